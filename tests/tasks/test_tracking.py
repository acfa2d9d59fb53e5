"""--report-to: fine-tuning and pretraining runs read back with each tracker's own reader (TensorBoard's event
accumulator, MLflow's client on the SQLite store, W&B's record protobuf from the offline run file); a resumed
pretraining run reopens the same MLflow run; bad or missing trackers are one line."""

from __future__ import annotations

import glob
import json
import struct
from pathlib import Path

import pytest
from test_finetune_cli import FAST, _sst2_slice, tiny_flags

from albertlm.cli import main
from albertlm.errors import UserError
from albertlm.training.tracking import parse_report_to


def test_report_to_names_and_missing_packages(monkeypatch):
    assert parse_report_to("jsonl") == () and parse_report_to("none") == ()
    with pytest.raises(UserError, match="comma-separated list of none, jsonl, tensorboard, mlflow, wandb"):
        parse_report_to("jsonl,comet")
    with pytest.raises(UserError, match="none cannot be combined"):
        parse_report_to("none,mlflow")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(UserError, match=r"the mlflow package is not installed; pip install 'albertlm\[tracking\]'"):
        parse_report_to("tensorboard,mlflow")


def test_finetune_cli_refuses_an_unknown_tracker_before_reading_data(tmp_path, capsys):
    code = main(["finetune", "--task", "sst2", "--data", str(tmp_path / "nowhere"), "--model", "albert-tiny",
                 "--out", str(tmp_path / "o"), "--report-to", "comet"])  # fmt: skip
    assert code == 2 and "--report-to 'comet'" in capsys.readouterr().err


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_runs(out: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(out / 'mlflow.db').resolve()}")
    experiment = client.get_experiment_by_name("albertlm")
    return client, client.search_runs([experiment.experiment_id])


def wandb_records(out: Path) -> dict[str, list[dict]]:
    """The history and summary records of the offline run file, decoded with W&B's own Record protobuf (the
    file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of checksum/length/type-framed chunks)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    chunks, buf, pos = [], b"", 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            break
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is complete
            chunks.append(buf)
            buf = b""
    out_records: dict[str, list[dict]] = {"history": [], "summary": []}
    for chunk in chunks:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(chunk)
        kind = record.WhichOneof("record_type")
        if kind in out_records:
            items = record.history.item if kind == "history" else record.summary.update
            out_records[kind].append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return out_records


@pytest.mark.parametrize("trackers", ["tensorboard,mlflow", "wandb"])
def test_finetune_reports_metrics_params_and_final_scores(trackers, data, en_tok_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    sst = _sst2_slice(data, tmp_path)
    out = tmp_path / "ft"
    assert main(["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer",
                 str(en_tok_dir), "--out", str(out), "--eval-every", "3", "--report-to", f"jsonl,{trackers}",
                 *FAST, *tiny_flags()]) == 0  # fmt: skip
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    accuracy = [(r["step"], r["accuracy"]) for r in rows]
    best = json.loads((out / "metrics.json").read_text())["metrics"]["accuracy"]
    assert [s for s, _ in accuracy] == [3, 6]
    if "tensorboard" in trackers:
        scalars = tensorboard_scalars(out / "tensorboard")
        assert scalars["eval/accuracy"] == [(s, pytest.approx(a)) for s, a in accuracy]
        assert scalars["final/accuracy"][0][1] == pytest.approx(best)
        client, (run,) = mlflow_runs(out)
        history = client.get_metric_history(run.info.run_id, "eval/accuracy")
        assert [(m.step, m.value) for m in history] == [(s, pytest.approx(a)) for s, a in accuracy]
        assert run.data.params["lr"] == "0.001" and run.data.params["inference.max_seq_length"] == "64"
        assert run.data.metrics["final/accuracy"] == pytest.approx(best) and run.info.status == "FINISHED"
    else:
        records = wandb_records(out)
        logged = [(r["_step"], r["eval/accuracy"]) for r in records["history"] if "eval/accuracy" in r]
        assert logged == [(s, pytest.approx(a)) for s, a in accuracy]
        assert any(r.get("final/accuracy") == pytest.approx(best) for r in records["summary"])


def test_pretraining_resume_reopens_the_mlflow_run(tmp_path, monkeypatch):
    """The demo corpus, 4 steps then a resume to 6: one MLflow run whose loss history has every step once."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    out = tmp_path / "pt"
    tiny = ["--set=hidden_size=32", "--set=num_attention_heads=2", "--set=intermediate_size=64",
            "--set=num_hidden_layers=2", "--set=embedding_size=16"]  # fmt: skip
    common = ["--global-batch-size", "4", "--micro-batch-size", "4", "--log-every", "1", "--save-every", "2",
              "--no-progress", "--report-to", "mlflow,tensorboard"]  # fmt: skip
    assert main(["pretrain", "--out", str(out), "--max-steps", "4", "--warmup-steps", "1", *tiny, *common]) == 0
    assert main(["pretrain", "--out", str(out), "--resume", "--max-steps", "6"]) == 0
    client, runs = mlflow_runs(out)
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    assert sorted(steps) == [1, 2, 3, 4, 5, 6]
    assert [s for s, _ in tensorboard_scalars(out / "tensorboard")["train/loss"]] == [1, 2, 3, 4, 5, 6]
