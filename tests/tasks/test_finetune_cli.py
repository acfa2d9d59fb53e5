"""End to end through the CLI on slices of the real data with a tiny model: finetune -> evaluate ->
predict, save/load round trip, a transformers-saved directory, a pretraining checkpoint under every
head, and bad input reported as one line (exit 2)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from albertlm import AlbertConfig, AlbertForPreTraining, AlbertForSequenceClassification
from albertlm.cli import main
from albertlm.tasks.registry import TASKS

TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, embedding_size=16)


def tiny_flags() -> list[str]:
    return [f"--set={k}={v}" for k, v in TINY.items()]


FAST = ["--quiet", "--max-steps", "6", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "64"]


def _sst2_slice(data: Path, tmp: Path) -> Path:
    out = tmp / "sst2"
    out.mkdir()
    for name, n in (("train_full.tsv", 200), ("dev.tsv", 60)):
        lines = (data / "glue_sst2" / name).read_text(encoding="utf-8").splitlines()[: n + 1]
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_finetune_evaluate_predict(data, en_tok_dir, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "ft"
    args = ["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir)]
    assert main([*args, "--out", str(out), "--eval-every", "3", *FAST, *tiny_flags()]) == 0
    assert "wrote model + tokenizer" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "spiece.model", "metrics.json", "metrics.jsonl"} <= {
        p.name for p in out.iterdir()
    }
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [3, 6] and all("accuracy" in r for r in rows)
    final = json.loads((out / "metrics.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"} and config["albertlm_task"]["name"] == "sst2"

    # evaluate from the saved directory alone reproduces the training-time metric
    assert main(["evaluate", "--data", str(sst), "--model", str(out), "--max-seq-length", "64"]) == 0
    got = json.loads(capsys.readouterr().out.splitlines()[0])
    assert got["accuracy"] == pytest.approx(final["metrics"]["accuracy"])

    inp = tmp_path / "in.txt"
    inp.write_text('{"text": "a charming film"}\nan awful , boring mess\n', encoding="utf-8")
    assert main(["predict", "--model", str(out), "--input", str(inp)]) == 0
    preds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(preds) == 2 and set(preds[0]["probabilities"]) == {"0", "1"}
    assert sum(preds[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)

    # the same model exported to ONNX (fp32 graph) predicts the same through onnxruntime
    if importlib.util.find_spec("onnxruntime") is not None:
        assert main(["export", "--model", str(out), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 0
        capsys.readouterr()
        assert main(["predict", "--model", str(tmp_path / "onnx"), "--engine", "onnx", "--input", str(inp)]) == 0
        onnx_preds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        for a, b in zip(onnx_preds, preds, strict=True):
            assert a["label"] == b["label"]
            assert a["probabilities"]["1"] == pytest.approx(b["probabilities"]["1"], abs=1e-4)

    # save / load round trip: same logits from the reloaded model
    m = AlbertForSequenceClassification.from_pretrained(out)
    x = torch.tensor([[2, 10, 11, 12, 3]])
    m2 = AlbertForSequenceClassification.from_pretrained(out)
    torch.testing.assert_close(m(x).logits, m2(x).logits)


def test_transformers_saved_directory(data, en_tok_dir, tmp_path, capsys):
    """A directory from transformers' save_pretrained fine-tunes like ours: same starting logits."""
    transformers = pytest.importorskip("transformers")
    from albertlm.tokenizer import load_tokenizer

    vocab = load_tokenizer(en_tok_dir).vocab_size
    hf_config = transformers.AlbertConfig(vocab_size=vocab, num_labels=2, classifier_dropout_prob=0.0, **TINY)
    torch.manual_seed(0)
    hf = transformers.AlbertForSequenceClassification(hf_config).eval()
    hf.save_pretrained(tmp_path / "hf")
    ours = AlbertForSequenceClassification.from_pretrained(tmp_path / "hf")
    x = torch.tensor([[2, 10, 11, 12, 3]])
    torch.testing.assert_close(ours(x).logits, hf(x).logits, atol=1e-5, rtol=1e-4)
    sst = _sst2_slice(data, tmp_path)
    args = ["finetune", "--task", "sst2", "--data", str(sst), "--model", str(tmp_path / "hf")]
    assert main([*args, "--tokenizer", str(en_tok_dir), "--out", str(tmp_path / "ft"), *FAST]) == 0
    assert (tmp_path / "ft" / "model.safetensors").is_file()
    # and our fine-tuned output loads back into transformers
    back = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "ft").eval()
    ours = AlbertForSequenceClassification.from_pretrained(tmp_path / "ft")
    torch.testing.assert_close(ours(x).logits, back(x).logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("task", ["sst2", "stsb", "pku-ner", "squad", "squad2", "chid"])
def test_pretraining_checkpoint_under_every_head(task, tmp_path):
    """--model DIR with an AlbertForPreTraining checkpoint: encoder loaded, head freshly initialised."""
    from albertlm.heads import HEADS
    from albertlm.tasks import kind_of
    from albertlm.training.finetune import build_model

    ckpt = tmp_path / "pt"
    AlbertForPreTraining(AlbertConfig(vocab_size=100, **TINY)).save_pretrained(ckpt)

    class Tok:
        vocab_size = 100

    t = TASKS[task]
    model = build_model(t, str(ckpt), Tok(), ["O", "B-PER", "I-PER"] if t.kind == "tagging" else ["0", "1"], {})
    assert isinstance(model, HEADS[kind_of(t).architecture].cls) and model.newly_initialized_keys
    assert not any(k.startswith("albert.") for k in model.newly_initialized_keys)


def test_bad_input_is_one_line(data, en_tok_dir, tmp_path, capsys):
    sst = tmp_path / "bad"
    sst.mkdir()
    (sst / "train.tsv").write_text("sentence\tlabel\ngood\t1\nfine\tmaybe\n", encoding="utf-8")
    (sst / "dev.tsv").write_text("sentence\tlabel\ngood\t1\n", encoding="utf-8")
    base = ["finetune", "--data", str(sst), "--tokenizer", str(en_tok_dir), "--out", str(tmp_path / "o"), *FAST]
    cases = [
        (["--task", "sst2", "--model", "albert-tiny"], "train.tsv:3: unknown label 'maybe'"),
        (["--task", "sst2", "--model", str(tmp_path / "missing")], f"--model: no such folder {tmp_path / 'missing'}"),
    ]
    for extra, msg in cases:
        assert main([*base, *extra, *tiny_flags()]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--out", "x"]) == 2
    assert "--tokenizer" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a task name is checked as the flag is parsed
        main([*base, "--task", "nope", "--model", "albert-tiny", *tiny_flags()])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "unknown task 'nope'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag, want", [([], 0.01), (["--weight-decay", "0"], 0.0), (["--weight-decay", "0.3"], 0.3)])
def test_weight_decay_reaches_the_optimizer(data, en_tok_dir, tmp_path, monkeypatch, flag, want):
    """`--weight-decay 0` means zero (it used to become 0.01): read from the optimizer's own groups."""
    import albertlm.training.finetune as ft

    seen = []

    def spy(*a, **kw):
        opt = build(*a, **kw)
        seen.append(opt)
        return opt

    build = ft.build_optimizer
    monkeypatch.setattr(ft, "build_optimizer", spy)
    sst = _sst2_slice(data, tmp_path)
    args = ["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir),
            "--out", str(tmp_path / "o"), "--limit-eval", "8", *FAST, "--max-steps", "1", *flag, *tiny_flags()]
    assert main(args) == 0
    decays = {g["weight_decay"] for g in seen[0].param_groups}
    assert decays == {0.0, want} if want else decays == {0.0}  # biases and LayerNorms never decay


def test_evaluate_official_format(data, en_tok_dir, tmp_path, capsys):
    """evaluate --official-format: the files the official evaluate-v2.0.py reads, scored by its reference
    implementation, give the numbers evaluate printed; a task without an official script is refused."""
    from official_reference import ref_squad_v2

    sq = tmp_path / "squad2"
    sq.mkdir()
    for name in ("train-v2.0.json", "dev-v2.0.json"):  # the shipped slice has a dev file only: it serves as both
        doc = json.loads((data / "squad_v2_subset" / "dev-v2.0.json").read_text(encoding="utf-8"))
        doc["data"] = doc["data"][:1]
        doc["data"][0]["paragraphs"] = doc["data"][0]["paragraphs"][:4]
        (sq / name).write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "ft"
    args = ["finetune", "--task", "squad2", "--data", str(sq), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir)]
    assert main([*args, "--out", str(out), *FAST, *tiny_flags()]) == 0
    capsys.readouterr()
    off = tmp_path / "official"
    assert main(["evaluate", "--data", str(sq), "--model", str(out), "--official-format", str(off)]) == 0
    captured = capsys.readouterr()
    ours = json.loads(captured.out.splitlines()[0])
    assert "python evaluate-v2.0.py dev.json predictions.json --na-prob-file null_odds.json" in captured.err
    load = lambda name: json.loads((off / name).read_text(encoding="utf-8"))  # noqa: E731
    official = ref_squad_v2(load("dev.json"), load("predictions.json"), load("null_odds.json"))[3]
    assert official == pytest.approx({k: v for k, v in ours.items() if k != "examples"}, abs=1e-9)

    sst = _sst2_slice(data, tmp_path)
    base = ["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir)]
    assert main([*base, "--out", str(tmp_path / "sst"), *FAST, *tiny_flags()]) == 0
    capsys.readouterr()
    argv = ["evaluate", "--data", str(sst), "--model", str(tmp_path / "sst"), "--official-format", str(tmp_path / "x")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "sst2 has no official evaluation script" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_undefined_correlation_is_null_in_json(en_tok_dir, tmp_path, capsys):
    """A dev set whose scores are all equal has no correlation: NaN in memory, null in every JSON file."""
    sts = tmp_path / "stsb"
    sts.mkdir()
    rows = [("a man plays a guitar", "a man plays music", "4.0"), ("a cat sleeps", "the dog runs", "0.5")] * 8
    (sts / "train.tsv").write_text("sentence1\tsentence2\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    (sts / "dev.tsv").write_text("sentence1\tsentence2\tscore\n" + "a\tb\t2.5\nc\td\t2.5\ne\tf\t2.5\n")
    out = tmp_path / "ft"
    args = ["finetune", "--task", "stsb", "--data", str(sts), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir)]
    assert main([*args, "--out", str(out), *FAST, *tiny_flags()]) == 0
    assert "pearson=nan" in capsys.readouterr().out
    strict = lambda text: json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))  # noqa: E731
    assert strict((out / "metrics.json").read_text())["metrics"]["pearson"] is None
    assert all(strict(line)["spearman"] is None for line in (out / "metrics.jsonl").read_text().splitlines())
    assert main(["evaluate", "--data", str(sts), "--model", str(out), "--out", str(tmp_path / "ev")]) == 0
    captured = capsys.readouterr()
    assert strict(captured.out.splitlines()[0])["pearson"] is None and "pearson=nan" in captured.err
    assert strict((tmp_path / "ev" / "metrics.json").read_text())["metrics"]["spearman"] is None
