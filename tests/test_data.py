"""Shards on disk: build determinism, dataset access, collators, packing, bad input and atomicity."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from shared_data import CORPUS, corpus_slice

from albertlm.data import (
    MANIFEST,
    DataFormatError,
    InstanceConfig,
    PackingCollator,
    PretrainingCollator,
    PretrainingDataset,
    build_dataset,
    load_manifest,
)

REPO = Path(__file__).resolve().parents[1]
CFG = InstanceConfig(max_seq_length=128)


@pytest.fixture(scope="module")
def en(tmp_path_factory):
    """A SentencePiece tokenizer trained on a slice, and two small input files."""
    from albertlm.data.tokenizer_training import train_sentencepiece

    d = tmp_path_factory.mktemp("en")
    files = [
        corpus_slice("en", "wikitext2.txt", 120_000, d / "a.txt"),
        corpus_slice("en", "lee_background.txt", 80_000, d / "b.txt"),
    ]
    tok = train_sentencepiece(files, d / "tok", vocab_size=1500, num_threads=1)
    return tok, files


def shard_bytes(out: Path) -> dict[str, bytes]:
    m = json.loads((out / MANIFEST).read_text())
    return {p.name: p.read_bytes() for p in sorted((out / m["shard_dir"]).iterdir())}


def test_static_is_deterministic_across_workers_and_seeds(en, tmp_path):
    tok, files = en
    kw = dict(mode="static", cfg=CFG, dupe_factor=2, chunk_bytes=20_000)
    m1 = build_dataset(files, tok, tmp_path / "w1", workers=1, seed=3, **kw)
    m2 = build_dataset(files, tok, tmp_path / "w2", workers=2, seed=3, **kw)
    build_dataset(files, tok, tmp_path / "s4", workers=1, seed=4, **kw)
    assert len(m1["shards"]) >= 4  # files were chunked into several units
    assert shard_bytes(tmp_path / "w1") == shard_bytes(tmp_path / "w2")
    assert shard_bytes(tmp_path / "w1") != shard_bytes(tmp_path / "s4")
    assert [s["files"] for s in m1["shards"]] == [s["files"] for s in m2["shards"]]
    c = m1["counts"]
    assert 0.13 < c["masked_tokens"] / c["instance_tokens"] < 0.16
    load_manifest(tmp_path / "w1", verify=True)


def test_static_copy_equals_dynamic_epoch(en, tmp_path):
    tok, files = en
    build_dataset(files, tok, tmp_path / "st", mode="static", cfg=CFG, dupe_factor=2, seed=7)
    build_dataset(files, tok, tmp_path / "dy", mode="dynamic", cfg=CFG, seed=7)
    st, dy = PretrainingDataset(tmp_path / "st"), PretrainingDataset(tmp_path / "dy")
    n0 = int(dy.cum[1])  # shard 0 of the dynamic build = copy 0 of static shard 0 (stored first)
    assert abs(len(st) - 2 * len(dy)) < len(dy) * 0.2  # copy 1 re-plans: a similar count
    for i in range(0, n0, 3):
        a, b = st[i], dy[i]
        for k in ("input_ids", "token_type_ids", "labels", "sentence_order_label"):
            assert np.array_equal(a[k], b[k]), k
    # dynamic bytes on disk are token ids only: no dupe_factor blow-up
    assert (
        sum(f["bytes"] for s in dy.manifest["shards"] for f in s["files"].values())
        < sum(f["bytes"] for s in st.manifest["shards"] for f in s["files"].values()) / 2
    )


def test_dynamic_random_access_and_epochs(en, tmp_path):
    tok, files = en
    build_dataset(files, tok, tmp_path / "dy", mode="dynamic", cfg=CFG, seed=1, workers=2, chunk_bytes=60_000)
    ds = PretrainingDataset(tmp_path / "dy")
    order = np.random.default_rng(0).permutation(len(ds))[:50]
    fwd = {int(i): ds[int(i)]["labels"] for i in order}
    for i in reversed(order):  # any order, any worker: same item
        assert np.array_equal(ds[int(i)]["labels"], fwd[int(i)])
    assert np.array_equal(ds[-1]["input_ids"], ds[len(ds) - 1]["input_ids"])
    clone = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker gets
    assert len(pickle.dumps(ds)) < 200_000 and np.array_equal(clone[5]["labels"], ds[5]["labels"])
    with pytest.raises(IndexError):
        ds[len(ds)]
    e0 = [ds[i]["input_ids"] for i in range(20)]
    ds.set_epoch(1)
    e1 = [ds[i]["input_ids"] for i in range(20)]
    assert any(len(a) != len(b) or not np.array_equal(a, b) for a, b in zip(e0, e1, strict=True))
    ds.set_epoch(0)
    assert all(np.array_equal(a, ds[i]["input_ids"]) for i, a in enumerate(e0))
    labels = [ds[i]["sentence_order_label"] for i in range(len(ds))]
    assert 0.35 < np.mean(labels) < 0.7
    loader = torch.utils.data.DataLoader(ds, batch_size=8, collate_fn=PretrainingCollator(tok.pad_id))
    batch = next(iter(loader))
    assert batch["input_ids"].shape[0] == 8


def test_collator_dynamic_padding(en, tmp_path):
    tok, files = en
    build_dataset(files[:1], tok, tmp_path / "d", cfg=InstanceConfig(max_seq_length=128, short_seq_prob=0.5))
    ds = PretrainingDataset(tmp_path / "d")
    items = [ds[i] for i in range(16)]
    lens = [len(x["input_ids"]) for x in items]
    b = PretrainingCollator(pad_id=tok.pad_id)(items)
    s = max(lens)
    assert b["input_ids"].shape == (16, s) and b["input_ids"].dtype == torch.long
    assert b["labels"].dtype == torch.long and b["sentence_order_label"].shape == (16,)
    for r, n in enumerate(lens):
        assert b["attention_mask"][r].tolist() == [1] * n + [0] * (s - n)
        assert (b["input_ids"][r, n:] == tok.pad_id).all() and (b["labels"][r, n:] == -100).all()
        assert b["input_ids"][r, 0] == tok.cls_id
    assert PretrainingCollator(pad_to_multiple_of=64)(items)["input_ids"].shape[1] % 64 == 0


def test_packing_block_mask_and_positions(en, tmp_path):
    tok, files = en
    # many short news documents, each with a random target length: instances of mixed lengths
    build_dataset(files[1:], tok, tmp_path / "d", cfg=InstanceConfig(max_seq_length=128, short_seq_prob=1.0))
    ds = PretrainingDataset(tmp_path / "d")
    items = [ds[i] for i in range(32)]
    b = PackingCollator(128, pad_id=tok.pad_id)(items)
    B, S = b["input_ids"].shape
    assert S == 128 and B < 32 and b["attention_mask"].shape == (B, S, S)
    assert b["attention_mask"].dtype == torch.bool
    assert int((b["labels"] != -100).sum()) == sum(int((x["labels"] != -100).sum()) for x in items)
    sop = b["sentence_order_label"]
    assert sorted(sop[sop != -100].tolist()) == sorted(x["sentence_order_label"] for x in items)
    seen = 0
    for r in range(B):
        cls = [int(c) for c, lab in zip(b["cls_positions"][r], sop[r], strict=True) if lab != -100]
        ends = cls[1:] + [next((p for p in range(cls[-1], S) if b["position_ids"][r, p] == 0 and p > cls[-1]), S)]
        for c, e in zip(cls, ends, strict=True):
            seen += 1
            assert b["input_ids"][r, c] == tok.cls_id
            assert b["position_ids"][r, c:e].tolist() == list(range(e - c))
            blk = b["attention_mask"][r, c:e]
            assert blk[:, c:e].all() and blk.sum() == (e - c) ** 2  # attends exactly its own instance
        used = ends[-1]
        assert (b["input_ids"][r, :used] != tok.pad_id).all()  # no padding between instances
    assert seen == 32


def test_bad_inputs_are_repaired_or_skipped(en, tmp_path):
    tok, _ = en
    d = tmp_path / "in"
    d.mkdir()
    (d / "empty.txt").write_bytes(b"")
    (d / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (d / "crlf.txt").write_bytes(b"The first line here.\r\nAnd the second.\r\n\r\nA doc of one sentence.\r\n")
    (d / "utf8.txt").write_bytes(b"Bad \xff bytes here.\nA NUL\x00 inside.\nMixed \xe4\xb8\xad\xe6\x96\x87 text.\n")
    (d / "huge.txt").write_bytes(b"Word " * 700_000 + b"\n\nLast one. Really.\n")
    (d / "docs.jsonl").write_text('{"text": "One here. Two here."}\n{broken\n', encoding="utf-8")
    m = build_dataset([d], tok, tmp_path / "out", mode="static", cfg=CFG)
    c = m["counts"]
    assert c["empty_files"] == 1 and c["binary_files"] == 1
    assert c["invalid_utf8_lines"] == 1 and c["nul_bytes_removed"] == 1
    assert c["overlong_lines_split"] == 1 and c["overlong_sentences_cut"] >= 1
    assert c["bad_json_lines"] == 1 and c["single_sentence_documents"] >= 1
    assert c["instances"] > 0
    ds = PretrainingDataset(tmp_path / "out")
    assert all(len(ds[i]["input_ids"]) <= 128 for i in range(len(ds)))


def test_missing_or_unreadable_path_is_named(en, tmp_path):
    tok, _ = en
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        build_dataset([tmp_path / "nope.txt"], tok, tmp_path / "out")
    if os.geteuid() != 0:  # root reads everything
        p = tmp_path / "secret.txt"
        p.write_text("a b.\n")
        p.chmod(0)
        with pytest.raises(PermissionError, match="secret.txt"):
            build_dataset([p], tok, tmp_path / "out")
    with pytest.raises(DataFormatError, match="manifest"):
        PretrainingDataset(tmp_path)


def test_failed_build_leaves_nothing_readable(en, tmp_path, monkeypatch):
    tok, files = en
    out = tmp_path / "out"
    build_dataset(files, tok, out, cfg=CFG)
    import albertlm.data.shards as data

    calls = {"n": 0}
    real = data._build_unit

    def dies_on_second(unit):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk full")
        return real(unit)

    monkeypatch.setattr(data, "_build_unit", dies_on_second)
    with pytest.raises(RuntimeError):
        build_dataset(files, tok, out, cfg=CFG, seed=99)
    assert not list(out.glob(".tmp-*"))
    assert PretrainingDataset(out).manifest["settings"]["seed"] != 99  # the old build is intact
    # a shard truncated after the manifest was written is refused
    m = load_manifest(out)
    victim = next((out / m["shard_dir"]).glob("00000.tokens.bin"))
    victim.write_bytes(victim.read_bytes()[:-2])
    with pytest.raises(DataFormatError, match="wrong size"):
        PretrainingDataset(out)


def test_50mb_single_line_is_cut_not_hung(en, tmp_path):
    tok, _ = en
    p = tmp_path / "huge.txt"
    with open(p, "wb") as f:
        f.write(b"Intro line one.\nIntro line two.\n\n")
        for _ in range(50):
            f.write(b"lorem ipsum dolor " * 58_255)  # 50 MB without a newline
        f.write(b"\n\nAfter the line. Still read.\n")
    t0 = time.time()
    m = build_dataset([p], tok, tmp_path / "out", cfg=CFG)
    c = m["counts"]
    assert c["overlong_lines_split"] == 1 and c["overlong_line_bytes_dropped"] > 45_000_000
    assert c["documents"] == 3 and time.time() - t0 < 120
    assert len(PretrainingDataset(tmp_path / "out")) > 0


@pytest.mark.slow
def test_killed_build_leaves_no_manifest(en, tmp_path):
    tok, _ = en
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:  # ~6 MB: the slices forty times over, long enough to be killed mid-build
        for _ in range(40):
            for name in ("wikitext2.txt", "enwiki_excerpt.txt", "lee_background.txt"):
                f.write((CORPUS / "en" / name).read_bytes())
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "albertlm",
            "data",
            "build",
            "--input",
            str(big),
            "--tokenizer",
            str(tok.file.parent),
            "--out",
            str(out),
            "--mode",
            "static",
            "--dupe-factor",
            "5",
            "--max-seq-length",
            "128",
            "--chunk-mb",
            "1",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    time.sleep(4)
    assert proc.poll() is None, "build finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / MANIFEST).exists()
    with pytest.raises(DataFormatError):
        load_manifest(out)


def test_cli_build_and_inspect(en, tmp_path, capsys):
    from albertlm.cli import main

    tok, files = en
    out = tmp_path / "cli"
    rc = main(
        [
            "data",
            "build",
            "--input",
            str(files[1]),
            "--tokenizer",
            str(tok.file.parent),
            "--out",
            str(out),
            "--mode",
            "static",
            "--max-seq-length",
            "64",
            "--task",
            "nsp",
            "--seed",
            "5",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "data build (static)" in text and "instances" in text and str(out) in text
    assert main(["data", "inspect", str(out), "--num", "2"]) == 0
    text = capsys.readouterr().out
    assert "[CLS]" in text and "instance 1" in text
    assert (
        main(
            [
                "data",
                "build",
                "--input",
                str(tmp_path / "missing"),
                "--tokenizer",
                str(tok.file.parent),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    assert "missing" in capsys.readouterr().err
