"""A small HTTP inference server (FastAPI) over a ``Predictor``: JSON in, JSON out.

    albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
    curl -s localhost:8000/v1/classify -d '{"texts": ["a gripping, funny film"]}'

Endpoints, enabled by the model's head: ``POST /v1/classify {"texts": [...], "pairs"?: [...]}``
(sequence classification), ``POST /v1/tag {"texts": [...]}`` (token classification),
``POST /v1/answer {"question": str, "context": str}`` (span QA); ``GET /health`` always.
Every rejected request gets a 4xx with ``{"error": {"code", "message"}}``: 400 malformed body (not
UTF-8, not JSON), 404 endpoint not served by this model, 413 body over ``max_request_bytes``, 422 wrong
fields, too many texts or a text longer than ``max_length`` tokens.

The body is parsed by hand rather than by pydantic models so that each of those cases has its own
clear message. Inference runs in a worker thread under one lock: concurrent requests queue instead of
oversubscribing the cores the engine's intra-op threads already use.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from albertlm.export import Predictor


class RequestError(Exception):
    """A bad request: answered with ``status`` and a JSON error body."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _string_list(body: dict, key: str, limit: int) -> list[str]:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty list of strings")
    if not all(isinstance(t, str) for t in value):
        raise RequestError(422, "invalid_field", f"every item of '{key}' must be a string")
    if len(value) > limit:
        raise RequestError(422, "too_many_texts", f"'{key}' has {len(value)} items; at most {limit} per request")
    return value


def _string(body: dict, key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty string")
    return value


class Service:
    """Validation and inference, independent of the web framework (so it is testable on its own)."""

    def __init__(self, predictor: Predictor, max_batch_size: int = 32, max_request_bytes: int = 1 << 20):
        self.predictor = predictor
        self.max_batch_size = max_batch_size
        self.max_request_bytes = max_request_bytes
        self.lock = threading.Lock()

    def parse(self, raw: bytes, allowed: set[str]) -> dict[str, Any]:
        if len(raw) > self.max_request_bytes:
            raise RequestError(
                413, "body_too_large", f"body is {len(raw)} bytes; the limit is {self.max_request_bytes}"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RequestError(400, "invalid_utf8", f"body is not valid UTF-8 (byte {e.start})") from None
        try:
            body = json.loads(text)
        except json.JSONDecodeError as e:
            raise RequestError(400, "invalid_json", f"body is not valid JSON: {e.msg} at char {e.pos}") from None
        if not isinstance(body, dict):
            raise RequestError(422, "invalid_body", "body must be a JSON object")
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise RequestError(
                422, "unknown_field", f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}"
            )
        return body

    def _check_lengths(self, texts: list[str], pairs: list[str] | None = None) -> None:
        limit = self.predictor.max_length
        for i, n in enumerate(self.predictor.token_counts(texts, pairs)):
            if n > limit:
                raise RequestError(
                    422, "text_too_long", f"input {i} is {n} tokens with specials; this server accepts {limit}"
                )

    def classify(self, raw: bytes) -> dict[str, Any]:
        body = self.parse(raw, {"texts", "pairs"})
        texts = _string_list(body, "texts", self.max_batch_size)
        pairs = None
        if body.get("pairs") is not None:
            pairs = _string_list(body, "pairs", self.max_batch_size)
            if len(pairs) != len(texts):
                raise RequestError(422, "invalid_field", f"{len(texts)} texts but {len(pairs)} pairs; give one each")
        self._check_lengths(texts, pairs)
        with self.lock:
            return {"results": self.predictor.classify(texts, pairs)}

    def tag(self, raw: bytes) -> dict[str, Any]:
        texts = _string_list(self.parse(raw, {"texts"}), "texts", self.max_batch_size)
        self._check_lengths(texts)
        with self.lock:
            return {"results": self.predictor.tag(texts)}

    def answer(self, raw: bytes) -> dict[str, Any]:
        body = self.parse(raw, {"question", "context"})
        question, context = _string(body, "question"), _string(body, "context")
        self._check_lengths([question], [context])
        with self.lock:
            return self.predictor.answer([question], [context])[0]

    def health(self) -> dict[str, Any]:
        p = self.predictor
        return {
            "status": "ok",
            "architecture": p.architecture,
            "task": p.task,
            "engine": p.engine,
            "labels": p.labels if p.task in ("classification", "tagging") else None,
        }


ROUTES = {"classification": ("/v1/classify", "classify"), "tagging": ("/v1/tag", "tag"), "qa": ("/v1/answer", "answer")}


def create_app(predictor: Predictor, max_batch_size: int = 32, max_request_bytes: int = 1 << 20) -> Any:
    """The FastAPI app for ``predictor``; only the endpoint of its head is served (others give 404)."""
    from albertlm.export import require

    fastapi = require("fastapi")
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    service = Service(predictor, max_batch_size, max_request_bytes)
    app = fastapi.FastAPI(title="albertlm", docs_url=None, redoc_url=None)
    app.state.service = service

    def error(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)

    @app.exception_handler(RequestError)
    async def _request_error(_: Any, e: RequestError) -> JSONResponse:
        return error(e.status, e.code, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Any, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        served = [path for task, (path, _) in ROUTES.items() if task == predictor.task]
        message = str(e.detail)
        if e.status_code == 404:
            message = f"no such endpoint; this {predictor.architecture} serves {', '.join(served + ['/health'])}"
        return error(e.status_code, code, message)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return service.health()

    if predictor.task in ROUTES:
        path, method = ROUTES[predictor.task]
        handler = getattr(service, method)

        async def endpoint(request: Any) -> JSONResponse:
            # Refuse an oversized body from its header before reading it.
            declared = request.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > max_request_bytes:
                raise RequestError(413, "body_too_large", f"body is {declared} bytes; the limit is {max_request_bytes}")
            raw = await request.body()
            return JSONResponse(await run_in_threadpool(handler, raw))

        # A plain route: the handler reads the raw body itself (FastAPI's parsing would answer first).
        app.router.add_route(path, endpoint, methods=["POST"])
    return app
