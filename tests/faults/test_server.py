"""The server under hostile input (issue 14, finding 6): a seeded, bounded fuzz of every endpoint of every
served head (random bytes, deep nesting, huge numbers, invalid Unicode, wrong types) answered with JSON 4xx,
never a 500; and a real chunked upload to uvicorn on 127.0.0.1 refused with 413 long before it is read whole."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from conftest import ARCHS, served  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from albertlm.deploy.serve import create_app  # noqa: E402

LIMIT = 4000


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
        r = c.post("/v1/classify", content=body[:LIMIT], headers={"content-type": "application/json"})
        assert r.status_code in (400, 413, 422) and "error" in r.json(), r.text


# ---------------------------------------------------------------------------------------------- chunked
def test_chunked_upload_is_refused_early_with_413(models):
    """A real server on 127.0.0.1: an endless chunked body is answered 413 after about the limit, the
    connection is dropped, and the server goes on answering (it never buffered the body)."""
    pytest.importorskip("uvicorn")
    from albertlm.deploy.inference import Predictor

    predictor = Predictor.load(models["AlbertForSequenceClassification"], engine="torch", threads=1)
    app = create_app(predictor, max_items=4, max_request_bytes=64 * 1024)
    with served(app) as port:
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


# ---------------------------------------------------------------------------------------------- browsers (issue 35)
BODY = {"AlbertForSequenceClassification": {"text": "a good film"},
        "AlbertForTokenClassification": {"text": "the film is good"},
        "AlbertForQuestionAnswering": {"question": "what is good?", "context": "the film is good"},
        "AlbertForMultipleChoice": {"context": "the film", "question": "is it", "options": ["good", "bad"]}}
JSON = {"content-type": "application/json"}


def local_client(model_dir: Path, **kw) -> TestClient:
    """A client that calls as a browser on this machine does: Host 127.0.0.1:8000."""
    from albertlm.deploy.inference import Predictor
    from albertlm.deploy.serve import default_allowed_hosts

    predictor = Predictor.load(model_dir, engine="torch", threads=1, overrides={"max_seq_length": 48})
    kw.setdefault("allowed_hosts", default_allowed_hosts("127.0.0.1"))
    return TestClient(create_app(predictor, max_items=4, max_request_bytes=LIMIT, **kw),
                      base_url="http://127.0.0.1:8000", raise_server_exceptions=False)


@pytest.fixture(scope="module")
def classifier(models) -> TestClient:
    return local_client(models["AlbertForSequenceClassification"])


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_a_body_that_is_not_application_json_is_415(classifier, ctype):
    """A web page can POST these three types cross-origin with no preflight: none is read."""
    headers = {"content-type": ctype} if ctype else {}
    r = classifier.post("/v1/predict", content=b'{"text": "a good film"}', headers=headers)
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type", r.text
    ok = classifier.post("/v1/predict", content=b'{"text": "a good film"}',
                         headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("host, status", [("127.0.0.1:8000", 200), ("localhost:8000", 200), ("[::1]:8000", 200),
                                          ("localhost", 200), ("evil.example:8000", 400), ("127.0.0.1.evil.example",
                                                                                           400), ("", 400)])
def test_host_must_be_a_name_the_server_answers(classifier, host, status):
    r = classifier.post("/v1/predict", json=BODY["AlbertForSequenceClassification"], headers={"host": host})
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"]["code"] == "invalid_host" and "--allowed-hosts" in r.json()["error"]["message"]
        assert classifier.get("/health", headers={"host": host}).status_code == 400  # every path, GET too


def test_allowed_hosts_for_a_proxy_and_the_defaults(models):
    from albertlm.deploy.serve import default_allowed_hosts

    proxied = local_client(models["AlbertForSequenceClassification"], allowed_hosts=["api.example.com"])
    assert proxied.get("/health", headers={"host": "api.example.com"}).status_code == 200
    assert proxied.get("/health", headers={"host": "127.0.0.1:8000"}).status_code == 400
    anyhost = local_client(models["AlbertForSequenceClassification"], allowed_hosts=["*"])
    assert anyhost.get("/health", headers={"host": "whatever"}).status_code == 200
    assert set(default_allowed_hosts("127.0.0.1")) == {"127.0.0.1", "localhost", "::1"}
    assert default_allowed_hosts("10.1.2.3") == ["10.1.2.3"]
    assert {"127.0.0.1", "localhost", socket.gethostname().lower()} <= set(default_allowed_hosts("0.0.0.0"))


def test_no_cors_grant_unless_asked(models, classifier):
    evil = {"origin": "https://evil.example"}
    r = classifier.post("/v1/predict", json=BODY["AlbertForSequenceClassification"], headers=evil)
    assert r.status_code == 200 and not any(k.lower().startswith("access-control-") for k in r.headers)
    pre = classifier.options("/v1/predict", headers={**evil, "access-control-request-method": "POST",
                                                     "access-control-request-headers": "content-type"})
    assert pre.status_code == 405 and "access-control-allow-origin" not in pre.headers
    granted = local_client(models["AlbertForSequenceClassification"], cors_origins=["https://app.example"])
    app = {"origin": "https://app.example", "access-control-request-method": "POST",
           "access-control-request-headers": "content-type"}
    pre = granted.options("/v1/predict", headers=app)
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
    pre = granted.options("/v1/predict", headers={**app, **evil})
    assert pre.headers.get("access-control-allow-origin") != "https://evil.example"


def test_gzip_bodies_are_decoded_within_the_limit_other_encodings_415(classifier):
    import gzip

    body = json.dumps(BODY["AlbertForSequenceClassification"]).encode()
    plain = classifier.post("/v1/predict", content=body, headers=JSON)
    r = classifier.post("/v1/predict", content=gzip.compress(body), headers={**JSON, "content-encoding": "gzip"})
    assert r.status_code == 200 and r.json() == plain.json(), r.text
    bomb = gzip.compress(b'{"text": "' + b"a" * (LIMIT * 50) + b'"}')  # small on the wire, 200 kB inflated
    assert len(bomb) < LIMIT
    r = classifier.post("/v1/predict", content=bomb, headers={**JSON, "content-encoding": "gzip"})
    assert r.status_code == 413 and "decompressed" in r.json()["error"]["message"]
    r = classifier.post("/v1/predict", content=b"\x1f\x8b not gzip", headers={**JSON, "content-encoding": "gzip"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_gzip"
    r = classifier.post("/v1/predict", content=body, headers={**JSON, "content-encoding": "br"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_encoding"


@pytest.mark.parametrize("method, path, allow", [("TRACE", "/v1/predict", "POST"), ("GET", "/v1/classify", "POST"),
                                                 ("PUT", "/health", "GET"), ("DELETE", "/openapi.json", "GET")])
def test_405_names_the_allowed_methods(classifier, method, path, allow):
    r = classifier.request(method, path)
    assert r.status_code == 405 and allow in r.headers["allow"], (r.status_code, r.headers)
    assert r.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("flag, value, needle", [("--cors-origin", "evil", "--cors-origin 'evil'"),
                                                 ("--cors-origin", "https://a.example/path", "no path"),
                                                 ("--allowed-hosts", "http://x.example/", "--allowed-hosts"),
                                                 ("--allowed-hosts", ",", "--allowed-hosts")])
def test_serve_web_flags_are_checked_before_anything_starts(tmp_path, capsys, flag, value, needle):
    from albertlm.cli import main

    assert main(["serve", "--model", str(tmp_path / "none"), "--port", "0", flag, value]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert ": error: " in line and needle in line, line


# ---------------------------------------------------------------------------------------------- schema = server
def test_each_model_documents_only_its_own_input_shapes_with_list_bounds(models):
    shapes = {"AlbertForSequenceClassification": {"text"}, "AlbertForTokenClassification": {"tokens", "text"},
              "AlbertForQuestionAnswering": {"question", "context", "id"},
              "AlbertForMultipleChoice": {"options", "context", "question"}}
    for arch, model_dir in models.items():
        c = local_client(model_dir)
        spec = c.get("/openapi.json").json()
        schema = spec["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        forms = schema["anyOf"]
        objects = [f for f in forms if "inputs" not in f["properties"]]
        fields = set().union(*(f["properties"] for f in objects))
        assert fields - {"text_b"} == shapes[arch], (arch, fields)
        inputs = next(f for f in forms if "inputs" in f["properties"])["properties"]["inputs"]
        assert (inputs["minItems"], inputs["maxItems"]) == (1, 4)
        assert c.post("/v1/predict", json=BODY[arch]).status_code == 200
        for other, body in BODY.items():  # another head's shape is refused, as its schema says
            if set(body) - shapes[arch] - {"text_b"}:
                r = c.post("/v1/predict", json=body)
                assert r.status_code == 422, (arch, other, r.text)
        for path, op in spec["paths"].items():
            if path.startswith("/v1/") and path != "/v1/predict":
                body_schema = op["post"]["requestBody"]["content"]["application/json"]["schema"]
                if "texts" in body_schema.get("properties", {}):
                    assert body_schema["properties"]["texts"]["minItems"] == 1
                    assert body_schema["properties"]["texts"]["maxItems"] == 4


@pytest.mark.parametrize("arch, path, body, code", [
    ("AlbertForSequenceClassification", "/v1/classify", {"texts": []}, "invalid_field"),
    ("AlbertForSequenceClassification", "/v1/predict", {"inputs": []}, "invalid_field"),
    ("AlbertForSequenceClassification", "/v1/predict", {"text": "a", "text_b": None}, "invalid_field"),
    ("AlbertForSequenceClassification", "/v1/predict", {"inputs": [{"text": "a", "text_b": None}]}, "invalid_field"),
    ("AlbertForSequenceClassification", "/v1/predict", {"text": "a", "label": 1}, "unknown_field"),
    ("AlbertForQuestionAnswering", "/v1/answer", {"id": {"a": [1]}, "question": "q", "context": "c"},
     "invalid_field"),
    ("AlbertForQuestionAnswering", "/v1/predict", {"id": [1], "question": "q", "context": "c"}, "invalid_field"),
    ("AlbertForQuestionAnswering", "/v1/answer", {"id": True, "question": "q", "context": "c"}, "invalid_field"),
    ("AlbertForTokenClassification", "/v1/tag", {"texts": [""]}, "invalid_field"),
])
def test_what_the_schema_refuses_the_server_refuses(models, arch, path, body, code):
    r = local_client(models[arch]).post(path, json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text


@pytest.mark.parametrize("qa_id, echoed", [("q-1", "q-1"), (7, "7")])
def test_qa_ids_are_strings_or_integers(models, qa_id, echoed):
    r = local_client(models["AlbertForQuestionAnswering"]).post(
        "/v1/answer", json={"id": qa_id, "question": "what is good?", "context": "the film is good"})
    assert r.status_code == 200 and r.json()["id"] == echoed, r.text


def test_choice_inputs_with_different_numbers_of_options_share_a_request(models):
    """Found by schemathesis: a body its schema allows, once a 500 (one batch took one number of options)."""
    c = local_client(models["AlbertForMultipleChoice"])
    r = c.post("/v1/predict", json={"inputs": [{"options": ["a", "b"]}, {"options": ["a", "b", "c", "d"]},
                                               {"options": ["x", "y"], "question": "q"}]})
    assert r.status_code == 200, r.text
    assert [len(row["probabilities"]) for row in r.json()["results"]] == [2, 4, 2]
