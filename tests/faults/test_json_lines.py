"""predict on hostile JSON lines, and undecodable --text (issue 35, finding 6): a lone surrogate escape, a
5,000-deep nesting and a 5,000-digit integer are one line each naming the file and line (the server answers
them with a JSON 400 already); --skip-bad-rows skips them as it skips bad CSV rows; ``tokenizer encode --text``
with a byte that is not UTF-8 is one line for both tokenizer kinds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import albertlm, assert_one_line_error, finetune_tiny_sst2

from albertlm.cli import main

BAD = {
    "surrogate": '{"text": "a\\ud800b"}',
    "deep": '{"text": ' + "[" * 5000 + "]" * 5000 + "}",
    "digits": '{"text": "a film", "id": ' + "7" * 5000 + "}",
    "deep-but-parsable": '{"text": ' + "[" * 100 + "]" * 100 + "}",
}
NEEDLE = {"surrogate": "lone surrogate", "deep": "nested too deep", "digits": "cannot be read",
          "deep-but-parsable": "nested deeper than 32"}


@pytest.fixture(scope="module")
def model(tok_dir, tmp_path_factory) -> Path:
    return finetune_tiny_sst2(tok_dir, tmp_path_factory.mktemp("json-lines"))


@pytest.mark.parametrize("case", list(BAD))
def test_a_hostile_json_line_is_one_line_naming_file_and_line(model, tmp_path, capsys, case):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "a good film"}\n' + BAD[case] + "\n")
    capsys.readouterr()
    code = main(["predict", "--model", str(model), "--input", str(inp)])
    out, err = capsys.readouterr()
    assert code == 2 and "Traceback" not in err and out == "", (code, err[-2000:])
    line = err.strip().splitlines()[-1]
    assert ": error: " in line and f"{inp}:2" in line and NEEDLE[case] in line and "--skip-bad-rows" in line, line


def test_skip_bad_rows_applies_to_json_lines(model, tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "a good film"}\n' + "\n".join(BAD.values()) + '\n{"text": "a bad film"}\n')
    capsys.readouterr()
    code = main(["predict", "--model", str(model), "--input", str(inp), "--skip-bad-rows"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = [json.loads(x) for x in out.splitlines()]
    assert len(rows) == 2 + len(BAD) and "label" in rows[0] and "label" in rows[-1]
    assert rows[1:-1] == [{}] * len(BAD), "a skipped line keeps its place, as a blank line does"
    assert f"skipped {len(BAD)} bad rows (first: {inp}:2" in err


def test_skip_bad_rows_with_only_bad_lines_is_one_line(model, tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    inp.write_text(BAD["surrogate"] + "\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--input", str(inp), "--skip-bad-rows"]) == 2
    assert "no input lines left (1 bad rows skipped)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def wordpiece_dir(corpus, tmp_path_factory) -> Path:
    from albertlm.data.tokenizer_training import train_wordpiece

    out = tmp_path_factory.mktemp("wp")
    train_wordpiece([corpus], out, vocab_size=300)
    return out


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_tokenizer_encode_text_that_is_not_utf8_is_one_line(tok_dir, wordpiece_dir, kind):
    tok = tok_dir if kind == "sentencepiece" else wordpiece_dir
    r = albertlm("tokenizer", "encode", "--tokenizer", str(tok), "--text", b"ab\xffcd")  # type: ignore[arg-type]
    assert_one_line_error(r, "--text is not UTF-8", "byte 0xff at char 2")
    ok = albertlm("tokenizer", "encode", "--tokenizer", str(tok), "--text", "ab cd")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ids"], ok.stderr
