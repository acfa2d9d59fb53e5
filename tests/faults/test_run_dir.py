"""A run directory belongs to one run (issue 14, findings 1-3 and 7): resume writes only into --out, a fresh
run refuses a used directory unless --overwrite, damaged checkpoints are skipped by name, never silently
restarted from step 0, and a run whose updates were all skipped fails."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY, albertlm, assert_one_line_error, pretrain_args

from albertlm.cli import main


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models on 2 shared cores: more threads only spin
    yield
    torch.set_num_threads(threads)


def run(capsys, *args: str) -> tuple[int, str, str]:
    """``albertlm ARGS`` in this process (an exception the CLI does not turn into one line fails the test)."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, *needles: str) -> None:
    line = err.strip().splitlines()[-1]
    assert code == 2 and ": error: " in line and "Traceback" not in err, err
    for n in needles:
        assert n in line, (n, line)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run2(shards, tmp_path_factory) -> Path:
    """A finished 2-step run (checkpoints at steps 1 and 2)."""
    out = tmp_path_factory.mktemp("runs") / "a"
    r = albertlm(*pretrain_args(shards, out, steps=2))
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_resume_of_a_copy_writes_only_into_the_copy(run2, tmp_path, capsys):
    before = snapshot(run2)
    copy = tmp_path / "copy"
    shutil.copytree(run2, copy)
    code, out, err = run(capsys, "pretrain", "--out", str(copy), "--resume", "--max-steps", "3")
    assert code == 0, err
    assert "resumed from" in out and str(copy) in out
    assert snapshot(run2) == before, "the original run changed"
    rows = [json.loads(x) for x in (copy / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "event" not in r] == [1, 2, 3]
    assert [(r["step"], r["checkpoint"]) for r in rows if r.get("event") == "resumed"] == [(2, "step_00000002")]
    assert (copy / "checkpoints" / "step_00000003").is_dir()
    # nothing in the run's records names where it lives
    for f in [copy / "run_config.json", *(copy / "checkpoints").glob("*/state.json")]:
        assert str(run2) not in f.read_text() and str(copy) not in f.read_text(), f


def test_fresh_run_into_a_used_directory_refuses_then_overwrite_replaces_only_our_files(run2, shards, tmp_path,
                                                                                        capsys):
    used = tmp_path / "used"
    shutil.copytree(run2, used)
    (used / "notes.txt").write_text("mine")
    (used / "final" / "README.md").write_text("mine too")
    before = snapshot(used)
    refused(*run(capsys, *pretrain_args(shards, used, steps=1))[::2], str(used), "--resume", "--overwrite")
    assert snapshot(used) == before
    code, _, err = run(capsys, *pretrain_args(shards, used, "--overwrite", steps=1))
    assert code == 0, err
    assert sorted(p.name for p in (used / "checkpoints").iterdir()) == ["step_00000001", "written.json"]
    assert [json.loads(x)["step"] for x in (used / "metrics.jsonl").read_text().splitlines()] == [1]
    assert (used / "notes.txt").read_text() == "mine" and (used / "final" / "README.md").read_text() == "mine too"
    refused(*run(capsys, *pretrain_args(shards, used, "--overwrite", "--resume", steps=1))[::2], "--overwrite")


def users_folders(ckpts: Path) -> dict[str, str]:
    """What a user keeps among a run's checkpoints: a copy named like one, and a notes folder."""
    shutil.copytree(ckpts / "step_00000001", ckpts / "step_00000001_good")
    (ckpts / "step_notes").mkdir()
    (ckpts / "step_notes" / "notes.txt").write_text("mine")
    (ckpts / ".step_mine.tmp").mkdir()
    return {k: v for k, v in snapshot(ckpts).items() if k.startswith(("step_00000001_good", "step_notes", ".step_m"))}


def test_keep_last_prunes_only_the_checkpoints_the_run_wrote(run2, tmp_path, capsys):
    """Issue 35, finding 2: a user's step_00000001_good sorts among the checkpoints; pruning never takes it."""
    rdir = tmp_path / "r"
    shutil.copytree(run2, rdir)
    ckpts = rdir / "checkpoints"
    mine = users_folders(ckpts)
    code, _, err = run(capsys, "pretrain", "--out", str(rdir), "--resume", "--max-steps", "4")
    assert code == 0, err
    assert sorted(p.name for p in ckpts.glob("step_0*[0-9]")) == ["step_00000003", "step_00000004"]
    assert {k: v for k, v in snapshot(ckpts).items() if k in mine} == mine
    assert json.loads((ckpts / "written.json").read_text()) == {"written": ["step_00000003", "step_00000004"]}


@pytest.mark.parametrize("record", ["kept", "absent"])
def test_overwrite_removes_only_the_checkpoints_a_run_wrote(run2, shards, tmp_path, capsys, record):
    """With the record, or (a run from before it existed) without: the user's folders stay."""
    used = tmp_path / "used"
    shutil.copytree(run2, used)
    ckpts = used / "checkpoints"
    if record == "absent":
        (ckpts / "written.json").unlink()
    mine = users_folders(ckpts)
    code, _, err = run(capsys, *pretrain_args(shards, used, "--overwrite", steps=1))
    assert code == 0, err
    assert {k: v for k, v in snapshot(ckpts).items() if k in mine} == mine
    assert not (ckpts / "step_00000002").exists()
    assert json.loads((ckpts / "written.json").read_text()) == {"written": ["step_00000001"]}


def test_a_folder_named_like_the_next_checkpoint_but_not_the_runs_stops_it(run2, tmp_path, capsys):
    rdir = tmp_path / "r"
    shutil.copytree(run2, rdir)
    theirs = rdir / "checkpoints" / "step_00000003"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    code, _, err = run(capsys, "pretrain", "--out", str(rdir), "--resume", "--max-steps", "3")
    refused(code, err, "step_00000003", "written.json", "move it")
    assert (theirs / "notes.txt").read_text() == "mine"


def test_a_damaged_record_is_one_line(run2, tmp_path, capsys):
    rdir = tmp_path / "r"
    shutil.copytree(run2, rdir)
    (rdir / "checkpoints" / "written.json").write_text('{"written": ["../../x"]}')
    code, _, err = run(capsys, "pretrain", "--out", str(rdir), "--resume", "--max-steps", "3")
    refused(code, err, "written.json is damaged", "delete it")


def test_resume_with_every_checkpoint_corrupt_refuses_and_keeps_them(run2, tmp_path):
    """(In a subprocess: the whole CLI, traceback check included.)"""
    bad = tmp_path / "bad"
    shutil.copytree(run2, bad)
    for ckpt in (bad / "checkpoints").glob("step_*"):
        f = ckpt / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-16])
    before = snapshot(bad)
    r = albertlm("pretrain", "--out", str(bad), "--resume")
    assert_one_line_error(r, "no valid checkpoint", "--overwrite")
    assert "step_00000001" in r.stderr and "step_00000002" in r.stderr  # each skipped one is named
    assert snapshot(bad) == before


@pytest.mark.parametrize("damage", ["garbage", "truncated", "list", "missing-entry", "deleted"])
def test_a_damaged_checksums_json_falls_back_to_the_previous_checkpoint(run2, tmp_path, damage, capsys):
    rdir = tmp_path / "r"
    shutil.copytree(run2, rdir)
    sums = rdir / "checkpoints" / "step_00000002" / "checksums.json"
    text = sums.read_text()
    if damage == "garbage":
        sums.write_bytes(b"\xff\xfe{not json")
    elif damage == "truncated":
        sums.write_text(text[: len(text) // 2])
    elif damage == "list":
        sums.write_text("[1, 2]")
    elif damage == "missing-entry":
        sums.write_text(json.dumps({k: v for k, v in json.loads(text).items() if k != "optimizer.pt"}))
    else:
        sums.unlink()
    code, out, err = run(capsys, "pretrain", "--out", str(rdir), "--resume", "--max-steps", "3")
    assert code == 0, err
    assert "skipping checkpoint step_00000002" in err and "checksums.json" in err
    assert "resumed from" in out and "step_00000001 at step 1" in out


def test_a_run_whose_updates_were_all_skipped_fails_and_the_summary_counts_skips(shards, tmp_path, monkeypatch):
    import albertlm.training.pretrain as train
    from albertlm.training.pretrain import PretrainConfig, TrainingError, pretrain

    real = train.micro_step
    poison = {"from": 0}

    def poisoned(model, batch, autocast, mask_id=None):
        loss, stats = real(model, batch, autocast, mask_id)
        return (loss * float("nan"), stats) if calls.append(1) or len(calls) > poison["from"] else (loss, stats)

    calls: list[int] = []
    monkeypatch.setattr(train, "micro_step", poisoned)
    cfg = dict(data=str(shards), model_overrides=dict(TINY), max_steps=4, warmup_steps=1, global_batch_size=4,
               micro_batch_size=4, eval_every=1000, save_every=1000, progress=False)
    with pytest.raises(TrainingError, match="last 4 updates were all skipped"):
        pretrain(PretrainConfig(out=str(tmp_path / "diverged"), **cfg))
    assert not (tmp_path / "diverged" / "final").exists()

    from albertlm.cli import main

    calls.clear()
    poison["from"] = 3  # only the 4th step is non-finite: the run ends, and says so
    assert main(["pretrain", "--out", str(tmp_path / "one"), "--data", str(shards), "--max-steps", "4",
                 "--warmup-steps", "1", "--global-batch-size", "4", "--micro-batch-size", "4", "--eval-every", "1000",
                 "--no-progress", *[f"--set={k}={v}" for k, v in TINY.items()]]) == 0
    assert json.loads((tmp_path / "one" / "metrics.jsonl").read_text().splitlines()[-1])["nonfinite_steps"] == 1


def test_pretrain_summary_line_names_skipped_steps(shards, tmp_path, monkeypatch, capsys):
    import albertlm.training.pretrain as train
    from albertlm.cli import main

    real, calls = train.micro_step, []

    def first_poisoned(model, batch, autocast, mask_id=None):
        loss, stats = real(model, batch, autocast, mask_id)
        calls.append(1)
        return (loss * float("nan"), stats) if len(calls) == 1 else (loss, stats)

    monkeypatch.setattr(train, "micro_step", first_poisoned)
    assert main(["pretrain", "--out", str(tmp_path / "s"), "--data", str(shards), "--max-steps", "3",
                 "--warmup-steps", "1", "--global-batch-size", "4", "--micro-batch-size", "4", "--eval-every", "1000",
                 "--no-progress", *[f"--set={k}={v}" for k, v in TINY.items()]]) == 0
    assert "pretrained 3 steps (1 skipped: non-finite)" in capsys.readouterr().out


def test_keep_last_prunes_only_checkpoints_up_to_the_new_one(tmp_path):
    """A stale higher-step folder (a corrupt one skipped on resume) never pushes out the new checkpoints."""
    from albertlm.training import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    stale = ckpt.step_dir(root, 9)
    stale.mkdir(parents=True)
    for step in (1, 2, 3):
        tmp = ckpt.prepare(root, step)
        (tmp / "x.bin").write_bytes(bytes([step]))
        ckpt.finalize(root, tmp, step, {"step": step}, keep_last=2)
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["step_00000002", "step_00000003", "step_00000009"]


def test_a_deletion_cut_short_never_leaves_part_of_a_checkpoint_under_its_name(tmp_path, monkeypatch):
    """keep_last's pruning killed half-way (here: rmtree stops after one file) leaves the old checkpoint under
    a trash name, never a partial step_N that a reader would have to take for damaged; the next resume or save
    removes the rest."""
    from albertlm.training import checkpoint as ckpt

    root = tmp_path / "checkpoints"
    for step in (1, 2):
        tmp = ckpt.prepare(root, step)
        for name in ("a.bin", "b.bin", "c.bin"):
            (tmp / name).write_bytes(bytes([step]))
        ckpt.finalize(root, tmp, step, {"step": step}, keep_last=0)
    real_rmtree = shutil.rmtree

    def killed_half_way(path, *args, **kwargs):
        files = sorted(p for p in Path(path).iterdir() if p.is_file()) if Path(path).is_dir() else []
        if files:
            files[0].unlink()
            raise KeyboardInterrupt  # the process dies here
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(ckpt.shutil, "rmtree", killed_half_way)
    with pytest.raises(KeyboardInterrupt):
        ckpt.discard(ckpt.step_dir(root, 1))
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    assert [p.name for p in ckpt.list_checkpoints(root)] == ["step_00000002"]  # no partial step_00000001
    assert (root / ".step_00000001.old").is_dir()
    list(ckpt.valid_checkpoints(root, log=lambda message: None))  # what a resume looks through first
    assert not (root / ".step_00000001.old").exists()


@pytest.mark.parametrize("typo, needle", [(("--preset", "albert-tyni"), "unknown preset 'albert-tyni'"),
                                          (("--set", "hidden_size=31"), "not divisible"),
                                          (("--warmup-steps", "100000"), "--warmup-steps must be from 0 to")])
def test_a_typo_stops_before_anything_is_built_or_replaced(run2, shards, tmp_path, capsys, typo, needle):
    used = tmp_path / "used"
    shutil.copytree(run2, used)
    before = snapshot(used)
    # --overwrite would replace the finished run; a bad setting must stop the command before it does
    refused(*run(capsys, *pretrain_args(shards, used, "--overwrite", *typo, steps=1))[::2], needle)
    assert snapshot(used) == before
    # the embedded demo (no --data) checks the same settings before it builds its corpus and shards
    refused(*run(capsys, "pretrain", "--out", str(tmp_path / "demo"), *typo)[::2], needle)
    assert not (tmp_path / "demo").exists()
