"""Output folders hold the user's files too (issue 14, findings 4, 5 and 8): a build removes only what an
earlier build made, tokenizer training is a pure function of its input, and a model is never trained on
shards whose vocabulary is not its own."""

from __future__ import annotations

import pytest
from conftest import TINY, albertlm, assert_one_line_error, pretrain_args


def test_data_build_removes_only_its_own_earlier_builds(corpus, tok_dir, tmp_path):
    from albertlm.data import BUILD_MARK, InstanceConfig, build_dataset, load_manifest
    from albertlm.tokenizer import load_tokenizer

    out = tmp_path / "shards"
    (out / "shards-mine").mkdir(parents=True)
    (out / "shards-mine" / "keep.txt").write_text("user data")
    (out / ".tmp-notes").mkdir()
    tok, cfg = load_tokenizer(tok_dir), InstanceConfig(max_seq_length=32)
    first = build_dataset([corpus], tok, out, cfg=cfg, seed=1)
    crashed = out / ".tmp-deadbeef0000"  # what a build killed mid-way leaves
    crashed.mkdir()
    (crashed / BUILD_MARK).write_text("deadbeef0000")
    second = build_dataset([corpus], tok, out, cfg=cfg, seed=1)
    assert (out / "shards-mine" / "keep.txt").read_text() == "user data" and (out / ".tmp-notes").is_dir()
    assert not (out / first["shard_dir"]).exists() and not crashed.exists()
    assert sorted(p.name for p in out.iterdir()) == sorted([".tmp-notes", "shards-mine", second["shard_dir"],
                                                            "manifest.json"])
    assert load_manifest(out, verify=True)["build_id"] == second["build_id"]


def test_wordpiece_training_is_deterministic(corpus, tmp_path):
    from albertlm.data.tokenizer_training import train_wordpiece

    vocabs = set()
    for i in range(4):
        train_wordpiece([corpus], tmp_path / str(i), vocab_size=600, unused_slots=0)
        vocabs.add((tmp_path / str(i) / "vocab.txt").read_text())
    assert len(vocabs) == 1


def test_sentencepiece_training_is_deterministic(corpus, tmp_path):
    from albertlm.data.tokenizer_training import train_sentencepiece

    pieces = set()
    for i in range(2):  # the machine's default thread count: no longer the machine's core count
        tok = train_sentencepiece([corpus], tmp_path / str(i), vocab_size=300)
        pieces.add(tuple(tok.convert_ids_to_tokens(list(range(tok.vocab_size)))))
    assert len(pieces) == 1


def test_training_a_second_tokenizer_kind_into_the_same_folder_refuses(corpus, tmp_path):
    out = tmp_path / "tok"
    r = albertlm("tokenizer", "train", "--input", str(corpus), "--out", str(out), "--kind", "sentencepiece",
                 "--vocab-size", "300")
    assert r.returncode == 0, r.stderr[-2000:]
    before = (out / "spiece.model").read_bytes()
    r = albertlm("tokenizer", "train", "--input", str(corpus), "--out", str(out), "--kind", "wordpiece",
                 "--vocab-size", "600")
    assert_one_line_error(r, str(out), "spiece.model")
    assert not (out / "vocab.txt").exists() and (out / "spiece.model").read_bytes() == before
    r = albertlm("tokenizer", "train", "--input", str(corpus), "--out", str(out), "--kind", "sentencepiece",
                 "--vocab-size", "320")  # the same kind again replaces it
    assert r.returncode == 0, r.stderr[-2000:]


def test_init_from_a_model_with_another_vocabulary_refuses(corpus, shards, tmp_path):
    """Same size, other kind: a WordPiece vocabulary cut or padded to the SentencePiece one's size."""
    from albertlm.config import AlbertConfig
    from albertlm.data import load_manifest
    from albertlm.data.tokenizer_training import train_wordpiece
    from albertlm.heads import AlbertForPreTraining
    from albertlm.hf import save_pretrained
    from albertlm.tokenizer import load_tokenizer

    info = load_manifest(shards)["tokenizer"]
    size = info["vocab_size"]
    train_wordpiece([corpus], tmp_path / "wp", vocab_size=size, unused_slots=0, min_frequency=1)
    vocab = (tmp_path / "wp" / "vocab.txt").read_text().splitlines()
    vocab += [f"[unused{i}]" for i in range(size - len(vocab))]
    (tmp_path / "wp" / "vocab.txt").write_text("\n".join(vocab[:size]) + "\n")
    wp = load_tokenizer(tmp_path / "wp")
    assert wp.vocab_size == size and wp.kind != info["kind"]
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-tiny", vocab_size=size, **TINY))
    other, same = tmp_path / "other", tmp_path / "same"
    for d, tok in ((other, wp), (same, load_tokenizer(info["path"]))):
        save_pretrained(model, d)
        tok.save(d)
    r = albertlm(*pretrain_args(shards, tmp_path / "run", "--init-from", str(other), steps=1))
    assert_one_line_error(r, "--init-from", "vocabulary", "wordpiece", "sentencepiece")
    assert not (tmp_path / "run" / "checkpoints").exists()
    r = albertlm(*pretrain_args(shards, tmp_path / "run2", "--init-from", str(same), steps=1))
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("workers", [2])
def test_data_build_is_deterministic_across_worker_counts(corpus, tok_dir, tmp_path, workers):
    from albertlm.data import InstanceConfig, build_dataset
    from albertlm.tokenizer import load_tokenizer

    tok, cfg = load_tokenizer(tok_dir), InstanceConfig(max_seq_length=32)
    digests = []
    for w in (1, workers):
        m = build_dataset([corpus], tok, tmp_path / f"w{w}", cfg=cfg, seed=3, workers=w, chunk_bytes=4096,
                          mode="static")
        digests.append([f["sha256"] for s in m["shards"] for f in s["files"].values()])
    assert digests[0] == digests[1]
