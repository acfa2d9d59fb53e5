"""``albertlm export --format web``: the folder, its records and refusals (default tier), and the page itself in
Debian's Chromium driven by Playwright (the ``browser`` tier: ``npm ci --prefix web`` first; `.ci/run` does it):
50 English and 50 Chinese dev inputs, and Chinese pairs, answered with the labels, scores and exit layers of
``albertlm predict`` on the same export, from the ids albertlm's tokenizer gives."""

from __future__ import annotations

import functools
import http.server
import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

from albertlm.cli import main
from albertlm.deploy import web
from albertlm.deploy.inference import Predictor
from albertlm.tasks import InferenceSettings, get_task
from albertlm.tokenizer import load_tokenizer
from albertlm.training.finetune import Settings, build_model, save

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tests" / "data" / "tasks"
TOKENIZERS = ROOT / "tests" / "fixtures" / "original"
NODE_MODULES = ROOT / "web" / "node_modules"
L = 6
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=L, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128, initializer_range=0.5, exit_heads="per-layer")  # fmt: skip


def tiny_model(root: Path, task_name: str, lang: str, **rule) -> Path:
    """A tiny model with per-layer exits, saved as finetune saves it, its exit heads widened so that inputs
    leave at different layers, and ``rule`` (exit_* settings) saved as its default."""
    task, tok = get_task(task_name), load_tokenizer(TOKENIZERS / lang)
    torch.manual_seed(0)
    model = build_model(task, "albert-tiny", tok, ["0", "1"], TINY)
    with torch.no_grad():
        for j in range(L):
            model.exit_classifier(j).weight.normal_(0.0, 0.3)
    save(model, tok, root / task_name, task, Settings(inference=InferenceSettings(max_seq_length=64, **rule)))
    return root / task_name


def tsv_column(path: Path, column: str) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    at = lines[0].split("\t").index(column)
    return [line.split("\t")[at] for line in lines[1:]]


def english() -> list[tuple[str, None]]:
    return [(t, None) for t in tsv_column(TASKS / "glue_sst2" / "dev.tsv", "sentence")[:50]]


def chinese() -> list[tuple[str, None]]:
    reviews = [*tsv_column(TASKS / "chnsenticorp" / "dev.tsv", "text_a"),
               *tsv_column(TASKS / "chnsenticorp" / "train.tsv", "text_a")]  # fmt: skip
    return [(t, None) for t in reviews[:50]]


def chinese_pairs() -> list[tuple[str, str]]:
    rows = (TASKS / "clue_afqmc" / "dev.txt").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")[:2]) for line in rows[:20]]


# --------------------------------------------------------------------------- the folder (default tier)
@pytest.fixture(scope="module")
def english_model(tmp_path_factory) -> Path:
    return tiny_model(tmp_path_factory.mktemp("web-en"), "sst2", "en", exit_patience=2)


def test_the_web_folder_holds_the_page_its_tokenizer_and_what_predict_resolved(english_model, tmp_path):
    out = tmp_path / "web"
    assert main(["export", "--model", str(english_model), "--format", "web", "--out", str(out)]) == 0
    deploy = json.loads((out / "deploy.json").read_text())
    page = deploy["web"]
    assert page["kind"] == "classification" and page["labels"] == ["0", "1"] and page["max_seq_length"] == 64
    assert page["rule"]["exit_patience"] == 2 and page["exit"]["group_of_layer"] == [0] * L
    assert page["tokenizer"] == {"file": "tokenizer.web.json", "config": "tokenizer_config.json",
                                 "digit_comma": True, "cls_id": 2, "sep_id": 3}  # fmt: skip
    # without --web-runtime the page takes the pinned runtime from the CDN
    html = (out / "index.html").read_text()
    assert f"onnxruntime-web@{web.ORT_WEB[1]}/dist/ort.wasm.min.mjs" in html and "$" not in html.split("<body>")[0]
    assert page["runtime"]["from"] == web.CDN and not (out / "ort-wasm-simd-threaded.wasm").exists()
    # the page's files are left out of the engines' checksums: editing the page never disables --engine onnx
    assert not {"index.html", "albert.js", "tokenizer.web.json"} & set(deploy["sha256"])
    (out / "index.html").write_text("<p>my page</p>")
    onnx = Predictor.load(out, engine="onnx")
    torch_fp32 = Predictor.load(english_model, precision="fp32")
    texts = [onnx.parse(t) for t, _ in english()[:8]]
    assert [(r["label"], r["layer"]) for r in onnx.predict(texts)] == [
        (r["label"], r["layer"]) for r in torch_fp32.predict(texts)
    ]


def refused(args: list[str], capsys, match: str) -> None:
    """The command ends with exit code 2 and one line on stderr matching ``match``."""
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(match, err), err


def test_an_edited_or_foreign_page_is_never_replaced(english_model, tmp_path, capsys):
    out = tmp_path / "web"
    args = ["export", "--model", str(english_model), "--format", "web", "--out", str(out)]
    assert main(args) == 0
    assert main(args) == 0  # our own, unedited: replaced
    (out / "albert.js").write_text("// my changes\n")
    refused(args, capsys, "holds albert.js, which no earlier export wrote \\(or which changed since\\)")
    assert (out / "albert.js").read_text() == "// my changes\n"
    other = tmp_path / "site"
    other.mkdir()
    (other / "index.html").write_text("<p>mine</p>")
    refused(
        ["export", "--model", str(english_model), "--format", "web", "--out", str(other)],
        capsys,
        "holds index.html, which no earlier export wrote",
    )
    assert (other / "index.html").read_text() == "<p>mine</p>" and not (other / "model.onnx").exists()


def test_a_plain_onnx_export_over_a_web_folder_removes_only_the_unedited_page_files(english_model, tmp_path):
    out = tmp_path / "web"
    assert main(["export", "--model", str(english_model), "--format", "web", "--out", str(out)]) == 0
    (out / "index.html").write_text("<p>kept: edited by me</p>")
    assert main(["export", "--model", str(english_model), "--out", str(out)]) == 0
    assert not (out / "albert.js").exists() and not (out / "tokenizer.web.json").exists()
    assert (out / "index.html").read_text() == "<p>kept: edited by me</p>"
    assert "web" not in json.loads((out / "deploy.json").read_text())


def test_what_the_page_cannot_answer_or_run_is_refused_in_one_line(tmp_path, english_model, capsys):
    squad = get_task("squad1")
    tok = load_tokenizer(TOKENIZERS / "en")
    model = build_model(squad, "albert-tiny", tok, None, {k: v for k, v in TINY.items() if k != "exit_heads"})
    save(model, tok, tmp_path / "qa", squad, Settings())
    refused(
        ["export", "--model", str(tmp_path / "qa"), "--format", "web", "--out", str(tmp_path / "out")],
        capsys,
        "the web page answers classification and regression models",
    )
    assert not (tmp_path / "out").exists()
    refused(["export", "--model", str(english_model), "--format", "web", "--out", str(tmp_path / "o2"),
             "--web-runtime", str(tmp_path)], capsys, "no onnxruntime-web in it")  # fmt: skip
    refused(
        ["export", "--model", str(english_model), "--out", str(tmp_path / "o3"), "--web-runtime", "x"],
        capsys,
        "--web-runtime is for --format web",
    )


def test_the_pinned_runtime_is_the_one_the_lock_file_installs():
    lock = json.loads((ROOT / "web" / "package-lock.json").read_text())["packages"]
    manifest = json.loads((ROOT / "web" / "package.json").read_text())["dependencies"]
    for name, version in (web.ORT_WEB, web.TOKENIZERS_JS):
        assert manifest[name] == version and lock[f"node_modules/{name}"]["version"] == version


# --------------------------------------------------------------------------- the page in Chromium
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output is the comparison, not the access log
        pass


@pytest.fixture
def served():
    """``served(folder)`` -> the URL of its index.html on a static file server on 127.0.0.1."""
    servers = []

    def serve(folder: Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/index.html"

    yield serve
    for server in servers:
        server.shutdown()


def in_chromium(url: str, inputs: list, tmp_path: Path) -> dict:
    if not (NODE_MODULES / "playwright-core").is_dir():
        pytest.fail("web/node_modules is missing: run `npm ci --prefix web` (the browser tier needs the page's "
                    "runtime and playwright-core)", pytrace=False)  # fmt: skip
    if shutil.which("chromium") is None:
        pytest.fail("no chromium: apt-get install chromium (Debian's build; never a downloaded one)", pytrace=False)
    spec = tmp_path / "inputs.json"
    spec.write_text(json.dumps(inputs, ensure_ascii=False), encoding="utf-8")
    done = subprocess.run(["node", str(ROOT / "web" / "drive.mjs"), url, str(spec)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["errors"] == []
    return result


def export_with_runtime(model: Path, out: Path, *extra: str) -> Path:
    args = ["export", "--model", str(model), "--format", "web", "--out", str(out), "--web-runtime", str(NODE_MODULES)]
    assert main([*args, *extra]) == 0
    return out


@pytest.mark.browser
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_answers_as_predict_does_with_the_same_ids_and_exit_layers(lang, tmp_path, served):
    if lang == "en":
        model, inputs = tiny_model(tmp_path, "sst2", "en", exit_patience=2), english()
    else:
        model, inputs = tiny_model(tmp_path, "chnsenticorp", "zh", exit_confidence=0.8), chinese()
    out = export_with_runtime(model, tmp_path / "web")
    got = in_chromium(served(out), inputs, tmp_path)
    predictor = Predictor.load(out, engine="onnx")  # `albertlm predict --engine onnx` on the same folder
    examples = [predictor.parse(t) for t, _ in inputs]
    want = predictor.predict(examples)
    tok = predictor.tokenizer
    want_ids = [[tok.cls_id, *ids[:62], tok.sep_id] for ids in tok.encode_batch([t for t, _ in inputs])]
    assert got["ids"] == want_ids
    assert [(r["label"], r["layer"]) for r in got["rows"]] == [(r["label"], r["layer"]) for r in want]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(got["rows"], want, strict=True)) < 1e-4
    assert len({r["layer"] for r in want}) > 1  # the rule stops inputs at different layers: the loop is exercised


@pytest.mark.browser
def test_pairs_in_the_page(tmp_path, served):
    model = tiny_model(tmp_path, "afqmc", "zh", exit_patience=1)
    pairs = chinese_pairs()
    out = export_with_runtime(model, tmp_path / "web")
    got = in_chromium(served(out), [list(p) for p in pairs], tmp_path)
    predictor = Predictor.load(out, engine="onnx")
    want = predictor.predict([predictor.parse({"text": a, "text_b": b}) for a, b in pairs])
    assert [(r["label"], r["layer"]) for r in got["rows"]] == [(r["label"], r["layer"]) for r in want]
    tok = predictor.tokenizer
    assert got["ids"][0][: got["ids"][0].index(tok.sep_id) + 1] == [tok.cls_id, *tok.encode_batch([pairs[0][0]])[0],
                                                                     tok.sep_id]  # fmt: skip


@pytest.mark.browser
def test_int8_graphs_in_the_page_agree_with_onnxruntime_on_most_inputs(tmp_path, served):
    """onnxruntime-web's int8 kernels (WebAssembly) are not x86's (AVX2 u8s8 products saturate in 16 bits), so
    int8 answers may differ on a few inputs, as int8 on two CPUs may; fp32 is identical (tests above)."""
    model = tiny_model(tmp_path, "sst2", "en", exit_patience=1)
    out = export_with_runtime(model, tmp_path / "web", "--quantize", "int8")
    assert json.loads((out / "deploy.json").read_text())["web"]["exit"]["embed"] == "exit_embed.int8.onnx"
    got = in_chromium(served(out), english(), tmp_path)
    predictor = Predictor.load(out, engine="onnx", precision="int8")
    want = predictor.predict([predictor.parse(t) for t, _ in english()])
    same = sum((a["label"], a["layer"]) == (b["label"], b["layer"]) for a, b in zip(got["rows"], want, strict=True))
    assert same >= 0.85 * len(want), f"{same} of {len(want)}"


@pytest.mark.browser
def test_the_page_cuts_text_as_albertlm_does_on_every_shipped_slice_row(tmp_path, served):
    """Every English and Chinese row of the shipped task slices, as ids in the page (SentencePiece in the
    original's behaviour, digit-comma re-split included; WordPiece for Chinese)."""
    for lang, task in (("en", "sst2"), ("zh", "chnsenticorp")):
        model = tiny_model(tmp_path / lang, task, lang)
        out = export_with_runtime(model, tmp_path / lang / "web")
        tok = load_tokenizer(out)
        texts = []
        for path in sorted(TASKS.rglob("*.tsv")) + sorted(TASKS.rglob("*.txt")):
            for line in path.read_text(encoding="utf-8").splitlines()[1:]:
                text = line.split("\t")[0]
                if text and (lang == "zh") == any("\u4e00" <= c <= "\u9fff" for c in text):
                    texts.append(text)
        texts += ["Section 9.5.6, and 1,234, and F9, then <unk> and [MASK] stay text", "2,3,4, done"]
        got = in_chromium(served(out), [[t, None] for t in texts], tmp_path)
        want = [[tok.cls_id, *ids[:62], tok.sep_id] for ids in tok.encode_batch(texts)]
        bad = [t for t, a, b in zip(texts, got["ids"], want, strict=True) if a != b]
        assert not bad, f"{len(bad)} of {len(texts)} {lang} rows differ, e.g. {bad[:3]}"
