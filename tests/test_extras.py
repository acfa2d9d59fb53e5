"""What the default install leaves out: a command that needs an extra says so in one line, naming the extra, before
it writes anything or trains; the same command without that need runs on the default install."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from albertlm.cli import main
from albertlm.errors import MissingDependency

REPO = Path(__file__).resolve().parents[1]
ZH = REPO / "tests" / "data" / "corpus" / "zh" / "peoples_daily_199801.txt"


@pytest.fixture(scope="module")
def zh_tok(tmp_path_factory):
    from albertlm.data.tokenizer_training import train_wordpiece

    out = tmp_path_factory.mktemp("zh") / "tok"
    return out, train_wordpiece([ZH], out, vocab_size=800)


def _without(monkeypatch, *modules: str) -> None:
    """``import m`` raises ImportError for each module, as on an install without its extra."""
    for m in modules:
        for name in [n for n in sys.modules if n == m or n.startswith(m + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, m, None)


def test_wordpiece_build_without_jieba_names_the_extra_and_writes_nothing(zh_tok, tmp_path, monkeypatch, capsys):
    from albertlm.data import build_dataset

    tok_dir, tok = zh_tok
    _without(monkeypatch, "jieba")
    out = tmp_path / "shards"
    with pytest.raises(MissingDependency, match=r"needs jieba: pip install 'albertlm\[chinese\]', or .*-no-whole-word"):
        build_dataset([ZH], tok, out)
    assert not out.exists()
    rc = main(["data", "build", "--input", str(ZH), "--tokenizer", str(tok_dir), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pip install 'albertlm[chinese]'" in err[0], err
    assert not out.exists()
    build_dataset([ZH], tok, out, whole_word_zh=False)  # what the message offers works without jieba
    assert (out / "manifest.json").is_file()


def test_cmrc_scoring_without_nltk_fails_before_any_work(monkeypatch, tmp_path):
    from albertlm.tasks import get_task, metrics
    from albertlm.training.finetune_data import load_data

    metrics._nltk_tokenizers.cache_clear()
    monkeypatch.setattr(metrics, "_nltk_tokenizers", metrics._nltk_tokenizers.__wrapped__)
    _without(monkeypatch, "nltk")
    with pytest.raises(MissingDependency, match=r"CMRC 2018 scoring .*needs nltk: pip install 'albertlm\[chinese\]'$"):
        load_data(get_task("cmrc2018"), tmp_path / "no-data-read-yet")
    metrics.check_scorer(get_task("sst2").metric)  # scorers of the default install need nothing more
