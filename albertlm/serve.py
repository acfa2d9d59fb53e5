"""A small HTTP inference server (FastAPI) over a ``Predictor``: JSON in, JSON out, the same answers as
``albertlm predict`` (one code path, ``albertlm.inference``).

    albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
    curl -s localhost:8000/v1/predict -d '{"text": "a gripping, funny film"}'

Endpoints: ``POST /v1/predict`` takes one input object exactly as a ``predict`` JSON line (``{"text",
"text_b"?}``, ``{"question", "context"}``, ``{"tokens"}`` or ``{"text"}``, ``{"context", "question",
"options"}``) or ``{"inputs": [...]}`` of them, and answers ``{"results": [row, ...]}`` with the rows
``predict`` prints (label names, per-word tags, spans with character offsets). Shortcuts by head:
``/v1/classify {"texts", "pairs"?}``, ``/v1/tag {"texts"}``, ``/v1/answer {"question", "context"}`` (one
row). ``GET /health`` always. Long QA contexts are windowed as in evaluation: the limit is on the
request's size, not on context length. The schemas are in ``/openapi.json``.

Every rejected request gets a 4xx with ``{"error": {"code", "message"}}``: 400 malformed body (not UTF-8,
not JSON, a lone surrogate escape in a string), 404 endpoint not served by this model, 413 body over
``max_request_bytes`` (checked while streaming, so a chunked body is never read whole), 422 wrong fields
or too many inputs. Inference runs
in a worker thread under one lock: concurrent requests queue instead of oversubscribing the cores.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from albertlm.errors import DataError, RequestError

if TYPE_CHECKING:
    from albertlm.inference import Predictor

__all__ = ["RequestError", "Service", "create_app"]

MAX_DEPTH = 32  # nesting a request body may have


def _depth(value: Any, limit: int) -> int:
    """How deep ``value`` nests (stopping past ``limit``); refuses strings that are not Unicode text: a JSON
    escape may encode half a surrogate pair (``"\\ud800"``), which no tokenizer can take."""
    stack, deepest = [(value, 1)], 1
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        for text in ([v] if isinstance(v, str) else list(v) if isinstance(v, dict) else []):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as e:
                raise RequestError(400, "invalid_unicode", f"a string holds a lone surrogate escape "
                                   f"({text[e.start]!r} at char {e.start}); send valid Unicode") from None
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


def _string_list(body: dict, key: str, limit: int) -> list[str]:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty list of strings")
    if not all(isinstance(t, str) for t in value):
        raise RequestError(422, "invalid_field", f"every item of '{key}' must be a string")
    if len(value) > limit:
        raise RequestError(422, "too_many_inputs", f"'{key}' has {len(value)} items; at most {limit} per request")
    return value


class Service:
    """Validation and inference, independent of the web framework (so it is testable on its own)."""

    def __init__(self, predictor: Predictor, max_items: int = 32, max_request_bytes: int = 1 << 20):
        self.predictor = predictor
        self.max_items = max_items
        self.max_request_bytes = max_request_bytes
        self.lock = threading.Lock()

    def parse(self, raw: bytes, allowed: set[str] | None = None) -> dict[str, Any]:
        if len(raw) > self.max_request_bytes:
            raise RequestError(413, "body_too_large", f"body is over {self.max_request_bytes} bytes, the limit")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(400, "invalid_utf8", f"body is not valid UTF-8 (byte {e.start})") from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError as e:
            raise RequestError(400, "invalid_json", f"body is not valid JSON: {e.msg} at char {e.pos}") from None
        except (RecursionError, ValueError) as e:  # absurd nesting, or an integer with too many digits
            raise RequestError(400, "invalid_json", f"body cannot be parsed: {str(e)[:120]}") from None
        if not isinstance(body, dict):
            raise RequestError(422, "invalid_body", "body must be a JSON object")
        if _depth(body, MAX_DEPTH) > MAX_DEPTH:
            raise RequestError(422, "invalid_body", f"body is nested deeper than {MAX_DEPTH} levels")
        unknown = sorted(set(body) - allowed) if allowed is not None else []
        if unknown:
            raise RequestError(
                422, "unknown_field", f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
        return body

    def _examples(self, items: list[Any]) -> list[Any]:
        if len(items) > self.max_items:
            raise RequestError(422, "too_many_inputs", f"{len(items)} inputs; at most {self.max_items} per request")
        try:
            return [self.predictor.parse(item, f"input {i}") for i, item in enumerate(items)]
        except DataError as e:
            raise RequestError(422, "invalid_field", str(e)) from None

    def _run(self, examples: list[Any]) -> list[dict[str, Any]]:
        with self.lock:
            return self.predictor.predict(examples)

    def predict(self, raw: bytes) -> dict[str, Any]:
        body = self.parse(raw)
        if "inputs" in body:
            if set(body) != {"inputs"}:
                raise RequestError(422, "unknown_field", "with 'inputs', give no other field")
            items = body["inputs"]
            if not isinstance(items, list) or not items:
                raise RequestError(422, "invalid_field", "'inputs' must be a non-empty list of input objects")
        else:
            items = [body]
        return {"results": self._run(self._examples(items))}

    def classify(self, raw: bytes) -> dict[str, Any]:
        body = self.parse(raw, {"texts", "pairs"})
        texts = _string_list(body, "texts", self.max_items)
        pairs: list[Any] = [None] * len(texts)
        if body.get("pairs") is not None:
            pairs = _string_list(body, "pairs", self.max_items)
            if len(pairs) != len(texts):
                raise RequestError(422, "invalid_field", f"{len(texts)} texts but {len(pairs)} pairs; give one each")
        items = [{"text": a, "text_b": b} for a, b in zip(texts, pairs, strict=True)]
        return {"results": self._run(self._examples(items))}

    def tag(self, raw: bytes) -> dict[str, Any]:
        texts = _string_list(self.parse(raw, {"texts"}), "texts", self.max_items)
        return {"results": self._run(self._examples([{"text": t} for t in texts]))}

    def answer(self, raw: bytes) -> dict[str, Any]:
        body = self.parse(raw, {"id", "question", "context"})
        for key in ("question", "context"):
            if not isinstance(body.get(key), str) or not body[key].strip():
                raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty string")
        return self._run(self._examples([body]))[0]

    def health(self) -> dict[str, Any]:
        p = self.predictor
        return {
            "status": "ok",
            "architecture": p.engine.architecture,
            "task": p.task.name if p.task else None,
            "kind": p.kind.name,
            "engine": p.engine.name,
            "labels": p.labels,
        }


def _schemas() -> dict[str, dict]:
    """Request and response bodies for /openapi.json (validation itself is the task kind's parse)."""
    s = {"type": "string"}
    text = {"type": "object", "properties": {"text": s, "text_b": s}, "required": ["text"]}
    qa = {"type": "object", "properties": {"id": s, "question": s, "context": s}, "required": ["question", "context"]}
    tokens = {"type": "object", "properties": {"tokens": {"type": "array", "items": s}}, "required": ["tokens"]}
    choice = {"type": "object", "properties": {"context": s, "question": s, "options": {"type": "array", "items": s}},
              "required": ["options"]}  # fmt: skip
    one = {"oneOf": [text, qa, tokens, choice, s]}
    row = {
        "type": "object",
        "description": "classification: label, score, probabilities; regression: value; tagging: tokens, tags, "
        "scores (one per word); qa: id, answer, start, end (character offsets), score (+ span, null_score "
        "for SQuAD 2.0); choice: label, option, score, probabilities",
    }
    return {
        "predict": {"oneOf": [one, {"type": "object", "properties": {"inputs": {"type": "array", "items": one}},
                                    "required": ["inputs"]}]},  # fmt: skip
        "classify": {"type": "object", "properties": {"texts": {"type": "array", "items": s},
                                                      "pairs": {"type": "array", "items": s}}, "required": ["texts"]},
        "tag": {"type": "object", "properties": {"texts": {"type": "array", "items": s}}, "required": ["texts"]},
        "answer": qa,
        "results": {"type": "object", "properties": {"results": {"type": "array", "items": row}}},
        "row": row,
        "error": {"type": "object", "properties": {"error": {"type": "object", "properties": {"code": s, "message": s},
                                                             "required": ["code", "message"]}}},  # fmt: skip
    }


def create_app(predictor: Predictor, max_items: int = 32, max_request_bytes: int = 1 << 20) -> Any:
    """The FastAPI app for ``predictor``: /v1/predict, its head's shortcut, /health."""
    from albertlm.inference import require

    fastapi = require("fastapi")
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    service = Service(predictor, max_items, max_request_bytes)
    app = fastapi.FastAPI(title="albertlm", docs_url=None, redoc_url=None)
    app.state.service = service
    schemas = _schemas()
    routes = {"/v1/predict": "predict"}
    if predictor.kind.endpoint:  # the head's shortcut: /v1/classify, /v1/tag or /v1/answer
        routes[f"/v1/{predictor.kind.endpoint}"] = predictor.kind.endpoint

    def error(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(_: Any, e: RequestError) -> JSONResponse:
        return error(e.status, e.code, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Any, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        message = str(e.detail)
        if e.status_code == 404:
            message = f"no such endpoint; this {predictor.kind.name} model serves {', '.join([*routes, '/health'])}"
        return error(e.status_code, code, message)

    @app.exception_handler(Exception)
    async def _bug(_: Any, e: Exception) -> JSONResponse:  # a bug, never the client's fault: still JSON
        return error(500, "internal_error", f"{type(e).__name__}: the server failed on this request")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return service.health()

    async def read_limited(request: Any) -> bytes:
        """The body, refused with 413 as soon as it passes the limit (declared or streamed)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_request_bytes:
            raise RequestError(413, "body_too_large", f"body is {declared} bytes; the limit is {max_request_bytes}")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_request_bytes:
                raise RequestError(413, "body_too_large", f"body is over {max_request_bytes} bytes, the limit")
            chunks.append(chunk)
        return b"".join(chunks)

    def endpoint(method: str):  # noqa: ANN202
        handler = getattr(service, method)

        async def run(request: Any) -> JSONResponse:
            return JSONResponse(await run_in_threadpool(handler, await read_limited(request)))

        run.__annotations__ = {"request": Request, "return": JSONResponse}  # resolved here, for FastAPI
        return run

    response = {"application/json": {"schema": schemas["error"]}}
    for path, method in routes.items():
        ok = schemas["row"] if method == "answer" else schemas["results"]
        # A plain route reading the raw body (FastAPI's own parsing would answer first, with its own
        # error shape); the schemas document it in /openapi.json.
        app.add_api_route(
            path, endpoint(method), methods=["POST"], summary=f"{method} ({predictor.kind.name} model)",
            openapi_extra={
                "requestBody": {"required": True, "content": {"application/json": {"schema": schemas[method]}}},
                "responses": {"200": {"description": "answers", "content": {"application/json": {"schema": ok}}},
                              "4XX": {"description": "a rejected request", "content": response}},
            },
        )  # fmt: skip
    return app
