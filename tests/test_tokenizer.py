"""Tokenizer tests: parity with transformers' AlbertTokenizer / BertTokenizer on the held-out corpora
(``compat="transformers"``), then the interface (special ids, pair template, masks, save/load, errors, CLI).
Parity of ``compat="original"`` with the original code is in ``test_original_parity.py``.

Tiny vocabularies are trained once per session on the corpus slices in tests/data; the `shared` tier
repeats the parity tests with 8000-piece vocabularies on the full held-out corpora in ../shared.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from shared_data import CORPUS, SHARED_CORPUS

from albertlm.data.tokenizer_training import train_sentencepiece, train_wordpiece
from albertlm.tokenizer import SentencePieceTokenizer, WordPieceTokenizer, load_tokenizer, preprocess_text
from albertlm.tokenizer.base import _DIGIT_COMMA

SLICE_LINES = 1500  # per training file of the full corpus: enough for an 8000-piece model, seconds on 2 cores


def _slice(lang: str, out: Path, corpus: Path = CORPUS, lines: int | None = None) -> Path:
    out.mkdir(parents=True)
    for f in sorted((corpus / lang).glob("*.txt")):
        if f.name != "heldout.txt":
            with open(f, encoding="utf-8") as fh:
                (out / f.name).write_text("".join(itertools.islice(fh, lines)), encoding="utf-8")
    return out


def _heldout(lang: str, corpus: Path = CORPUS) -> list[str]:
    text = (corpus / lang / "heldout.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def sp_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sp")
    train_sentencepiece([_slice("en", root / "corpus")], root / "tok", vocab_size=1500, seed=0)
    return root / "tok"


@pytest.fixture(scope="session")
def wp_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wp")
    train_wordpiece([_slice("zh", root / "corpus")], root / "tok", vocab_size=3000)
    return root / "tok"


@pytest.fixture(scope="session")
def sp(sp_dir) -> SentencePieceTokenizer:
    return load_tokenizer(sp_dir)


@pytest.fixture(scope="session")
def wp(wp_dir) -> WordPieceTokenizer:
    return load_tokenizer(wp_dir)


@pytest.fixture(scope="session")
def sp_hf(sp_dir) -> SentencePieceTokenizer:
    return load_tokenizer(sp_dir, compat="transformers")


@pytest.fixture(scope="session")
def wp_hf(wp_dir) -> WordPieceTokenizer:
    return load_tokenizer(wp_dir, compat="transformers")


# --- parity ----------------------------------------------------------------------------------------


def _sentencepiece_parity(sp_dir: Path, lines: list[str], min_lines: int) -> None:
    """compat="transformers" gives exactly transformers' ids; the original behaviour differs only where
    text has a digit before a comma, `` or '' quotes, or <unk> (see test_original_parity.py)."""
    transformers = pytest.importorskip("transformers")
    # transformers' own ALBERT pipeline, built from spiece.model alone as for any HF checkpoint: albertlm's folder
    # also holds a tokenizer.json of its original behaviour, which HF loads instead (see tasks/test_hf_tokenizer.py)
    bare = sp_dir.parent / f"{sp_dir.name}-spiece-only"
    bare.mkdir(exist_ok=True)
    shutil.copyfile(sp_dir / "spiece.model", bare / "spiece.model")
    hf = transformers.AlbertTokenizer.from_pretrained(str(bare))
    sp, sp_hf = load_tokenizer(sp_dir), load_tokenizer(sp_dir, compat="transformers")
    assert len(lines) > min_lines
    assert sp_hf.encode_batch(lines) == [hf.encode(line, add_special_tokens=False) for line in lines]
    pairs = zip(lines, sp.encode_batch(lines), sp_hf.encode_batch(lines), strict=True)
    differ = [line for line, o, h in pairs if o != h]
    assert all(any(x in line for x in ("``", "''", "<unk>")) or _DIGIT_COMMA.search(line) for line in differ)


def _wordpiece_parity(wp_dir: Path, lines: list[str], min_lines: int) -> None:
    transformers = pytest.importorskip("transformers")
    assert len(lines) > min_lines
    ours = load_tokenizer(wp_dir, compat="transformers").encode_batch(lines)
    fast = transformers.BertTokenizer.from_pretrained(str(wp_dir))
    assert ours == [fast.encode(line, add_special_tokens=False) for line in lines]
    # The pure-Python BERT reference (BasicTokenizer + WordpieceTokenizer) on a part of the lines.
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    slow = BertTokenizerLegacy(vocab_file=str(wp_dir / "vocab.txt"))
    assert ours[:1500] == [slow.encode(line, add_special_tokens=False) for line in lines[:1500]]


def test_sentencepiece_parity_with_transformers(sp_dir):
    _sentencepiece_parity(sp_dir, _heldout("en"), 200)


def test_wordpiece_parity_with_transformers(wp_dir):
    _wordpiece_parity(wp_dir, _heldout("zh"), 200)


@pytest.mark.shared
def test_sentencepiece_parity_on_the_full_heldout_corpus(tmp_path):
    train_sentencepiece([_slice("en", tmp_path / "corpus", SHARED_CORPUS, SLICE_LINES)], tmp_path / "tok",
                        vocab_size=8000, seed=0)
    _sentencepiece_parity(tmp_path / "tok", _heldout("en", SHARED_CORPUS), 2000)


@pytest.mark.shared
def test_wordpiece_parity_on_the_full_heldout_corpus(tmp_path):
    train_wordpiece([_slice("zh", tmp_path / "corpus", SHARED_CORPUS, SLICE_LINES)], tmp_path / "tok", vocab_size=8000)
    _wordpiece_parity(tmp_path / "tok", _heldout("zh", SHARED_CORPUS), 5000)



def test_autotokenizer_loads_our_save(sp, wp, sp_dir, wp_dir, tmp_path):
    transformers = pytest.importorskip("transformers")
    for tok, sample in ((sp, "Hello World, this is ALBERT."), (wp, "今天天气很好，ALBERT模型。")):
        tok.save(tmp_path / tok.kind)
        hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path / tok.kind))
        assert hf.encode(sample) == tok.encode(sample)
        a, b = (
            hf("第一句 first", "second 第二句")["input_ids"],
            tok.encode_pair("第一句 first", "second 第二句")[0],
        )
        assert a == b


# --- interface -------------------------------------------------------------------------------------


def test_special_ids_and_layout(sp, wp, sp_hf, wp_hf):
    assert (sp.pad_id, sp.unk_id, sp.cls_id, sp.sep_id, sp.mask_id) == (0, 1, 2, 3, 4)
    assert sp.convert_ids_to_tokens(range(5)) == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    assert (wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id) == (0, 100, 101, 102, 103)
    assert sp.kind == "sentencepiece" and wp.kind == "wordpiece" and sp.vocab_size == 1500
    # transformers: special strings inside text map to their ids (WikiText's <unk>, masked text);
    # original: they are plain text ("[", "mask", "]").
    assert sp_hf.encode("a [MASK] b <unk>", add_special_tokens=False)[1::2] == [sp.mask_id, sp.unk_id]
    assert wp_hf.mask_id in wp_hf.encode("今天[MASK]气")
    assert sp.mask_id not in sp.encode("a [MASK] b", add_special_tokens=False)
    assert wp.mask_id not in wp.encode("今天[MASK]气") and len(wp.tokenize("今天[MASK]气")) > 3


def test_pair_template_and_truncation(sp, wp):
    for tok in (sp, wp):
        a, b = tok.encode("one two three", False), tok.encode("four five", False)
        ids, types = tok.encode_pair("one two three", "four five")
        assert ids == [tok.cls_id, *a, tok.sep_id, *b, tok.sep_id]
        assert types == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        ids, types = tok.encode_pair("word " * 50, "other " * 10, max_length=32)
        # Original _truncate_seq_pair: the longer side gives way (to 15 + 14 of 29 if both are long).
        n_b = min(len(tok.encode("other " * 10, False)), 14)
        assert len(ids) == len(types) == 32 and types.count(1) == n_b + 1
    batch = sp.batch_encode(["short", "a much longer sentence here"], pairs=["x", "y"], return_tensors="pt")
    assert batch["input_ids"].shape == batch["attention_mask"].shape == batch["token_type_ids"].shape
    assert batch["input_ids"][0, batch["attention_mask"][0] == 0].eq(sp.pad_id).all()
    plain = wp.batch_encode(["今天", "今天天气很好"], max_length=5, padding=False)
    assert [len(r) for r in plain["input_ids"]] == [4, 5]


def test_preprocessing_and_digit_comma(sp, sp_hf):
    assert preprocess_text("  Héllo\t  ``WÖRLD''  ") == 'hello "world"'
    assert preprocess_text("  Héllo\t  ``WÖRLD''  ", quotes=False) == "hello ``world''"
    assert preprocess_text("Héllo", lowercase=False) == "Hello"
    assert sp.encode("Héllo WORLD", False) == sp.encode("hello world", False)
    pieces = sp.tokenize("in 1942, and 1,100 men")
    assert "," in pieces and not any(len(p) > 1 and p.endswith(",") and p[-2].isdigit() for p in pieces)
    # the original re-encodes "<digit>," pieces and keeps the "▁" SentencePiece puts before the digits
    glued = [p for p in sp_hf.tokenize("in 1942, and 1,100 men") if len(p) > 1 and p[-1] == "," and p[-2].isdigit()]
    for p in glued:
        assert sp.sp.encode(p[:-1].replace("▁", ""), out_type=str)[0].startswith("▁")


def test_decode_round_trip(sp, wp):
    for line in _heldout("en")[:200]:
        ids = sp.encode(line)
        if sp.unk_id not in ids:
            assert sp.decode(ids) == preprocess_text(line)
    assert wp.decode(wp.encode("今天天气很好，适合出去走走。")) == "今天天气很好，适合出去走走。"
    assert sp.decode(sp.encode("hello"), skip_special_tokens=False) == "[CLS] hello [SEP]"


def test_word_start_mask(sp, wp):
    m = sp.word_start_mask()
    assert m.dtype == np.bool_ and m.shape == (sp.vocab_size,) and m[:5].all()
    pieces = sp.convert_ids_to_tokens(range(sp.vocab_size))
    punct = set('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
    letters = set("abcdefghijklmnopqrstuvwxyz") | punct
    # the original's _is_start_piece_sp: also any piece with a character outside a-z and that punctuation
    want = [p.startswith(("▁", "<")) or p in punct or not set(p.lower()) <= letters for p in pieces]
    assert m[5:].tolist() == want[5:]
    assert any(w and not p.startswith("▁") and any(c.isdigit() for c in p) for p, w in zip(pieces, want, strict=True))
    m = wp.word_start_mask()
    assert m.shape == (wp.vocab_size,) and m[[wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id]].all()
    assert all(m[i] != t.startswith("##") for i, t in enumerate(wp.inv_vocab))


def test_encode_words(wp, sp):
    words = ["今天", "天气", "很好", " ", "ALBERT"]
    ids, starts = wp.encode_words(words)
    assert ids == wp.encode("今天天气很好 ALBERT", add_special_tokens=False)
    assert len(starts) == len(ids) and starts[:6] == [True, False, True, False, True, False] and starts[6]
    ids, starts = sp.encode_words(["hello", "worldliness"])
    assert ids == sp.encode("hello worldliness", False) and starts[0] and sum(starts) == 2


def test_save_load_round_trip(sp, wp, tmp_path):
    for tok in (sp, wp):
        tok.save(tmp_path / tok.kind)
        again = load_tokenizer(tmp_path / tok.kind / tok.file_name)
        assert type(again) is type(tok) and again.lowercase == tok.lowercase
        assert tok.compat == again.compat == "original"  # trained here: the original behaviour
        assert again.encode_batch(_heldout("en")[:50]) == tok.encode_batch(_heldout("en")[:50])
        assert (
            json.loads((tmp_path / tok.kind / "tokenizer_config.json").read_text())["do_lower_case"] is True
        )


def test_compat_is_recorded_and_hf_dirs_default_to_transformers(sp_dir, tmp_path):
    cfg = json.loads((sp_dir / "tokenizer_config.json").read_text())
    assert cfg["albertlm_compat"] == "original"
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "spiece.model").write_bytes((sp_dir / "spiece.model").read_bytes())
    del cfg["albertlm_compat"]
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_tokenizer(hf_dir).compat == "transformers"
    assert load_tokenizer(hf_dir, compat="original").compat == "original"
    assert load_tokenizer(hf_dir).with_compat("original").encode("a 1,2") == load_tokenizer(sp_dir).encode("a 1,2")
    (hf_dir / "tokenizer_config.json").write_text(json.dumps({**cfg, "albertlm_compat": "tf"}))
    with pytest.raises(ValueError, match="albertlm_compat: 'tf' is not a tokenizer behaviour"):
        load_tokenizer(hf_dir)


def test_cased_training_keeps_case(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("".join(f"Alpha Beta gamma {i}\nDELTA epsilon Zeta\n" for i in range(300)))
    tok = train_sentencepiece([f], tmp_path / "cased", vocab_size=60, lowercase=False)
    assert load_tokenizer(tmp_path / "cased").lowercase is False
    assert tok.encode("Alpha", False) != tok.encode("alpha", False)


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_two_identical_trainings_write_identical_bytes(tmp_path, kind):
    """Issue 35, finding 7: spiece.model once recorded its random temporary folder (trainer_spec.model_prefix)."""
    f = tmp_path / "c.txt"
    f.write_text("".join(f"alpha beta gamma {i} delta\nepsilon zeta eta theta {i * 7}\n" for i in range(300)))
    train = train_sentencepiece if kind == "sentencepiece" else train_wordpiece
    kw = {"vocab_size": 80, "num_threads": 1} if kind == "sentencepiece" else {"vocab_size": 200}
    for name in ("a", "b"):
        train([f], tmp_path / name, **kw)
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "b").iterdir()) and len(files) >= 2
    for name in files:
        data = (tmp_path / "a" / name).read_bytes()
        assert data == (tmp_path / "b" / name).read_bytes(), name
        assert str(tmp_path).encode() not in data, f"{name} records where it was trained"


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="neither"):
        load_tokenizer(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a valid SentencePiece"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="lacks the special tokens"):
        load_tokenizer(tmp_path / "vocab.txt")


def test_cli(sp_dir, tmp_path, capsys, monkeypatch):
    from albertlm import cli

    monkeypatch.setattr(cli, "COMMANDS", ["tokenizer"])  # the other commands are not needed here
    assert cli.main(["tokenizer", "encode", "--tokenizer", str(sp_dir), "--text", "Hello", "--pieces"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["ids"][0] == 2 and row["pieces"][-1] == "[SEP]"
    for compat, has_mask in (("original", False), ("transformers", True)):
        argv = ["tokenizer", "encode", "--tokenizer", str(sp_dir), "--text", "a [MASK]", "--compat", compat]
        assert cli.main(argv) == 0
        assert (4 in json.loads(capsys.readouterr().out)["ids"]) is has_mask
    assert cli.main(["tokenizer", "encode", "--tokenizer", str(tmp_path / "nope"), "--text", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["tokenizer", "train", "--input", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "--input" in capsys.readouterr().err
    corpus = tmp_path / "zh"
    corpus.mkdir()
    (corpus / "a.txt").write_text("今天天气很好。\n明天下雨。\n" * 50, encoding="utf-8")
    out = tmp_path / "wp"
    argv = ["tokenizer", "train", "--input", str(corpus), "--out", str(out), "--kind", "wordpiece"]
    assert cli.main([*argv, "--vocab-size", "200"]) == 0
    assert "wrote wordpiece vocab" in capsys.readouterr().out and (out / "vocab.txt").is_file()
