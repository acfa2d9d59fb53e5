"""HF's tokenizer and pipelines on albertlm's folders (issue 45): the tokenizer.json and tokenizer_config.json albertlm
writes make transformers give albertlm's ids on the shipped English and Chinese slices (both behaviours, transformers'
fast tokenizer and its use_fast=False path), a folder holding only a tokenizer.json (transformers 5's layout) loads,
and HF's text-classification pipeline gives `predict`'s scores, truncating where the model's max_seq_length does."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from albertlm.cli import main  # noqa: E402
from albertlm.deploy.inference import Predictor  # noqa: E402
from albertlm.tokenizer import load_tokenizer  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, embedding_size=16)
# The two things the original's tokenization does that no `tokenizers` pipeline can: a control piece's string in
# text read as characters (WikiText's "<unk>" placeholders), and a piece ending in "<digit>," re-encoded with the
# "▁" it never strips ("103,702" -> "▁10 ▁3 , 70 2"; the pipeline scores such pieces down instead, as transformers'
# converter does: "▁10 3 , 70 2").
ORIGINAL_ONLY = re.compile(r"<unk>|<pad>|\[(CLS|SEP|MASK|UNK|PAD)\]|\d,")


def _tsv(path: Path, column: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [r[column] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def english() -> dict[str, list[str]]:
    sst2 = _tsv(DATA / "tasks/glue_sst2/dev.tsv", "sentence") + _tsv(DATA / "tasks/glue_sst2/train_full.tsv",
                                                                       "sentence")  # fmt: skip
    squad = json.loads((DATA / "tasks/squad_v1.1/dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    qa = [t for a in squad for p in a["paragraphs"] for t in (p["context"], *(q["question"] for q in p["qas"]))]
    corpus = [t for f in sorted((DATA / "corpus/en").glob("*.txt")) for t in _lines(f)]
    return {"sst2": sst2, "squad": qa, "corpus": corpus}


def chinese() -> dict[str, list[str]]:
    senti = [json.loads(line)["评论"] for line in _lines(DATA / "generic/chnsenticorp_train.jsonl")]
    cmrc = json.loads((DATA / "tasks/cmrc2018/squad-style-data/cmrc2018_dev.json").read_text(encoding="utf-8"))
    qa = [t for a in cmrc["data"] for p in a["paragraphs"] for t in (p["context"], *(q["question"] for q in p["qas"]))]
    corpus = [t for f in sorted((DATA / "corpus/zh").glob("*.txt")) for t in _lines(f)]
    return {"chnsenticorp": senti, "cmrc2018": qa, "corpus": corpus}


@pytest.mark.parametrize("compat", ["original", "transformers"])
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("fast", [True, False])
def test_hf_tokenizer_gives_albertlms_ids_on_the_slices(lang, compat, fast, en_tok_dir, zh_tok_dir, tmp_path):
    tok = load_tokenizer(en_tok_dir if lang == "en" else zh_tok_dir).with_compat(compat)
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path), use_fast=fast)
    for name, texts in (english() if lang == "en" else chinese()).items():
        ours = tok.encode_batch(texts, add_special_tokens=True)
        theirs = hf(texts)["input_ids"]
        differ = [t for t, a, b in zip(texts, ours, theirs, strict=True) if a != b]
        if compat == "transformers" or name != "corpus":
            assert not differ, (name, differ[:3])  # every row of the task slices, and of everything for transformers
        else:
            assert all(ORIGINAL_ONLY.search(t) for t in differ), [t for t in differ if not ORIGINAL_ONLY.search(t)][:3]
    for a, b in zip(texts[:8], texts[8:16], strict=True):  # pairs: [CLS] A [SEP] B [SEP], types 0 then 1
        if not ORIGINAL_ONLY.search(a + b) or compat == "transformers":
            got = hf(a, b)
            assert (got["input_ids"], got["token_type_ids"]) == tok.encode_pair(a, b)


def test_a_folder_with_only_tokenizer_json_loads(en_tok_dir, tmp_path):
    """transformers 5 saves an ALBERT tokenizer as tokenizer.json alone: albertlm reads it with `tokenizers`."""
    load_tokenizer(en_tok_dir).with_compat("transformers").save(tmp_path / "ours")
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "ours"))
    hf.save_pretrained(str(tmp_path / "hf"))
    (tmp_path / "hf" / "spiece.model").unlink(missing_ok=True)
    assert not (tmp_path / "hf" / "spiece.model").exists() and (tmp_path / "hf" / "tokenizer.json").is_file()
    tok = load_tokenizer(tmp_path / "hf")
    texts = english()["sst2"]
    assert tok.encode_batch(texts, add_special_tokens=True) == hf(texts)["input_ids"]
    assert (tok.cls_id, tok.sep_id, tok.pad_id) == (hf.cls_token_id, hf.sep_token_id, hf.pad_token_id)


@pytest.fixture(scope="module")
def classifier(en_tok_dir, tmp_path_factory) -> Path:
    """A tiny classifier fine-tuned 2 steps with --max-seq-length 16, so SST-2 sentences are cut."""
    root = tmp_path_factory.mktemp("hf_pipeline")
    out = root / "run"
    assert main(["finetune", "--task", "sst2", "--data", str(DATA / "tasks/glue_sst2"), "--model", "albert-tiny",
                 "--tokenizer", str(en_tok_dir), "--out", str(out), "--max-steps", "2", "--batch-size", "8",
                 "--max-seq-length", "16", "--limit-eval", "8", "--quiet", "--precision", "fp32",
                 *[f"--set={k}={v}" for k, v in TINY.items()]]) == 0  # fmt: skip
    return out


def test_hf_pipeline_scores_equal_predict_and_truncate_alike(classifier):
    config = json.loads((classifier / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 16
    texts = english()["sst2"][:24]
    rows = Predictor.load(classifier, engine="torch", threads=1, precision="fp32")(texts)
    pipe = transformers.pipeline("text-classification", model=str(classifier), tokenizer=str(classifier),
                                 device="cpu", top_k=None)  # fmt: skip
    for row, got in zip(rows, pipe(texts, truncation=True), strict=True):
        assert {g["label"]: g["score"] for g in got} == pytest.approx(row["probabilities"], abs=1e-5)
    # the folder moves with its tokenizer: an exported copy keeps model_max_length
    copy = classifier.parent / "copy"
    shutil.copytree(classifier, copy)
    load_tokenizer(copy).save(copy)
    assert json.loads((copy / "tokenizer_config.json").read_text())["model_max_length"] == 16


def test_a_model_folder_saved_by_transformers_is_served(classifier, tmp_path):
    """The issue's report: a folder written by transformers 5 (tokenizer.json, no spiece.model) was refused with
    "holds no tokenizer"; it now loads and answers as the albertlm folder it came from."""
    hf_dir = tmp_path / "hf"
    transformers.AutoModelForSequenceClassification.from_pretrained(str(classifier)).save_pretrained(str(hf_dir))
    transformers.AutoTokenizer.from_pretrained(str(classifier)).save_pretrained(str(hf_dir))
    assert not (hf_dir / "spiece.model").exists() and (hf_dir / "tokenizer.json").is_file()
    texts = english()["sst2"][:8]
    want = Predictor.load(classifier, engine="torch", threads=1, precision="fp32", task="sst2",
                          overrides={"max_seq_length": 16})(texts)  # fmt: skip
    got = Predictor.load(hf_dir, engine="torch", threads=1, precision="fp32", task="sst2",
                         overrides={"max_seq_length": 16})(texts)  # fmt: skip
    assert [r["label"] for r in got] == [r["label"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-6)
