"""An unreachable tracking server is found at start, in one line naming the URL and the fix, before anything
is trained or written (issue 44, finding 6). The server is a closed port on 127.0.0.1 (nothing else is
ever contacted); before the fix MLflow's client retried for minutes once training had begun, and W&B online the same."""

from __future__ import annotations

import importlib.util
import os
import socket

import pytest
from conftest import FINETUNE_FAST, TINY_SET, pretrain_args, refused, tiny_sst2_data

from albertlm.cli import main
from albertlm.training.tracking import check_reachable

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MLFLOW = pytest.param("mlflow", "MLFLOW_TRACKING_URI", {}, "unset it to log to RUN/mlflow.db", id="mlflow",
                      marks=pytest.mark.skipif(not importlib.util.find_spec("mlflow"), reason="mlflow"))
WANDB = pytest.param("wandb", "WANDB_BASE_URL", {"WANDB_MODE": "online", "WANDB_API_KEY": "x" * 40},
                     "WANDB_MODE=offline", id="wandb",
                     marks=pytest.mark.skipif(not importlib.util.find_spec("wandb"), reason="wandb"))


@pytest.mark.parametrize("tracker, variable, extra, fix", [MLFLOW, WANDB])
def test_finetune_refuses_an_unreachable_tracking_server_at_start(tok_dir, tmp_path, monkeypatch, capsys, tracker,
                                                                  variable, extra, fix):  # fmt: skip
    url = f"http://127.0.0.1:{closed_port()}"
    for k, v in {variable: url, **extra}.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "ft"
    code = main(["finetune", "--task", "sst2", "--data", str(tiny_sst2_data(tmp_path / "sst")), "--model",
                 "albert-tiny", "--tokenizer", str(tok_dir), "--out", str(out), *FINETUNE_FAST, "--report-to",
                 f"jsonl,{tracker}", *TINY_SET])  # fmt: skip
    refused(capsys, code, f"--report-to {tracker}", url, "cannot be reached", fix)
    assert not out.exists()  # nothing trained, nothing written


@pytest.mark.skipif(not importlib.util.find_spec("mlflow"), reason="mlflow")
def test_pretrain_refuses_an_unreachable_mlflow_at_start(shards, tmp_path, monkeypatch, capsys):
    url = f"http://127.0.0.1:{closed_port()}/"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    out = tmp_path / "run"
    refused(capsys, main(pretrain_args(shards, out, "--report-to", "mlflow")), "--report-to mlflow", url,
            "cannot be reached")  # fmt: skip
    assert not out.exists()


def test_local_stores_need_no_server(monkeypatch, tmp_path):
    """A file or sqlite MLflow store and offline W&B are not probed (no server to reach)."""
    for uri in ("", f"sqlite:///{tmp_path}/m.db", f"file://{tmp_path}/mlruns"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
        monkeypatch.setenv("WANDB_MODE", "offline")
        wanted = ",".join(t for t in ("mlflow", "wandb") if importlib.util.find_spec(t))
        check_reachable(wanted or "jsonl")
    assert os.environ["WANDB_MODE"] == "offline"
