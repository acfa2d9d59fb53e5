"""ONNX export: parity with PyTorch for every head on real sentences, int8 that really quantizes the
shared weights, the Predictor on both engines, and the CLI.

Artifacts (a SentencePiece model trained on a corpus slice, tiny models of each head, one briefly
SST-2-labelled classifier) are built once per session by ``deploy_artifacts`` (also used by
test_serve.py), on the corpus and SST-2 slices shipped in tests/data.
"""

from __future__ import annotations

import atexit
import csv
import functools
import itertools
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from shared_data import CORPUS as SLICE_CORPUS
from shared_data import DATA

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from albertlm import AlbertConfig  # noqa: E402
from albertlm.deploy.engines import OnnxEngine, load_torch_model  # noqa: E402
from albertlm.deploy.export import export_onnx, quantization_report  # noqa: E402
from albertlm.deploy.inference import Predictor  # noqa: E402
from albertlm.heads import HEADS  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CORPUS, SST2 = SLICE_CORPUS / "en", DATA / "glue_sst2"
LABELS = {0: "negative", 1: "positive"}
TAGS = {0: "O", 1: "B-X", 2: "I-X"}
L, G = 4, 2  # two parameter groups, each shared by two computed layers


def sst2(split: str, n: int | None = None) -> tuple[list[str], list[int]]:
    with open(SST2 / split, encoding="utf-8") as f:
        rows = list(itertools.islice(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE), n))
    return [r["sentence"].strip() for r in rows], [int(r["label"]) for r in rows]


def tiny_config(vocab_size: int, **kw) -> AlbertConfig:
    return AlbertConfig(
        vocab_size=vocab_size, embedding_size=32, hidden_size=64, num_hidden_layers=L, num_hidden_groups=G,
        num_attention_heads=4, intermediate_size=128, max_position_embeddings=128, **kw,
    )  # fmt: skip


def _confident(model: torch.nn.Module) -> None:
    """Widen the random classifier so its logits spread well beyond int8 rounding noise: the int8-vs-fp32
    agreement test then measures quantization, not coin flips between near-tied logits. (A real
    fine-tuned model's int8 accuracy is measured on the whole SST-2 dev set by benchmarks/inference.py.)"""
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)


@functools.lru_cache(maxsize=1)
def deploy_artifacts() -> dict[str, Path]:
    """{architecture: model dir} for every head (+ "tok" and "sst2-onnx"), built once per process."""
    # One thread: the CI box has 2 shared cores, where 2 torch threads spin-wait and run ~10x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _build(Path(tempfile.mkdtemp(prefix="albertlm-deploy-")))
    finally:
        torch.set_num_threads(threads)


def _build(root: Path) -> dict[str, Path]:
    from albertlm.data.tokenizer_training import train_sentencepiece

    atexit.register(shutil.rmtree, root, ignore_errors=True)
    (root / "corpus").mkdir()
    for name in ("enwiki_excerpt.txt", "wikitext2.txt"):
        with open(CORPUS / name, encoding="utf-8") as f:
            (root / "corpus" / name).write_text("".join(itertools.islice(f, 1200)), encoding="utf-8")
    tok = train_sentencepiece([root / "corpus"], root / "tok", vocab_size=2000, seed=0)
    dirs: dict[str, Path] = {"tok": root / "tok"}
    for arch in HEADS:
        labels = TAGS if arch == "AlbertForTokenClassification" else LABELS
        torch.manual_seed(0)
        model = HEADS[arch].cls(tiny_config(tok.vocab_size, id2label=labels))
        if arch == "AlbertForTokenClassification":
            _confident(model)
        dirs[arch] = model.save_pretrained(root / arch)
        tok.save(dirs[arch])
    export_onnx(dirs["AlbertForSequenceClassification"], root / "sst2-onnx", quantize="int8")
    dirs["sst2-onnx"] = root / "sst2-onnx"
    return dirs



@pytest.fixture(scope="session")
def artifacts() -> dict[str, Path]:
    return deploy_artifacts()


def _real_batch(tok, arch: str) -> dict[str, torch.Tensor]:
    """5 dev sentences (pairs for QA / multiple choice): another batch and length than the export's 2x8."""
    texts, _ = sst2("dev.tsv", 10)
    if arch == "AlbertForMultipleChoice":
        enc = tok.batch_encode(texts[:3] * 2, texts[3:9], max_length=40, return_tensors="pt")
        return {k: v.view(3, 2, -1) for k, v in enc.items()}
    pairs = texts[5:] if arch.startswith("AlbertForQuestionAnswering") else None
    batch = tok.batch_encode(texts[:5], pairs, max_length=64, return_tensors="pt")
    if "p_mask" in HEADS[arch].inputs:  # no answer in the question, the separators or the padding
        batch["p_mask"] = (1 - batch["token_type_ids"]) | (1 - batch["attention_mask"])
        batch["p_mask"][:, 0] = 0
    return batch


@pytest.mark.parametrize(
    "arch, graph",
    [(arch, "ort") for arch in HEADS] + [("AlbertForSequenceClassification", "standard")],
)
def test_export_matches_torch_on_real_sentences(artifacts, arch, graph, tmp_path):
    from albertlm.tokenizer import load_tokenizer

    manifest = export_onnx(artifacts[arch], tmp_path / "onnx", graph=graph)
    assert manifest["architecture"] == arch and manifest["fp32_max_abs_diff"] <= 1e-4
    fused = manifest["fused_ops"]
    if graph == "ort":  # per layer: Attention, FastGelu, 2 residual+LayerNorm (MLM heads add a GELU)
        assert fused["Attention"] == L and fused["FastGelu"] >= L and fused["SkipLayerNormalization"] >= 2 * L
    else:
        assert fused == {}
    for f in ("model.onnx", "config.json", "spiece.model", "deploy.json"):
        assert (tmp_path / "onnx" / f).is_file(), f  # self-contained
    batch = _real_batch(load_tokenizer(artifacts["tok"]), arch)
    assert batch["attention_mask"].min() == 0  # padded rows are part of the check
    with torch.inference_mode():
        ref = load_torch_model(artifacts[arch])(**batch)
    got = OnnxEngine(tmp_path / "onnx", threads=1)({k: v.numpy() for k, v in batch.items()})
    assert list(got) == list(HEADS[arch].outputs)
    for name, value in got.items():
        expected = getattr(ref, name).numpy()
        assert value.shape == expected.shape
        if value.dtype.kind == "f":  # top-k indices: compared through their scores (ties may swap)
            np.testing.assert_allclose(value, expected, atol=1e-4, rtol=0, err_msg=name)


def test_int8_quantizes_the_shared_weights(artifacts):
    import onnx

    out = artifacts["sst2-onnx"]
    fp32 = onnx.load(str(out / "model.onnx")).graph
    inits = {t.name for t in fp32.initializer}
    assert not [n for n in fp32.node if n.op_type == "Identity" and n.input[0] in inits]
    # Per computed layer: one QAttention (q/k/v) and 3 weight matmuls (output, FFN in, FFN out) of its
    # group; + embedding projection, pooler and classifier.
    report = quantization_report(out / "model.int8.onnx")
    assert report["int8_attentions"] == L
    assert report["int8_matmuls"] == 3 * L + 3
    assert report["fp32_weight_matmuls"] == 0
    assert report["int8_gathers"] == 3  # word, position and token-type tables
    # Shared weights are stored once, in int8: what stays fp32 is biases and LayerNorms.
    assert report["float_bytes"] < 0.1 * report["int8_bytes"]
    assert (out / "model.int8.onnx").stat().st_size < 0.5 * (out / "model.onnx").stat().st_size


def test_int8_keeps_predictions(artifacts, tmp_path):
    # Per-token tags: a random encoder's [CLS] barely varies between sentences, its tokens do.
    export_onnx(artifacts["AlbertForTokenClassification"], tmp_path, quantize="int8")
    texts, _ = sst2("dev.tsv", 200)
    fp32 = Predictor.load(tmp_path, engine="onnx", threads=1, precision="fp32").tag(texts)
    int8 = Predictor.load(tmp_path, engine="onnx", threads=1, precision="int8").tag(texts)
    a = [t for row in fp32 for t in row["tags"]]
    b = [t for row in int8 for t in row["tags"]]
    assert len(a) == len(b) > 1000 and len(set(a)) > 1  # several tags occur: agreement is not trivial
    agree = np.mean([x == y for x, y in zip(a, b, strict=True)])
    assert agree >= 0.9, agree


def test_predictor_same_answers_on_both_engines(artifacts, tmp_path):
    texts, _ = sst2("dev.tsv", 7)
    three = {"eval_batch_size": 3}
    torch_p = Predictor.load(artifacts["AlbertForSequenceClassification"], engine="torch", overrides=three,
                             precision="fp32")
    onnx_p = Predictor.load(artifacts["sst2-onnx"], engine="onnx", threads=1, precision="fp32", overrides=three)
    a, b = torch_p.classify(texts), onnx_p.classify(texts)
    assert [r["label"] for r in a] == [r["label"] for r in b]
    assert all(abs(x["score"] - y["score"]) < 1e-4 for x, y in zip(a, b, strict=True))
    assert set(a[0]["probabilities"]) == {"negative", "positive"}

    tags = Predictor.load(artifacts["AlbertForTokenClassification"]).tag(texts[:2])
    assert len(tags) == 2 and len(tags[0]["tags"]) == len(texts[0].split())  # one tag per word
    qa = Predictor.load(artifacts["AlbertForQuestionAnswering"])
    (ans,) = qa.answer(["what is it?"], [texts[0]])
    assert 0 <= ans["start"] <= ans["end"] and ans["answer"] == texts[0][ans["start"] : ans["end"]]
    with pytest.raises(ValueError, match="QA needs"):
        qa.classify(texts)


def test_cli_export(artifacts, tmp_path, capsys):
    from albertlm.cli import main

    out = tmp_path / "cli"
    assert main(["export", "--model", str(artifacts["AlbertForQuestionAnswering"]), "--out", str(out),
                 "--quantize", "int8", "--opset", "17"]) == 0  # fmt: skip
    assert "int8" in capsys.readouterr().out
    assert (out / "model.int8.onnx").is_file() and (out / "spiece.model").is_file()
    assert main(["export", "--model", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main(["export", "--model", str(artifacts["AlbertModel"]), "--out", str(out), "--opset", "9"]) == 2
