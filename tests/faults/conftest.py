"""Tiny inputs for the fault tests: a corpus of stdlib docstrings, a SentencePiece tokenizer, dynamic shards,
and helpers to run the CLI in a subprocess and check that a failure is one clear line."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shared_data import docstring_corpus

TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, embedding_size=16, num_hidden_layers=2)
TINY_SET = [f"--set={k}={v}" for k, v in TINY.items()]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:

    root = tmp_path_factory.mktemp("faults-corpus")
    text = root / "corpus.txt"
    docstring_corpus(text, 150)
    return text


@pytest.fixture(scope="session")
def tok_dir(corpus, tmp_path_factory) -> Path:
    from albertlm.data.tokenizer_training import train_sentencepiece

    out = tmp_path_factory.mktemp("faults-tok")
    train_sentencepiece([corpus], out, vocab_size=400, num_threads=1)
    return out


@pytest.fixture(scope="session")
def shards(corpus, tok_dir, tmp_path_factory) -> Path:
    from albertlm.data import InstanceConfig, build_dataset
    from albertlm.tokenizer import load_tokenizer

    out = tmp_path_factory.mktemp("faults-shards") / "shards"
    build_dataset([corpus], load_tokenizer(tok_dir), out, cfg=InstanceConfig(max_seq_length=32), seed=1)
    return out


ARCHS = {"AlbertForSequenceClassification": {0: "negative", 1: "positive"},
         "AlbertForTokenClassification": {0: "O", 1: "B-X", 2: "I-X"},
         "AlbertForQuestionAnswering": None, "AlbertForMultipleChoice": None}


@pytest.fixture(scope="session")
def models(tok_dir, tmp_path_factory) -> dict[str, Path]:
    import torch

    from albertlm.config import AlbertConfig
    from albertlm.heads import HEADS
    from albertlm.tokenizer import load_tokenizer

    root, tok = tmp_path_factory.mktemp("serve-models"), load_tokenizer(tok_dir)
    out = {}
    for arch, labels in ARCHS.items():
        torch.manual_seed(0)
        config = AlbertConfig(vocab_size=tok.vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                              num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                              id2label=labels)
        out[arch] = HEADS[arch].cls(config).save_pretrained(root / arch)
        tok.save(out[arch])
    return out


def pretrain_args(shards: Path, out: Path, *extra: str, steps: int = 4) -> list[str]:
    return ["pretrain", "--data", str(shards), "--out", str(out), "--max-steps", str(steps), "--warmup-steps", "1",
            "--global-batch-size", "4", "--micro-batch-size", "4", "--save-every", "1", "--keep-last", "2",
            "--lr", "5e-3", "--eval-every", "1000", "--log-every", "1", "--no-progress", *TINY_SET, *extra]


def albertlm(*args: str, stdin: bytes | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m albertlm ARGS`` in a subprocess, this checkout's code; text output (bytes in)."""
    r = subprocess.run([sys.executable, "-m", "albertlm", *args], input=stdin, capture_output=True, env=ENV,
                       timeout=timeout)
    r.stdout, r.stderr = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
    return r


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    """A refusal: exit 2, no traceback, the last stderr line is ``albertlm CMD: error: ...`` naming ``needles``."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    line = r.stderr.strip().splitlines()[-1]
    assert ": error: " in line, r.stderr[-3000:]
    for n in needles:
        assert n in line, (n, line)
    return line


FINETUNE_FAST = ["--quiet", "--max-steps", "1", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "32"]


def refused(capsys, code: int, *needles: str) -> str:
    """An in-process ``main()`` that stopped with exit 2 and one ``albertlm CMD: error:`` line (no traceback)
    holding every needle; returns that line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err and ": error: " in err[-1] and "Traceback" not in "\n".join(err), (code, err[-5:])
    for n in needles:
        assert n in err[-1], (n, err[-1])
    return err[-1]


def tiny_sst2_data(root: Path) -> Path:
    """An SST-2-shaped folder of 16 made-up rows (train.tsv = dev.tsv) at ``root``."""
    root.mkdir()
    rows = "".join(f"a {'good' if i % 2 else 'bad'} film {i}\t{i % 2}\n" for i in range(16))
    for name in ("train.tsv", "dev.tsv"):
        (root / name).write_text("sentence\tlabel\n" + rows)
    return root


def finetune_tiny_sst2(tok_dir: Path, root: Path, steps: int = 1) -> Path:
    """A tiny model fine-tuned for ``steps`` steps on ``tiny_sst2_data``, in ``root / "ft"``."""
    from albertlm.cli import main

    out = root / "ft"
    fast = [*FINETUNE_FAST[:2], str(steps), *FINETUNE_FAST[3:]]
    assert main(["finetune", "--task", "sst2", "--data", str(tiny_sst2_data(root / "sst")), "--model",
                 "albert-tiny", "--tokenizer", str(tok_dir), "--out", str(out), *fast, *TINY_SET]) == 0  # fmt: skip
    return out


@contextlib.contextmanager
def served(app):  # noqa: ANN001, ANN201
    """``app`` under a real uvicorn server on 127.0.0.1 (a free port), in a thread; yields the port."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 30
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        assert server.started
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
