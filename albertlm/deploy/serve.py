"""A small HTTP inference server (FastAPI) over a ``Predictor``: JSON in, JSON out, the same answers as
``albertlm predict`` (one code path, ``albertlm.deploy.inference``).

    albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
    albertlm serve --model runs/sst2-onnx --engine onnx --batch-window-ms 0 --max-batch 1   # no batching
    curl -s localhost:8000/v1/predict -H 'Content-Type: application/json' -d '{"text": "a gripping, funny film"}'

Endpoints: ``POST /v1/predict`` takes one input object exactly as a ``predict`` JSON line (``{"text",
"text_b"?}``, ``{"question", "context"}``, ``{"tokens"}`` or ``{"text"}``, ``{"context", "question",
"options"}``) or ``{"inputs": [...]}`` of them, and answers ``{"results": [row, ...]}`` with the rows
``predict`` prints (label names, per-word tags, spans with character offsets). Shortcuts by head:
``/v1/classify {"texts": [text or [text, text_b], ...]}``, ``/v1/tag {"texts"}``, ``/v1/answer {"question",
"context", "id"?}`` (one row). ``GET /health`` always (503 once the model computed NaN); ``GET /stats``
counts the batches run. Long QA contexts are windowed as in evaluation: the limit is on the request's size,
not on context length. The same Service answers the HF Inference API / TEI shape (``POST /predict``, ``/``,
``/invocations``, ``GET /info``, ``/metrics``: ``routes_hf``) and the Open Inference Protocol v2
(``/v2/models/{name}/infer``: ``routes_v2``).
``/openapi.json`` has this model's schemas (only its head's input shapes, lists of 1 to
``max_items``), and the server holds every body to them: what the schema allows is answered, what it refuses
is refused (``predict`` on the command line also reads field aliases such as ``sentence``).

Every rejected request gets a 4xx with ``{"error": {"code", "message"}}``: 400 malformed body (not UTF-8,
not JSON, a lone surrogate escape in a string, bad gzip) or a Host this server does not answer (DNS
rebinding), 404 endpoint not served by this model, 405 method not allowed (with ``Allow``), 413 body over
``max_request_bytes`` (checked while streaming, and after gzip decoding, so neither a chunked body nor a zip
bomb is read whole), 415 a body that is not ``application/json`` or an encoding other than gzip, 422 wrong
fields or too many inputs. A failure inside the model is a 500 in the same shape. No CORS header is sent
unless ``cors_origins`` names the pages allowed to read answers.

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

from albertlm.deploy.schema import conforms, request_schemas
from albertlm.errors import DataError, NonFiniteOutput, RequestError, UserError, check_settings

if TYPE_CHECKING:
    from albertlm.deploy.inference import Predictor

__all__ = ["BatchSettings", "Batcher", "RequestError", "Service", "create_app", "read_body"]

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
        check_settings(self)
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
        task = predictor.task
        self.schemas = request_schemas(predictor.kind.name, max_items, task.columns if task is not None else None)

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

    def _conform(self, endpoint: str, body: dict) -> None:
        """The body is what /openapi.json says this endpoint takes (after the checks with their own messages)."""
        why = conforms(body, self.schemas[endpoint])
        if why:
            raise RequestError(422, "unknown_field" if "unknown field" in why else "invalid_field", why)

    # one parser per endpoint: a request body -> its validated inputs
    def _predict_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw)
        if "inputs" in body:
            if set(body) != {"inputs"}:
                raise RequestError(422, "unknown_field", "with 'inputs', give no other field")
            items = body["inputs"]
            if not isinstance(items, list) or not items:
                raise RequestError(422, "invalid_field", "'inputs' must be a non-empty list of input objects")
            examples = self._examples(items)
        else:
            try:
                examples = self._examples([body])
            except RequestError as e:  # e.g. {"texts": [...]}, another route's body: say what this one takes
                other = " ('texts' is the field of /v1/classify and /v1/tag)" if "texts" in body else ""
                raise RequestError(e.status, e.code, f"{e.message}; {self.expected('predict')}{other}") from None
        self._conform("predict", body)
        return examples

    def _classify_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw, {"texts"})
        texts = body.get("texts")
        if not isinstance(texts, list) or not texts:
            raise RequestError(422, "invalid_field",
                               "'texts' must be a non-empty list of texts or [text, text_b] pairs")
        if len(texts) > self.max_items:
            raise RequestError(422, "too_many_inputs",
                               f"'texts' has {len(texts)} items; at most {self.max_items} per request")
        self._conform("classify", body)
        return self._examples([{"text": t} if isinstance(t, str) else {"text": t[0], "text_b": t[1]} for t in texts])

    def _tag_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw, {"texts"})
        texts = _string_list(body, "texts", self.max_items)
        self._conform("tag", body)
        return self._examples([{"text": t} for t in texts])

    def _answer_inputs(self, raw: bytes) -> list[Any]:
        body = self.parse(raw, {"id", "question", "context"})
        for key in ("question", "context"):
            if not isinstance(body.get(key), str) or not body[key]:
                raise RequestError(422, "invalid_field", f"'{key}' must be a non-empty string")
        self._conform("answer", body)
        return self._examples([body])

    def examples(self, endpoint: str, raw: bytes) -> list[Any]:
        """The validated inputs of a request to ``endpoint`` (one of ``ENDPOINTS``); RequestError otherwise."""
        if endpoint not in self.ENDPOINTS:
            raise ValueError(f"unknown endpoint {endpoint!r}; one of {', '.join(self.ENDPOINTS)}")
        try:
            return getattr(self, f"_{endpoint}_inputs")(raw)
        except RequestError as e:
            if e.code != "invalid_body":  # the other messages name the field at fault
                raise
            raise RequestError(e.status, e.code, f"{e.message}; {self.expected(endpoint)}") from None

    def expected(self, endpoint: str) -> str:
        """What a request body of ``endpoint`` holds, in a line (the errors' fix)."""
        if endpoint == "predict":
            one = "{" + ", ".join(f'"{k}": ...' for k in self.schemas["predict"]["anyOf"][0]["required"]) + "}"
            return f'POST /v1/predict takes one input, {one}, or a list of them as {{"inputs": [{one}, ...]}}'
        body = {"classify": '{"texts": ["a text", ["a text", "its pair"]]}', "tag": '{"texts": ["a text", ...]}',
                "answer": '{"question": "...", "context": "..."}'}[endpoint]  # fmt: skip
        return f"POST /v1/{endpoint} takes {body}"

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

    async def rows(self, items: list[Any]) -> list[dict[str, Any]]:
        """The /v1 rows of input objects another route (HF / TEI, Open Inference Protocol v2) has read from its own
        body shape: the same validation, batch queue and NaN guard as /v1."""
        examples = await asyncio.to_thread(self._examples, items)
        try:
            return await self.batcher.submit(examples)
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


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")


def default_allowed_hosts(bind: str) -> list[str]:
    """The Host names a server bound to ``bind`` answers: its address, and the loopback names when it listens
    on loopback or on every interface (0.0.0.0 / ::), plus this machine's name there. Anything else (a web page's
    DNS-rebound name) is refused; a reverse proxy's name is added with ``--allowed-hosts``."""
    import socket

    hosts = [bind]
    if bind in ("0.0.0.0", "::", "") or bind in LOOPBACK_NAMES or bind.startswith("127."):
        hosts += LOOPBACK_NAMES
    if bind in ("0.0.0.0", "::", ""):
        hosts += [socket.gethostname(), socket.getfqdn()]
    return list(dict.fromkeys(h.lower() for h in hosts if h))


def _host_name(header: str) -> str:
    """``Host``'s name without its port (``[::1]:8000`` -> ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class _HostCheck:
    """ASGI middleware: a request whose Host is not one this server answers gets a 400 (a page the user visits
    can make the browser call 127.0.0.1 under its own name: DNS rebinding). ``"*"`` allows every name."""

    def __init__(self, app: Any, allowed: list[str]):
        self.app, self.allowed = app, {h.lower() for h in allowed}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and "*" not in self.allowed:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if _host_name(host) not in self.allowed:
                from fastapi.responses import JSONResponse

                message = (f"Host {host!r} is not a name this server answers ({', '.join(sorted(self.allowed))}); "
                           "start it with --allowed-hosts NAME to serve behind a proxy under that name")
                await JSONResponse({"error": {"code": "invalid_host", "message": message}}, 400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _decoded(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body under its Content-Encoding: identity, or gzip decompressed to at most ``limit`` bytes."""
    import zlib

    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding != "gzip":
        raise RequestError(415, "unsupported_encoding", f"Content-Encoding {encoding!r} is not supported; send the "
                           "body as is or gzip-compressed")  # fmt: skip
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    try:
        out = inflate.decompress(raw, limit + 1)  # never more than the limit (a zip bomb stops here)
    except zlib.error as e:
        raise RequestError(400, "invalid_gzip", f"body is not valid gzip ({e})") from None
    if len(out) > limit:
        raise RequestError(413, "body_too_large", f"body is over {limit} bytes once decompressed, the limit")
    if not inflate.eof or inflate.unused_data:
        raise RequestError(400, "invalid_gzip", "body is not one complete gzip stream")
    return out


async def read_body(request: Any, limit: int, json_only: bool = True) -> bytes:
    """A request's body under the server's rules: ``application/json`` (415 otherwise: a web page can post
    ``text/plain`` cross-origin with no preflight), refused with 413 as soon as it passes ``limit`` (declared,
    streamed, or once gzip-decoded). ``json_only=False`` lets the caller judge the media type itself (the v2
    binary tensor extension)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if json_only and media != "application/json":
        raise RequestError(415, "unsupported_media_type", f"Content-Type must be application/json, not "
                           f"{media or 'absent'}")  # fmt: skip
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "body_too_large", f"body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body_too_large", f"body is over {limit} bytes, the limit")
        chunks.append(chunk)
    return _decoded(b"".join(chunks), request.headers.get("content-encoding", ""), limit)


def _guard(app: Any, allowed_hosts: list[str] | None, cors_origins: list[str] | None) -> None:
    """The Host check (outermost: before CORS answers anything) and, when asked, the CORS grant."""
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["content-type", "content-encoding"])  # fmt: skip
    if allowed_hosts is not None:
        app.add_middleware(_HostCheck, allowed=list(allowed_hosts))


def create_app(predictor: Predictor, max_items: int = 32, max_request_bytes: int = 1 << 20,
               batching: BatchSettings | None = None, allowed_hosts: list[str] | None = None,
               cors_origins: list[str] | None = None, model_name: str = "albertlm") -> Any:  # fmt: skip
    """The FastAPI app for ``predictor``: /v1/predict, its head's shortcut, /health, /stats, the HF Inference /
    TEI routes (``routes_hf``) and the Open Inference Protocol v2 (``routes_v2``, the model named
    ``model_name``); concurrent requests on every route share forward passes as ``batching`` says.

    Bodies are ``application/json`` only (415 otherwise: a web page can send ``text/plain`` cross-origin with
    no preflight), as is or gzip-compressed. ``allowed_hosts``: the Host names answered (``albertlm serve``
    passes ``default_allowed_hosts`` of its --host; None answers any, for an app mounted behind another
    check). ``cors_origins``: the web origins granted CORS; none by default, so no page can read an answer."""
    from albertlm.deploy import routes_hf, routes_v2
    from albertlm.deploy.engines import require

    fastapi = require("fastapi")
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    service = Service(predictor, max_items, max_request_bytes, batching)
    app = fastapi.FastAPI(title="albertlm", docs_url=None, redoc_url=None)
    app.state.service = service
    _guard(app, allowed_hosts, cors_origins)
    schemas = service.schemas
    routes = {"/v1/predict": "predict"}
    if predictor.kind.endpoint:  # the head's shortcut: /v1/classify, /v1/tag or /v1/answer
        routes[f"/v1/{predictor.kind.endpoint}"] = predictor.kind.endpoint

    def error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)

    @app.exception_handler(RequestError)
    async def _request_error(_: Any, e: RequestError) -> JSONResponse:
        return error(e.status, e.code, e.message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Any, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        message = str(e.detail)
        if e.status_code == 404:
            served = ", ".join([*routes, "/health", "/stats", *routes_hf.PATHS, f"/v2/models/{model_name}/infer"])
            message = f"no such endpoint; this {predictor.kind.name} model serves {served}"
        headers = dict(e.headers or {})  # a 405 names the methods allowed (Allow), as HTTP requires
        if e.status_code == 405 and "Allow" in headers:
            message = f"method not allowed here; use {headers['Allow']}"
        return error(e.status_code, code, message, headers or None)

    @app.exception_handler(Exception)
    async def _bug(_: Any, e: Exception) -> JSONResponse:  # a bug, never the client's fault: still JSON
        return error(500, "internal_error", f"{type(e).__name__}: the server failed on this request")

    @app.get("/health", response_model=None, summary="the model served, and whether it answers (503 once broken)")
    async def health() -> Any:
        state = service.health()
        return JSONResponse(state, status_code=503 if state["status"] != "ok" else 200)

    @app.get("/stats", summary="batches run since the start, and the batching settings")
    async def stats() -> dict[str, Any]:
        return service.stats()

    def endpoint(method: str):  # noqa: ANN202
        async def run(request: Any) -> JSONResponse:
            return JSONResponse(await service.handle(method, await read_body(request, max_request_bytes)))

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
    routes_hf.mount(app, service, model_name)
    routes_v2.mount(app, service, model_name)
    return app
