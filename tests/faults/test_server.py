"""The server under hostile input (issue 14, finding 6): a seeded, bounded fuzz of every endpoint of every
served head (random bytes, deep nesting, huge numbers, invalid Unicode, wrong types) answered with JSON 4xx,
never a 500; and a real chunked upload to uvicorn on 127.0.0.1 refused with 413 long before it is read whole."""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from albertlm.deploy.serve import create_app  # noqa: E402

ARCHS = {"AlbertForSequenceClassification": {0: "negative", 1: "positive"},
         "AlbertForTokenClassification": {0: "O", 1: "B-X", 2: "I-X"},
         "AlbertForQuestionAnswering": None, "AlbertForMultipleChoice": None}
LIMIT = 4000


@pytest.fixture(scope="module")
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


def client(model_dir: Path) -> TestClient:
    from albertlm.deploy.inference import Predictor

    predictor = Predictor.load(model_dir, engine="torch", threads=1, overrides={"max_seq_length": 48})
    return TestClient(create_app(predictor, max_items=4, max_request_bytes=LIMIT), raise_server_exceptions=False)


# ---------------------------------------------------------------------------------------------- the fuzz
FIELDS = ["text", "text_b", "texts", "pairs", "inputs", "question", "context", "id", "options", "choices",
          "tokens", "words", "label"]


def _value(rng: random.Random, depth: int = 0):
    kinds = ["str", "int", "float", "bool", "null", "list", "dict", "weird_str", "huge"]
    kind = rng.choice(kinds if depth < 3 else kinds[:5])
    if kind == "str":
        return "".join(rng.choice("abc xyz.,?!é中\t\n") for _ in range(rng.randint(0, 30)))
    if kind == "weird_str":
        return rng.choice(["\ud800", "\udfff x", "\x00", "\u200b" * 50, "[CLS] [SEP] [MASK]", " " * 100, "𝔘𝔫𝔦"])
    if kind == "int":
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30])
    if kind == "float":
        return rng.choice([0.5, -0.0, 1e308, float("inf"), float("nan")])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "huge":
        return "x" * rng.randint(100, 3000)
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {rng.choice(FIELDS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _body(rng: random.Random) -> bytes:
    """One hostile body."""
    kind = rng.randrange(9)
    if kind == 0:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    if kind == 1:  # deep nesting, as lists or objects, closed or not
        n = rng.choice([40, 1000, 100_000 // 2])
        opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
        return (opener * n + "1" + closer * (n if rng.random() < 0.7 else 0)).encode()[: LIMIT - 1]
    if kind == 2:  # huge numbers
        digits = rng.choice([400, 3000, 3900])
        return ('{"texts": [' + "9" * digits + "]}").encode()[:LIMIT]
    if kind == 3:  # invalid UTF-8 inside an otherwise good body
        return b'{"texts": ["good \xc3\x28 \xed\xa0\x80 film"]}'
    if kind == 4:  # JSON escapes of lone surrogates, NUL, and NaN / Infinity literals
        return rng.choice([b'{"texts": ["\\ud800"]}', b'{"text": "\\udfff\\u0000"}', b'{"texts": [NaN]}',
                           b'{"question": "\\ud83d", "context": "x"}', b'{"inputs": [Infinity]}'])
    if kind == 5:  # over the size limit
        return b'{"texts": ["' + b"y" * (LIMIT + rng.randint(1, 5000)) + b'"]}'
    # well-formed JSON with random fields and types of random values
    obj = {rng.choice(FIELDS): _value(rng) for _ in range(rng.randint(0, 4))}
    if kind == 6 and rng.random() < 0.5:
        obj = {"inputs": [obj, _value(rng)]}
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


def _check(r, body: bytes) -> int:
    assert r.status_code < 500, (r.status_code, body[:300], r.text[:500])
    data = r.json()  # always JSON
    if r.status_code >= 400:
        assert set(data) == {"error"} and set(data["error"]) == {"code", "message"}, data
        assert isinstance(data["error"]["message"], str) and data["error"]["message"]
    return r.status_code


@pytest.mark.parametrize("arch", list(ARCHS))
def test_fuzz_every_endpoint_answers_json_4xx_never_500(models, arch):
    c = client(models[arch])
    endpoints = [p for p in c.app.openapi()["paths"] if p.startswith("/v1/")]
    rng = random.Random(f"albertlm-fuzz-{arch}")
    counts: dict[int, int] = {}
    for _ in range(120):
        body = _body(rng)
        for path in endpoints:
            status = _check(c.post(path, content=body, headers={"content-type": "application/json"}), body)
            counts[status] = counts.get(status, 0) + 1
    assert sum(v for k, v in counts.items() if 400 <= k < 500) > 0
    # other methods, paths and content types: JSON errors too
    for r in (c.get("/v1/predict"), c.post("/nope", content=b"{}"), c.put("/health"),
              c.post("/v1/predict", content=b"{}", headers={"content-type": "text/plain"})):
        assert 400 <= _check(r, b"") < 500


def test_deep_nesting_and_huge_integers_are_400_or_422(models):
    c = client(models["AlbertForSequenceClassification"])
    for body in (b"[" * 3000 + b"]" * 3000, b'{"texts": [' + b"1" * 3900 + b"]}",
                 b'{"a":' * 600 + b"1" + b"}" * 600):
        r = c.post("/v1/classify", content=body[:LIMIT])
        assert r.status_code in (400, 413, 422) and "error" in r.json(), r.text


# ---------------------------------------------------------------------------------------------- chunked
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chunked_upload_is_refused_early_with_413(models):
    """A real server on 127.0.0.1: an endless chunked body is answered 413 after about the limit, the
    connection is dropped, and the server goes on answering (it never buffered the body)."""
    uvicorn = pytest.importorskip("uvicorn")
    from albertlm.deploy.inference import Predictor

    predictor = Predictor.load(models["AlbertForSequenceClassification"], engine="torch", threads=1)
    app = create_app(predictor, max_items=4, max_request_bytes=64 * 1024)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.time() + 30
        while not server.started and time.time() < deadline:
            time.sleep(0.05)
        assert server.started
        sent, chunk = 0, b"x" * 16384
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            s.settimeout(0.05)
            response = b""
            while sent < 64 * 1024 * 1024:  # stop by itself: at most 64 MiB, 1000 x the limit
                try:
                    s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    sent += len(chunk)
                except OSError:  # the server closed the connection
                    break
                try:
                    got = s.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not got:
                    break
                response += got
                if b"\r\n\r\n" in response:
                    break
            s.settimeout(5)
            try:
                while b"}}" not in response and (got := s.recv(65536)):
                    response += got
            except OSError:
                pass
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413"), response[:300]
        assert b"body_too_large" in body
        # refused early: well before the sender gave up (a server reading it whole would take all 64 MiB)
        assert sent < 8 * 1024 * 1024, sent
        import httpx

        r = httpx.post(f"http://127.0.0.1:{port}/v1/classify", json={"texts": ["still serving"]}, timeout=30)
        assert r.status_code == 200, r.text
    finally:
        server.should_exit = True
        thread.join(timeout=10)
