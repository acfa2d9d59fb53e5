"""file:// URLs for --out and --data (issue 44, finding 2) are the local paths they name, for every command and
the Python API: `data build --out file:///x` wrote into a folder literally named `file:` before. A file URL of
another host is one line."""

from __future__ import annotations

import pytest
from conftest import FINETUNE_FAST, TINY_SET, tiny_sst2_data

from albertlm.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_data_build_and_pretrain_take_file_urls(corpus, tok_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # where a folder named `file:` appeared
    built = tmp_path / "built data"
    assert main(["data", "build", "--input", f"file://{corpus}", "--tokenizer", str(tok_dir), "--out",
                 "file://" + str(built).replace(" ", "%20"), "--max-seq-length", "32", "--seed", "1"]) == 0  # fmt: skip
    assert (built / "manifest.json").is_file() and not (tmp_path / "file:").exists()
    assert main(["data", "inspect", f"file://{built}", "--num", "1"]) == 0
    assert main(["pretrain", "--data", f"file://localhost{built}", "--out", f"file:{tmp_path}/run", "--max-steps",
                 "1", "--global-batch-size", "4", "--micro-batch-size", "4", "--no-progress",
                 *TINY_SET]) == 0  # fmt: skip
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file() and not (tmp_path / "file:").exists()
    assert main(["pretrain", "--out", f"file://{tmp_path}/run", "--resume", "--max-steps", "2"]) == 0


def test_finetune_and_the_api_take_file_urls(tok_dir, tmp_path, monkeypatch):
    import albertlm

    monkeypatch.chdir(tmp_path)
    sst = tiny_sst2_data(tmp_path / "sst")
    assert main(["finetune", "--task", "sst2", "--data", f"file://{sst}", "--model", "albert-tiny", "--tokenizer",
                 f"file://{tok_dir}", "--out", f"file://{tmp_path}/ft", *FINETUNE_FAST, *TINY_SET]) == 0  # fmt: skip
    assert (tmp_path / "ft" / "model.safetensors").is_file()
    tiny = {k.split("=")[1]: int(k.split("=")[2]) for k in TINY_SET}
    albertlm.finetune("sst2", f"file://{sst}", "albert-tiny", f"file://{tmp_path}/api", tokenizer=str(tok_dir),
                      max_steps=1, batch_size=8, max_seq_length=32, progress=False, config_overrides=tiny)
    assert (tmp_path / "api" / "model.safetensors").is_file() and not (tmp_path / "file:").exists()


def test_a_file_url_of_another_host_is_one_line(corpus, tok_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["data", "build", "--input", str(corpus), "--tokenizer", str(tok_dir), "--out",
                 "file://fileserver/shared/data"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "--out file://fileserver/shared/data: a file:// URL names a path on this machine" in err[-1]
    assert not any(tmp_path.iterdir())
