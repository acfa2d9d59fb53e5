"""The study runner at a tiny budget: every variant trains, is scored, resumes, and lands in the table."""

from __future__ import annotations

import itertools
import json

import pytest
from shared_data import DATA

from albertlm.errors import UserError
from albertlm.research.ablation import StudySettings, run_study, study_variants


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from albertlm.data.demo import _sentences, stdlib_docstrings

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
    finetune = dict(finetune_steps=2, finetune_data=str(SST2), finetune_limit_train=64, finetune_seeds=2)
    s = StudySettings(study="objective", corpus=str(corpus), out=str(tmp_path), steps=2, global_batch_size=8,
                      micro_batch_size=4, max_seq_length=48, vocab_size=500, eval_batches=2, eval_pairs=40,
                      **finetune,
                      model=dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, embedding_size=16,
                                 num_hidden_layers=2))
    results, (js, md, png, curves) = run_study(s, log=lambda *_: None)
    assert [r["variant"] for r in results] == ["none", "nsp", "sop"]
    for r in results:
        assert 0 <= r["mlm_acc"] <= 1 and 0 <= r["sop_acc"] <= 1 and 0 <= r["nsp_acc"] <= 1
        assert r["sop_ci95"][0] <= r["sop_acc"] <= r["sop_ci95"][1] and r["pairs"] == 80  # 40 pairs, both cases
        assert len(r["downstream_seeds"]["sst2 accuracy"]) == 2
        assert r["downstream"]["sst2 accuracy"] == sum(r["downstream_seeds"]["sst2 accuracy"]) / 2
    table = md.read_text()
    assert "| sop |" in table and "MLM 54.0 / NSP 78.9 / SOP 86.5" in table
    assert png.stat().st_size > 0 and curves.stat().st_size > 0
    assert "sst2 accuracy (mean ± sd, 2 seeds)" in table
    assert json.loads(js.read_text())["settings"]["steps"] == 2
    # rerun: finished variants are skipped, not retrained
    before = (tmp_path / "sop" / "result.json").stat().st_mtime
    run_study(s, log=lambda *_: None)
    assert (tmp_path / "sop" / "result.json").stat().st_mtime == before
    # ... but only under the settings they were run with: a table never mixes two budgets
    with pytest.raises(UserError, match="holds the objective study, run with other settings .steps 2 there, 3 now"):
        run_study(StudySettings(**{**vars(s), "steps": 3}), log=lambda *_: None)
    with pytest.raises(UserError, match="other settings"):
        run_study(StudySettings(**{**vars(s), "steps": 3}), report_only=True)
    # a folder holding anything else is not taken over
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="holds files that are not a study's .notes.txt."):
        run_study(StudySettings(**{**vars(s), "out": str(tmp_path / "mine")}), log=lambda *_: None)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    # a variant linked from another study reports under that study's name and paper column
    sharing = tmp_path / "sharing"
    sharing.mkdir()
    (sharing / "all").symlink_to(tmp_path / "sop")
    results, (_, md, _, _) = run_study(StudySettings(**{**vars(s), "study": "sharing", "out": str(sharing)}),
                                       report_only=True)  # fmt: skip
    assert [(r["variant"], r["objective"]) for r in results] == [("all", "sop")]
    assert "| all | " in md.read_text() and "12M; the default" in md.read_text()


def test_pair_sets_are_balanced_and_separate_the_contrasts(corpus):
    import torch

    from albertlm.config import AlbertConfig
    from albertlm.data.tokenizer_training import train_sentencepiece
    from albertlm.heads import AlbertForPreTraining
    from albertlm.research.analysis import build_pair_sets, pair_accuracy, wilson_interval

    tok = train_sentencepiece([corpus / "train.txt"], corpus / "tok", vocab_size=500, seed=0)
    sets = build_pair_sets(corpus / "heldout.txt", tok, max_seq_length=48, max_pairs=50, seed=1)
    sop, nsp = sets["sop"], sets["nsp"]
    assert len(sop.labels) == len(nsp.labels) == 100 and sum(sop.labels) == sum(nsp.labels) == 50
    for k in range(0, 100, 2):
        true, swapped = sop.input_ids[k], sop.input_ids[k + 1]
        a_len = true.index(tok.sep_id) - 1
        a, b = true[1 : a_len + 1], true[a_len + 2 : -1]
        assert swapped == [tok.cls_id, *b, tok.sep_id, *a, tok.sep_id]  # the same two segments, swapped
        assert nsp.input_ids[k] == true and nsp.input_ids[k + 1][: a_len + 2] == true[: a_len + 2]
        assert nsp.input_ids[k + 1] != true and len(true) <= 48
        assert sop.token_type_ids[k + 1] == [0] * (len(b) + 2) + [1] * (len(a) + 1)
    model = AlbertForPreTraining(AlbertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                                              intermediate_size=64, embedding_size=16, num_hidden_layers=1))
    with torch.no_grad():  # a pair head that always answers "in order"
        model.sop_classifier.classifier.weight.zero_()
        model.sop_classifier.classifier.bias.copy_(torch.tensor([1.0, 0.0]))
    r = pair_accuracy(model, sop, tok.pad_id, batch_size=16)
    assert r["sop_acc"] == 0.5 and r["sop_n"] == 100
    assert (r["sop_ci95_low"], r["sop_ci95_high"]) == pytest.approx(wilson_interval(50, 100))
    assert wilson_interval(50, 100) == pytest.approx((0.4038, 0.5962), abs=1e-4)


def test_analyze_pairs_cli_scores_a_model_and_names_a_file_without_pairs(corpus, tmp_path, capsys):
    from albertlm.cli import main
    from albertlm.config import AlbertConfig
    from albertlm.data.tokenizer_training import train_sentencepiece
    from albertlm.heads import AlbertForPreTraining

    tok = train_sentencepiece([corpus / "train.txt"], tmp_path / "model", vocab_size=500, seed=0)
    AlbertForPreTraining(AlbertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_attention_heads=2,
                                      intermediate_size=64, embedding_size=16, num_hidden_layers=1)).save_pretrained(
        tmp_path / "model")  # fmt: skip
    out = tmp_path / "pairs.json"
    args = ["analyze", "pairs", "--model", str(tmp_path / "model"), "--heldout", str(corpus / "heldout.txt"),
            "--max-seq-length", "48", "--pairs", "30", "--json", str(out)]  # fmt: skip
    assert main(args) == 0
    r = json.loads(out.read_text())
    assert r["sop_n"] == r["nsp_n"] == 60 and r["sop_ci95_low"] <= r["sop_acc"] <= r["sop_ci95_high"]
    assert "SOP acc" in capsys.readouterr().out
    one = tmp_path / "one.txt"
    one.write_text("Only one document here.\nIt has two sentences.\n")
    assert main([*args[:5], str(one)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "one.txt" in err[0] and "two documents" in err[0]
