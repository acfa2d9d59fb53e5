"""``albertlm export --format web``: a folder any static file server can serve, in which a page runs the model in
the browser (onnxruntime-web on WebAssembly) with the tokenizer and the early-exit loop of ``albertlm predict``.

The folder is an ONNX export (``export_onnx``: the graphs with the shared layer stored once, int8 with
``--quantize int8``, the exit graphs of a model with exits) plus:

- ``index.html`` (type or paste a text, get the label, its score and the layer it left at) and ``albert.js``
  (the page's model: tokenizer, exit loop, answers; ``albertlm/deploy/web_page``);
- ``tokenizer.web.json``: the tokenizer as tokenizers.js (``@huggingface/tokenizers``) runs it, with the ids
  albertlm gives (``Tokenizer.browser_json``);
- deploy.json's ``web`` section: what the page reads, resolved here as ``albertlm predict`` resolves it (task
  kind, labels, ``max_seq_length``, the saved exit rule, the graphs of the chosen precision);
- the JavaScript runtime: copied in from ``--web-runtime`` (a ``node_modules`` folder holding the pinned
  onnxruntime-web and @huggingface/tokenizers: ``npm ci --prefix web`` in a clone), so that the page needs no
  network; without it the page loads the same pinned versions from the jsDelivr CDN.
"""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path
from typing import Any

from albertlm.errors import UserError

# The JavaScript runtime the page is written and tested against (web/package.json pins the same; a test
# checks that they agree).
ORT_WEB = "onnxruntime-web", "1.31.1"
TOKENIZERS_JS = "@huggingface/tokenizers", "0.2.0"
CDN = "https://cdn.jsdelivr.net/npm"
# runtime files: (package, path in the package, name in the export)
RUNTIME_FILES = (
    (ORT_WEB, "dist/ort.wasm.min.mjs", "ort.wasm.min.mjs"),
    (ORT_WEB, "dist/ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.mjs"),
    (ORT_WEB, "dist/ort-wasm-simd-threaded.wasm", "ort-wasm-simd-threaded.wasm"),
    (TOKENIZERS_JS, "dist/tokenizers.min.mjs", "tokenizers.min.mjs"),
)
PAGE = Path(__file__).with_name("web_page")
PAGE_FILES = ("index.html", "albert.js")
TOKENIZER_FILE = "tokenizer.web.json"
WEB_KINDS = ("classification", "regression")  # one text or a pair in, one answer out: what the page shows


def check_runtime(runtime: str | Path) -> dict[str, Path]:
    """The runtime files in ``runtime`` (a node_modules folder), at the pinned versions; one line otherwise."""
    root = Path(runtime)
    found: dict[str, Path] = {}
    for (package, version), inner, name in RUNTIME_FILES:
        meta = root / package / "package.json"
        try:
            have = json.loads(meta.read_text(encoding="utf-8")).get("version")
        except (OSError, ValueError):
            raise UserError(f"--web-runtime {root}: no {package} in it ({meta} unreadable); give the node_modules "
                            "folder of `npm ci --prefix web` (a clone's web/node_modules), or leave the flag out "
                            "for the CDN") from None  # fmt: skip
        if have != version:
            raise UserError(f"--web-runtime {root}: {package} is {have}, the page is built for {version}; install "
                            f"{package}@{version} (npm ci --prefix web)")  # fmt: skip
        if not (root / package / inner).is_file():
            raise UserError(f"--web-runtime {root}: {package} {version} lacks {inner}; reinstall it")
        found[name] = root / package / inner
    return found


def page_settings(model_dir: Path, tokenizer_dir: Path | None) -> dict[str, Any]:
    """What the page needs to answer as ``albertlm predict`` does, resolved by the Predictor itself."""
    from albertlm.deploy.inference import Predictor

    try:
        pred = Predictor.load(model_dir, tokenizer=tokenizer_dir)
    except FileNotFoundError as e:
        raise UserError(f"{e} (the page tokenizes in the browser)") from None
    if pred.kind.name not in WEB_KINDS:
        raise UserError(
            f"{model_dir} answers {pred.kind.name}; the web page answers {' and '.join(WEB_KINDS)} "
            "models (one text or a pair in); use --format onnx and albertlm serve for this one"
        )
    return {"kind": pred.kind.name, "labels": pred.labels, "max_seq_length": pred.settings.max_seq_length,
            "num_layers": pred.config.num_hidden_layers,
            "rule": pred.exit_rule.settings() if pred.exit_rule is not None else None,
            "tokenizer": pred.tokenizer}  # fmt: skip


def write_web(folder: Path, manifest: dict[str, Any], settings: dict[str, Any], runtime: dict[str, Path] | None,
              precision: str) -> list[str]:  # fmt: skip
    """Write the page, its tokenizer and runtime into the export's staging ``folder`` and add the web section;
    returns their names, which the engines here do not read (left out of deploy.json's checksums; the export's
    record of what it wrote still covers them, so a later export replaces a page file only while unedited)."""
    tok = settings.pop("tokenizer")
    text, digit_comma = tok.browser_json()
    (folder / TOKENIZER_FILE).write_text(text, encoding="utf-8")
    web: dict[str, Any] = {**settings, "precision": precision,
                           "tokenizer": {"file": TOKENIZER_FILE, "config": "tokenizer_config.json",
                                         "digit_comma": digit_comma, "cls_id": tok.cls_id, "sep_id": tok.sep_id},
                           "graph": manifest["files"][precision]}  # fmt: skip
    exit_entry = manifest.get("exit")
    if exit_entry is not None and settings["rule"] is not None:  # a model with exits and a rule: the loop
        files = exit_entry["files"][precision]
        web["exit"] = {"embed": files["embed"], "layers": files["layers"], "rule": settings["rule"],
                       "group_of_layer": exit_entry["group_of_layer"]}  # fmt: skip
    if runtime is not None:
        for name, src in runtime.items():
            shutil.copyfile(src, folder / name)
        ort_js, tokenizers_js, wasm = "./ort.wasm.min.mjs", "./tokenizers.min.mjs", "./"
    else:
        ort_js = f"{CDN}/{ORT_WEB[0]}@{ORT_WEB[1]}/dist/ort.wasm.min.mjs"
        tokenizers_js = f"{CDN}/{TOKENIZERS_JS[0]}@{TOKENIZERS_JS[1]}/dist/tokenizers.min.mjs"
        wasm = f"{CDN}/{ORT_WEB[0]}@{ORT_WEB[1]}/dist/"
    web["runtime"] = {"onnxruntime-web": ORT_WEB[1], "@huggingface/tokenizers": TOKENIZERS_JS[1],
                      "from": "this folder" if runtime is not None else CDN}  # fmt: skip
    html = string.Template((PAGE / "index.html").read_text(encoding="utf-8"))
    (folder / "index.html").write_text(html.substitute(ort=ort_js, tokenizers=tokenizers_js, wasm=wasm,
                                                       kind=settings["kind"]), encoding="utf-8")  # fmt: skip
    shutil.copyfile(PAGE / "albert.js", folder / "albert.js")
    manifest["web"] = web
    return [*PAGE_FILES, TOKENIZER_FILE, *(runtime or ())]


def export_web(model_dir: str | Path, out_dir: str | Path, quantize: str | None = None,
               runtime: str | Path | None = None, tokenizer_dir: str | Path | None = None,
               **onnx: Any) -> dict[str, Any]:  # fmt: skip
    """Export ``model_dir`` to ``out_dir`` as a web folder (see the module docstring); ``onnx``: the rest of
    ``export_onnx``'s settings (opset, graph, device). Returns the manifest written."""
    from albertlm.deploy.export import export_onnx

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    files = check_runtime(runtime) if runtime is not None else None
    settings = page_settings(model_dir, Path(tokenizer_dir) if tokenizer_dir else None)
    precision = "int8" if quantize == "int8" else "fp32"
    return export_onnx(model_dir, out_dir, quantize=quantize, tokenizer_dir=tokenizer_dir,
                       extra=lambda folder, manifest: write_web(folder, manifest, settings, files, precision),
                       **onnx)  # fmt: skip


__all__ = ["ORT_WEB", "TOKENIZERS_JS", "check_runtime", "export_web", "page_settings", "write_web"]
