"""Pretraining loop: end to end, exact resume after SIGKILL, DDP == single process, non-finite guard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from shared_data import docstring_corpus

from albertlm.training.data_order import rank_micro_batches
from albertlm.training.pretrain import PretrainConfig, TrainingError, pretrain

TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, embedding_size=16, num_hidden_layers=2,
            hidden_dropout_prob=0.1)  # dropout on: resume must restore the RNG too
TINY_SET = [f"--set={k}={v}" for k, v in TINY.items()]


@pytest.fixture(scope="session")
def shards(tmp_path_factory) -> Path:
    """~250 documents of stdlib docstrings -> a 600-piece SentencePiece model -> dynamic shards (seq 64)."""
    from albertlm.data import InstanceConfig, build_dataset
    from albertlm.data.tokenizer_training import train_sentencepiece

    root = tmp_path_factory.mktemp("pretrain")
    text = root / "corpus.txt"
    docstring_corpus(text, 250)
    tok = train_sentencepiece([text], root / "tok", vocab_size=600)
    build_dataset([text], tok, root / "shards", cfg=InstanceConfig(max_seq_length=64), seed=1)
    return root / "shards"


def config(shards: Path, out: Path, **kw) -> PretrainConfig:
    base = dict(out=str(out), data=str(shards), valid_data=str(shards), model_overrides=dict(TINY), max_steps=6,
                warmup_steps=2, global_batch_size=8, micro_batch_size=4, log_every=2, eval_every=3, eval_batches=2,
                save_every=3, progress=False, lr=5e-3)
    return PretrainConfig(**{**base, **kw})


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "albertlm", "pretrain", *args]


def test_micro_batches_split_global_batch_in_rank_order():
    g = list(range(8))
    import numpy as np

    assert rank_micro_batches(np.array(g), 2, rank=0, acc=2) == [[0, 1], [2, 3]]
    assert rank_micro_batches(np.array(g), 2, rank=1, acc=2) == [[4, 5], [6, 7]]
    assert rank_micro_batches(np.array(g), 2, rank=0, acc=4) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_end_to_end_writes_metrics_checkpoints_and_hf_model(shards, tmp_path):
    result = pretrain(config(shards, tmp_path))
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "split" not in r]
    valid = [r for r in rows if r.get("split") == "valid"]
    assert [r["step"] for r in train] == [2, 4, 6] and [r["step"] for r in valid] == [3, 6]
    assert all(0 <= r["mlm_acc"] <= 1 and r["tokens_per_s"] > 0 for r in train)
    assert all(r["mfu"] is None for r in train)  # no honest peak on CPU without --peak-tflops
    assert 0.5 <= valid[-1]["valid_sop_majority"] <= 1
    assert result["steps"] == 6 and (tmp_path / "final" / "spiece.model").exists()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000003", "step_00000006",
                                                                          "written.json"]
    assert json.loads((tmp_path / "checkpoints" / "written.json").read_text()) == {
        "written": ["step_00000003", "step_00000006"]}
    transformers = pytest.importorskip("transformers")
    hf, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "final", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def test_sigkill_then_resume_is_bitwise_exact(shards, tmp_path):
    """Kill -9 at several points (between steps, during a save); resuming gives the uninterrupted weights."""
    common = ["--data", str(shards), "--max-steps", "8", "--warmup-steps", "2", "--global-batch-size", "8",
              "--micro-batch-size", "4", "--save-every", "1", "--keep-last", "2", "--lr", "5e-3",
              "--eval-every", "1000", "--no-progress", *TINY_SET]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ref = tmp_path / "ref"
    subprocess.run(cli("--out", str(ref), *common), check=True, env=env, capture_output=True)
    expected = _weights(ref / "final")
    for kill_after in (2, 5):
        out = tmp_path / f"kill{kill_after}"
        proc = subprocess.Popen(cli("--out", str(out), *common), env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        target = out / "checkpoints" / f"step_{kill_after:08d}"
        deadline = time.time() + 120
        while not target.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (out / "final").exists(), "the run finished before it could be killed"
        done = subprocess.run(cli("--out", str(out), "--resume", "--no-progress"), env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
        assert "resumed from" in done.stdout
        got = _weights(out / "final")
        assert got.keys() == expected.keys()
        for k in expected:
            assert torch.equal(got[k], expected[k]), f"kill after step {kill_after}: {k} differs"


@pytest.mark.distributed
def test_two_process_ddp_equals_single_process(shards, tmp_path):
    """torchrun with 2 gloo ranks == one process with twice the accumulation (same global batch)."""
    common = ["--data", str(shards), "--max-steps", "3", "--warmup-steps", "1", "--global-batch-size", "8",
              "--micro-batch-size", "2", "--save-every", "1000", "--eval-every", "1000", "--no-progress",
              "--lr", "5e-3", *[s for s in TINY_SET if "dropout" not in s], "--set=hidden_dropout_prob=0",
              "--set=classifier_dropout_prob=0"]  # no dropout: ranks draw different masks
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    single = subprocess.run(cli("--out", str(tmp_path / "one"), *common), env=env, capture_output=True, text=True)
    assert single.returncode == 0, single.stderr
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
         "-m", "albertlm", "pretrain", "--out", str(tmp_path / "two"), *common],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    fsdp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
         "-m", "albertlm", "pretrain", "--out", str(tmp_path / "fsdp"), "--fsdp", *common],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert fsdp.returncode == 0, fsdp.stderr[-3000:]
    a = _weights(tmp_path / "one" / "final")
    for run in ("two", "fsdp"):
        b = _weights(tmp_path / run / "final")
        for k in a:
            torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4, msg=f"{run}: {k}")
    assert json.loads((tmp_path / "two" / "checkpoints" / "step_00000003" / "state.json").read_text())[
        "world_size"] == 2


def test_a_worker_of_the_same_torchrun_job_continues_the_run_and_never_overwrites_it(shards, tmp_path, monkeypatch,
                                                                                   capsys):  # fmt: skip
    """A worker finding its own job's run in --out (the same --rdzv-id: a host that comes back, or every worker
    after a restart) continues it, even when the job's command had --overwrite; another job's is refused."""
    from albertlm.cli import main

    out = tmp_path / "run"
    args = ["pretrain", "--data", str(shards), "--out", str(out), "--max-steps", "2", "--global-batch-size", "8",
            "--micro-batch-size", "4", "--save-every", "1", "--keep-last", "0", "--no-progress", "--overwrite",
            *TINY_SET]  # fmt: skip
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "albert-en")
    assert main(args) == 0
    assert json.loads((out / "run_config.json").read_text())["elastic_job"] == "albert-en"
    capsys.readouterr()
    assert main([*args[:-len(TINY_SET)], "--max-steps", "3", *TINY_SET]) == 0  # the same job: --overwrite ignored
    text = capsys.readouterr().out
    assert "resumed from" in text and "step_00000002" in text and "removed the previous run" not in text
    assert (out / "checkpoints" / "step_00000001").is_dir()  # nothing of the run deleted
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "another-job")
    assert main([a for a in args if a != "--overwrite"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default id: every unnamed job has it
    assert main([a for a in args if a != "--overwrite"]) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.distributed
def test_a_job_rendezvous_through_albertlm_rendezvous_and_a_used_port_is_one_line(shards, tmp_path, capsys):
    """The store of `albertlm rendezvous` serves torchrun's c10d rendezvous (agents with is_host=false, as on
    hosts whose store runs elsewhere); a second store on its port is refused in one line."""
    import socket

    from albertlm.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = subprocess.Popen([sys.executable, "-m", "albertlm", "rendezvous", "--port", str(port)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert "rendezvous store on port" in store.stdout.readline()
        job = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf", "is_host=false",
             "-m", "albertlm", "pretrain", "--data", str(shards), "--out", str(tmp_path / "run"), "--max-steps", "2",
             "--global-batch-size", "8", "--micro-batch-size", "2", "--no-progress", *TINY_SET],
            env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert job.returncode == 0, job.stderr[-3000:]
        assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
        assert main(["rendezvous", "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert f"--port {port}: cannot listen there (address already in use)" in err and "Traceback" not in err
    finally:
        store.terminate()
        assert store.wait(timeout=30) == 0  # SIGTERM stops it cleanly


@pytest.mark.distributed
def test_one_rank_dying_stops_every_rank(shards, tmp_path):
    """SIGKILL one of two workers mid-run: torchrun stops the other and exits non-zero, no hang."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29535",
         "-m", "albertlm", "pretrain", "--data", str(shards), "--out", str(tmp_path), "--max-steps", "100000",
         "--global-batch-size", "8", "--micro-batch-size", "2", "--log-every", "1", "--save-every", "100000",
         "--eval-every", "100000", "--no-progress", *TINY_SET],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    deadline = time.time() + 120
    while not (tmp_path / "metrics.jsonl").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    os.kill(int(workers[1]), signal.SIGKILL)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the surviving rank hung after its peer died")
    assert proc.returncode != 0
    assert "FAILED" in out and "SIGKILL" in out, out[-2000:]


def test_nonfinite_steps_are_skipped_then_stop_without_nan_checkpoint(shards, tmp_path, monkeypatch):
    import albertlm.training.pretrain as train

    real = train.micro_step

    def poisoned(model, batch, autocast, mask_id=None):
        loss, stats = real(model, batch, autocast, mask_id)
        return loss * float("nan"), stats

    monkeypatch.setattr(train, "micro_step", poisoned)
    with pytest.raises(TrainingError, match="3 steps with a non-finite loss"):
        pretrain(config(shards, tmp_path, max_nonfinite=3, save_every=1, valid_data=None))
    saved = list((tmp_path / "checkpoints").glob("step_*"))
    assert saved, "checkpoints before the stop are kept"
    for path in saved:  # skipped updates leave the weights as they were: every saved tensor is finite
        assert all(torch.isfinite(t).all() for t in _weights(path).values())
    assert not (tmp_path / "final").exists()


def test_bad_settings_are_clear_errors(shards, tmp_path):
    with pytest.raises(TrainingError, match="not a multiple of --micro-batch-size"):
        pretrain(config(shards, tmp_path, global_batch_size=10, micro_batch_size=4))
    with pytest.raises(TrainingError, match="fewer than one global batch"):
        pretrain(config(shards, tmp_path, global_batch_size=100_000, micro_batch_size=4))
    r = subprocess.run(cli("--data", str(tmp_path / "nope"), "--out", str(tmp_path / "o")), capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no such folder" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("one sentence.\n", encoding="utf-8")
    r = subprocess.run(cli("--data", str(tmp_path / "text"), "--out", str(tmp_path / "o")), capture_output=True,
                       text=True)  # fmt: skip
    assert r.returncode == 2 and "no manifest.json" in r.stderr and "albertlm data build --input" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_and_activation_checkpointing_run(shards, tmp_path, precision):
    result = pretrain(config(shards, tmp_path, precision=precision, activation_checkpointing=True, max_steps=2,
                             warmup_steps=1, save_every=2, valid_data=None))
    assert result["steps"] == 2
    assert all(torch.isfinite(t).all() for t in _weights(tmp_path / "final").values())


def test_analyses_of_a_trained_model(shards, tmp_path):
    """Figure 1's layer transitions and the held-out intrinsic accuracies run on a pretrained model."""
    from albertlm.research.analysis import intrinsic_accuracy, layer_transitions, write_report

    pretrain(config(shards, tmp_path, max_steps=2, warmup_steps=1, valid_data=None))
    stats = layer_transitions(tmp_path / "final", ["The module docstring says what it does.", "Return x."])
    assert [s.layer for s in stats] == [1, 2] and all(-1 <= s.cosine_similarity <= 1 for s in stats)
    assert all(p.exists() for p in write_report(stats, tmp_path / "report"))
    r = intrinsic_accuracy(tmp_path / "final", shards, epochs=2)
    assert r["pairs"] > 0 and 0 <= r["pair_acc"] <= 1 and 0.5 <= r["majority_baseline"] <= 1
    assert 0 < r["mlm_acc_at_mask_baseline"] < r["mlm_acc_baseline"] < 1


def test_copy_or_unigram_baseline_counts_by_hand():
    """Copy where the input is not [MASK], else the most frequent [MASK]ed target: 3 of 5 here."""
    from types import SimpleNamespace

    from albertlm.research.analysis import copy_or_unigram_baseline

    m = 4
    items = [  # input ids, labels (-100 = not a target)
        ([2, m, 7, 9, 3], [-100, 5, 7, 8, -100]),  # [MASK]->5, kept 7 (copy right), replaced 9 (copy wrong)
        ([2, m, m, 3], [-100, 5, 6, -100]),  # [MASK]->5, [MASK]->6: 5 is the most frequent
    ]

    class Items:
        special, mode = SimpleNamespace(mask_id=m), "static"

        def set_epoch(self, e):
            pass

        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            return {"input_ids": np.array(items[i][0]), "labels": np.array(items[i][1])}

    r = copy_or_unigram_baseline(Items(), epochs=3)  # a static dataset is read once
    assert r == {"mlm_acc": 3 / 5, "mlm_acc_at_mask": 2 / 3}


def test_epoch_boundaries_with_a_dataset_whose_length_changes():
    """Dynamic shards re-plan pairs each epoch, so the epoch length changes: every step stays full."""
    import torch as _torch

    from albertlm.training.data_order import StepBatches
    from albertlm.training.distributed import DistInfo

    class Replanned:
        sizes = {0: 20, 1: 13, 2: 17}

        def __init__(self):
            self.epoch = 0

        def set_epoch(self, e):
            self.epoch = e

        def __len__(self):
            return self.sizes.get(self.epoch, 16)

    cfg = PretrainConfig(out="", data="d", global_batch_size=4, micro_batch_size=2)
    steps = StepBatches(Replanned(), cfg, DistInfo(False, 0, 0, 1, _torch.device("cpu")), acc=2)
    seen = []
    for _ in range(5 + 3 + 4 + 2):
        micro = steps.next()
        assert [len(m) for m in micro] == [2, 2]
        seen.append((steps.epoch, max(i for m in micro for i in m) < len(steps.ds)))
    assert [e for e, _ in seen] == [0] * 5 + [1] * 3 + [2] * 4 + [3] * 2 and all(ok for _, ok in seen)


def test_mlm_accuracy_at_mask_excludes_copyable_positions():
    """A model that only copies its input scores on the unchanged positions, and 0 at [MASK]ed ones."""
    import contextlib

    from albertlm.heads import PreTrainingOutput
    from albertlm.training.pretrain import micro_step

    mask_id, V = 4, 50
    ids = torch.tensor([[2, 7, 4, 9, 4, 3], [2, 4, 11, 12, 3, 0]])
    labels = torch.full_like(ids, -100)
    labels[0, [1, 2, 4]] = torch.tensor([7, 8, 10])  # position 1 kept unchanged, 2 and 4 masked
    labels[1, [1, 3]] = torch.tensor([13, 12])  # position 1 masked, 3 kept

    def copier(input_ids, labels, **_):
        picked = input_ids[labels != -100]
        return PreTrainingOutput(torch.tensor(0.0), torch.tensor(0.0), None,
                                 torch.nn.functional.one_hot(picked, V).float(), None, labels[labels != -100])

    _, s = micro_step(copier, {"input_ids": ids, "labels": labels}, contextlib.nullcontext, mask_id)
    assert (s["mlm_correct"], s["mlm_total"]) == (2, 5)
    assert (s["mlm_mask_correct"], s["mlm_mask_total"]) == (0, 3)


def test_the_samples_of_a_step_depend_on_seed_and_step_only_not_on_the_topology():
    """Global batch 12 over 1x(acc 6), 2x3, 3x2, 6x1 processes (micro-batch 2), across epoch boundaries of a
    dataset whose length changes: every step sees the same sample ids in the same order. A run resumed at
    another world size from the position a checkpoint saves (epoch, step in epoch) sees the rest exactly as
    the uninterrupted run does."""
    import torch as _torch

    from albertlm.training.data_order import StepBatches
    from albertlm.training.distributed import DistInfo

    class Replanned:
        sizes = {0: 50, 1: 37, 2: 61}

        def __init__(self):
            self.epoch = 0

        def set_epoch(self, e):
            self.epoch = e

        def __len__(self):
            return self.sizes.get(self.epoch, 40)

    cfg = PretrainConfig(out="", data="d", global_batch_size=12, micro_batch_size=2, seed=7)

    def ranks(world: int, epoch: int = 0, step_in_epoch: int = 0) -> list[StepBatches]:
        return [StepBatches(Replanned(), cfg, DistInfo(world > 1, r, r, world, _torch.device("cpu")),
                            acc=12 // (2 * world), epoch=epoch, step_in_epoch=step_in_epoch) for r in range(world)]

    def ids(batches: list[StepBatches], steps: int) -> list[list[int]]:
        out = []
        for _ in range(steps):
            out.append([i for b in batches for micro in b.next() for i in micro])  # rank order, then micro order
        return out

    steps = 4 + 3 + 5 + 3  # into the fourth epoch
    reference = ids(ranks(1), steps)
    assert all(len(s) == 12 and len(set(s)) == 12 for s in reference)
    assert len({tuple(s) for s in reference}) == steps  # (not one batch repeated)
    for world in (2, 3, 6):
        assert ids(ranks(world), steps) == reference, f"{world} processes saw other samples"
    for before, after, at in ((2, 1, 5), (1, 2, 9), (6, 3, 2), (3, 2, 12)):
        first = ranks(before)
        head = ids(first, at)
        position = (first[0].epoch, first[0].step_in_epoch)  # what state.json records
        assert all((b.epoch, b.step_in_epoch) == position for b in first)
        assert head + ids(ranks(after, *position), steps - at) == reference, f"{before} -> {after} at step {at}"
    other_seed = PretrainConfig(out="", data="d", global_batch_size=12, micro_batch_size=2, seed=8)
    moved = StepBatches(Replanned(), other_seed, DistInfo(False, 0, 0, 1, _torch.device("cpu")), acc=6)
    assert [i for m in moved.next() for i in m] != reference[0]  # the seed does choose the order


def test_sharded_checkpoints_resume_exactly_skip_a_partial_save_and_refuse_another_optimizer(shards, tmp_path):
    """--fsdp writes torch.distributed.checkpoint shards (here one process's): the resume is bitwise the
    uninterrupted run; a save whose shard is gone is never taken for complete (the one before is used); state
    of another optimizer stops the run in one line before any step."""
    from albertlm.training.pretrain import load_run_config

    ref = pretrain(config(shards, tmp_path / "ref", fsdp=True, keep_last=0, valid_data=None))
    expected = _weights(Path(ref["final"]))
    run = tmp_path / "run"
    pretrain(config(shards, run, fsdp=True, keep_last=0, max_steps=6, save_every=2, valid_data=None))
    ckpts = run / "checkpoints"
    assert {".metadata", "__0_0.distcp", "schedule.pt"} <= {p.name for p in (ckpts / "step_00000004").iterdir()}
    assert json.loads((ckpts / "step_00000004" / "state.json").read_text())["format"] == "dcp"
    (ckpts / "step_00000006" / "__0_0.distcp").unlink()  # a save that lost its shard
    (run / "final" / "model.safetensors").unlink()
    done = pretrain(load_run_config(run), resume=True)
    resumed = [json.loads(r) for r in (run / "metrics.jsonl").read_text().splitlines() if "event" in json.loads(r)]
    assert resumed[-1]["step"] == 4 and "step_00000004" in resumed[-1]["checkpoint"]
    got = _weights(Path(done["final"]))
    for k in expected:
        assert torch.equal(got[k], expected[k]), k
    other = load_run_config(run)
    other.optimizer = "adamw"
    with pytest.raises(TrainingError, match="holds lamb state.*--optimizer adamw.*resume with --optimizer lamb"):
        pretrain(other, resume=True)
