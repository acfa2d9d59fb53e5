"""Numbers that cannot give a finite model are refused, and a NaN answer is an error (issue 35, finding 3):
config.json's layer_norm_eps / initializer_range / label maps are checked at load, in one line; a model that
computes NaN makes predict exit 2, the server answer a JSON 500 and /health turn 503, and a fine-tune whose
loss is NaN stop instead of saving a NaN model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import finetune_tiny_sst2, refused, tiny_sst2_data
from safetensors.torch import load_file, save_file

from albertlm.cli import main

FAST = ["--quiet", "--max-steps", "2", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "32"]


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    return finetune_tiny_sst2(tok_dir, tmp_path_factory.mktemp("finite"), steps=2)


@pytest.fixture(scope="module")
def nan_model(model, tmp_path_factory) -> Path:
    """The fine-tuned model with one NaN in its first LayerNorm: every output is NaN, config.json is fine."""
    bad = tmp_path_factory.mktemp("nan") / "m"
    shutil.copytree(model, bad)
    sd = load_file(str(bad / "model.safetensors"))
    key = next(k for k in sd if k.endswith("embeddings.LayerNorm.weight"))
    sd[key][0] = float("nan")
    save_file(sd, str(bad / "model.safetensors"), metadata={"format": "pt"})
    return bad


@pytest.mark.parametrize("field, value, needle", [
    ("layer_norm_eps", -1, "layer_norm_eps must be a positive finite number"),
    ("layer_norm_eps", 0, "layer_norm_eps must be a positive finite number"),
    ("layer_norm_eps", "NaN", "layer_norm_eps must be a positive finite number"),
    ("layer_norm_eps", "Infinity", "layer_norm_eps must be a positive finite number"),
    ("initializer_range", "NaN", "initializer_range must be a finite number"),
    ("hidden_dropout_prob", "NaN", "hidden_dropout_prob must be in [0, 1)"),
    ("id2label", {"0": "a", "5": "b"}, "without gaps"),
    ("id2label", {"0": "a", "1": "a"}, "more than once"),
    ("id2label", {}, "id2label is empty"),
    ("label2id", {"a": 1, "b": 0}, "label2id is not the inverse of id2label"),
])
def test_a_config_that_cannot_give_a_finite_model_is_refused_at_load(model, tmp_path, capsys, field, value, needle):
    bad = tmp_path / "m"
    shutil.copytree(model, bad)
    text = (bad / "config.json").read_text()
    cfg = json.loads(text)
    if field == "label2id":
        cfg["id2label"] = {"0": "a", "1": "b"}
    cfg[field] = "@@" if value in ("NaN", "Infinity") else value
    # Python's json reads the bare words NaN and Infinity (not JSON, but what a hand edit or json.dumps writes)
    (bad / "config.json").write_text(json.dumps(cfg).replace('"@@"', str(value)))
    inp = tmp_path / "in.txt"
    inp.write_text("a good film\n")
    capsys.readouterr()
    refused(capsys, main(["predict", "--model", str(bad), "--input", str(inp)]), "config.json", needle)


def test_predict_on_a_model_that_computes_nan_exits_2(nan_model, tmp_path, capsys):
    inp = tmp_path / "in.txt"
    inp.write_text("a good film\n")
    capsys.readouterr()
    code = main(["predict", "--model", str(nan_model), "--input", str(inp)])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err, (code, err)
    assert ": error: " in err.splitlines()[-1] and "non-finite" in err.splitlines()[-1], err
    assert out == "", "no row is printed from a NaN"


def test_the_server_answers_a_json_500_and_health_turns_503(nan_model):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from albertlm.deploy.inference import Predictor
    from albertlm.deploy.serve import create_app

    client = TestClient(create_app(Predictor.load(nan_model, engine="torch", threads=1)),
                        raise_server_exceptions=False)
    assert client.get("/health").json()["status"] == "ok"
    r = client.post("/v1/predict", json={"text": "a good film"})
    assert r.status_code == 500 and r.json()["error"]["code"] == "non_finite_output", r.text
    h = client.get("/health")
    assert h.status_code == 503 and h.json()["status"] == "failing" and "non-finite" in h.json()["error"]
    r = client.post("/v1/classify", json={"texts": ["a", "b"]})
    assert r.status_code == 500 and r.json()["error"]["code"] == "non_finite_output"
    assert client.get("/health").json()["failed_requests"] == 2


def test_a_finetune_whose_loss_is_nan_fails(nan_model, tok_dir, tmp_path, capsys):
    torch.manual_seed(0)
    data = tiny_sst2_data(tmp_path / "sst")
    code = main(["finetune", "--task", "sst2", "--data", str(data), "--model", str(nan_model), "--out",
                 str(tmp_path / "o"), *FAST])  # fmt: skip
    refused(capsys, code, "non-finite loss or gradient")
    assert not (tmp_path / "o" / "model.safetensors").exists()
