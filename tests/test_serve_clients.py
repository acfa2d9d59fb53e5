"""The clients users already have against a real ``albertlm serve`` on 127.0.0.1 (issue 45): huggingface_hub's
InferenceClient on the HF Inference / TEI routes and tritonclient on the Open Inference Protocol v2, each answer
equal to the Predictor's (what ``albertlm predict`` prints) on the same model; /info, /metrics; and the same
limits, Host and Content-Type rules as /v1."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
hub = pytest.importorskip("huggingface_hub")
triton = pytest.importorskip("tritonclient.http")
httpx = pytest.importorskip("httpx")

from test_export import deploy_artifacts, sst2  # noqa: E402

from albertlm.deploy.inference import Predictor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
ARGS = ["--engine", "torch", "--precision", "fp32", "--threads", "1", "--max-items", "8", "--max-request-bytes",
        "20000"]  # fmt: skip


@contextlib.contextmanager
def serve(model: Path, name: str):  # noqa: ANN201
    """``albertlm serve`` in a subprocess on a free port; yields (base URL, the Predictor it serves)."""
    proc = subprocess.Popen([sys.executable, "-m", "albertlm", "serve", "--model", str(model), "--port", "0",
                             "--model-name", name, *ARGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ENV)  # fmt: skip
    try:
        line = proc.stdout.readline()
        port = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert port, line + proc.stdout.read()
        predictor = Predictor.load(model, engine="torch", threads=1, precision="fp32")
        yield f"http://127.0.0.1:{port.group(1)}", predictor
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def classifier():  # noqa: ANN201
    with serve(deploy_artifacts()["AlbertForSequenceClassification"], "sst2") as server:
        yield server


@pytest.fixture(scope="module")
def tagger():  # noqa: ANN201
    with serve(deploy_artifacts()["AlbertForTokenClassification"], "ner") as server:
        yield server


@pytest.fixture(scope="module")
def reader():  # noqa: ANN201
    with serve(deploy_artifacts()["AlbertForQuestionAnswering"], "squad") as server:
        yield server


TEXTS = sst2("dev.tsv", 4)[0]
CONTEXT = ("Super Bowl 50 was an American football game played in 2015 at Levi's Stadium in Santa Clara, "
           "California, to determine the champion of the National Football League.")  # fmt: skip
QUESTIONS = ["Where was the game played?", "When was Super Bowl 50 played?"]


# --------------------------------------------------------------------------- HF Inference / TEI
@pytest.mark.parametrize("path", ["/predict", "/", "/invocations"])
def test_inference_client_text_classification_equals_predict(classifier, path):
    url, predictor = classifier
    client = hub.InferenceClient(base_url=url + path)
    for text, row in zip(TEXTS, predictor(TEXTS), strict=True):
        got = client.text_classification(text)
        want = sorted(row["probabilities"].items(), key=lambda x: -x[1])
        assert [g.label for g in got] == [lab for lab, _ in want]
        assert [g.score for g in got] == pytest.approx([s for _, s in want], abs=1e-6)
    assert [g.label for g in client.text_classification(TEXTS[0], top_k=1)] == [predictor(TEXTS[:1])[0]["label"]]


def test_hf_batches_and_pairs(classifier):
    url, predictor = classifier
    rows = predictor([*TEXTS[:2], (TEXTS[2], TEXTS[3])])
    r = httpx.post(url + "/predict", json={"inputs": [TEXTS[0], {"text": TEXTS[1]}, [TEXTS[2], TEXTS[3]]]})
    assert r.status_code == 200, r.text
    for got, row in zip(r.json(), rows, strict=True):
        assert {g["label"]: g["score"] for g in got} == pytest.approx(row["probabilities"], abs=1e-6)
    r = httpx.post(url + "/predict", json={"inputs": {"text": TEXTS[2], "text_pair": TEXTS[3]}})
    assert r.json()[0][0]["label"] == rows[2]["label"]


def test_inference_client_question_answering_equals_predict(reader):
    url, predictor = reader
    client = hub.InferenceClient(base_url=url + "/predict")
    rows = predictor([(q, CONTEXT) for q in QUESTIONS])
    for q, row in zip(QUESTIONS, rows, strict=True):
        got = client.question_answering(question=q, context=CONTEXT)
        assert (got.answer, got.start, got.end) == (row["answer"], row["start"], row["end"])
        assert got.score == pytest.approx(row["score"], abs=1e-6) and 0 <= got.score <= 1
        assert CONTEXT[got.start : got.end] == got.answer
    with pytest.raises(hub.errors.HfHubHTTPError, match="max_answer_len"):
        client.question_answering(question=QUESTIONS[0], context=CONTEXT, max_answer_len=3)
    assert client.question_answering(question=QUESTIONS[0], context=CONTEXT, align_to_words=True).answer == rows[0][
        "answer"]  # fmt: skip


def test_inference_client_token_classification_equals_predict(tagger):
    url, predictor = tagger
    client = hub.InferenceClient(base_url=url + "/predict")
    text = TEXTS[0]
    row = predictor.tag([text])[0]
    words = client.token_classification(text, aggregation_strategy="none", ignore_labels=[])
    assert [w.word for w in words] == row["tokens"]
    assert [w.entity for w in words] == row["tags"]
    assert [w.score for w in words] == pytest.approx(row["scores"], abs=1e-6)
    assert all(text[w.start : w.end] == w.word for w in words)
    groups = client.token_classification(text)  # the default: B-/I- runs grouped, "O" left out
    tagged = [w for w in words if w.entity != "O"]
    assert sum(len(g.word.split()) for g in groups) == len(tagged)
    assert all(g.entity_group == "X" and text[g.start : g.end] == g.word for g in groups)
    starts = [w.start for w in tagged if w.entity == "B-X" or w.start == min(t.start for t in tagged)]
    assert len(groups) >= len([w for w in tagged if w.entity == "B-X"]) and groups[0].start in starts


def test_info_health_metrics(classifier):
    url, predictor = classifier
    info = httpx.get(url + "/info").json()
    assert info["model_id"] == "sst2" and info["pipeline_tag"] == "text-classification"
    assert info["model_type"] == {"classifier": {"id2label": {"0": "negative", "1": "positive"}}}
    assert info["max_input_length"] == predictor.settings.max_seq_length and info["max_client_batch_size"] == 8
    assert httpx.get(url + "/health").json()["status"] == "ok"
    httpx.post(url + "/predict", json={"inputs": "a"})
    httpx.post(url + "/predict", json={"input": "a"})
    metrics = httpx.get(url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert re.search(r'albertlm_requests_total\{route="/predict",status="200"\} [1-9]', text)
    assert re.search(r'albertlm_requests_total\{route="/predict",status="422"\} [1-9]', text)
    assert re.search(r"albertlm_batch_examples_total [1-9]", text) and "albertlm_healthy 1.0" in text
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert {"/predict", "/", "/invocations", "/info", "/metrics", "/v2/models/{name}/infer"} <= set(paths)


@pytest.mark.parametrize("body, status, words", [
    ({"input": "a"}, 422, ["input", "inputs"]),
    ({"inputs": []}, 422, ["'inputs'", "empty"]),
    ({"inputs": 3}, 422, ["'inputs'", "text"]),
    ({"inputs": ["a"] * 9}, 422, ["'inputs'", "at most 8"]),
    ({"inputs": "a", "parameters": {"topk": 1}}, 422, ["topk", "top_k"]),
    ({"inputs": "a", "parameters": {"function_to_apply": "sigmoid"}}, 422, ["function_to_apply", "softmax"]),
])  # fmt: skip
def test_hf_bad_requests_name_the_field(classifier, body, status, words):
    r = httpx.post(classifier[0] + "/predict", json=body)
    assert r.status_code == status, r.text
    assert all(w in r.json()["error"]["message"] for w in words), r.text


def test_hf_routes_keep_the_servers_rules(classifier):
    url = classifier[0]
    r = httpx.post(url + "/predict", content=b'{"inputs": "a"}', headers={"content-type": "text/plain"})
    assert r.status_code == 415
    r = httpx.post(url + "/predict", json={"inputs": "a"}, headers={"host": "evil.example"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_host"
    r = httpx.post(url + "/predict", json={"inputs": "x" * 30000})
    assert r.status_code == 413


# --------------------------------------------------------------------------- Open Inference Protocol v2
def _text(name: str, values: list[str], binary: bool = True):  # noqa: ANN202
    t = triton.InferInput(name, [len(values)], "BYTES")
    t.set_data_from_numpy(np.array(values, dtype=object), binary_data=binary)
    return t


def test_tritonclient_classification_equals_predict(classifier):
    url, predictor = classifier
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready("sst2")
    meta = client.get_model_metadata("sst2")
    assert [i["name"] for i in meta["inputs"]] == ["text", "text_b"]
    assert {"label", "score", "probabilities", "result"} <= {o["name"] for o in meta["outputs"]}
    assert client.get_server_metadata()["extensions"] == ["binary_tensor_data"]
    rows = predictor(TEXTS)
    result = client.infer("sst2", [_text("text", TEXTS)])  # tritonclient's default: binary inputs, JSON outputs
    assert [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("label")] == [r["label"] for r in rows]
    assert result.as_numpy("score") == pytest.approx([r["score"] for r in rows], abs=1e-6)
    probs = [[r["probabilities"][lab] for lab in ("negative", "positive")] for r in rows]
    assert result.as_numpy("probabilities") == pytest.approx(np.array(probs), abs=1e-6)
    wanted = [triton.InferRequestedOutput("score", binary_data=True), triton.InferRequestedOutput("label")]
    binary = client.infer("sst2", [_text("text", TEXTS[:2]), _text("text_b", TEXTS[2:])], outputs=wanted)
    pairs = predictor(list(zip(TEXTS[:2], TEXTS[2:], strict=True)))
    assert binary.as_numpy("score").dtype == np.float32
    assert binary.as_numpy("score") == pytest.approx([r["score"] for r in pairs], abs=1e-6)
    assert binary.as_numpy("probabilities") is None  # not asked for
    json_only = client.infer("sst2", [_text("text", TEXTS[:1], binary=False)],
                             headers={"Content-Type": "application/json"})  # fmt: skip
    assert json_only.as_numpy("score") == pytest.approx([rows[0]["score"]], abs=1e-6)


def test_tritonclient_question_answering_equals_predict(reader):
    url, predictor = reader
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    rows = predictor([(q, CONTEXT) for q in QUESTIONS])
    result = client.infer("squad", [_text("question", QUESTIONS), _text("context", [CONTEXT] * 2)])
    answers = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("answer")]
    assert answers == [r["answer"] for r in rows]
    assert list(result.as_numpy("start")) == [r["start"] for r in rows]
    assert result.as_numpy("score") == pytest.approx([r["score"] for r in rows], abs=1e-6)


def test_v2_errors(classifier):
    url = classifier[0]
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    with pytest.raises(triton.InferenceServerException, match="no model 'nope'.*'sst2'"):
        client.infer("nope", [_text("text", ["a"])])
    with pytest.raises(triton.InferenceServerException, match="no input 'sentence'.*text"):
        client.infer("sst2", [_text("sentence", ["a"])])
    with pytest.raises(triton.InferenceServerException, match="at most 8"):
        client.infer("sst2", [_text("text", ["a"] * 9)])
    with pytest.raises(triton.InferenceServerException, match="Content-Type must be application/json"):
        client.infer("sst2", [_text("text", ["a"], binary=False)])  # JSON with no Content-Type: a page could send it
    r = httpx.post(url + "/v2/models/sst2/infer", json={"inputs": [{"name": "text", "shape": [2], "datatype": "BYTES",
                                                                     "data": ["a"]}]})  # fmt: skip
    assert r.status_code == 422 and "holds 2 elements, the data 1" in r.json()["error"]
    r = httpx.post(url + "/v2/models/sst2/infer", content=b"{}", headers={"content-type": "text/plain",
                                                                          "inference-header-content-length": "2"})
    assert r.status_code == 415
    assert httpx.get(url + "/v2/models/sst2/versions/2").status_code == 404
