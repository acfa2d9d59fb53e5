"""The HTTP server, in process (FastAPI's TestClient, no network): each endpoint, each 4xx, health."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402
from test_export import deploy_artifacts  # noqa: E402

from albertlm.deploy.inference import Predictor  # noqa: E402
from albertlm.deploy.serve import create_app  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def classify_client() -> TestClient:
    predictor = Predictor.load(deploy_artifacts()["sst2-onnx"], engine="onnx", threads=1,
                               overrides={"eval_batch_size": 4, "max_seq_length": 32})  # fmt: skip
    return TestClient(create_app(predictor, max_items=4, max_request_bytes=2000))


def test_health(classify_client):
    r = classify_client.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "architecture": "AlbertForSequenceClassification", "task": None,
                        "kind": "classification", "engine": "onnx", "labels": ["negative", "positive"]}  # fmt: skip


def test_classify(classify_client):
    r = classify_client.post("/v1/classify", json={"texts": ["a gripping film", "dull and lifeless"]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert len(results) == 2 and results[0]["label"] in ("negative", "positive")
    r = classify_client.post("/v1/classify", json={"texts": [["a", "c"], "b"]})  # a [text, text_b] pair, a text
    assert r.status_code == 200 and len(r.json()["results"]) == 2


@pytest.mark.parametrize(
    "body, status, code",
    [
        (b"\xff\xfe not utf-8", 400, "invalid_utf8"),
        (b'{"texts": [', 400, "invalid_json"),
        (b'["a list"]', 422, "invalid_body"),
        (b'{"text": ["typo"]}', 422, "unknown_field"),
        (b'{"texts": "not a list"}', 422, "invalid_field"),
        (b'{"texts": []}', 422, "invalid_field"),
        (b'{"texts": [1, 2]}', 422, "invalid_field"),
        (b'{"texts": ["a", "b"], "pairs": ["c"]}', 422, "unknown_field"),
        (b'{"texts": [["a", "b", "c"]]}', 422, "invalid_field"),
        (b'{"texts": ["a", "b", "c", "d", "e"]}', 422, "too_many_inputs"),
        (b'{"texts": ["' + b"x" * 3000 + b'"]}', 413, "body_too_large"),
    ],
)
def test_classify_rejects_bad_input(classify_client, body, status, code):
    r = classify_client.post("/v1/classify", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"]


def test_a_null_text_is_named_as_null_not_as_missing(classify_client):
    r = classify_client.post("/v1/predict", json={"inputs": [{"text": "fine"}, {"text": None}]})
    assert r.status_code == 422 and r.json()["error"]["message"] == 'input 1: "text" must be a string, got null'


def test_endpoints_follow_the_head(classify_client):
    r = classify_client.post("/v1/answer", json={"question": "q", "context": "c"})
    assert r.status_code == 404 and "/v1/classify" in r.json()["error"]["message"]
    assert classify_client.get("/v1/classify").status_code == 405

    art = deploy_artifacts()
    tag = TestClient(create_app(Predictor.load(art["AlbertForTokenClassification"], engine="torch")))
    r = tag.post("/v1/tag", json={"texts": ["the film is good"]})
    assert r.status_code == 200 and r.json()["results"][0]["tokens"] == ["the", "film", "is", "good"]

    qa = TestClient(create_app(Predictor.load(art["AlbertForQuestionAnswering"], engine="torch")))
    r = qa.post("/v1/answer", json={"question": "what is good?", "context": "the film is good"})
    assert r.status_code == 200 and set(r.json()) == {"id", "answer", "start", "end", "score"}
    r = qa.post("/v1/answer", json={"question": "", "context": "c"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_field"


def test_a_body_error_names_the_field_the_route_takes(classify_client):
    r = classify_client.post("/v1/predict", json={"texts": ["fine"]})  # /v1/classify's body, sent to /v1/predict
    message = r.json()["error"]["message"]
    assert r.status_code == 422 and '{"inputs": [{"text": ...}, ...]}' in message and "'texts' is the field" in message
    for route, field in (("predict", '"inputs"'), ("classify", '"texts"')):
        r = classify_client.post(f"/v1/{route}", json=["a list"])
        assert r.status_code == 422 and field in r.json()["error"]["message"], r.text


def test_hf_routes_hold_parameters_and_inputs_to_their_schema():
    """What schemathesis found on the HF routes: 0 accepted where the schema says false (Python's 0 == False),
    and a multiple-choice input with a field the schema does not allow."""
    art = deploy_artifacts()
    qa = TestClient(create_app(Predictor.load(art["AlbertForQuestionAnswering"], engine="torch")))
    body = {"inputs": {"question": "what is good?", "context": "the film is good"}}
    assert qa.post("/predict", json={**body, "parameters": {"handle_impossible_answer": False}}).status_code == 200
    for params in ({"handle_impossible_answer": 0}, {"align_to_words": 1}):
        r = qa.post("/predict", json={**body, "parameters": params})
        assert r.status_code == 422 and next(iter(params)) in r.json()["error"]["message"], r.text
    choice = TestClient(create_app(Predictor.load(art["AlbertForMultipleChoice"], engine="torch")))
    item = {"context": "the film", "question": "is it", "options": ["good", "bad"]}
    assert choice.post("/predict", json={"inputs": [item]}).status_code == 200
    r = choice.post("/predict", json={"inputs": [{**item, "extra": 42}]})
    assert r.status_code == 422 and "'inputs[0]'" in r.json()["error"]["message"], r.text
