"""A small HTTP inference server (FastAPI) over a ``Predictor``: JSON in, JSON out, the same answers as
``albertlm predict`` (one code path, ``albertlm.deploy.inference``).

    albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
    albertlm serve --model runs/sst2-onnx --engine onnx --batch-window-ms 0 --max-batch 1   # no batching
    curl -s localhost:8000/v1/predict -d '{"text": "a gripping, funny film"}'

Endpoints: ``POST /v1/predict`` takes one input object exactly as a ``predict`` JSON line (``{"text",
"text_b"?}``, ``{"question", "context"}``, ``{"tokens"}`` or ``{"text"}``, ``{"context", "question",
"options"}``) or ``{"inputs": [...]}`` of them, and answers ``{"results": [row, ...]}`` with the rows
``predict`` prints (label names, per-word tags, spans with character offsets). Shortcuts by head:
``/v1/classify {"texts", "pairs"?}``, ``/v1/tag {"texts"}``, ``/v1/answer {"question", "context"}`` (one
row). ``GET /health`` always; ``GET /stats`` counts the batches run. Long QA contexts are windowed as in
evaluation: the limit is on the request's size, not on context length. The schemas are in ``/openapi.json``.

Every rejected request gets a 4xx with ``{"error": {"code", "message"}}``: 400 malformed body (not UTF-8,
not JSON, a lone surrogate escape in a string), 404 endpoint not served by this model, 413 body over
``max_request_bytes`` (checked while streaming, so a chunked body is never read whole), 422 wrong fields
or too many inputs. A failure inside the model is a 500 in the same shape.

Concurrent requests are batched dynamically (``Batcher``): each request's validated inputs join a queue;
one worker waits up to ``batch_window_ms`` after the oldest queued request (or until ``max_batch`` inputs
are queued), runs one ``Predictor.predict`` over all of them in a worker thread, and hands each request its
own rows. Inference is never run twice at once, so requests queue instead of oversubscribing the cores,
and the model sees batches, which cost less per input than one forward per request. A request is never
split; a batch that fails is run again request by request, so only the request that fails gets the 500.
Answers are those of a lone request (padding is masked out) to float rounding, except on onnxruntime's
int8 graph, whose activations are quantized with one scale per batch (OpenVINO's static int8 has fixed
scales): its scores move (by 1e-4 on the test models) with the company a request keeps, as they already do
between the inputs of one request; bf16 (the torch engine's default on CPUs with bf16 instructions) rounds
differently by batch shape, by ~1e-4 too. A lone request on an idle server waits the whole window;
``batch_window_ms=0`` never waits and batches only the requests that queued while the model was busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from albertlm.errors import DataError, NonFiniteOutput, RequestError, UserError, check_bounds

if TYPE_CHECKING:
    from albertlm.deploy.inference import Predictor

__all__ = ["BatchSettings", "Batcher", "RequestError", "Service", "create_app"]

_log = logging.getLogger(__name__)
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


@dataclass
class BatchSettings:
    """How the server groups concurrent requests into one forward pass (``albertlm serve`` flags)."""

    batch_window_ms: float = field(default=5.0, metadata={"metavar": "MS", "min": 0,
        "help": "how long the oldest queued request waits for others to share its forward pass, in ms (0: no "
                "waiting, only requests that queued while the model was busy join)"})  # fmt: skip
    max_batch: int = field(default=32, metadata={"metavar": "N", "min": 1,
        "help": "most inputs in one batched forward pass; a larger request runs alone, never split (1: no "
                "batching)"})  # fmt: skip

    def __post_init__(self) -> None:
        check_bounds(self)
        if math.isinf(self.batch_window_ms):
            raise UserError("--batch-window-ms must be finite: a window that never closes never answers")


@dataclass
class _Job:
    examples: list[Any]  # one request's validated inputs
    future: asyncio.Future  # its rows, or the exception its batch raised
    arrived: float  # loop.time() when it was queued


class _Lane:
    """The queue of one event loop. uvicorn runs one loop; a TestClient used without ``with`` starts one per
    request, so each loop gets its own queue and worker (asyncio objects cannot cross loops)."""

    def __init__(self) -> None:
        self.jobs: deque[_Job] = deque()
        self.queued = 0  # inputs in jobs
        self.full = asyncio.Event()  # set when queued reaches max_batch: stop waiting for more
        self.worker: asyncio.Task | None = None  # runs while jobs are queued, then ends


class Batcher:
    """Concurrent requests -> one ``predict`` over their combined inputs -> each request its own rows.

    ``await batcher.submit(examples)`` queues one request's inputs and returns its rows. A worker (started
    by the first request, ending when the queue is empty) waits until ``max_batch`` inputs are queued or
    ``batch_window_ms`` has passed since the oldest queued request arrived, takes the oldest requests that
    fit (a larger one alone), and runs ``predict`` once in a thread so the event loop keeps accepting
    requests; the next batch forms meanwhile. ``stats`` counts what ran.
    """

    def __init__(self, predict: Callable[[list[Any]], list[dict[str, Any]]], settings: BatchSettings | None = None):
        self.predict = predict
        self.settings = settings or BatchSettings()
        self.stats = {"batches": 0, "requests": 0, "examples": 0, "most_requests_in_a_batch": 0,
                      "most_examples_in_a_batch": 0}  # fmt: skip
        self._lanes: dict[asyncio.AbstractEventLoop, _Lane] = {}

    async def submit(self, examples: list[Any]) -> list[dict[str, Any]]:
        """One row per example, in order; raises what ``predict`` raised on this request."""
        loop = asyncio.get_running_loop()
        lane = self._lanes.get(loop)
        if lane is None:
            for old in [old for old in self._lanes if old.is_closed()]:
                del self._lanes[old]
            lane = self._lanes[loop] = _Lane()
        job = _Job(examples, loop.create_future(), loop.time())
        lane.jobs.append(job)
        lane.queued += len(examples)
        if lane.queued >= self.settings.max_batch:
            lane.full.set()
        if lane.worker is None or lane.worker.done():
            lane.worker = loop.create_task(self._drain(lane))
        return await job.future

    async def _drain(self, lane: _Lane) -> None:
        while lane.jobs:
            jobs = await self._collect(lane)
            if jobs:
                await self._run(jobs)

    async def _collect(self, lane: _Lane) -> list[_Job]:
        """Wait for a full batch or the end of the oldest request's window; take the oldest requests that fit."""
        cap = self.settings.max_batch
        wait = lane.jobs[0].arrived + self.settings.batch_window_ms / 1000 - asyncio.get_running_loop().time()
        if lane.queued < cap and wait > 0:
            lane.full.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lane.full.wait(), wait)
        jobs: list[_Job] = []
        size = 0
        while lane.jobs and (not jobs or size + len(lane.jobs[0].examples) <= cap):
            job = lane.jobs.popleft()
            lane.queued -= len(job.examples)
            if not job.future.done():  # done already: its client went away, nobody waits for the answer
                jobs.append(job)
                size += len(job.examples)
        return jobs

    async def _run(self, jobs: list[_Job]) -> None:
        examples = [ex for job in jobs for ex in job.examples]
        try:
            rows = await asyncio.to_thread(self.predict, examples)
            if len(rows) != len(examples):
                raise RuntimeError(f"predict returned {len(rows)} rows for {len(examples)} inputs")
        except Exception as e:
            if len(jobs) > 1:  # find the request that fails: the others get their answers as if alone
                _log.warning("a batch of %d requests failed (%s: %s); running them one by one", len(jobs),
                             type(e).__name__, e)  # fmt: skip
                for job in jobs:
                    if not job.future.done():
                        await self._run([job])
            elif not jobs[0].future.done():
                jobs[0].future.set_exception(e)
            return
        except BaseException:  # cancelled (the server is stopping): nobody will answer these requests
            for job in jobs:
                job.future.cancel()
            raise
        st = self.stats
        st["batches"] += 1
        st["requests"] += len(jobs)
        st["examples"] += len(examples)
        st["most_requests_in_a_batch"] = max(st["most_requests_in_a_batch"], len(jobs))
        st["most_examples_in_a_batch"] = max(st["most_examples_in_a_batch"], len(examples))
        start = 0
        for job in jobs:
            if not job.future.done():
                job.future.set_result(rows[start : start + len(job.examples)])
            start += len(job.examples)


class Service:
    """Validation and inference, independent of the web framework (so it is testable on its own).

    ``examples(endpoint, body)`` validates a request; ``handle`` answers it through the batcher (the app);
    ``call`` answers it at once in the calling thread (Python callers, tests).
    """

    ENDPOINTS = ("predict", "classify", "tag", "answer")

    def __init__(self, predictor: Predictor, max_items: int = 32, max_request_bytes: int = 1 << 20,
                 batching: BatchSettings | None = None):  # fmt: skip
        self.predictor = predictor
        self.max_items = max_items
        self.max_request_bytes = max_request_bytes
        self.lock = threading.Lock()  # one inference at a time, batched or called directly
        self.batcher = Batcher(self._run, batching)
        self.failure: str | None = None  # why the model is broken (it computed NaN), once it has
        self.failures = 0

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

    # one parser per endpoint: a request body -> its validated inputs
    def _predict_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw)
        if "inputs" in body:
            if set(body) != {"inputs"}:
                raise RequestError(422, "unknown_field", "with 'inputs', give no other field")
            items = body["inputs"]
            if not isinstance(items, list) or not items:
                raise RequestError(422, "invalid_field", "'inputs' must be a non-empty list of input objects")
        else:
            items = [body]
        return self._examples(items)

    def _classify_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw, {"texts", "pairs"})
        texts = _string_list(body, "texts", self.max_items)
        pairs: list[Any] = [None] * len(texts)
        if body.get("pairs") is not None:
            pairs = _string_list(body, "pairs", self.max_items)
            if len(pairs) != len(texts):
                raise RequestError(422, "invalid_field", f"{len(texts)} texts but {len(pairs)} pairs; give one each")
        return self._examples([{"text": a, "text_b": b} for a, b in zip(texts, pairs, strict=True)])

    def _tag_inputs(self, raw: bytes) -> list[Any]:
        texts = _string_list(self.parse(raw, {"texts"}), "texts", self.max_items)
        return self._examples([{"text": t} for t in texts])

    def _answer_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw, {"id", "question", "context"})
        for key in ("question", "context"):
            if not isinstance(body.get(key), str) or not body[key].strip():
                raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty string")
        return self._examples([body])

    def examples(self, endpoint: str, raw: bytes) -> list[Any]:
        """The validated inputs of a request to ``endpoint`` (one of ``ENDPOINTS``); RequestError otherwise."""
        if endpoint not in self.ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; one of {', '.join(self.ENDPOINTS)}")
        return getattr(self, f"_{endpoint}_inputs")(raw)

    @staticmethod
    def reply(endpoint: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The response body: ``{"results": rows}``, or /v1/answer's one row."""
        return rows[0] if endpoint == "answer" else {"results": rows}

    def call(self, endpoint: str, raw: bytes) -> dict[str, Any]:
        """Answer one request now, in this thread, unbatched."""
        examples = self.examples(endpoint, raw)
        try:
            return self.reply(endpoint, self._run(examples))
        except NonFiniteOutput as e:
            raise self.broken(e) from None

    async def handle(self, endpoint: str, raw: bytes) -> dict[str, Any]:
        """Answer one request in the batch it shares with the requests that arrive with it."""
        examples = await asyncio.to_thread(self.examples, endpoint, raw)  # a big body parses off the event loop
        try:
            return self.reply(endpoint, await self.batcher.submit(examples))
        except NonFiniteOutput as e:
            raise self.broken(e) from None

    def broken(self, e: NonFiniteOutput) -> RequestError:
        """A model that computed NaN is broken, not the request: the answer is a 500, and /health says so from
        now on (a load balancer stops sending it traffic)."""
        self.failures += 1
        self.failure = str(e)
        return RequestError(500, "non_finite_output", str(e))

    def stats(self) -> dict[str, Any]:
        return {**self.batcher.stats, "batch_window_ms": self.batcher.settings.batch_window_ms,
                "max_batch": self.batcher.settings.max_batch}  # fmt: skip

    def health(self) -> dict[str, Any]:
        """The model and its state: ``status`` "ok", or "failing" (with the error) once it computed NaN."""
        p = self.predictor
        failing = {"error": self.failure, "failed_requests": self.failures} if self.failure else {}
        return {
            "status": "failing" if self.failure else "ok",
            **failing,
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
        "for SQuAD 2.0); choice: label, option, score, probabilities; with an early-exit rule (classification, "
        "regression, choice) also layer, the computed layer the input left at",
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


def create_app(predictor: Predictor, max_items: int = 32, max_request_bytes: int = 1 << 20,
               batching: BatchSettings | None = None) -> Any:  # fmt: skip
    """The FastAPI app for ``predictor``: /v1/predict, its head's shortcut, /health, /stats; concurrent
    requests share forward passes as ``batching`` says."""
    from albertlm.deploy.inference import require

    fastapi = require("fastapi")
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    service = Service(predictor, max_items, max_request_bytes, batching)
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
            served = ", ".join([*routes, "/health", "/stats"])
            message = f"no such endpoint; this {predictor.kind.name} model serves {served}"
        return error(e.status_code, code, message)

    @app.exception_handler(Exception)
    async def _bug(_: Any, e: Exception) -> JSONResponse:  # a bug, never the client's fault: still JSON
        return error(500, "internal_error", f"{type(e).__name__}: the server failed on this request")

    @app.get("/health")
    async def health() -> JSONResponse:
        state = service.health()
        return JSONResponse(state, status_code=503 if state["status"] != "ok" else 200)

    @app.get("/stats", summary="batches run since the start, and the batching settings")
    async def stats() -> dict[str, Any]:
        return service.stats()

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
        async def run(request: Any) -> JSONResponse:
            return JSONResponse(await service.handle(method, await read_limited(request)))

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
