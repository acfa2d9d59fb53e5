"""The HF Inference API / Text Embeddings Inference routes of ``albertlm serve``: the shape that
``huggingface_hub.InferenceClient(base_url=...)`` and TEI's users send, beside the /v1 routes and behind the same
``Service`` (its Predictor, batch queue, limits, Host and Content-Type rules).

    client = InferenceClient(base_url="http://127.0.0.1:8000/predict")
    client.text_classification("a gripping film")       # [TextClassificationOutputElement(label=..., score=...)]
    client.question_answering(question="who?", context="...")   # a QA model; client.token_classification(text)

``POST /predict`` (also ``POST /`` and ``POST /invocations``, SageMaker's name) takes ``{"inputs": ...,
"parameters": {...}}`` for the served task and answers as the HF Inference API does:

- text-classification: ``inputs`` a text, ``{"text", "text_pair"}``, or a list of them (``[text, text_pair]``
  pairs too); one list of ``{label, score}`` per input, best first, all labels unless ``top_k``; always a list
  of lists (the client takes the first). Scores are the softmax probabilities ``predict`` gives
  (``function_to_apply`` "softmax"); a regression model answers ``{label, score}`` with its raw value ("none").
- token-classification: ``inputs`` a text or a list; per text a list of entities with character offsets. The
  model tags words (a word's first piece), so ``aggregation_strategy`` "none" gives one entry per word
  (``entity``, ``index``) and "simple" / "first" (the default "simple", as the hosted API) group B-/I- runs into
  ``entity_group`` with the mean of the words' scores; ``ignore_labels`` defaults to ["O"].
- question-answering: ``inputs`` ``{"question", "context"}`` or a list; ``{answer, score, start, end}`` each
  (a SQuAD 2.0 model answers "" at 0..0 when the null score wins). The decoding settings are the server's
  (``--doc-stride``, ``--max-answer-length``...): a parameter that asks for another value is refused, naming it.
- a multiple-choice model (no HF task): ``inputs`` the /v1 input objects, answers /v1's rows.

``GET /info`` describes the model (TEI's fields: ``model_id``, ``model_type``, ``max_input_length``,
``max_client_batch_size``); ``GET /metrics`` is Prometheus' text format: requests by route and status, their
latency, and the batches run; ``GET /health`` is /v1's.
"""


import time
from typing import Any

from albertlm.errors import RequestError

PREDICT_PATHS = ("/predict", "/", "/invocations")
PATHS = (*PREDICT_PATHS, "/info", "/metrics")
PIPELINE_TAG = {"classification": "text-classification", "regression": "text-classification",
                "tagging": "token-classification", "qa": "question-answering", "qa_v2": "question-answering",
                "choice": "multiple-choice"}  # fmt: skip
# parameters each task takes; the QA ones that set decoding must equal the server's settings
PARAMETERS = {
    "text-classification": {"top_k", "function_to_apply"},
    "token-classification": {"aggregation_strategy", "ignore_labels", "stride"},
    "question-answering": {"top_k", "align_to_words", "doc_stride", "handle_impossible_answer", "max_answer_len",
                           "max_question_len", "max_seq_len"},
    "multiple-choice": set(),
}  # fmt: skip
QA_SETTINGS = {"doc_stride": "doc_stride", "max_answer_len": "max_answer_length", "max_question_len":
               "max_query_length", "max_seq_len": "max_seq_length", "align_to_words": "align_to_words"}  # fmt: skip


def _same(value: Any, own: Any) -> bool:
    """Equal as JSON values are: true is not 1 and 0 is not false (Python's ``==`` says they are)."""
    return value == own and isinstance(value, bool) == isinstance(own, bool)


def _bad(where: str, message: str, code: str = "invalid_field") -> RequestError:
    return RequestError(422, code, f"{where} {message}")


def _is_pair(x: Any) -> bool:
    return isinstance(x, list) and len(x) == 2 and all(isinstance(t, str) for t in x)


def read_inputs(kind: str, inputs: Any, max_items: int) -> tuple[list[dict], bool]:
    """``inputs`` of an HF request -> (the /v1 input objects, whether it was a list)."""
    batched = isinstance(inputs, list)  # a bare [a, b] is two texts, as the HF API reads it
    items = inputs if batched else [inputs]
    if batched and not items:
        raise _bad("'inputs'", "must not be an empty list")
    if len(items) > max_items:
        raise RequestError(422, "too_many_inputs", f"'inputs' has {len(items)} items; at most {max_items} per request")
    out = []
    for i, x in enumerate(items):
        where = f"'inputs[{i}]'" if batched else "'inputs'"
        if kind in ("classification", "regression"):
            if isinstance(x, str):
                out.append({"text": x})
            elif isinstance(x, dict) and isinstance(x.get("text"), str) and set(x) <= {"text", "text_pair"}:
                if not isinstance(x.get("text_pair", ""), str):
                    raise _bad(where, "'text_pair' must be a string")
                out.append({"text": x["text"], **({"text_b": x["text_pair"]} if "text_pair" in x else {})})
            elif batched and _is_pair(x):
                out.append({"text": x[0], "text_b": x[1]})
            else:
                raise _bad(where, 'must be a text or {"text": ..., "text_pair": ...}' +
                           (" or a [text, text_pair] pair" if batched else ""))  # fmt: skip
        elif kind == "tagging":
            if not isinstance(x, str) or not x.strip():
                raise _bad(where, "must be a non-empty text")
            out.append({"text": x})
        elif kind in ("qa", "qa_v2"):
            if not (isinstance(x, dict) and set(x) == {"question", "context"}
                    and all(isinstance(v, str) and v for v in x.values())):  # fmt: skip
                raise _bad(where, 'must be {"question": ..., "context": ...} with non-empty strings')
            out.append({"id": str(i), **x})
        else:  # choice: the /v1 objects, held to the schema /openapi.json shows for them
            from albertlm.deploy.schema import conforms, input_schemas

            why = conforms(x, {"anyOf": input_schemas("choice")}, where)
            if why is not None:
                raise _bad(where, f'must be {{"context", "question", "options"}} as /v1/predict takes: {why}')
            out.append(x)
    return out, batched


def check_parameters(service: Any, params: Any) -> dict:
    """The request's ``parameters`` for the served task, or a 422 naming the one that does not fit."""
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise _bad("'parameters'", "must be an object")
    p = service.predictor
    task = PIPELINE_TAG[p.kind.name]
    unknown = sorted(set(params) - PARAMETERS[task])
    if unknown:
        raise RequestError(422, "unknown_field", f"'parameters' has unknown field(s) {', '.join(unknown)}; "
                           f"{task} takes {', '.join(sorted(PARAMETERS[task])) or 'none'}")  # fmt: skip
    params = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in params.items() if v is not None}
    top_k = params.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise _bad("'parameters.top_k'", "must be an integer >= 1")
    if task == "text-classification":
        want = "none" if p.kind.name == "regression" else "softmax"
        if params.get("function_to_apply", want) != want:
            raise _bad("'parameters.function_to_apply'", f"must be {want!r}: this model's scores are "
                       f"{'its raw values' if want == 'none' else 'softmax probabilities'}")  # fmt: skip
    if task == "token-classification":
        strategy = params.get("aggregation_strategy", "simple")
        if strategy not in ("none", "simple", "first"):
            raise _bad("'parameters.aggregation_strategy'", f"{strategy!r}: use none, simple or first (the model "
                       "tags each word by its first piece, so max and average have nothing to choose from)")
        ignore = params.get("ignore_labels", ["O"])
        if not isinstance(ignore, list) or not all(isinstance(t, str) for t in ignore):
            raise _bad("'parameters.ignore_labels'", "must be a list of labels")
        if "stride" in params:
            raise _bad("'parameters.stride'", "is not supported: a text longer than --max-seq-length is cut")
    if task == "question-answering":
        if top_k not in (None, 1):
            raise _bad("'parameters.top_k'", "must be 1: this server answers the best span of each question")
        for name, setting in QA_SETTINGS.items():
            value, own = params.get(name), getattr(p.settings, setting)
            if value is not None and not _same(value, own):
                raise _bad(f"'parameters.{name}'", f"is {own!r} on this server (--{setting.replace('_', '-')}; "
                           "start it with another value to change it)")  # fmt: skip
        impossible = params.get("handle_impossible_answer")
        if impossible is not None and not _same(impossible, p.kind.name == "qa_v2"):
            raise _bad("'parameters.handle_impossible_answer'", f"must be {p.kind.name == 'qa_v2'}: this "
                       f"{'SQuAD 2.0' if p.kind.name == 'qa_v2' else 'SQuAD 1.1'} model "
                       f"{'answers no-answer when its null score wins' if p.kind.name == 'qa_v2' else 'always answers a span'}")  # fmt: skip  # noqa: E501
    return params


def word_offsets(text: str, words: list[str]) -> list[tuple[int, int]]:
    """Each word's [start, end) in ``text`` (the words were cut from it in order)."""
    out, pos = [], 0
    for w in words:
        k = text.find(w, pos)
        k = pos if k < 0 else k
        out.append((k, k + len(w)))
        pos = k + len(w)
    return out


def entities(text: str, row: dict, strategy: str, ignore: list[str]) -> list[dict]:
    """A tagging row -> HF's token-classification entities (per word, or B-/I- runs grouped)."""
    words = zip(row["tokens"], row["tags"], row["scores"], word_offsets(text, row["tokens"]), strict=True)
    per = [{"entity": tag, "score": score, "index": i, "word": w, "start": a, "end": b}
           for i, (w, tag, score, (a, b)) in enumerate(words)]  # fmt: skip
    if strategy == "none":
        return [e for e in per if e["entity"] not in ignore]
    groups: list[dict] = []
    for e in per:  # HF's group_entities: a run continues while the type stays and no B- starts a new one
        bio, _, kind = e["entity"].partition("-") if e["entity"][:2] in ("B-", "I-") else ("I", "", e["entity"])
        if groups and bio == "I" and groups[-1]["type"] == kind:
            groups[-1]["words"].append(e)
        else:
            groups.append({"type": kind, "words": [e]})
    out = []
    for g in groups:
        scores = [e["score"] for e in g["words"] if e["score"] is not None]
        a, b = g["words"][0]["start"], g["words"][-1]["end"]
        out.append({"entity_group": g["type"], "score": sum(scores) / len(scores) if scores else None,
                    "word": text[a:b], "start": a, "end": b})  # fmt: skip
    return [e for e in out if e["entity_group"] not in ignore]


def answer(service: Any, items: list[dict], rows: list[dict], params: dict) -> list[Any]:
    """/v1 rows -> the HF task's answer per input."""
    p = service.predictor
    kind = p.kind.name
    if kind == "classification":
        k = params.get("top_k")
        return [[{"label": lab, "score": s} for lab, s in sorted(r["probabilities"].items(), key=lambda x: -x[1])][:k]
                for r in rows]  # fmt: skip
    if kind == "regression":
        return [[{"label": str(p.config.id2label.get(0, "LABEL_0")), "score": r["value"]}] for r in rows]
    if kind == "tagging":
        strategy, ignore = params.get("aggregation_strategy", "simple"), params.get("ignore_labels", ["O"])
        return [entities(x["text"], r, strategy, ignore) for x, r in zip(items, rows, strict=True)]
    if kind in ("qa", "qa_v2"):
        return [{"answer": r["answer"], "score": r["score"], "start": r["start"] or 0, "end": r["end"] or 0}
                for r in rows]  # fmt: skip
    return rows


def info(service: Any, model_name: str) -> dict[str, Any]:
    """TEI's /info fields for this model."""
    import albertlm

    p = service.predictor
    labels = p.labels
    model_type = {"classifier": {"id2label": dict(enumerate(labels))}} if labels and p.kind.name != "tagging" else {
        p.kind.name: {"labels": labels}}  # fmt: skip
    return {"model_id": model_name, "model_type": model_type, "pipeline_tag": PIPELINE_TAG[p.kind.name],
            "architecture": p.engine.architecture, "engine": p.engine.name,
            "max_input_length": p.settings.max_seq_length, "max_client_batch_size": service.max_items,
            "max_request_bytes": service.max_request_bytes, "max_batch": service.batcher.settings.max_batch,
            "version": albertlm.__version__}  # fmt: skip


# --------------------------------------------------------------------------- Prometheus
def route_label(path: str, model_name: str) -> str:
    """A bounded label for a request path: the served routes by name, v2's by their template, else 'other'."""
    if path.startswith("/v2/models/"):
        rest = path[len("/v2/models/"):].split("/")
        tail = "/".join(rest[1:])
        tail = "/".join(["versions", "{version}", *rest[3:]]) if rest[1:2] == ["versions"] else tail
        return "/v2/models/{name}" + (f"/{tail}" if tail else "")
    known = {*PATHS, "/health", "/stats", "/openapi.json", "/v2", "/v2/health/live", "/v2/health/ready"}
    return path if path in known or path.startswith("/v1/") and path.count("/") == 2 else "other"


class Metrics:
    """ASGI middleware and collector: every request's route, status and latency, and the batcher's counts."""

    def __init__(self, app: Any, service: Any, model_name: str, registry: Any):
        from prometheus_client import Counter, Histogram

        self.app, self.service, self.model_name = app, service, model_name
        self.requests = Counter("albertlm_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=registry)  # fmt: skip
        self.latency = Histogram("albertlm_request_duration_seconds", "time from request to response, by route",
                                 ["route"], registry=registry)  # fmt: skip

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, start, status = route_label(scope["path"], self.model_name), time.perf_counter(), [500]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.requests.labels(route, str(status[0])).inc()
            self.latency.labels(route).observe(time.perf_counter() - start)


class _BatchCollector:
    """The batcher's counters and the model's state, read at scrape time."""

    def __init__(self, service: Any):
        self.service = service

    def collect(self):  # noqa: ANN201
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        st = self.service.batcher.stats
        for key, what in (("batches", "forward passes run"), ("requests", "requests answered by those passes"),
                          ("examples", "inputs answered by those passes")):  # fmt: skip
            yield CounterMetricFamily(f"albertlm_batch_{key}", what, value=st[key])
        yield GaugeMetricFamily("albertlm_healthy", "1 while the model answers, 0 once it computed NaN",
                                value=0 if self.service.failure else 1)  # fmt: skip


def mount(app: Any, service: Any, model_name: str) -> None:
    """Add the HF / TEI routes and /metrics to ``app`` (``serve.create_app`` calls this)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from albertlm.deploy.serve import read_body

    registry = CollectorRegistry()  # one per app: two servers in one process keep their own counts
    registry.register(_BatchCollector(service))
    app.add_middleware(Metrics, service=service, model_name=model_name, registry=registry)
    kind = service.predictor.kind.name
    task = PIPELINE_TAG[kind]

    async def predict(request: Request) -> JSONResponse:
        body = service.parse(await read_body(request, service.max_request_bytes), {"inputs", "parameters"})
        if "inputs" not in body:
            raise _bad("body", f"lacks 'inputs' ({task}: {_INPUT_HELP[task]})")
        params = check_parameters(service, body.get("parameters"))
        items, batched = read_inputs(kind, body["inputs"], service.max_items)
        answers = answer(service, items, await service.rows(items), params)
        return JSONResponse(answers if batched or task == "text-classification" else answers[0])

    async def get_info() -> dict[str, Any]:
        return info(service, model_name)

    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    error = {"application/json": {"schema": service.schemas["error"]}}
    body_schema = {"type": "object", "required": ["inputs"], "additionalProperties": False,
                   "properties": {"inputs": {**input_schema(service), "description": _INPUT_HELP[task]},
                                  "parameters": parameters_schema(service)}}  # fmt: skip
    for path in PREDICT_PATHS:
        app.add_api_route(path, predict, methods=["POST"], summary=f"{task} in the HF Inference API shape",
                          openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                              "schema": body_schema}}}, "responses": {"4XX": {"description": "a rejected request",
                                                                              "content": error}}})  # fmt: skip
    app.add_api_route("/info", get_info, methods=["GET"], summary="the model served (TEI's /info)")
    app.add_api_route("/metrics", metrics, methods=["GET"], summary="Prometheus metrics (text format)",
                      response_class=Response)  # fmt: skip


def input_schema(service: Any) -> dict:
    """What ``read_inputs`` takes for the served kind, as JSON Schema (one input, or a list of 1 to max_items)."""
    kind, s, nonblank = service.predictor.kind.name, {"type": "string"}, {"type": "string", "pattern": "\\S"}
    text = {"type": "string", "minLength": 1}
    one = {
        "classification": [s, {"type": "object", "required": ["text"], "additionalProperties": False,
                               "properties": {"text": s, "text_pair": s}}],
        "tagging": [nonblank],
        "qa": [{"type": "object", "required": ["question", "context"], "additionalProperties": False,
                "properties": {"question": text, "context": text}}],
    }  # fmt: skip
    one["regression"], one["qa_v2"] = one["classification"], one["qa"]
    if kind == "choice":
        from albertlm.deploy.schema import input_schemas

        one["choice"] = input_schemas("choice")
    texts = kind in ("classification", "regression")
    pair = [{"type": "array", "items": s, "minItems": 2, "maxItems": 2}] if texts else []
    batch = {"type": "array", "minItems": 1, "maxItems": service.max_items, "items": {"anyOf": one[kind] + pair}}
    return {"anyOf": [*one[kind], batch]}


def parameters_schema(service: Any) -> dict:
    """The parameters ``check_parameters`` accepts for the served task (each may also be null)."""
    p = service.predictor
    task = PIPELINE_TAG[p.kind.name]
    props: dict[str, dict] = {}
    if task == "text-classification":
        props = {"top_k": {"type": "integer", "minimum": 1},
                 "function_to_apply": {"enum": ["none" if p.kind.name == "regression" else "softmax"]}}
    elif task == "token-classification":
        props = {"aggregation_strategy": {"enum": ["none", "simple", "first"]},
                 "ignore_labels": {"type": "array", "items": {"type": "string"}}}
    elif task == "question-answering":
        props = {"top_k": {"enum": [1]}, "handle_impossible_answer": {"enum": [p.kind.name == "qa_v2"]},
                 **{name: {"enum": [getattr(p.settings, setting)]} for name, setting in QA_SETTINGS.items()}}
    props = {k: {"anyOf": [v, {"type": "null"}]} for k, v in props.items()}
    return {"anyOf": [{"type": "object", "properties": props, "additionalProperties": False}, {"type": "null"}],
            "description": f"{task} parameters: {', '.join(sorted(props)) or 'none'}"}  # fmt: skip


_INPUT_HELP = {
    "text-classification": 'a text, {"text", "text_pair"}, or a list of them',
    "token-classification": "a text or a list of texts",
    "question-answering": '{"question", "context"} or a list of them',
    "multiple-choice": '{"context", "question", "options"} or a list of them',
}
