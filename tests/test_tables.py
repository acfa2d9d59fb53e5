"""Corpora in tables: Parquet (streamed by row groups), Arrow and a saved `datasets` folder give the same
shards and the same tokenizer as the same text in a text file; row-per-document tables equal JSON lines;
a missing column is one line; fine-tuning's own-data path reads Parquet as it reads CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_data import CORPUS

from albertlm.cli import main
from albertlm.data import InstanceConfig, build_dataset
from albertlm.data.tables import TextColumns
from albertlm.data.tokenizer_training import train_sentencepiece, train_wordpiece
from albertlm.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def documents(lang: str, n: int) -> list[list[str]]:
    path = CORPUS / lang / ("lee_background.txt" if lang == "en" else "peoples_daily_199801.txt")
    docs, doc = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc.append(line)
        elif doc:
            docs.append(doc)
            doc = []
        if len(docs) == n:
            break
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    """The same 25 English documents as a text file, Parquet (row groups of 64 rows), Arrow and datasets."""
    root = tmp_path_factory.mktemp("tables")
    docs = documents("en", 25)
    (root / "corpus.txt").write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    table = pa.table({"doc": [i for i, d in enumerate(docs) for _ in d], "text": [s for d in docs for s in d]})
    pq.write_table(table, root / "corpus.parquet", row_group_size=64)
    with pa.OSFile(str(root / "corpus.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=100)
    out = {"txt": root / "corpus.txt", "parquet": root / "corpus.parquet", "arrow": root / "corpus.arrow"}
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(table).save_to_disk(str(root / "ds"))
    out["datasets"] = root / "ds"
    return out


def shard_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*/*.bin"))}


@pytest.fixture(scope="module")
def tok(corpus, tmp_path_factory):
    return train_sentencepiece([corpus["txt"]], tmp_path_factory.mktemp("tok") / "t", vocab_size=400)


@pytest.mark.parametrize("kind", ["parquet", "arrow", "datasets"])
def test_a_table_builds_the_shards_its_text_file_builds(kind, corpus, tok, tmp_path):
    cfg = dict(cfg=InstanceConfig(max_seq_length=64), mode="static", dupe_factor=2, seed=3)
    text = build_dataset([corpus["txt"]], tok, tmp_path / "txt", **cfg)
    table = build_dataset([corpus[kind]], tok, tmp_path / kind, columns=TextColumns(doc_column="doc"), **cfg)
    assert table["counts"]["documents"] == text["counts"]["documents"] == 25
    assert shard_bytes(tmp_path / kind) == shard_bytes(tmp_path / "txt") != {}


def test_rows_as_documents_equal_json_lines(corpus, tok, tmp_path):
    docs = documents("en", 25)
    texts = [" ".join(d) for d in docs]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"body": t}) + "\n" for t in texts).replace('"body"',
                                                                                                    '"text"'))
    pq.write_table(pa.table({"body": texts}), tmp_path / "c.parquet", row_group_size=7)
    a = build_dataset([tmp_path / "c.jsonl"], tok, tmp_path / "j", seed=1)
    b = build_dataset([tmp_path / "c.parquet"], tok, tmp_path / "p", seed=1, columns=TextColumns(text_column="body"))
    assert a["counts"]["sentences"] == b["counts"]["sentences"] > 25
    assert shard_bytes(tmp_path / "p") == shard_bytes(tmp_path / "j")


def _pieces(folder: Path) -> list[tuple[str, float]]:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(folder / "spiece.model"))
    return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]


def test_tokenizers_trained_on_a_table_equal_those_on_its_text(corpus, tmp_path):
    cols = TextColumns(doc_column="doc")
    train_sentencepiece([corpus["txt"]], tmp_path / "a", vocab_size=300)
    train_sentencepiece([corpus["parquet"]], tmp_path / "b", vocab_size=300, columns=cols)
    assert _pieces(tmp_path / "a") == _pieces(tmp_path / "b")
    train_wordpiece([corpus["txt"]], tmp_path / "c", vocab_size=500, unused_slots=0)
    train_wordpiece([corpus["datasets"]], tmp_path / "d", vocab_size=500, unused_slots=0, columns=cols)
    assert (tmp_path / "c" / "vocab.txt").read_bytes() == (tmp_path / "d" / "vocab.txt").read_bytes()


def test_a_missing_column_is_one_line(corpus, tok, tmp_path, capsys):
    with pytest.raises(DataError, match=r"corpus.parquet: no column 'body' \(it has doc, text\); pass --text-column"):
        build_dataset([corpus["parquet"]], tok, tmp_path / "x", columns=TextColumns(text_column="body"))
    code = main(["tokenizer", "train", "--input", str(corpus["parquet"]), "--out", str(tmp_path / "t"),
                 "--vocab-size", "300", "--doc-column", "paragraph"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no column 'paragraph'" in err and "pass --doc-column" in err and "Traceback" not in err


def test_finetune_reads_parquet_as_it_reads_csv(tmp_path):
    from albertlm.tasks import RowPolicy
    from albertlm.tasks.generic import UserData, read_text

    rows = [("a fine film", "pos"), ("dull, long and loud", "neg"), ("warm", "pos")]
    (tmp_path / "t.csv").write_text("review,stars\n" + "".join(f'"{t}",{y}\n' for t, y in rows), encoding="utf-8")
    pq.write_table(pa.table({"review": [t for t, _ in rows], "stars": [y for _, y in rows]}), tmp_path / "t.parquet")
    data = UserData(text_column="review", label_column="stars")
    csv_rows = read_text(tmp_path / "t.csv", data, RowPolicy())
    parquet_rows = read_text(tmp_path / "t.parquet", data, RowPolicy())
    assert [(e.text_a, e.label) for e in parquet_rows] == [(e.text_a, e.label) for e in csv_rows] == rows
