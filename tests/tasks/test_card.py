"""Model cards: finetune writes README.md in the Hub's format (parsed with huggingface_hub's own card class,
else a YAML parser), export inherits it into its folder (inside the published, checksummed files), a run
with --overwrite starts the card afresh, and a README.md of the user's own is never replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_finetune_cli import FAST, _sst2_slice, tiny_flags

from albertlm.card import read_card, update_card
from albertlm.cli import main


def card_header(folder: Path) -> dict:
    text = (folder / "README.md").read_text(encoding="utf-8")
    try:
        from huggingface_hub import ModelCard
    except ImportError:
        return yaml.safe_load(text.split("---\n")[1])
    return ModelCard(text).data.to_dict()


@pytest.fixture(scope="module")
def finetuned(data, en_tok_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("card")
    sst = _sst2_slice(data, root)
    out = root / "sst2-model"
    assert main(["finetune", "--task", "sst2", "--data", str(sst), "--model", "albert-tiny", "--tokenizer",
                 str(en_tok_dir), "--out", str(out), *FAST, *tiny_flags()]) == 0  # fmt: skip
    return out


def test_finetune_writes_a_hub_model_card(finetuned):
    header = card_header(finetuned)
    accuracy = json.loads((finetuned / "metrics.json").read_text())["metrics"]["accuracy"]
    assert header["library_name"] == "albertlm" and header["pipeline_tag"] == "text-classification"
    assert header["language"] == ["en"] and header["datasets"] == ["sst2"] and "albert" in header["tags"]
    (result,) = header["model-index"][0]["results"]
    assert result["dataset"]["name"] == "sst2" and result["dataset"]["split"] == "dev"
    assert {m["type"]: m["value"] for m in result["metrics"]}["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    (step,) = header["albertlm"]["history"]
    assert step["command"].startswith("albertlm finetune --task sst2 ") and "--max-steps 6" in step["command"]
    body = (finetuned / "README.md").read_text(encoding="utf-8")
    assert "AutoModelForSequenceClassification.from_pretrained" in body and "| accuracy |" in body


def test_export_inherits_the_card_beside_its_checksummed_files(finetuned, tmp_path):
    out = tmp_path / "onnx"
    assert main(["export", "--model", str(finetuned), "--out", str(out)]) == 0
    header = card_header(out)
    assert [s["command"].split()[1] for s in header["albertlm"]["history"]] == ["finetune", "export"]
    # the card is documentation: checksums cover what the engines read, so editing it never disables the model
    assert "README.md" not in json.loads((out / "deploy.json").read_text())["sha256"]
    assert 'engine="onnx"' in (out / "README.md").read_text(encoding="utf-8")


def test_a_users_readme_is_never_replaced(finetuned, tmp_path):
    out = tmp_path / "onnx"
    out.mkdir()
    (out / "README.md").write_text("# my notes\n", encoding="utf-8")
    assert main(["export", "--model", str(finetuned), "--out", str(out)]) == 0
    assert (out / "README.md").read_text(encoding="utf-8") == "# my notes\n"
    assert read_card(out) == (None, False) and update_card(out, "anything") is None


def test_a_second_command_updates_the_same_card_and_fresh_restarts_it(finetuned, tmp_path):
    import shutil

    folder = tmp_path / "m"
    shutil.copytree(finetuned, folder)
    update_card(folder, "saved an exit rule")
    history = card_header(folder)["albertlm"]["history"]
    assert [h["what"] for h in history][1:] == ["saved an exit rule"] and len(history) == 2
    update_card(folder, "fine-tuned again", fresh=True)
    assert [h["what"] for h in card_header(folder)["albertlm"]["history"]] == ["fine-tuned again"]
