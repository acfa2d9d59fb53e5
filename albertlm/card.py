"""Model cards: the README.md of a model or export folder, in the Hub's model-card format.

``pretrain`` (final/), ``finetune``, ``convert`` and ``export`` each call ``update_card`` on the folder they
wrote. The YAML header holds the Hub's keys (language, license, library_name, tags, datasets, base_model,
pipeline_tag, model-index) and, under ``albertlm``, the commands that made the folder; the text below it is
rendered from the header and the folder's config.json every time, so a folder written by one command and
updated by another keeps one card. An export inherits the card of the model it was exported from.

A README.md the user wrote (no ``library_name: albertlm`` in its header) is never replaced.
"""

from __future__ import annotations

import datetime
import json
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from albertlm.files import write_text_atomic

_log = logging.getLogger(__name__)
CARD = "README.md"
LIBRARY = "albertlm"
# What transformers can load (config.json's architectures); a folder with early exits or the original
# SQuAD 2.0 head is albertlm's only.
TRANSFORMERS_CLASSES = {
    "AlbertForPreTraining": "AlbertForPreTraining", "AlbertForMaskedLM": "AlbertForMaskedLM",
    "AlbertForSequenceClassification": "AutoModelForSequenceClassification",
    "AlbertForTokenClassification": "AutoModelForTokenClassification",
    "AlbertForQuestionAnswering": "AutoModelForQuestionAnswering",
    "AlbertForMultipleChoice": "AutoModelForMultipleChoice", "AlbertModel": "AutoModel",
}  # fmt: skip
PIPELINE_TAGS = {
    "AlbertForPreTraining": "fill-mask", "AlbertForMaskedLM": "fill-mask",
    "AlbertForSequenceClassification": "text-classification", "AlbertForTokenClassification": "token-classification",
    "AlbertForQuestionAnswering": "question-answering", "AlbertForQuestionAnsweringV2": "question-answering",
    "AlbertForMultipleChoice": "multiple-choice", "AlbertModel": "feature-extraction",
}  # fmt: skip


invocation: list[str] | None = None  # the arguments albertlm.cli.main parsed, set by it


def command_line() -> str:
    """How this process was started, as a shell line: ``albertlm finetune ...`` from the CLI."""
    if invocation is not None:
        return shlex.join(["albertlm", *invocation])
    argv = list(sys.argv)
    if argv and Path(argv[0]).name in ("albertlm", "__main__.py"):
        argv[0] = "albertlm"
    elif argv and argv[0] == "-m":
        argv[0] = "python -m"
    return shlex.join(argv) if argv else "(Python)"


def read_card(folder: Path) -> tuple[dict[str, Any] | None, bool]:
    """(the header, whether the card is ours); (None, False) when there is none or it is the user's own."""
    path = Path(folder) / CARD
    if not path.is_file():
        return None, True
    text = path.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---\n") or "\n---\n" not in text[4:]:
        return None, False
    try:
        header = yaml.safe_load(text[4 : text.index("\n---\n", 4) + 1])
    except yaml.YAMLError:
        return None, False
    if not isinstance(header, dict) or header.get("library_name") != LIBRARY:
        return None, False
    return header, True


def languages(folder: Path) -> list[str]:
    """en / zh by what the folder's vocabulary holds: pieces with CJK characters make it Chinese too."""
    pieces: list[str] = []
    if (folder / "vocab.txt").is_file():
        pieces = (folder / "vocab.txt").read_text(encoding="utf-8", errors="replace").split()
    elif (folder / "spiece.model").is_file():
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=str(folder / "spiece.model"))
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    if not pieces:
        return []
    cjk = sum(any("\u4e00" <= ch <= "\u9fff" for ch in p) for p in pieces) / len(pieces)
    latin = sum(any("a" <= ch <= "z" for ch in p.lower()) for p in pieces) / len(pieces)
    return [lang for lang, share in (("en", latin), ("zh", cjk)) if share > 0.1]


def model_index(name: str, task: str, task_type: str, split: str, scores: dict[str, Any]) -> list[dict]:
    metrics = [{"type": k, "name": k, "value": round(float(v), 6)} for k, v in scores.items()
               if k != "examples" and isinstance(v, int | float) and not isinstance(v, bool) and v == v]  # fmt: skip
    if not metrics:
        return []
    return [{"name": name, "results": [{"task": {"type": task_type}, "dataset": {"name": task, "type": task,
                                                                                "split": split},
                                        "metrics": metrics}]}]  # fmt: skip


def update_card(folder: str | Path, what: str, *, datasets: tuple[str, ...] = (), base_model: str | None = None,
                scores: dict[str, Any] | None = None, task: str | None = None, split: str = "dev",
                facts: dict[str, Any] | None = None, inherit: str | Path | None = None,
                license: str | None = None, fresh: bool = False, name: str | None = None) -> Path | None:  # fmt: skip
    """Add this command (``what`` it did, its ``facts``) to ``folder``'s card and render it again; ``fresh``:
    the folder's model was written anew, so the card starts afresh (from ``inherit``'s, if given). Returns the
    card's path, or None when the folder holds the user's own README.md (left as it is). ``name``: the folder's
    name in the card when ``folder`` is a staging folder published under another."""
    folder = Path(folder)
    header, ours = read_card(folder)
    if not ours:
        _log.warning("%s is not an albertlm model card; left as it is (no card written)", folder / CARD)
        return None
    if fresh:
        header = None
    if header is None and inherit is not None:
        header, _ = read_card(Path(inherit))
    header = dict(header or {})
    config = _config(folder)
    architecture = (config.get("architectures") or ["AlbertModel"])[0]
    history = list(header.get(LIBRARY, {}).get("history", []))
    history.append({"what": what, "command": command_line(), "date": datetime.date.today().isoformat(),
                    **({"facts": facts} if facts else {})})  # fmt: skip
    header.update(library_name=LIBRARY, pipeline_tag=PIPELINE_TAGS.get(architecture, "feature-extraction"))
    header["language"] = languages(folder) or header.get("language") or []
    header["license"] = license or header.get("license") or "other"
    header["tags"] = sorted({*header.get("tags", []), "albert", *(["early-exit"] if _exits(config) else [])})
    header["datasets"] = sorted({*header.get("datasets", []), *datasets})
    if base_model:
        header["base_model"] = base_model
    if scores and task:
        header["model-index"] = model_index(name or folder.name, task, header["pipeline_tag"], split, scores)
    header[LIBRARY] = {"history": history}
    header = {k: v for k, v in header.items() if v not in ([], None, "")}
    head = yaml.safe_dump(header, sort_keys=False, allow_unicode=True)
    return write_text_atomic(folder / CARD, f"---\n{head}---\n\n{_body(folder, header, config, name)}")


def _config(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _exits(config: dict[str, Any]) -> bool:
    return config.get("exit_heads", "none") != "none"


def _body(folder: Path, header: dict[str, Any], config: dict[str, Any], name: str | None) -> str:
    architecture = (config.get("architectures") or ["AlbertModel"])[0]
    is_export = any(folder.glob("*.onnx"))
    name = name or folder.name
    lines = [f"# {name}", ""]
    shape = (f"{config.get('num_hidden_layers')} layers, hidden size {config.get('hidden_size')}, embedding size "
             f"{config.get('embedding_size')}, {config.get('num_attention_heads')} heads, FFN "
             f"{config.get('intermediate_size')}, sharing {config.get('sharing', 'all')}, vocabulary "
             f"{config.get('vocab_size')}")  # fmt: skip
    exits = f", with early exits: {config['exit_heads']}" if _exits(config) else ""
    export = ", exported for inference (ONNX graphs, deploy.json)" if is_export else ""
    lines += [f"An ALBERT model ({architecture}: {shape}){exits}{export}, made with albertlm.", ""]
    if header.get("license") == "other":
        lines += ["The weights' license follows the data they were trained on: set `license` above before "
                  "publishing.", ""]  # fmt: skip
    lines += ["## How it was made", ""]
    for step in header[LIBRARY]["history"]:
        lines += [f"- {step['date']}: {step['what']}", "", "  ```", f"  {step['command']}", "  ```", ""]
        for k, v in step.get("facts", {}).items():
            lines.append(f"  - {k}: {v}")
        if step.get("facts"):
            lines.append("")
    results = header.get("model-index", [])
    if results:
        r = results[0]["results"][0]
        lines += ["## Scores", "", f"Measured on {r['dataset']['name']} ({r['dataset']['split']}):", "",
                  "| metric | value |", "|---|---|"]  # fmt: skip
        lines += [f"| {m['type']} | {m['value']:.4f} |" for m in r["metrics"]] + [""]
    lines += ["## Use", "", "```python"]
    if is_export:
        lines += ["from albertlm import Predictor", "", f'predictor = Predictor.load("{name}", engine="onnx")']
    elif architecture in ("AlbertForPreTraining", "AlbertForMaskedLM", "AlbertModel"):
        lines += ["import albertlm", "", f'model = albertlm.{architecture}.from_pretrained("{name}")']
    else:
        lines += ["from albertlm import Predictor", "", f'predictor = Predictor.load("{name}")']
    lines += ["```", ""]
    auto = TRANSFORMERS_CLASSES.get(architecture)
    if auto and not _exits(config) and not is_export:
        lines += ["In transformers:", "", "```python", f"from transformers import {auto}", "",
                  f'model = {auto}.from_pretrained("{name}")', "```", ""]  # fmt: skip
    elif not is_export:
        lines += ["transformers cannot load this folder's head (" + ("early exits" if _exits(config) else
                  architecture) + "); albertlm can.", ""]  # fmt: skip
    return "\n".join(lines)
