"""Fine-tuning data as `datasets` users keep it (issue 45): a DatasetDict or a Dataset saved with save_to_disk, and
a Hub-layout folder of Parquet shards (splits by file name), each with its ClassLabel names kept as the model's
labels in their id order; a single Parquet file keeps them too, and evaluate takes its own labels back."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")
pytest.importorskip("pyarrow")

from albertlm.cli import main  # noqa: E402
from albertlm.errors import DataError  # noqa: E402
from albertlm.tasks import RowPolicy  # noqa: E402
from albertlm.tasks.registry import generic_task, read_split  # noqa: E402
from albertlm.training.finetune_data import load_data  # noqa: E402

GEN = Path(__file__).resolve().parents[1] / "data" / "generic"
NAMES = ["positive", "negative"]  # not alphabetical: ids must keep the ClassLabel's order
TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, embedding_size=16)


def sst2(file: str) -> dict[str, list]:
    with open(GEN / file, encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {"sentence": [r["review"] for r in rows], "label": [NAMES.index(r["sentiment"]) for r in rows]}


def features() -> datasets.Features:
    return datasets.Features({"sentence": datasets.Value("string"), "label": datasets.ClassLabel(names=NAMES)})


@pytest.fixture(scope="module")
def splits() -> datasets.DatasetDict:
    dev = sst2("sst2_dev.csv")
    return datasets.DatasetDict({"train": datasets.Dataset.from_dict(sst2("sst2_train.csv"), features=features()),
                                 "validation": datasets.Dataset.from_dict(dev, features=features())})  # fmt: skip


def expected(ds: datasets.Dataset) -> list[tuple[str, str]]:
    return [(r["sentence"].strip(), NAMES[r["label"]]) for r in ds]


def test_a_saved_dataset_dict_gives_its_splits_and_class_names(splits, tmp_path):
    splits.save_to_disk(str(tmp_path / "dd"))
    task = generic_task("classification")
    data = load_data(task, tmp_path / "dd")
    assert [(e.text_a, e.label) for e in data.train] == expected(splits["train"])
    assert [(e.text_a, e.label) for e in data.eval] == expected(splits["validation"])
    assert data.labels == NAMES and data.eval_path == str(tmp_path / "dd" / "validation")


def test_a_saved_dataset_trains_with_a_hold_out(splits, tmp_path):
    splits["train"].save_to_disk(str(tmp_path / "one"))
    data = load_data(generic_task("classification"), tmp_path / "one")
    assert len(data.train) + len(data.eval) == len(splits["train"]) and "hold-out" in data.eval_path
    assert data.labels == NAMES


def test_hub_parquet_shards_by_split_name(splits, tmp_path):
    root = tmp_path / "hub"
    (root / "data").mkdir(parents=True)
    train = splits["train"]
    half = len(train) // 2
    train.select(range(half)).to_parquet(str(root / "data" / "train-00000-of-00002.parquet"))
    train.select(range(half, len(train))).to_parquet(str(root / "data" / "train-00001-of-00002.parquet"))
    splits["validation"].to_parquet(str(root / "data" / "validation-00000-of-00001.parquet"))
    data = load_data(generic_task("classification"), root)
    assert [(e.text_a, e.label) for e in data.train] == expected(train)  # both shards, in order
    assert [(e.text_a, e.label) for e in data.eval] == expected(splits["validation"]) and data.labels == NAMES
    (root / "data" / "train-00001-of-00002.parquet").unlink()
    with pytest.raises(DataError, match="train split has 2 shards but train-00001-of-00002.parquet is not there"):
        load_data(generic_task("classification"), root)


def test_tags_of_a_class_label_list_are_names(tmp_path):
    rows = [json.loads(line) for line in (GEN / "pku_ner_dev.jsonl").read_text(encoding="utf-8").splitlines()[:8]]
    tags = sorted({t for r in rows for t in r["tags"]})
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                               "ner_tags": datasets.Sequence(datasets.ClassLabel(names=tags))})  # fmt: skip
    ds = datasets.Dataset.from_dict({"tokens": [r["tokens"] for r in rows],
                                     "ner_tags": [[tags.index(t) for t in r["tags"]] for r in rows]}, features=feats)
    ds.save_to_disk(str(tmp_path / "ner"))
    got, _ = read_split(generic_task("tagging"), tmp_path / "ner", "train", RowPolicy())
    assert [(e.words, e.tags) for e in got] == [(r["tokens"], r["tags"]) for r in rows]


def test_parquet_file_finetune_then_evaluate_keep_the_names(splits, en_tok_dir, tmp_path, capsys):
    """The issue's report: a Parquet file trained with ids as labels ("0"/"1"), and evaluate then refused them."""
    splits["train"].to_parquet(str(tmp_path / "train.parquet"))
    splits["validation"].to_parquet(str(tmp_path / "dev.parquet"))
    out = tmp_path / "run"
    assert main(["finetune", "--task", "classification", "--data", str(tmp_path / "train.parquet"), "--eval-file",
                 str(tmp_path / "dev.parquet"), "--model", "albert-tiny", "--tokenizer", str(en_tok_dir), "--out",
                 str(out), "--max-steps", "2", "--quiet", "--batch-size", "8", "--max-seq-length", "32",
                 *[f"--set={k}={v}" for k, v in TINY.items()]]) == 0  # fmt: skip
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "positive", "1": "negative"}
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data", str(tmp_path / "dev.parquet")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["examples"] == len(splits["validation"])
