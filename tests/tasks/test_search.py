"""finetune --search: trials on the SST-2 slice with a tiny model, the best setting over seeds, the best seed's
model kept, the study resumed by the same command, diverged trials pruned, bad ranges one line."""

from __future__ import annotations

import json
import math

import pytest
from test_finetune_cli import _sst2_slice, tiny_flags

from albertlm.cli import main
from albertlm.errors import UserError
from albertlm.training.search import Pruning, SearchSettings, check_search

optuna = pytest.importorskip("optuna")
FAST = ["--quiet", "--max-steps", "4", "--max-seq-length", "32", "--search-batch-sizes", "8,16", "--search-evals", "2"]


def test_search_then_seeds_keeps_the_best_seed_and_resumes(data, en_tok_dir, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "search"
    args = ["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir),
            "--out", str(out), "--search-seeds", "2", *FAST, *tiny_flags()]  # fmt: skip
    assert main([*args, "--search", "3"]) == 0
    assert "searched 3 trials for sst2" in capsys.readouterr().out
    report = json.loads((out / "search.json").read_text())
    assert [t["number"] for t in report["trials"]] == [0, 1, 2]
    assert all(1e-4 <= t["params"]["lr"] <= 1e-3 and t["params"]["batch_size"] in (8, 16) for t in report["trials"])
    assert "epochs" not in report["space"]  # --max-steps given: steps are not searched
    seeds = report["seeds"]
    assert sorted(seeds["scores"]) == ["0", "1"] and seeds["min"] <= seeds["mean"] <= seeds["max"]
    kept = json.loads((out / "metrics.json").read_text())["metrics"]["accuracy"]
    assert kept == pytest.approx(seeds["scores"][str(seeds["best_seed"])]) == pytest.approx(seeds["max"])
    assert (out / "model.safetensors").exists() and (out / "search.png").stat().st_size > 1000
    assert "| trial | state | lr | batch_size | warmup | accuracy |" in (out / "search.md").read_text()

    # the same command with --search 4: the study resumes, one trial more, the seeds' runs are not redone
    before = (out / "seeds" / "seed_0" / "model.safetensors").stat().st_mtime_ns
    assert main([*args, "--search", "4"]) == 0
    report = json.loads((out / "search.json").read_text())
    assert [t["number"] for t in report["trials"]] == [0, 1, 2, 3]
    assert report["trials"][3]["params"] != report["trials"][0]["params"]  # not the first run's draws again
    if report["best_trial"]["number"] != 3:
        assert (out / "seeds" / "seed_0" / "model.safetensors").stat().st_mtime_ns == before
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in rows if "lr" in r]) == 4


def test_a_diverged_trial_is_pruned():
    study = optuna.create_study(direction="maximize")
    prune = Pruning(study.ask())
    prune(10, 0.6, 1.2)
    with pytest.raises(optuna.TrialPruned, match="the loss is nan at step 20"):
        prune(20, 0.5, math.nan)
    assert prune.trial.user_attrs["pruned_because"] == "loss nan at step 20"


def test_bad_ranges_are_one_line():
    with pytest.raises(UserError, match="--search-lr '1e-3': give LOW,HIGH"):
        check_search(SearchSettings(search=2, search_lr="1e-3"), "albert-tiny", {})
    with pytest.raises(UserError, match="--search-batch-sizes '16,x'"):
        check_search(SearchSettings(search=2, search_batch_sizes="16,x"), "albert-tiny", {})
    with pytest.raises(UserError, match="need 0 <= LOW <= HIGH"):
        check_search(SearchSettings(search=2, search_warmup="0.3,0.1"), "albert-tiny", {})
