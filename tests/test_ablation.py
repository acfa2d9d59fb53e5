"""The study runner at a tiny budget: every variant trains, is scored, resumes, and lands in the table."""

from __future__ import annotations

import itertools
import json

import pytest
from shared_data import DATA

from albertlm.ablation import StudySettings, run_study, study_variants


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from albertlm.demo import _sentences, stdlib_docstrings

    root = tmp_path_factory.mktemp("corpus")
    docs = ["\n".join(s) + "\n\n" for s in map(_sentences, itertools.islice(stdlib_docstrings(), 400)) if len(s) >= 2]
    (root / "train.txt").write_text("".join(docs[:-30]))
    (root / "heldout.txt").write_text("".join(docs[-30:]))
    return root


def test_every_study_has_the_papers_variants():
    assert [v.name for v in study_variants("sharing")] == ["all", "attention", "ffn", "none"]
    assert [v.task for v in study_variants("objective")] == ["none", "nsp", "sop"]
    assert len(study_variants("embedding")) == 8
    with pytest.raises(ValueError, match="unknown --study"):
        study_variants("dropout")


SST2 = DATA / "glue_sst2"


def test_objective_study_tiny_budget(corpus, tmp_path):
    finetune = dict(finetune_steps=2, finetune_data=str(SST2), finetune_limit_train=64)
    s = StudySettings(study="objective", corpus=str(corpus), out=str(tmp_path), steps=2, global_batch_size=8,
                      micro_batch_size=4, max_seq_length=48, vocab_size=500, eval_batches=2,
                      **finetune,
                      model=dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, embedding_size=16,
                                 num_hidden_layers=2))
    results, (js, md, png) = run_study(s, log=lambda *_: None)
    assert [r["variant"] for r in results] == ["none", "nsp", "sop"]
    for r in results:
        assert 0 <= r["mlm_acc"] <= 1 and 0 <= r["sop_acc"] <= 1 and 0 <= r["nsp_acc"] <= 1
        assert 0 <= r["downstream"]["sst2 accuracy"] <= 1
    table = md.read_text()
    assert "| sop |" in table and "MLM 54.0 / NSP 78.9 / SOP 86.5" in table and png.stat().st_size > 0
    assert json.loads(js.read_text())["settings"]["steps"] == 2
    # rerun: finished variants are skipped, not retrained
    before = (tmp_path / "sop" / "result.json").stat().st_mtime
    run_study(s, log=lambda *_: None)
    assert (tmp_path / "sop" / "result.json").stat().st_mtime == before
