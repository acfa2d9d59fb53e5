"""The embedded demo's closing lines: what was learned, against the no-model baselines, flagged plainly
when not above them; and `albertlm data demo-corpus`, which writes the demo's text for the Quick tour."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch
from shared_data import docstring_corpus

from albertlm.cli import main


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, Path]:
    """A random tiny pretraining model and held-out dynamic shards of stdlib docstrings (seconds)."""
    from albertlm import AlbertConfig, AlbertForPreTraining
    from albertlm.data import InstanceConfig, build_dataset
    from albertlm.data.tokenizer_training import train_sentencepiece

    root = tmp_path_factory.mktemp("demo")
    text = root / "heldout.txt"
    docstring_corpus(text, 60)
    tok = train_sentencepiece([text], root / "tok", vocab_size=400)
    build_dataset([text], tok, root / "shards", cfg=InstanceConfig(max_seq_length=64), seed=1)
    torch.manual_seed(0)
    cfg = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64)
    AlbertForPreTraining(cfg).save_pretrained(root / "model")
    return root / "model", root / "shards"


def test_learned_summary_states_the_baselines_and_flags_a_miss(tiny_run):
    from albertlm.data.demo import learned_summary, next_steps
    from albertlm.research.analysis import intrinsic_accuracy

    model, shards = tiny_run
    line = learned_summary(model, shards, epochs=1)
    r = intrinsic_accuracy(model, shards, epochs=1)
    assert "\n" not in line and f"MLM accuracy {r['mlm_acc']:.3f} vs {r['mlm_acc_baseline']:.3f}" in line
    assert f"vs {r['majority_baseline']:.3f} for the majority label" in line
    # a random model is below the copy-or-most-frequent baseline: the line says so in capitals
    assert r["mlm_acc"] < r["mlm_acc_baseline"] and "(NOT above it:" in line
    sop_verdict = re.search(r"majority label \((.*)\)$", line).group(1)
    if r["pair_acc"] <= r["majority_baseline"]:
        assert sop_verdict == "NOT above it"
    elif r["pair_acc"] - r["pair_acc_ci95"] <= r["majority_baseline"]:
        assert sop_verdict.startswith("not clearly above it")
    nxt = next_steps("runs/demo", shards)
    assert nxt.startswith("next: ") and "--resume" in nxt and f"--data {shards}" in nxt


def test_demo_corpus_writes_train_and_heldout_and_never_overwrites(tmp_path, capsys, monkeypatch):
    from albertlm.data import demo

    first = list(itertools.islice(demo.stdlib_docstrings(), 300))  # the whole library takes ~15 s to parse
    monkeypatch.setattr(demo, "stdlib_docstrings", lambda: iter([*first, *first[:50]]))  # 50 repeats
    assert main(["data", "demo-corpus", "--out", str(tmp_path / "c")]) == 0
    train, held = (tmp_path / "c" / "train.txt").read_text(), (tmp_path / "c" / "heldout.txt").read_text()
    train_docs, held_docs = train.split("\n\n")[:-1], held.split("\n\n")[:-1]
    assert len(held_docs) == (len(train_docs) + len(held_docs)) // demo.HELDOUT_EVERY
    assert len(set(train_docs)) == len(train_docs) and not set(held_docs) & set(train_docs)  # repeats dropped
    before = (tmp_path / "c" / "train.txt").stat().st_mtime_ns
    assert main(["data", "demo-corpus", "--out", str(tmp_path / "c")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "c" / "train.txt").stat().st_mtime_ns == before


def test_pretrain_and_analyze_intrinsic_weigh_held_out_scores_against_the_baselines(tiny_run, tmp_path, capsys):
    """Not only the demo: a run with --valid-data, and `analyze intrinsic`, end with the same verdicts."""
    model, shards = tiny_run
    assert main(["analyze", "intrinsic", "--model", str(model), "--data", str(shards), "--epochs", "1"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert "for copying the input or answering the most frequent piece (NOT above it:" in line
    assert "for the majority label (" in line
    tiny = ["--set", "hidden_size=32", "--set", "intermediate_size=64", "--set", "num_attention_heads=2"]
    assert main(["pretrain", "--preset", "albert-tiny", *tiny, "--data", str(shards), "--valid-data", str(shards),
                 "--out", str(tmp_path / "run"), "--max-steps", "1", "--global-batch-size", "4", "--micro-batch-size",
                 "4", "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "learned (held-out, " in out and "for the majority label (" in out
