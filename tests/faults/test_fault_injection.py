"""Fault injection (issue 14): kill `data build`, `pretrain` (also inside a checkpoint save) and `export` at
seeded random points, and damage each file of a checkpoint, a shard set and an export in turn. Every command
must then either succeed with the correct output or fail with one clear line, and nothing written before
the fault may be lost. The default tier injects a few faults of each kind; ``-m slow`` many more.

    pytest tests/faults/test_fault_injection.py                  # default tier
    ALBERTLM_FAULTS_REPORT=counts.json pytest -m slow tests/faults/test_fault_injection.py

Each scenario tallies faults injected, recovered (the command, or its rerun / --resume, gave the correct
output) and refused (one clear line; then the documented way out worked); with ALBERTLM_FAULTS_REPORT set,
the tallies are written there as JSON.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from conftest import ENV, TINY, pretrain_args
from safetensors.torch import load_file

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

TALLY: dict[str, Counter] = defaultdict(Counter)


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    path = os.environ.get("ALBERTLM_FAULTS_REPORT")
    if path:
        old = json.loads(Path(path).read_text()) if Path(path).exists() else {}
        old.update({k: dict(v) for k, v in TALLY.items()})
        Path(path).write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")



def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "albertlm", *args]


def run_to_end(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.time()
    r = subprocess.run(cli(*args), capture_output=True, text=True, env=ENV, timeout=300)
    return r, time.time() - t


def work_span(args: list[str], started) -> float:
    """Seconds ``albertlm ARGS`` runs after ``started()`` first holds (its start-up excluded)."""
    proc = subprocess.Popen(cli(*args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while proc.poll() is None and not started():
        time.sleep(0.005)
    t = time.time()
    assert proc.wait() == 0, proc.stderr.read().decode()[-3000:]
    return time.time() - t


def kill_after(args: list[str], delay: float, until=None, start=None) -> bool:
    """Start ``albertlm ARGS``, SIGKILL it ``delay`` s after ``start()`` holds (after launch without it), or as
    soon as ``until()`` holds; True when it was still running (the fault hit), False when it had finished."""
    proc = subprocess.Popen(cli(*args), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while start and proc.poll() is None and not start():
        time.sleep(0.005)
    deadline = time.time() + delay
    while proc.poll() is None and time.time() < deadline and not (until and until()):
        time.sleep(0.002 if until else 0.01)
    hit = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return hit


def one_line_refusal(r: subprocess.CompletedProcess | tuple[int, str]) -> bool:
    """True for exit 2 with an ``error:`` last line and no traceback; fails the test on anything else."""
    code, err = (r.returncode, r.stderr) if isinstance(r, subprocess.CompletedProcess) else r
    assert "Traceback" not in err, err[-3000:]
    if code == 0:
        return False
    assert code == 2 and ": error: " in err.strip().splitlines()[-1], (code, err[-3000:])
    return True


def in_process(capsys, *args: str) -> tuple[int, str]:
    """``albertlm ARGS`` in this process: (exit code, stderr). An uncaught exception fails the test."""
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().err


def flip(path: Path, where: float, rng: random.Random | None = None) -> None:
    """Damage one byte at the relative position ``where`` (or truncate the file when ``where`` < 0)."""
    data = bytearray(path.read_bytes())
    if where < 0 or not data:
        path.write_bytes(bytes(data[: len(data) // 2]))
        return
    i = min(int(where * len(data)), len(data) - 1)
    data[i] ^= rng.randrange(1, 256) if rng else 0xFF
    path.write_bytes(bytes(data))


def weights(d: Path) -> dict[str, torch.Tensor]:
    return load_file(str(d / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


# ------------------------------------------------------------------------------------------------ data build
def data_build_args(corpus: Path, tok: Path, out: Path) -> list[str]:
    return ["data", "build", "--input", str(corpus), "--tokenizer", str(tok), "--out", str(out), "--mode", "static",
            "--dupe-factor", "3", "--max-seq-length", "32", "--chunk-mb", "0.02", "--seed", "7"]


def digests(out: Path) -> list[str]:
    from albertlm.data import load_manifest

    m = load_manifest(out, verify=True)
    return [f["sha256"] for s in m["shards"] for f in s["files"].values()]


def kill_data_build(corpus: Path, tok_dir: Path, tmp: Path, kills: int, seed: int) -> None:
    """Killed builds into a folder holding a finished build: that build stays readable and unchanged, the
    user's folder stays, and a rerun gives the reference build."""
    tally = TALLY["data build: SIGKILL"]
    big = tmp / "big.txt"
    big.write_text(corpus.read_text() * 4)
    ref, _ = run_to_end(*data_build_args(big, tok_dir, tmp / "ref"))
    assert ref.returncode == 0, ref.stderr
    expected = digests(tmp / "ref")
    out = tmp / "out"
    assert main(data_build_args(big, tok_dir, out)) == 0  # the build a fault must not lose
    (out / "shards-mine").mkdir()
    (out / "shards-mine" / "notes.txt").write_text("user data")
    started = lambda: any(out.glob(".tmp-*"))  # noqa: E731
    span = work_span(data_build_args(big, tok_dir, out), started)
    rng = random.Random(seed)
    for _ in range(kills):
        hit = kill_after(data_build_args(big, tok_dir, out), rng.uniform(0.0, 1.1) * span, start=started)
        tally["injected"] += hit
        assert digests(out) == expected, "the finished build in --out was lost or changed"
        assert (out / "shards-mine" / "notes.txt").read_text() == "user data"
        tally["recovered"] += hit
    assert main(data_build_args(big, tok_dir, out)) == 0  # the rerun tidies up after the killed ones
    assert digests(out) == expected
    assert not list(out.glob(".tmp-*")), "a killed build's temp folder was left behind"
    assert len(list(out.glob("shards-*"))) == 2  # this build's and the user's


def test_kill_data_build(corpus, tok_dir, tmp_path):
    kill_data_build(corpus, tok_dir, tmp_path, kills=2, seed=0)


@pytest.mark.slow
def test_kill_data_build_many(corpus, tok_dir, tmp_path):
    kill_data_build(corpus, tok_dir, tmp_path, kills=20, seed=1)


# ------------------------------------------------------------------------------------------------ pretrain
def kill_pretrain(shards: Path, tmp: Path, capsys, kills: int, seed: int, in_save: int) -> None:
    """Killed runs: every checkpoint under its final name is complete, and --resume ends with the weights of
    the uninterrupted run (or, killed before the first checkpoint, refuses in one line)."""
    tally = TALLY["pretrain: SIGKILL"]
    ref, _ = run_to_end(*pretrain_args(shards, tmp / "ref", steps=5))
    assert ref.returncode == 0, ref.stderr
    # the training part of a run: from run_config.json (written as training starts) to the final model
    span = (tmp / "ref" / "final" / "model.safetensors").stat().st_mtime - (tmp / "ref" / "run_config.json").stat(
        ).st_mtime
    rng = random.Random(seed)
    plan = [("anywhere", rng.uniform(0.0, 1.1) * span) for _ in range(kills)]
    plan += [("in a save", 120.0)] * in_save
    for i, (where, delay) in enumerate(plan):
        out = tmp / f"run{i}"
        until = None
        if where == "in a save":
            step = rng.randint(2, 5)  # a complete checkpoint before it to fall back to
            until = lambda out=out, step=step: (out / "checkpoints" / f".step_{step:08d}.tmp").exists()  # noqa: E731
        started = lambda out=out: (out / "run_config.json").exists()  # noqa: E731
        hit = kill_after(pretrain_args(shards, out, steps=5), delay, until, started)
        tally["injected"] += hit
        if not hit:
            assert same_weights(out / "final", tmp / "ref" / "final")
            continue
        from albertlm.training.checkpoint import verify

        for ckpt in (out / "checkpoints").glob("step_*"):
            verify(ckpt)  # a checkpoint under its final name is always complete
        code, err = in_process(capsys, "pretrain", "--out", str(out), "--resume")
        if one_line_refusal((code, err)):  # killed before the first checkpoint: --resume refuses, --overwrite
            assert "no valid checkpoint" in err or "holds no run_config.json" in err, err
            tally["refused"] += 1
            assert in_process(capsys, *pretrain_args(shards, out, "--overwrite", steps=5))[0] == 0
        else:
            tally["recovered"] += 1
        assert same_weights(out / "final", tmp / "ref" / "final"), f"{where}: resumed weights differ"


def test_kill_pretrain(shards, tmp_path, capsys):
    kill_pretrain(shards, tmp_path, capsys, kills=1, seed=0, in_save=1)


@pytest.mark.slow
def test_kill_pretrain_many(shards, tmp_path, capsys):
    kill_pretrain(shards, tmp_path, capsys, kills=12, seed=1, in_save=6)


# ------------------------------------------------------------------------------------------------ export
@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    """A tiny fine-tuned classifier (2 steps)."""
    root = tmp_path_factory.mktemp("faults-model")
    (root / "sst").mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film {i}\t{i % 2}\n" for i in range(24))
    for name in ("train.tsv", "dev.tsv"):
        (root / "sst" / name).write_text("sentence\tlabel\n" + rows)
    r = subprocess.run(cli("finetune", "--task", "sst2", "--data", str(root / "sst"), "--model", "albert-tiny",
                           "--tokenizer", str(tok_dir), "--out", str(root / "ft"), "--quiet", "--max-steps", "2",
                           "--batch-size", "8", "--max-seq-length", "32",
                           *[f"--set={k}={v}" for k, v in TINY.items()]), capture_output=True, text=True, env=ENV)
    assert r.returncode == 0, r.stderr
    (root / "in.txt").write_text("a good film\nan awful , boring mess\n")
    return root / "ft"


def predictions(capsys, export: Path, inp: Path) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``albertlm predict --engine onnx``, in this process."""
    capsys.readouterr()
    code = main(["predict", "--model", str(export), "--engine", "onnx", "--input", str(inp), "--threads", "1"])
    out, err = capsys.readouterr()
    return code, out, err


def kill_export(model: Path, tmp: Path, capsys, kills: int, seed: int) -> None:
    """Killed exports over a finished one: it keeps predicting exactly as before; a rerun tidies up."""
    pytest.importorskip("onnxruntime")
    tally = TALLY["export: SIGKILL"]
    inp = model.parent / "in.txt"
    args = ["export", "--model", str(model), "--out", str(tmp / "out"), "--quantize", "int8"]
    assert main(args) == 0
    expected = predictions(capsys, tmp / "out", inp)[1]
    assert expected.count("\n") == 2
    started = lambda: any((tmp / "out").glob(".export-*.tmp"))  # noqa: E731
    span = work_span(args, started)
    rng = random.Random(seed)
    for _ in range(kills):
        hit = kill_after(args, rng.uniform(0.0, 1.1) * span, start=started)
        tally["injected"] += hit
        code, out, err = predictions(capsys, tmp / "out", inp)
        if one_line_refusal((code, err)):  # only if the kill fell between the renames of the swap (milliseconds)
            tally["refused"] += hit
        else:
            assert out == expected, "the previous export changed"
            tally["recovered"] += hit
    assert main(args) == 0
    assert predictions(capsys, tmp / "out", inp)[1] == expected
    assert not list((tmp / "out").glob(".export-*")), "a killed export's temp folder was left behind"


def test_kill_export(model, tmp_path, capsys):
    kill_export(model, tmp_path, capsys, kills=2, seed=0)


@pytest.mark.slow
def test_kill_export_many(model, tmp_path, capsys):
    kill_export(model, tmp_path, capsys, kills=15, seed=1)


# ------------------------------------------------------------------------------------------------ damaged files
@pytest.fixture(scope="module")
def run3(shards, tmp_path_factory) -> Path:
    """A finished 3-step run keeping every checkpoint."""
    out = tmp_path_factory.mktemp("faults-run3") / "run"
    r = subprocess.run(cli(*pretrain_args(shards, out, "--keep-last", "3", steps=3)), capture_output=True, text=True,
                       env=ENV)
    assert r.returncode == 0, r.stderr
    return out


def damage_checkpoint(run3: Path, tmp: Path, capsys, positions: list[float], seed: int) -> None:
    """Each file of the newest checkpoint, damaged in turn: --resume falls back to step 2, names the file, and
    ends with the uninterrupted run's weights."""
    tally = TALLY["checkpoint: damaged file"]
    rng = random.Random(seed)
    names = sorted(p.name for p in (run3 / "checkpoints" / "step_00000003").iterdir())
    assert {"checksums.json", "config.json", "model.safetensors", "optimizer.pt", "rng_rank0.pt",
            "state.json"} <= set(names)
    for name in names:
        for where in positions:
            run = tmp / f"{name}-{where}"
            shutil.copytree(run3, run)
            shutil.rmtree(run / "final")
            flip(run / "checkpoints" / "step_00000003" / name, where, rng)
            tally["injected"] += 1
            code, err = in_process(capsys, "pretrain", "--out", str(run), "--resume")
            assert code == 0 and "Traceback" not in err, err
            assert "skipping checkpoint step_00000003" in err and name in err, err
            assert same_weights(run / "final", run3 / "final")
            tally["recovered"] += 1
            shutil.rmtree(run)


def test_damaged_checkpoint_files(run3, tmp_path, capsys):
    damage_checkpoint(run3, tmp_path, capsys, positions=[0.5, -1], seed=0)


@pytest.mark.slow
def test_damaged_checkpoint_files_many(run3, tmp_path, capsys):
    damage_checkpoint(run3, tmp_path, capsys, positions=[0.0, 0.1, 0.37, 0.5, 0.81, 0.999, -1], seed=1)


def damage_shards(shards: Path, tmp: Path, capsys, positions: list[float], seed: int) -> None:
    """Each file of a shard set, damaged in turn: pretraining on it refuses with one line naming the data,
    or (a byte no reader uses) trains exactly as on the intact set."""
    tally = TALLY["shard set: damaged file"]
    rng = random.Random(seed)
    base = pretrain_args(shards, tmp / "ref", steps=1)
    assert in_process(capsys, *base)[0] == 0
    files = sorted(p.relative_to(shards) for p in shards.rglob("*") if p.is_file())
    for rel in files:
        for where in positions:
            copy = tmp / "shards"
            shutil.copytree(shards, copy)
            flip(copy / rel, where, rng)
            tally["injected"] += 1
            out = tmp / "out"
            code, err = in_process(capsys, *pretrain_args(copy, out, steps=1))
            if one_line_refusal((code, err)):
                assert str(copy) in err.strip().splitlines()[-1], err
                tally["refused"] += 1
            else:
                assert same_weights(out / "final", tmp / "ref" / "final"), f"{rel} damaged at {where}: wrong model"
                tally["recovered"] += 1
            shutil.rmtree(copy)
            shutil.rmtree(out, ignore_errors=True)


def test_damaged_shard_files(shards, tmp_path, capsys):
    damage_shards(shards, tmp_path, capsys, positions=[0.5, -1], seed=0)


@pytest.mark.slow
def test_damaged_shard_files_many(shards, tmp_path, capsys):
    damage_shards(shards, tmp_path, capsys, positions=[0.0, 0.2, 0.5, 0.77, 0.999, -1], seed=1)


def damage_export(model: Path, tmp: Path, capsys, positions: list[float], seed: int) -> None:
    """Each file of an export, damaged in turn: predict refuses with one line naming it, or predicts exactly
    what the intact export does."""
    pytest.importorskip("onnxruntime")
    tally = TALLY["export: damaged file"]
    rng = random.Random(seed)
    export = tmp / "export"
    assert in_process(capsys, "export", "--model", str(model), "--out", str(export), "--quantize", "int8")[0] == 0
    inp = model.parent / "in.txt"
    capsys.readouterr()
    assert main(["predict", "--model", str(export), "--engine", "onnx", "--input", str(inp)]) == 0
    expected = capsys.readouterr().out
    for name in sorted(p.name for p in export.iterdir() if p.is_file()):
        for where in positions:
            copy = tmp / "copy"
            shutil.copytree(export, copy)
            flip(copy / name, where, rng)
            tally["injected"] += 1
            code = main(["predict", "--model", str(copy), "--engine", "onnx", "--input", str(inp)])
            out, err = capsys.readouterr()
            if one_line_refusal((code, err)):
                tally["refused"] += 1
            else:
                assert out == expected, f"{name} damaged at {where}: other predictions"
                tally["recovered"] += 1
            shutil.rmtree(copy)


def test_damaged_export_files(model, tmp_path, capsys):
    damage_export(model, tmp_path, capsys, positions=[0.5, -1], seed=0)


@pytest.mark.slow
def test_damaged_export_files_many(model, tmp_path, capsys):
    damage_export(model, tmp_path, capsys, positions=[0.0, 0.1, 0.5, 0.9, 0.999, -1], seed=1)
