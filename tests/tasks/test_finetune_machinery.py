"""Fine-tuning on the shared training machinery (albertlm.training.steps): the same numbers as before the
move, resume after SIGKILL bitwise exact, gradient accumulation and two torchrun processes equal to one
batch, --device everywhere, and the one-call Python API equal to the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_finetune_cli import FAST, _sst2_slice, tiny_flags

from albertlm.cli import main

REPO = Path(__file__).resolve().parents[2]


def _args(sst: Path, tok: Path, out: Path, *extra: str) -> list[str]:
    return ["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer", str(tok),
            "--out", str(out), "--precision", "fp32", *tiny_flags(), *extra]  # fmt: skip


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model.safetensors"))


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "albertlm", *args]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def test_a_short_run_gives_the_numbers_it_gave_before_the_move(data, en_tok_dir, tmp_path, one_thread):
    """Pinned from the fine-tuning loop before it moved onto the shared Stepper (commit 8baa64c), one thread,
    fp32: the move changed no arithmetic."""
    sst = _sst2_slice(data, tmp_path)
    assert main(_args(sst, en_tok_dir, tmp_path / "ft", "--eval-every", "3", *FAST)) == 0
    rows = [json.loads(line) for line in (tmp_path / "ft" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train_loss"], r["accuracy"]) for r in rows] == [
        (3, pytest.approx(0.6868575811386108, abs=1e-7), pytest.approx(0.4666666666666667)),
        (6, pytest.approx(0.6891023516654968, abs=1e-7), pytest.approx(0.4666666666666667))]
    classifier = _weights(tmp_path / "ft")["classifier.weight"].double().sum().item()
    assert classifier == pytest.approx(-0.246845803107135, abs=1e-7)


def test_sigkill_then_resume_is_bitwise_exact(data, en_tok_dir, tmp_path):
    sst = _sst2_slice(data, tmp_path)
    common = ["--quiet", "--max-steps", "30", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "64",
              "--eval-every", "10", "--save-every", "2"]  # fmt: skip
    ref = tmp_path / "ref"
    subprocess.run(_cli(*_args(sst, en_tok_dir, ref, *common)), check=True, env=ENV, capture_output=True)
    out = tmp_path / "killed"
    proc = subprocess.Popen(_cli(*_args(sst, en_tok_dir, out, *common)), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    target = out / "checkpoints" / "step_00000012"
    deadline = time.time() + 120
    while not target.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "metrics.json").exists(), "the run finished before it could be killed"
    again = subprocess.run(_cli(*_args(sst, en_tok_dir, out, *common)), env=ENV, capture_output=True, text=True)
    assert again.returncode == 2 and "--resume" in again.stderr  # a used --out says how to continue it
    done = subprocess.run(_cli(*_args(sst, en_tok_dir, out, *common, "--resume")), env=ENV, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stdout + done.stderr
    expected, got = _weights(ref), _weights(out)
    assert got.keys() == expected.keys()
    for k in expected:
        assert torch.equal(got[k], expected[k]), k
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (ref, out))
    assert a["metrics"] == b["metrics"] and a["final_train_loss"] == b["final_train_loss"]
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 30 and 30 in steps


def test_resume_refuses_other_settings_and_a_folder_without_checkpoints(data, en_tok_dir, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "ft"
    assert main(_args(sst, en_tok_dir, out, *FAST, "--save-every", "2")) == 0
    capsys.readouterr()
    assert main(_args(sst, en_tok_dir, out, *FAST, "--save-every", "2", "--resume", "--lr", "5e-4")) == 2
    err = capsys.readouterr().err
    assert "other settings (lr)" in err and "Traceback" not in err
    assert main(_args(sst, en_tok_dir, tmp_path / "empty", *FAST, "--resume")) == 2
    assert "no valid checkpoint" in capsys.readouterr().err
    assert main(_args(sst, en_tok_dir, out, *FAST, "--resume", "--overwrite")) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(_args(sst, en_tok_dir, out, *FAST, "--overwrite", "--save-every", "0")) == 0
    assert not (out / "checkpoints").exists()  # --overwrite took the earlier run's checkpoints too


def test_a_torchrun_restart_continues_the_run(data, en_tok_dir, tmp_path, monkeypatch, capsys):
    """A worker torchrun's agent restarted (TORCHELASTIC_RESTART_COUNT > 0) finds its own job's run in --out
    and continues it from the newest checkpoint, the command's --overwrite done once, at the job's start."""
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "ft"
    args = _args(sst, en_tok_dir, out, *FAST, "--save-every", "2", "--keep-last", "0", "--overwrite")
    assert main(args) == 0
    capsys.readouterr()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "resumed from" in text and "step_00000004" in text
    assert (out / "checkpoints" / "step_00000002").is_dir()  # the run's checkpoints kept, not overwritten


def test_gradient_accumulation_gives_the_batch_update(data, en_tok_dir, tmp_path, one_thread):
    sst = _sst2_slice(data, tmp_path)
    no_dropout = ["--set=hidden_dropout_prob=0", "--set=attention_probs_dropout_prob=0",
                  "--set=classifier_dropout_prob=0"]  # fmt: skip
    assert main(_args(sst, en_tok_dir, tmp_path / "one", *FAST, *no_dropout)) == 0
    assert main(_args(sst, en_tok_dir, tmp_path / "acc", *FAST, *no_dropout, "--micro-batch-size", "3")) == 0
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "acc")
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=2e-6, rtol=1e-5, msg=k)


@pytest.mark.distributed
def test_two_processes_equal_one_process(data, en_tok_dir, tmp_path):
    """torchrun with 2 gloo processes, each half of every batch == one process on the whole batch."""
    sst = _sst2_slice(data, tmp_path)
    common = [*FAST, "--set=hidden_dropout_prob=0", "--set=attention_probs_dropout_prob=0",
              "--set=classifier_dropout_prob=0"]  # no dropout: the processes draw other masks  # fmt: skip
    one = subprocess.run(_cli(*_args(sst, en_tok_dir, tmp_path / "one", *common)), env=ENV, capture_output=True,
                         text=True)  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29561", "-m", "albertlm", *_args(sst, en_tok_dir, tmp_path / "two", *common)],
                         env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("fine-tuned sst2") == 1  # rank 0 reports; the other process only trains
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4, msg=k)
    assert json.loads((tmp_path / "two" / "metrics.json").read_text())["world_size"] == 2


def test_fsdp_two_processes_equal_one_process_and_their_shards_resume_on_one(data, en_tok_dir, tmp_path):
    """--fsdp under torchrun (2 gloo processes, weights and optimizer state sharded): the same model as one
    process; its checkpoints are each rank's shards, and one process resumes from them (resharded) to the
    same end."""
    import shutil

    sst = _sst2_slice(data, tmp_path)
    common = [*FAST, "--set=hidden_dropout_prob=0", "--set=attention_probs_dropout_prob=0",
              "--set=classifier_dropout_prob=0", "--save-every", "2", "--keep-last", "0"]  # fmt: skip
    one = subprocess.run(_cli(*_args(sst, en_tok_dir, tmp_path / "one", *common)), env=ENV, capture_output=True,
                         text=True)  # fmt: skip
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29562", "-m", "albertlm", *_args(sst, en_tok_dir, tmp_path / "two", *common, "--fsdp")],
                         env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    a = _weights(tmp_path / "one")
    for k, v in _weights(tmp_path / "two").items():
        torch.testing.assert_close(v, a[k], atol=1e-5, rtol=1e-4, msg=k)
    saved = {p.name for p in (tmp_path / "two" / "checkpoints" / "step_00000004").iterdir()}
    assert {".metadata", "__0_0.distcp", "__1_0.distcp"} <= saved and "model.safetensors" not in saved
    m1, m2 = (json.loads((tmp_path / d / "metrics.json").read_text()) for d in ("one", "two"))
    assert m2["metrics"]["accuracy"] == m1["metrics"]["accuracy"]  # rank 0 evaluated the gathered weights
    shutil.copytree(tmp_path / "two", tmp_path / "resumed")  # from step 4 of the 2-process run, on 1 process
    done = subprocess.run(_cli(*_args(sst, en_tok_dir, tmp_path / "resumed", *common, "--fsdp", "--resume")),
                          env=ENV, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resumed from" in done.stdout + done.stderr and "step_00000004" in done.stdout + done.stderr
    for k, v in _weights(tmp_path / "resumed").items():
        torch.testing.assert_close(v, a[k], atol=1e-5, rtol=1e-4, msg=k)
    refused = subprocess.run(_cli(*_args(sst, en_tok_dir, tmp_path / "resumed", *common, "--resume")), env=ENV,
                             capture_output=True, text=True)  # fmt: skip
    assert refused.returncode == 2 and "other settings (fsdp)" in refused.stderr  # the shards' layout follows it


def test_device_flags(data, en_tok_dir, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    with pytest.raises(SystemExit) as e:
        main(_args(sst, en_tok_dir, tmp_path / "x", "--device", "gpu"))
    assert e.value.code == 2 and "auto, cpu, cuda or cuda:N" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(_args(sst, en_tok_dir, tmp_path / "x", *FAST, "--device", "cuda:1")) == 2
        err = capsys.readouterr().err
        assert "no CUDA GPU" in err and "Traceback" not in err
    assert main(_args(sst, en_tok_dir, tmp_path / "cpu", *FAST, "--device", "cpu")) == 0
    model = tmp_path / "cpu"
    capsys.readouterr()
    assert main(["evaluate", "--data", str(sst), "--model", str(model), "--device", "cpu"]) == 0
    assert "accuracy" in json.loads(capsys.readouterr().out.splitlines()[0])
    text = tmp_path / "in.txt"
    text.write_text("a charming film\n", encoding="utf-8")
    assert main(["predict", "--model", str(model), "--input", str(text), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["label"] in ("0", "1")


def test_the_python_api_does_in_one_call_what_the_cli_does(data, en_tok_dir, tmp_path, one_thread, capsys):
    import albertlm

    sst = _sst2_slice(data, tmp_path)
    assert main(_args(sst, en_tok_dir, tmp_path / "cli", *FAST)) == 0
    overrides = {k: int(v) for k, v in (f.split("=", 1)[1].split("=") for f in tiny_flags())}
    result = albertlm.finetune("sst2", sst, "albert-tiny", tmp_path / "api", tokenizer=en_tok_dir, precision="fp32",
                               progress=False, max_steps=6, batch_size=8, lr=1e-3, max_seq_length=64,
                               config_overrides=overrides)  # fmt: skip
    cli = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert result["metrics"] == cli["metrics"] and result["final_train_loss"] == cli["final_train_loss"]
    a, b = _weights(tmp_path / "cli"), _weights(tmp_path / "api")
    assert all(torch.equal(a[k], b[k]) for k in a)

    predictor = albertlm.load(tmp_path / "api", device="cpu")
    rows = predictor(["a charming film", ("a charming film", "a second text")])
    assert len(rows) == 2 and all(r["label"] in ("0", "1") for r in rows)
    assert albertlm.predict(tmp_path / "api", ["a charming film"], precision="fp32")[0]["label"] == rows[0]["label"]
    with pytest.raises(albertlm.errors.UserError, match="unknown settings lrr"):
        albertlm.finetune("sst2", sst, "albert-tiny", tmp_path / "bad", tokenizer=en_tok_dir, lrr=1e-3)
    with pytest.raises(albertlm.errors.UserError, match="non-empty list of inputs"):
        predictor("one text, not a list")


def test_export_check_analyze_and_serve_take_device(data, en_tok_dir, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    model = tmp_path / "ft"
    assert main(_args(sst, en_tok_dir, model, *FAST)) == 0
    assert main(["export", "--model", str(model), "--out", str(tmp_path / "onnx"), "--device", "cpu"]) == 0
    manifest = json.loads((tmp_path / "onnx" / "deploy.json").read_text())
    assert manifest["checked_on"] == "cpu" and manifest["fp32_max_abs_diff"] < 1e-4
    corpus = tmp_path / "s.txt"
    corpus.write_text("a charming film .\nan awful , boring mess .\n", encoding="utf-8")
    assert main(["analyze", "layers", "--model", str(model), "--corpus", str(corpus), "--out", str(tmp_path / "a"),
                 "--device", "cpu"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "a" / "layers.json").read_text())
    import albertlm

    assert albertlm.load(tmp_path / "onnx")(["a charming film"])[0]["label"] in ("0", "1")  # engine auto: onnx
    with pytest.raises(albertlm.errors.UserError, match="runs exports on the CPU"):
        albertlm.load(tmp_path / "onnx", device="cuda")
    for command in (["serve", "--model", str(model)], ["export", "--model", str(model), "--out", str(tmp_path / "x")],
                    ["analyze", "layers", "--model", str(model), "--corpus", str(corpus)]):
        with pytest.raises(SystemExit) as e:
            main([*command, "--device", "tpu"])
        assert e.value.code == 2 and "--device must be auto, cpu, cuda or cuda:N" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["auto", "fp16", "fp32"])
def test_finetune_and_evaluate_on_the_gpu(data, en_tok_dir, tmp_path, capsys, precision):
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "gpu"
    args = [a for a in _args(sst, en_tok_dir, out, *FAST, "--device", "cuda") if a != "fp32"]
    args[args.index("--precision") + 1:args.index("--precision") + 1] = [precision]
    assert main(args) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["precision"] in ("bf16", "fp16", "fp32") and summary["final_train_loss"] > 0
    capsys.readouterr()
    for device in ("cuda", "cpu"):
        assert main(["evaluate", "--data", str(sst), "--model", str(out), "--device", device, "--fp32"]) == 0
    gpu, cpu = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert gpu["accuracy"] == pytest.approx(cpu["accuracy"], abs=0.02)


def _head_inputs(name: str, B: int = 2, S: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 100, (B, S), generator=torch.Generator().manual_seed(0))
    kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if name == "AlbertForMultipleChoice":
        kw = {k: v.unsqueeze(1).expand(B, 3, S).contiguous() for k, v in kw.items()}
        return {**kw, "labels": torch.tensor([0, 1])}
    span = {"start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([2, 3])}
    labels = {
        "AlbertForSequenceClassification": {"labels": torch.tensor([0, 1])},
        "AlbertForTokenClassification": {"labels": torch.randint(0, 3, (B, S))},
        "AlbertForQuestionAnswering": span,
        "AlbertForQuestionAnsweringV2": {**span, "is_impossible": torch.tensor([0.0, 1.0]),
                                         "p_mask": torch.zeros(B, S)},
        "AlbertForMaskedLM": {"labels": ids.clone()},
        "AlbertForPreTraining": {"labels": ids.clone(), "sentence_order_label": torch.tensor([0, 1])},
    }
    return {**kw, **labels[name]}


@pytest.mark.parametrize("exits", ["none", "per-layer", "shared"])
def test_every_heads_loss_reaches_every_parameter(exits):
    """DDP is built without find_unused_parameters (a graph search every step): that needs every trainable
    parameter of every head to get a gradient from its loss."""
    from albertlm import AlbertConfig
    from albertlm.heads import HEADS

    for name, head in HEADS.items():
        if name == "AlbertModel" or (exits != "none" and name != "AlbertForSequenceClassification"):
            continue
        config = AlbertConfig(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=3,
                              embedding_size=16, vocab_size=100, id2label={0: "a", 1: "b", 2: "c"}, exit_heads=exits)
        model = head.cls(config).train()
        model(**_head_inputs(name)).loss.backward()
        unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
        assert not unused, f"{name} ({exits}): {unused}"
