"""The Python API refuses bad arguments in one albertlm error before any work, and every value read back
from a model or export folder is checked as its flag is (issue 44, findings 8, 9 and 10): a bad exit rule or
max_seq_length in config.json, or a bad deploy.json "exit" section, is one line at load and `serve` does not
start on it; an export's README.md (its model card) is documentation, not something its checksums cover."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import TINY_SET, finetune_tiny_sst2, refused

import albertlm
from albertlm.cli import main
from albertlm.errors import AlbertlmError, DataError, UserError
from albertlm.training.search import SearchSettings

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    return finetune_tiny_sst2(tok_dir, tmp_path_factory.mktemp("api"))


@pytest.fixture(scope="module")
def exit_export(tok_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(a tiny sst2 model with per-layer exits, saved as finetune saves it; its fp32 export)."""
    pytest.importorskip("onnxruntime")
    from albertlm.tasks import get_task
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.finetune import Settings, build_model, save

    root = tmp_path_factory.mktemp("exits")
    task, tok = get_task("sst2"), load_tokenizer(tok_dir)
    torch.manual_seed(0)
    tiny = dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                max_position_embeddings=64, exit_heads="per-layer")  # fmt: skip
    m = build_model(task, "albert-tiny", tok, ["0", "1"], tiny)
    save(m, tok, root / "model", task, Settings(inference=InferenceSettings(max_seq_length=32)))
    assert main(["export", "--model", str(root / "model"), "--out", str(root / "export")]) == 0
    return root / "model", root / "export"


# --------------------------------------------------------------------------- 10. the Python API
@pytest.mark.parametrize("inputs, needle", [
    ([], "non-empty list"),  # was KeyError 'logits'
    (["a \ud800 film"], "inputs[0]: a string holds a lone surrogate"),  # was a pybind RuntimeError
    ([("a good film", "b \udc80")], "inputs[0]: a string holds a lone surrogate"),
    ([{"text": "x \ud83d"}], "inputs[0]: a string holds a lone surrogate"),
])
def test_predictor_refuses_inputs_in_one_error(model, inputs, needle):
    predictor = albertlm.load(model)
    with pytest.raises(UserError) as e:
        predictor(inputs)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("setting, value, needle", [
    ("exit_confidence", 2.0, "--exit-confidence must be at most 1, not 2.0"),
    ("exit_confidence", "high", "--exit-confidence must be a number, not str 'high'"),
    ("exit_entropy", float("nan"), "--exit-entropy must be a number"),
    ("exit_patience", -1, "--exit-patience must be at least 0"),
    ("exit_patience", 1.5, "--exit-patience must be an integer"),
    ("exit_max_layers", 0, "--exit-max-layers must be at least 1"),
    ("max_seq_length", "64", "--max-seq-length must be an integer"),
    ("max_seq_length", 4, "--max-seq-length must be at least 8"),
    ("eval_batch_size", 0, "--eval-batch-size must be at least 1"),
    ("bucketing", "yes", "--bucketing must be true or false"),
    ("exit_typo", 1, "unknown inference settings exit_typo"),
])
def test_load_refuses_bad_settings_as_the_flags_do(model, setting, value, needle):
    with pytest.raises(UserError, match=None) as e:
        albertlm.predict(model, ["a good film"], **{setting: value})
    assert needle in str(e.value), str(e.value)


@pytest.mark.parametrize("changes, needle", [
    ({"lr": -1.0}, "--lr must be above 0, not -1.0"),  # was torch's "Invalid learning rate" after loading the data
    ({"lr": float("nan")}, "--lr must be a number"),
    ({"lr": "1e-3"}, "--lr must be a number, not str '1e-3'"),  # was a format-code ValueError
    ({"batch_size": "8"}, "--batch-size must be an integer"),  # was a TypeError
    ({"precision": "fp8"}, "--precision must be one of"),
    ({"device": "tpu"}, "--device"),
    ({"seed": -1}, "--seed must be from 0"),
    ({"exits": "some"}, "--exits must be one of"),
    ({"search": 2}, "search must be a SearchSettings"),  # was AttributeError
    ({"search": SearchSettings(search=2, search_seeds=0)}, "--search-seeds must be at least 1"),
])
def test_finetune_refuses_bad_arguments_before_any_work(tmp_path, tok_dir, changes, needle):
    data = tmp_path / "sst"  # missing on purpose: the check comes before the data is read
    with pytest.raises(AlbertlmError) as e:
        albertlm.finetune("sst2", data, "albert-tiny", tmp_path / "out", tokenizer=tok_dir, max_steps=1, **changes)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not (tmp_path / "out").exists()


def test_the_flags_and_the_api_share_one_check(tmp_path, tok_dir, capsys):
    """The CLI's flag and the API's keyword give the same reason for the same value."""
    with pytest.raises(SystemExit) as code:  # argparse's exit
        main(["finetune", "--task", "sst2", "--data", str(tmp_path), "--model", "albert-tiny", "--out",
              str(tmp_path / "o"), "--exit-confidence", "2", *TINY_SET])  # fmt: skip
    cli = refused(capsys, code.value.code)
    with pytest.raises(UserError) as e:
        albertlm.finetune("sst2", tmp_path, "albert-tiny", tmp_path / "o", tokenizer=tok_dir, exit_confidence=2.0)
    assert "must be at most 1" in cli and "must be at most 1" in str(e.value)


# --------------------------------------------------------------------------- 8. values read back
@pytest.mark.parametrize("key, value, needle", [
    ("max_seq_length", "x", "--max-seq-length must be an integer"),  # was int('x') ValueError
    ("max_seq_length", 2, "--max-seq-length must be at least 8"),
    ("exit_confidence", 2, "--exit-confidence must be at most 1"),  # was accepted: a rule that never fires
    ("exit_patience", -3, "--exit-patience must be at least 0"),
    ("exit_entropy", "low", "--exit-entropy must be a number"),
    ("eval_batch_size", 0, "--eval-batch-size must be at least 1"),
])
def test_config_json_settings_are_checked_at_load(model, tmp_path, capsys, key, value, needle):
    bad = tmp_path / "m"
    shutil.copytree(model, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["albertlm_task"][key] = value
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError) as e:
        albertlm.load(bad)
    assert "config.json" in str(e.value) and needle in str(e.value)
    (tmp_path / "in.txt").write_text("a good film\n")
    capsys.readouterr()
    refused(capsys, main(["predict", "--model", str(bad), "--input", str(tmp_path / "in.txt")]), "config.json", needle)
    refused(capsys, main(["serve", "--model", str(bad), "--port", "0"]), "config.json", needle)


def _edit_exit(export: Path, tmp_path: Path, edit) -> Path:  # noqa: ANN001
    bad = tmp_path / "export"
    shutil.copytree(export, bad)
    manifest = json.loads((bad / "deploy.json").read_text())
    edit(manifest["exit"], manifest)
    (bad / "deploy.json").write_text(json.dumps(manifest))
    return bad


EXIT_EDITS = {
    "group beyond the layer files": (lambda e, m: e.update(group_of_layer=[0, 7]), "group_of_layer"),
    "group map too short": (lambda e, m: e.update(group_of_layer=[0]), "one group per layer"),
    "group map a string": (lambda e, m: e.update(group_of_layer="0,0"), "one group per layer"),
    "group a bool": (lambda e, m: e.update(group_of_layer=[True, 0]), "group_of_layer"),
    "no layer files": (lambda e, m: e["files"]["fp32"].update(layers=[]), "files.fp32 must name"),
    "layer file outside": (lambda e, m: e["files"]["fp32"].update(layers=["../x.onnx"]), "../x.onnx"),
    "embed file null": (lambda e, m: e["files"]["fp32"].update(embed=None), "files.fp32 must name"),
    "heads the model lacks": (lambda e, m: e.update(heads="shared"), "heads 'shared'"),
    "rule out of range": (lambda e, m: e.update(rule={"exit_confidence": 3}), "--exit-confidence must be at most 1"),
    "rule of an unknown field": (lambda e, m: e.update(rule={"exit_speed": 1}), "rule must be a table"),
    "section not a table": (lambda e, m: m.update(exit=[1]), "not a table"),
}


@pytest.mark.parametrize("name", list(EXIT_EDITS))
def test_deploy_json_exit_section_is_checked_at_load(exit_export, tmp_path, capsys, name):
    edit, needle = EXIT_EDITS[name]
    bad = _edit_exit(exit_export[1], tmp_path, edit)
    with pytest.raises(DataError) as e:
        albertlm.load(bad)
    assert "deploy.json exit" in str(e.value) and needle in str(e.value), str(e.value)
    capsys.readouterr()
    # was: served, 500 to every request with an exit rule, /health ok
    serve = ["serve", "--model", str(bad), "--engine", "onnx", "--port", "0", "--exit-patience", "1"]
    refused(capsys, main(serve), "deploy.json", needle)


def test_the_intact_exit_export_loads_and_exits(exit_export):
    model_dir, export = exit_export
    rule = {"exit_max_layers": 1}
    got = albertlm.predict(export, ["a good film", "a dull film"], **rule)
    assert [r["layer"] for r in got] == [1, 1]
    assert [r["label"] for r in got] == [r["label"] for r in albertlm.predict(model_dir, ["a good film",
                                                                                         "a dull film"], **rule)]


# --------------------------------------------------------------------------- 9. the export's card
def test_editing_or_deleting_an_exports_readme_keeps_it_working(exit_export, tmp_path):
    _, export = exit_export
    texts = ["a good film", "an awful , boring mess"]
    want = albertlm.predict(export, texts)
    assert "README.md" not in json.loads((export / "deploy.json").read_text())["sha256"]
    mine = tmp_path / "export"
    shutil.copytree(export, mine)
    (mine / "README.md").write_text((mine / "README.md").read_text() + "\nOur notes on this model.\n")
    assert albertlm.predict(mine, texts) == want  # was: "README.md is missing or fails its checksum"
    (mine / "README.md").unlink()
    assert albertlm.predict(mine, texts) == want


def test_an_older_export_whose_checksums_list_the_card_still_loads(exit_export, tmp_path):
    _, export = exit_export
    old = tmp_path / "export"
    shutil.copytree(export, old)
    manifest = json.loads((old / "deploy.json").read_text())
    manifest["sha256"]["README.md"] = "0" * 64  # what exports wrote before: the card's sha256, now edited
    (old / "deploy.json").write_text(json.dumps(manifest))
    assert albertlm.predict(old, ["a good film"]) == albertlm.predict(export, ["a good film"])
    (old / "model.onnx").write_bytes((old / "model.onnx").read_bytes()[:-1] + b"\0")  # an engine's file still counts
    with pytest.raises(DataError, match="model.onnx is missing or fails its checksum"):
        albertlm.load(old)
