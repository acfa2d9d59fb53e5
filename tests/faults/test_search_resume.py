"""`finetune --search` resumes truthfully (issue 44, finding 5): resumed with more trials, the kept model is the
one the report names (a seed folder trained for another trial is trained again); resumed with other choices,
one line naming what changed and no trial left RUNNING; trials that diverge are pruned and the message names
the flag the user gave; `--search-epochs 0,0` is refused."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import FINETUNE_FAST, TINY_SET, refused, tiny_sst2_data

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
optuna = pytest.importorskip("optuna")


def search_args(tok_dir, data, out, *extra: str) -> list[str]:  # noqa: ANN001
    return ["finetune", "--task", "sst2", "--data", str(data), "--model", "albert-tiny", "--tokenizer", str(tok_dir),
            "--out", str(out), "--search-seeds", "1", "--search-batch-sizes", "8", "--search-evals", "1",
            *FINETUNE_FAST, *TINY_SET, *extra]  # fmt: skip


def states(out) -> list[str]:  # noqa: ANN001
    study = optuna.load_study(study_name="finetune", storage=f"sqlite:///{out / 'search.db'}")
    return [t.state.name for t in study.trials]


def test_a_resumed_search_keeps_the_model_its_report_names(tok_dir, tmp_path):
    data, out = tiny_sst2_data(tmp_path / "sst"), tmp_path / "search"
    assert main([*search_args(tok_dir, data, out), "--search", "1"]) == 0
    with sqlite3.connect(out / "search.db") as db:  # a later trial scores higher than trial 0 did
        db.execute("UPDATE trial_values SET value = -1 WHERE trial_id = (SELECT trial_id FROM trials WHERE number = 0)")
    assert main([*search_args(tok_dir, data, out), "--search", "2"]) == 0
    report = json.loads((out / "search.json").read_text())
    best = report["best_trial"]
    assert best["number"] == 1
    assert json.loads((out / "seeds" / "seed_0" / "search_run.json").read_text())["trial"] == 1
    kept = json.loads((out / "metrics.json").read_text())
    assert kept["lr"] == pytest.approx(best["params"]["lr"])  # was trial 0's model, kept under trial 1's name
    assert (out / "model.safetensors").read_bytes() == (out / "seeds" / "seed_0" / "model.safetensors").read_bytes()


def test_resumed_with_other_choices_is_one_line_and_leaves_no_trial_running(tok_dir, tmp_path, capsys):
    data, out = tiny_sst2_data(tmp_path / "sst"), tmp_path / "search"
    assert main([*search_args(tok_dir, data, out), "--search", "1"]) == 0
    capsys.readouterr()
    code = main([*search_args(tok_dir, data, out, "--search-batch-sizes", "8,16"), "--search", "2"])
    refused(capsys, code, "--search-batch-sizes was 8, now 8,16", "resume it with the same flags")
    assert states(out) == ["COMPLETE"]  # was a second trial left RUNNING by Optuna's ValueError
    code = main([*search_args(tok_dir, data, out, "--search-lr", "1e-4,2e-4"), "--search", "2"])
    refused(capsys, code, "--search-lr was")


def test_diverging_trials_are_pruned_and_the_message_names_the_users_flag(tok_dir, tmp_path, capsys):
    data, out = tiny_sst2_data(tmp_path / "sst"), tmp_path / "search"
    code = main([*search_args(tok_dir, data, out, "--search-lr", "1e30,1e31", "--max-nonfinite", "1"), "--search",
                 "2"])  # fmt: skip
    refused(capsys, code, "every one of the 2 trials was pruned", "diverged", "--search-lr 1e30,1e31")
    assert states(out) == ["PRUNED", "PRUNED"]  # was a TrainingError naming --lr, which the user never gave


@pytest.mark.parametrize("flag, value, needle", [
    ("--search-epochs", "0,0", "a trial trains for more than 0 epochs"),
    ("--search-epochs", "0,2", "a trial trains for more than 0 epochs"),
    ("--search-warmup", "0,1.5", "from 0 to 1"),
])  # fmt: skip
def test_ranges_that_cannot_train_are_refused(tok_dir, tmp_path, capsys, flag, value, needle):
    data, out = tiny_sst2_data(tmp_path / "sst"), tmp_path / "search"
    args = search_args(tok_dir, data, out, flag, value, "--search", "2")
    del args[args.index("--max-steps") : args.index("--max-steps") + 2]  # (epochs are searched without it)
    refused(capsys, main(args), f"{flag} '{value}'", needle)
    assert not out.exists()
