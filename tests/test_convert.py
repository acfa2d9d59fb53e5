"""``albertlm convert``: original TF checkpoints reproduce the ORIGINAL code's outputs, without TensorFlow.

The fixtures under tests/fixtures/tf were made by running google-research/albert and brightmart/albert_zh
themselves (tests/fixtures/tf/generate.py): checkpoint + albert_config.json + the original's outputs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import albertlm
from albertlm.cli import main
from albertlm.convert.original import COMPAT_KEY, ConversionError, from_tf, group_plan, list_variables, map_name
from albertlm.convert.tf_reader import CheckpointFormatError, TFCheckpoint, resolve_prefix, snappy_decompress
from albertlm.errors import UserError
from albertlm.heads import IGNORE
from albertlm.tokenizer import load_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "tf"
TOLERANCE = 2e-5  # fp32, the bar
ALL = ["google", "google_classifier", "brightmart_google_slots", "brightmart_postln", "brightmart_preln"]
GOOGLE = ["google", "google_classifier", "brightmart_google_slots"]
INPUTS = ("input_ids", "input_mask", "token_type_ids", "masked_lm_positions", "p_mask")


def expected(name: str) -> dict[str, np.ndarray]:
    return dict(np.load(FIXTURES / name / "expected.npz"))


def inputs(e: dict[str, np.ndarray]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.from_numpy(e[k]).long() for k in ("input_ids", "input_mask", "token_type_ids"))


def convert(name: str, out: Path, config: Path | None = None, **kw):
    d = FIXTURES / name
    return from_tf(d / "model.ckpt", config or d / "albert_config.json", out, **kw)


def ours_outputs(model_dir: Path, arch: str, e: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Sequence / pooled output, and with the pretraining heads the MLM logits at the original's masked
    positions (through the labels path, which gathers them row-major as the original does) and SOP logits."""
    ids, mask, types = inputs(e)
    model = getattr(albertlm, arch).from_pretrained(model_dir).eval()
    out = {}
    with torch.no_grad():
        base = model.albert(ids, mask, types) if hasattr(model, "albert") else model(ids, mask, types)
        out["sequence_output"], out["pooled_output"] = base.last_hidden_state, base.pooler_output
        if arch == "AlbertForSequenceClassification":  # run_classifier's head on the pooled output
            out["classifier_logits"] = model(ids, mask, types).logits
        if arch == "AlbertForPreTraining":
            labels = torch.full_like(ids, IGNORE)
            positions = torch.from_numpy(e["masked_lm_positions"]).long()
            assert (positions.diff(dim=1) > 0).all()  # row-major order == the original's gather order
            labels.scatter_(1, positions, 7)
            pt = model(ids, mask, types, labels=labels)
            out["mlm_logits"], out["sop_logits"] = pt.prediction_logits, pt.sop_logits
    return {k: v.numpy() for k, v in out.items()}


@pytest.mark.parametrize("name", ALL)
def test_converted_model_reproduces_the_original(name, tmp_path):
    report = convert(name, tmp_path / "out")
    e = expected(name)
    got = ours_outputs(tmp_path / "out", report.architecture, e)
    keys = [k for k in e if k not in INPUTS]
    assert set(keys) <= set(got) and len(keys) >= 1
    for k in keys:
        diff = np.abs(got[k] - e[k]).max()
        assert diff < TOLERANCE, f"{name} {k}: max |diff| {diff:.2e}"
        assert np.abs(e[k]).max() > 2500 * TOLERANCE  # outputs of real magnitude, not a vacuous comparison


def test_squad2_head_reproduces_the_original_beam(tmp_path):
    report = convert("google_squad2", tmp_path / "out")
    assert report.architecture == "AlbertForQuestionAnsweringV2" and not report.transformers_compatible
    assert "transformers cannot represent AlbertForQuestionAnsweringV2" in report.summary()
    e = expected("google_squad2")
    model = albertlm.AlbertForQuestionAnsweringV2.from_pretrained(tmp_path / "out").eval()
    assert model.top_k == 5  # run_squad_v2.py's start_n_top = end_n_top = 5
    with torch.no_grad():
        out = model(*inputs(e), p_mask=torch.from_numpy(e["p_mask"]).long())
    torch.testing.assert_close(out.start_top_index.float().numpy(), e["start_top_index"], rtol=0, atol=0)
    torch.testing.assert_close(out.end_top_index.reshape(2, -1).float().numpy(), e["end_top_index"], rtol=0, atol=0)
    for ours, k in ((out.start_top_log_probs, "start_top_log_probs"), (out.end_top_log_probs, "end_top_log_probs"),
                    (out.cls_logits, "cls_logits")):
        assert np.abs(ours.reshape(e[k].shape).numpy() - e[k]).max() < TOLERANCE, k


def test_fixtures_discriminate_the_details(tmp_path):
    """The same fixture converted with the erf GELU, or with post-LN for a pre-LN checkpoint, misses by far:
    the tolerance tests above can fail."""
    cfg = json.loads((FIXTURES / "google" / "albert_config.json").read_text())
    report = convert("google", tmp_path / "ok")
    model = albertlm.AlbertForPreTraining.from_pretrained(tmp_path / "ok")
    erf = albertlm.AlbertForPreTraining(report.config.replace(hidden_act="gelu"))
    erf.load_state_dict(model.state_dict())
    ids, mask, types = inputs(expected("google"))
    with torch.no_grad():
        d = (erf.albert(ids, mask, types).last_hidden_state - model.albert(ids, mask, types).last_hidden_state)
    assert d.abs().max() > 10 * TOLERANCE  # erf vs tanh GELU: ~1e-3 here, 50x the tolerance
    assert cfg["hidden_act"] == "gelu" and report.config.hidden_act == "gelu_new"  # tanh, as the original

    pre = json.loads((FIXTURES / "brightmart_preln" / "albert_config.json").read_text())
    (tmp_path / "post.json").write_text(json.dumps({**pre, "ln_type": "postln"}))
    wrong = convert("brightmart_preln", tmp_path / "wrong", config=tmp_path / "post.json")
    got = ours_outputs(tmp_path / "wrong", wrong.architecture, expected("brightmart_preln"))
    assert np.abs(got["sequence_output"] - expected("brightmart_preln")["sequence_output"]).max() > 0.1


@pytest.mark.parametrize("name", GOOGLE)
def test_google_structure_loads_in_transformers_with_the_same_outputs(name, tmp_path):
    transformers = pytest.importorskip("transformers")
    report = convert(name, tmp_path / "out")
    assert report.transformers_compatible
    e = expected(name)
    ids, mask, types = inputs(e)
    hf_cls = getattr(transformers, report.architecture)
    hf = hf_cls.from_pretrained(tmp_path / "out").eval()
    with torch.no_grad():
        out = hf(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
    if report.architecture == "AlbertForSequenceClassification":
        assert np.abs(out.logits.numpy() - e["classifier_logits"]).max() < TOLERANCE
        assert report.config.num_labels == 3
        return
    if report.architecture == "AlbertForPreTraining":
        positions = torch.from_numpy(e["masked_lm_positions"]).long()
        mlm = out.prediction_logits.gather(1, positions[..., None].expand(-1, -1, out.prediction_logits.shape[-1]))
        assert np.abs(mlm.reshape(-1, mlm.shape[-1]).numpy() - e["mlm_logits"]).max() < TOLERANCE
        assert np.abs(out.sop_logits.numpy() - e["sop_logits"]).max() < TOLERANCE
        seq = out.hidden_states[-1]
    else:
        seq = out.last_hidden_state
        assert np.abs(out.pooler_output.numpy() - e["pooled_output"]).max() < TOLERANCE
    assert np.abs(seq.numpy() - e["sequence_output"]).max() < TOLERANCE


def test_optimizer_slots_and_step_are_skipped(tmp_path):
    report = convert("brightmart_google_slots", tmp_path / "out")
    ckpt = TFCheckpoint(FIXTURES / "brightmart_google_slots")
    slots = [n for n, _, _ in ckpt.variables() if n.endswith(("/adam_m", "/adam_v")) or n == "global_step"]
    assert sorted(report.skipped) == sorted(slots) and len(slots) == 2 * report.converted + 1
    # G=5 over L=3 layers: the original runs groups 0, 1, 3 (int(l / L * G)); ours are 0, 1, 2
    assert group_plan(3, 5, "cfg") == (3, {0: 0, 1: 1, 3: 2})
    assert report.config.num_hidden_groups == 3 and not report.config.project_embeddings  # E == H: no projection


def test_albert_zh_config_mapping_and_written_config(tmp_path):
    post = convert("brightmart_postln", tmp_path / "post")
    pre = convert("brightmart_preln", tmp_path / "pre")
    assert post.config.embedding_projection_before_position and post.config.layer_norm_position == "post"
    assert pre.config.layer_norm_position == "pre" and not pre.transformers_compatible
    assert "albertlm only" in pre.summary()
    assert "albertlm and transformers" in convert("google", tmp_path / "g").summary()
    written = json.loads((tmp_path / "pre" / "config.json").read_text())
    assert written["layer_norm_position"] == "pre"
    assert "transformers cannot" in written["albertlm_transformers_incompatible"]
    google = json.loads((tmp_path / "g" / "config.json").read_text())
    assert "layer_norm_position" not in google and "albertlm_transformers_incompatible" not in google
    assert google["hidden_act"] == "gelu_new" and google["layer_norm_eps"] == 1e-12


def test_pre_ln_pooled_only_path_matches_the_full_forward():
    c = albertlm.AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                              num_attention_heads=2, intermediate_size=24, layer_norm_position="pre",
                              embedding_projection_before_position=True)
    torch.manual_seed(0)
    m = albertlm.AlbertModel(c).eval()
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.3)
    ids, mask = torch.randint(5, 50, (2, 7)), torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad():
        full, fast = m(ids, mask).pooler_output, m(ids, mask, pooled_only=True).pooler_output
    torch.testing.assert_close(full, fast, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("bad, match", [
    (dict(embedding_projection_before_position=True, project_embeddings=False, embedding_size=16),
     "needs project_embeddings=True"),
    (dict(layer_norm_position="middle"), "unknown layer_norm_position"),
])
def test_structure_options_are_validated(bad, match):
    base = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=24)
    with pytest.raises(ValueError, match=match):
        albertlm.AlbertConfig(**{**base, **bad})


# ----------------------------------------------------------------------------- tokenizers
def zh_vocab(path: Path, size: int = 40) -> Path:
    chars = list("我你他的是不了在人有这个上们来到好电影很看书喜欢") + [chr(0x4E00 + i) for i in range(size)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(dict.fromkeys(chars))[: size - 5]
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def test_wordpiece_vocab_is_carried_with_a_tokenizer_config(tmp_path):
    vocab = zh_vocab(tmp_path / "vocab_chinese.txt")
    report = convert("google", tmp_path / "out", vocab=vocab)
    assert report.tokenizer == "vocab.txt"
    tc = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text(encoding="utf-8"))
    # HF loads the folder's tokenizer.json as it is (not BertTokenizer, which would rebuild its own pipeline)
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc[COMPAT_KEY] == "original"
    ours = load_tokenizer(tmp_path / "out")
    text = "我很喜欢这个电影"
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert hf(text)["input_ids"] == ours.encode(text) and ours.encode(text)[0] == ours.cls_id
    assert report.config.pad_token_id == ours.pad_id and report.config.eos_token_id == ours.sep_id


def test_sentencepiece_model_is_carried_as_spiece_model(tmp_path):
    from albertlm.data.tokenizer_training import train_sentencepiece

    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["the quick brown fox jumps over the lazy dog", "a bad cab", "we jump"] * 50) + "\n")
    tok = train_sentencepiece([text], tmp_path / "spm", vocab_size=34, num_threads=1)
    shutil.copyfile(tmp_path / "spm" / "spiece.model", tmp_path / "30k-clean.model")
    report = convert("google", tmp_path / "out", vocab=tmp_path / "30k-clean.model")
    assert report.tokenizer == "spiece.model" and (tmp_path / "out" / "spiece.model").is_file()
    again = load_tokenizer(tmp_path / "out")
    assert again.encode("a bad bee") == tok.encode("a bad bee")
    tc = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc[COMPAT_KEY] == "original"


def test_vocabulary_beside_the_checkpoint_is_found(tmp_path):
    ckpt = tmp_path / "release"
    shutil.copytree(FIXTURES / "brightmart_postln", ckpt)
    zh_vocab(ckpt / "vocab.txt")
    report = from_tf(ckpt, ckpt / "albert_config.json", tmp_path / "out")  # a directory as the checkpoint
    assert report.tokenizer == "vocab.txt"
    big = zh_vocab(tmp_path / "big.txt", size=41)
    with pytest.raises(ConversionError, match="41 tokens but the config's vocab_size is 40"):
        from_tf(ckpt, ckpt / "albert_config.json", tmp_path / "out2", vocab=big)


# ----------------------------------------------------------------------------- errors
def test_mixed_up_families_and_shapes_fail_with_one_clear_line(tmp_path):
    with pytest.raises(ConversionError, match="has no ln_type, but the checkpoint is brightmart/albert_zh-structure"):
        convert("brightmart_postln", tmp_path / "a", config=FIXTURES / "google" / "albert_config.json")
    with pytest.raises(ConversionError, match=r"group_1/.*belongs to group 1, but .* run only groups \[0\]"):
        convert("google", tmp_path / "b", config=FIXTURES / "brightmart_postln" / "albert_config.json")
    cfg = json.loads((FIXTURES / "google" / "albert_config.json").read_text())
    (tmp_path / "v.json").write_text(json.dumps({**cfg, "vocab_size": 30000}))
    with pytest.raises(ConversionError, match=r"word_embeddings has shape \[40, 16\] but .* implies \[30000, 16\]"):
        convert("google", tmp_path / "c", config=tmp_path / "v.json")
    (tmp_path / "act.json").write_text(json.dumps({**cfg, "hidden_act": "linear"}))
    with pytest.raises(ConversionError, match="hidden_act 'linear'"):
        convert("google", tmp_path / "d", config=tmp_path / "act.json")
    assert not any(p.name.startswith((".a", ".b", ".c", ".d")) for p in tmp_path.iterdir())  # no temp dirs left


def test_unknown_variables_are_named():
    with pytest.raises(KeyError, match="bert/encoder/transformer/group_0/inner_group_0/adapter/kernel"):
        map_name("bert/encoder/transformer/group_0/inner_group_0/adapter/kernel", "google", {0: 0})
    with pytest.raises(KeyError, match="not a variable of brightmart's transformer block"):
        map_name("bert/encoder/layer_shared/adapter/dense/kernel", "albert_zh", {})
    assert map_name("bert/encoder/layer_shared/output/LayerNorm/gamma", "albert_zh", {}) == (
        "albert.encoder.albert_layer_groups.0.albert_layers.0.full_layer_layer_norm.weight", False)
    assert map_name("output_weights", "google", {}) == ("classifier.weight", False)  # run_classifier's head
    assert map_name("bert/pooler/dense/kernel/Adam_1", "google", {}) is None


def test_output_directory_is_never_overwritten(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(UserError, match="exists and is not empty"):
        convert("google", out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    convert("google", empty)  # an empty directory is filled
    assert (empty / "model.safetensors").is_file()


def test_damaged_checkpoints_are_named(tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / "brightmart_preln", ckpt)
    data = ckpt / "model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:1000])
    with pytest.raises(CheckpointFormatError, match=r"data-00000-of-00001 is truncated .* download or copy it again"):
        convert_from(ckpt, tmp_path / "o1")
    data.unlink()
    with pytest.raises(FileNotFoundError, match="data-00000-of-00001 is missing"):
        convert_from(ckpt, tmp_path / "o2")
    (ckpt / "model.ckpt.index").write_bytes(b"\0" * 64)
    with pytest.raises(CheckpointFormatError, match="not a TensorFlow V2 checkpoint index"):
        TFCheckpoint(ckpt / "model.ckpt")
    with pytest.raises(FileNotFoundError, match="pass the prefix"):
        TFCheckpoint(tmp_path / "nothing" / "model.ckpt-best")


def convert_from(ckpt: Path, out: Path):
    return from_tf(ckpt / "model.ckpt", ckpt / "albert_config.json", out)


# ----------------------------------------------------------------------------- the reader and the CLI
def test_reader_lists_and_resolves_every_way_of_naming_a_checkpoint():
    d = FIXTURES / "google"
    prefix = d / "model.ckpt"
    for p in (prefix, d / "model.ckpt.index", d / "model.ckpt.data-00000-of-00001", d):
        assert resolve_prefix(p) == prefix
    rows = list_variables(prefix)
    assert ("bert/encoder/embedding_hidden_mapping_in/kernel", "float32", (16, 32)) in rows
    assert rows == sorted(rows) and len(rows) == 80
    assert TFCheckpoint(prefix).read("cls/seq_relationship/output_weights").shape == (2, 32)


def test_snappy_blocks_decode():
    # "abcd" as a literal, then a 2-byte-offset copy of 8 bytes from 4 back (overlapping), per the format spec
    stream = bytes([12, (4 - 1) << 2]) + b"abcd" + bytes([((8 - 1) << 2) | 2, 4, 0])
    assert snappy_decompress(stream) == b"abcdabcdabcd"
    with pytest.raises(CheckpointFormatError, match="corrupt snappy"):
        snappy_decompress(bytes([5, 0]) + b"a")


def test_cli_convert_and_list(tmp_path, capsys):
    d = FIXTURES / "brightmart_preln"
    assert main(["convert", "--list", str(d / "model.ckpt")]) == 0
    listing = capsys.readouterr().out
    assert "bert/embeddings/word_embeddings_2" in listing and "[16, 32]" in listing
    assert main(["convert", "--from", "tf", "--checkpoint", str(d / "model.ckpt"), "--config",
                 str(d / "albert_config.json"), "--out", str(tmp_path / "out")]) == 0
    assert "albert_zh structure" in capsys.readouterr().out
    assert main(["convert", "--checkpoint", str(d / "model.ckpt"), "--config", str(d / "albert_config.json"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists and is not empty" in err
    assert main(["convert", "--checkpoint", str(d)]) == 2
    assert "--config, --out required" in capsys.readouterr().err


# ----------------------------------------------------------------------------- albert_zh structure in use
@pytest.mark.parametrize("name", ["brightmart_preln", "brightmart_postln"])
def test_albert_zh_structure_fine_tunes_exports_and_serves(name, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from albertlm.deploy.export import export_onnx
    from albertlm.deploy.inference import Predictor
    from albertlm.deploy.serve import create_app
    from albertlm.tasks import InferenceSettings, TextExample, get_task
    from albertlm.training.finetune import Settings, train
    from albertlm.training.finetune_data import Data

    vocab = zh_vocab(tmp_path / "vocab.txt")
    convert(name, tmp_path / "converted", vocab=vocab)
    rows = [("我很喜欢这个电影", "1"), ("这个电影不好", "0"), ("他喜欢看书", "1"), ("你不喜欢", "0")] * 4
    examples = [TextExample(text_a=t, label=y, source=f"mem:{i}") for i, (t, y) in enumerate(rows)]
    tok = load_tokenizer(tmp_path / "converted")
    s = Settings(max_steps=6, batch_size=4, lr=1e-3, warmup=0, progress=False,
                 inference=InferenceSettings(max_seq_length=16, eval_batch_size=8))
    data = Data(train=examples, eval=examples[:8], train_path="mem", eval_path="mem", labels=["0", "1"])
    metrics = train(get_task("chnsenticorp"), data, str(tmp_path / "converted"), tok, tmp_path / "ft", s)
    assert metrics["steps"] == 6 and np.isfinite(metrics["final_train_loss"]) and "accuracy" in metrics["metrics"]
    assert sorted(metrics["newly_initialized_keys"]) == ["classifier.bias", "classifier.weight"]  # rest converted
    tuned = albertlm.AlbertForSequenceClassification.from_pretrained(tmp_path / "ft")
    before = albertlm.AlbertForPreTraining.from_pretrained(tmp_path / "converted")
    moved = tuned.albert.embeddings.word_projection.weight - before.albert.embeddings.word_projection.weight
    assert moved.abs().max() > 0  # the albert_zh-only projection is trained like any other weight
    assert tuned.config.embedding_projection_before_position
    assert tuned.config.layer_norm_position == ("pre" if name.endswith("preln") else "post")
    for graph in ("ort", "standard"):
        manifest = export_onnx(tmp_path / "ft", tmp_path / f"onnx-{graph}", graph=graph)
        assert manifest["fp32_max_abs_diff"] < 1e-4, (graph, manifest["fp32_max_abs_diff"])
    texts = ["我喜欢这个电影", "他不好"]
    ref = Predictor.load(tmp_path / "ft", engine="torch", precision="fp32").classify(texts)
    client = TestClient(create_app(Predictor.load(tmp_path / "onnx-ort", engine="onnx", threads=1)))
    r = client.post("/v1/classify", json={"texts": texts})
    assert r.status_code == 200, r.text
    served = r.json()["results"]
    assert [x["label"] for x in served] == [x["label"] for x in ref]
    assert np.allclose([x["score"] for x in served], [x["score"] for x in ref], atol=1e-4)
