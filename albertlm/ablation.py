"""The paper's ablations at a small, equal budget: one command per table.

    albertlm ablate --study objective --corpus ../shared/corpus/en --out runs/ablate/objective-en
    albertlm ablate --study sharing --corpus ../shared/corpus/en --steps 400 --finetune-steps 400

Each variant pretrains with the same data, steps, batch and seed, is scored on held-out text
(intrinsic MLM accuracy; SOP and NSP accuracy on held-out pairs built both ways, as paper Table 5),
then fine-tuned on a downstream task (SST-2 for English, ChnSentiCorp for Chinese by default) through
``albertlm finetune``. A variant directory with ``result.json`` is done and skipped, and an unfinished
pretraining resumes from its checkpoint, so a study can be stopped and rerun, or split over processes
with ``--variants`` and gathered with ``--report-only``.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import UserError

_log = logging.getLogger(__name__)

# The small model every study varies (CPU-feasible); V comes from the tokenizer.
BASE = dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024, embedding_size=128, num_hidden_layers=4)
DOWNSTREAM = {"en": ("sst2", "glue_sst2"), "zh": ("chnsenticorp", "chnsenticorp")}


@dataclass
class Variant:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    task: str = "sop"  # inter-sentence objective of its pretraining data
    paper: str = ""  # what the paper reports for the full-size counterpart


def study_variants(study: str, hidden_size: int = BASE["hidden_size"]) -> list[Variant]:
    H = hidden_size
    if study == "embedding":  # Table 3: the paper's E in {64, 128, 256, H=768}, scaled to H=256
        return [Variant(f"E{e}-{'shared' if s == 'all' else 'not-shared'}", {"embedding_size": e, "sharing": s})
                for s in ("all", "none") for e in (H // 8, H // 4, H // 2, H)]
    if study == "sharing":  # Table 4
        return [Variant(f"{s}", {"sharing": s}) for s in ("all", "attention", "ffn", "none")]
    if study == "objective":  # Table 5
        paper = {"none": "MLM 54.9 / NSP 52.4 / SOP 53.3", "nsp": "MLM 54.5 / NSP 90.5 / SOP 52.0",
                 "sop": "MLM 54.0 / NSP 78.9 / SOP 86.5"}
        return [Variant(t, {}, task=t, paper=paper[t]) for t in ("none", "nsp", "sop")]
    if study == "depth":  # Table 11
        return [Variant(f"L{n}", {"num_hidden_layers": n}) for n in (1, 2, 4, 8)]
    if study == "width":  # Table 12
        return [Variant(f"H{h}", {"hidden_size": h, "intermediate_size": 4 * h, "num_attention_heads": h // 64})
                for h in (128, 256, 512)]
    raise UserError(f"unknown --study {study!r}; choose embedding, sharing, objective, depth or width")


STUDIES = ("embedding", "sharing", "objective", "depth", "width")


@dataclass
class StudySettings:
    study: str
    corpus: str  # directory of *.txt (classic format), with heldout.txt held out
    out: str
    steps: int = 300
    global_batch_size: int = 64
    micro_batch_size: int = 32
    lr: float = 3e-3
    max_seq_length: int = 128
    vocab_size: int = 8000
    seed: int = 0
    eval_batches: int = 20
    finetune_task: str | None = None  # default by language
    finetune_data: str | None = None
    finetune_steps: int = 300
    finetune_lr: float = 3e-4
    finetune_limit_train: int = 8000
    variants: list[str] | None = None  # run only these (the others are left for other processes)
    model: dict[str, Any] = field(default_factory=dict)  # changes to BASE shared by every variant


def _lang(corpus: Path) -> str:
    sample = next((p for p in sorted(corpus.glob("*.txt")) if p.name != "heldout.txt"), None)
    if sample is None:
        raise FileNotFoundError(f"{corpus}: no *.txt files besides heldout.txt")
    text = sample.read_text(encoding="utf-8", errors="replace")[:20000]
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    return "zh" if cjk > len(text) * 0.2 else "en"


def prepare_data(s: StudySettings, tasks: set[str], log=_log.info) -> dict[str, Path]:
    """Tokenizer and shards for the study (train per objective, held-out for SOP and NSP); reused."""
    from albertlm.data import InstanceConfig, build_dataset, load_manifest
    from albertlm.tokenizer import load_tokenizer
    from albertlm.tokenizer_training import train_sentencepiece, train_wordpiece

    corpus, work = Path(s.corpus), Path(s.out) / "data"
    held = corpus / "heldout.txt"
    if not held.exists():
        raise FileNotFoundError(f"{held}: the study needs a held-out file for intrinsic accuracies")
    files = [p for p in sorted(corpus.glob("*.txt")) if p.name != "heldout.txt"]
    lang = _lang(corpus)
    tok_dir = work / "tokenizer"
    if (tok_dir / "spiece.model").exists() or (tok_dir / "vocab.txt").exists():
        tok = load_tokenizer(tok_dir)
    elif lang == "zh":
        tok = train_wordpiece(files, tok_dir, vocab_size=s.vocab_size)
    else:
        tok = train_sentencepiece(files, tok_dir, vocab_size=s.vocab_size, seed=s.seed)
    paths = {"tokenizer": tok_dir, "lang": lang}
    wanted = [(f"train-{t}", files, t, s.seed) for t in sorted(tasks)]
    wanted += [("heldout-sop", [held], "sop", s.seed + 1), ("heldout-nsp", [held], "nsp", s.seed + 1)]
    for name, inputs, task, seed in wanted:
        path = work / name
        try:
            load_manifest(path)
        except ValueError:
            log(f"building {name} shards from {len(inputs)} file(s)")
            build_dataset(inputs, tok, path, cfg=InstanceConfig(task=task, max_seq_length=s.max_seq_length),
                          seed=seed, workers=2 if len(inputs) > 1 else 1)
        paths[name] = path
    return paths


def intrinsic(model_dir: Path, shards: Path, s: StudySettings) -> dict[str, float]:
    """Held-out MLM accuracy and sentence-pair accuracy of a pretrained model on ``shards``."""
    from albertlm.analysis import heldout_scores
    from albertlm.data import PretrainingDataset
    from albertlm.heads import AlbertForPreTraining

    model = AlbertForPreTraining.from_pretrained(model_dir)
    return heldout_scores(model, PretrainingDataset(shards), s.eval_batches, s.micro_batch_size)


def finetune(model_dir: Path, out: Path, s: StudySettings, lang: str) -> dict[str, float]:
    from albertlm.finetune import Settings, load_data, resolve_tokenizer, train
    from albertlm.tasks import InferenceSettings, get_task

    task_name, folder = DOWNSTREAM[lang]
    task = get_task(s.finetune_task or task_name)
    data = s.finetune_data or str(Path(s.corpus).resolve().parents[1] / "data" / folder)
    settings = Settings(lr=s.finetune_lr, batch_size=32, max_steps=s.finetune_steps, seed=s.seed, progress=False,
                        inference=InferenceSettings(max_seq_length=s.max_seq_length))  # fmt: skip
    final = train(task, load_data(task, data, limit_train=s.finetune_limit_train), str(model_dir),
                  resolve_tokenizer(str(model_dir), None), out, settings)  # fmt: skip
    return {f"{task.name} {k}": v for k, v in final["metrics"].items()  # the dev-set scores
            if isinstance(v, float) and not k.endswith(("loss", "examples", "seconds"))}  # fmt: skip


def run_variant(v: Variant, s: StudySettings, data: dict[str, Path], log=_log.info) -> dict[str, Any]:
    from albertlm.checkpoint import latest_valid
    from albertlm.params import count_parameters
    from albertlm.train import PretrainConfig, pretrain

    vdir = Path(s.out) / v.name
    done = vdir / "result.json"
    if done.exists():
        log(f"[{v.name}] done before; skipping")
        return json.loads(done.read_text())
    t0 = time.time()
    overrides = {**BASE, **s.model, **v.overrides}
    cfg = PretrainConfig(out=str(vdir / "pretrain"), data=str(data[f"train-{v.task}"]),
                         valid_data=str(data["heldout-sop"]), preset="albert-tiny", model_overrides=overrides,
                         lr=s.lr, warmup_steps=max(1, s.steps // 10), max_steps=s.steps,
                         global_batch_size=s.global_batch_size, micro_batch_size=s.micro_batch_size, seed=s.seed,
                         eval_every=s.steps, save_every=max(50, s.steps // 4), log_every=max(1, s.steps // 30),
                         eval_batches=s.eval_batches, device="cpu")
    log(f"[{v.name}] pretraining {s.steps} steps, overrides {v.overrides or '{}'}, objective {v.task}")
    # continue from the variant's checkpoint; one stopped before its first checkpoint starts again
    resume = latest_valid(vdir / "pretrain" / "checkpoints") is not None
    cfg.overwrite = not resume
    pretrain(cfg, resume=resume)
    final = vdir / "pretrain" / "final"
    sop = intrinsic(final, data["heldout-sop"], s)
    nsp = intrinsic(final, data["heldout-nsp"], s)
    from albertlm.config import AlbertConfig

    result: dict[str, Any] = {
        "variant": v.name, "objective": v.task, "overrides": v.overrides, "paper": v.paper,
        "parameters": count_parameters(AlbertConfig.load(final)),
        "mlm_acc": sop["valid_mlm_acc"], "sop_acc": sop["valid_sop_acc"], "nsp_acc": nsp["valid_sop_acc"],
        "sop_majority": sop["valid_sop_majority"], "nsp_majority": nsp["valid_sop_majority"],
    }
    if s.finetune_steps > 0:
        log(f"[{v.name}] fine-tuning {s.finetune_steps} steps")
        result["downstream"] = finetune(final, vdir / "finetune", s, data["lang"])
    result["minutes"] = (time.time() - t0) / 60
    done.write_text(json.dumps(result, indent=1))
    log(f"[{v.name}] " + ", ".join(f"{k} {x:.3f}" for k, x in result.items() if isinstance(x, float)))
    return result


def report(s: StudySettings, results: list[dict[str, Any]]) -> tuple[Path, Path, Path]:
    """study.json, study.md (the paper's layout) and study.png in the study directory."""
    out = Path(s.out)
    (out / "study.json").write_text(json.dumps({"settings": asdict(s), "results": results}, indent=1))
    score_keys = sorted({k for r in results for k in r.get("downstream", {})})
    head = ["variant", "params", "MLM acc", "SOP acc", "NSP acc"] + score_keys + (
        ["paper"] if any(r.get("paper") for r in results) else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["variant"], f"{r['parameters'] / 1e6:.2f}M", f"{r['mlm_acc']:.3f}", f"{r['sop_acc']:.3f}",
                 f"{r['nsp_acc']:.3f}"] + [f"{r.get('downstream', {}).get(k, float('nan')):.3f}" for k in score_keys]
        if "paper" in head:
            cells.append(r.get("paper", ""))
        lines.append("| " + " | ".join(cells) + " |")
    maj = results[0]
    lines.append("")
    lines.append(f"Majority-label baselines on the held-out pairs: SOP {maj['sop_majority']:.3f}, "
                 f"NSP {maj['nsp_majority']:.3f}.")
    (out / "study.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["mlm_acc", "sop_acc", "nsp_acc"] + score_keys
    fig, ax = plt.subplots(figsize=(1.6 * len(results) * len(metrics) / 3 + 3, 3.8))
    width = 0.8 / len(metrics)
    for i, m in enumerate(metrics):
        values = [r.get(m, r.get("downstream", {}).get(m, 0.0)) for r in results]
        ax.bar([j + i * width for j in range(len(results))], values, width, label=m)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(results))], [r["variant"] for r in results])
    ax.set_ylim(0, 1)
    ax.set_title(f"{s.study} study ({Path(s.corpus).name}, {s.steps} steps)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "study.png", dpi=110)
    plt.close(fig)
    return out / "study.json", out / "study.md", out / "study.png"


def run_study(s: StudySettings, report_only: bool = False, log=_log.info) -> tuple[list[dict[str, Any]], tuple]:
    variants = study_variants(s.study, {**BASE, **s.model}["hidden_size"])
    if s.variants:
        unknown = set(s.variants) - {v.name for v in variants}
        if unknown:
            raise UserError(f"--variants: unknown {sorted(unknown)}; {s.study} has {[v.name for v in variants]}")
    Path(s.out).mkdir(parents=True, exist_ok=True)
    if not report_only:
        data = prepare_data(s, {v.task for v in variants}, log)
        for v in variants:
            if s.variants is None or v.name in s.variants:
                run_variant(v, s, data, log)
    results = [json.loads((Path(s.out) / v.name / "result.json").read_text()) for v in variants
               if (Path(s.out) / v.name / "result.json").exists()]
    if not results:
        raise UserError(f"{s.out}: no finished variants to report")
    return results, report(s, results)
