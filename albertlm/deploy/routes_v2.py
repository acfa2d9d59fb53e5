"""The Open Inference Protocol (KServe v2, Triton's HTTP API) routes of ``albertlm serve``, for cluster tooling
that speaks it (``tritonclient.http``, KServe's client), behind the same ``Service`` as /v1.

    client = tritonclient.http.InferenceServerClient("127.0.0.1:8000")
    text = tritonclient.http.InferInput("text", [2], "BYTES")
    text.set_data_from_numpy(np.array(["a gripping film", "dull"], dtype=object))
    client.infer("sst2", [text]).as_numpy("label")            # array([b'positive', b'negative'], dtype=object)

Routes: ``GET /v2`` (server metadata), ``/v2/health/live``, ``/v2/health/ready`` (503 once the model computed
NaN), ``GET /v2/models/{name}`` (its input and output tensors), ``/v2/models/{name}/ready`` and ``POST
/v2/models/{name}/infer``, each also under ``/versions/1``. The model's name is ``serve --model-name`` (default: the
model folder's name).

Inputs are BYTES tensors named as /v1's input fields, one element per input (shape ``[N]`` or ``[N, 1]``):
``text`` (+ ``text_b``) for classification and regression, ``text`` for tagging, ``question`` and ``context``
for QA, ``options`` ``[N, K]`` (+ ``context``, ``question``) for multiple choice. Outputs: ``result`` (each
input's /v1 row as JSON) for every model, and typed tensors per kind: ``label``, ``score``, ``probabilities``
``[N, C]`` (labels in config order); ``value``; ``answer``, ``start``, ``end`` (-1 when none), ``score``
(+ ``null_score``). Request ``outputs`` picks some; ``"parameters": {"binary_data": true}`` on one returns it
in the binary tensor extension.

Bodies are JSON as the protocol says, or the binary tensor extension tritonclient sends by default (a JSON
header of ``Inference-Header-Content-Length`` bytes, then the tensors: BYTES elements as a 4-byte little-endian
length and the bytes). The server's Content-Type rule holds with one reading: a JSON body needs
``application/json``; a binary one comes with ``Inference-Header-Content-Length``, a header no web page can
send without a CORS preflight (which the server grants only to ``--cors-origin``), so it may come with
``application/octet-stream`` or no Content-Type, as tritonclient sends it. Errors are the protocol's
``{"error": "message"}`` with the same status codes as /v1.
"""


import json
import struct
from typing import Any

import numpy as np

from albertlm.errors import RequestError

VERSION = "1"
BINARY_HEADER = "inference-header-content-length"


def inputs_of(kind: str) -> list[tuple[str, list[int], bool]]:
    """(name, shape, required) of the BYTES input tensors of a ``kind`` model."""
    one = [-1]
    return {
        "classification": [("text", one, True), ("text_b", one, False)],
        "regression": [("text", one, True), ("text_b", one, False)],
        "tagging": [("text", one, True)],
        "qa": [("question", one, True), ("context", one, True)],
        "qa_v2": [("question", one, True), ("context", one, True)],
        "choice": [("options", [-1, -1], True), ("context", one, False), ("question", one, False)],
    }[kind]


def outputs_of(kind: str, labels: list[str] | None) -> list[tuple[str, str, list[int]]]:
    """(name, datatype, shape) of the output tensors of a ``kind`` model."""
    typed = {
        "classification": [("label", "BYTES", [-1]), ("score", "FP32", [-1]),
                           ("probabilities", "FP32", [-1, len(labels or [])])],
        "regression": [("value", "FP32", [-1])],
        "tagging": [],
        "qa": [("answer", "BYTES", [-1]), ("start", "INT64", [-1]), ("end", "INT64", [-1]), ("score", "FP32", [-1])],
        "choice": [("label", "BYTES", [-1]), ("score", "FP32", [-1])],
    }  # fmt: skip
    typed["qa_v2"] = [*typed["qa"], ("null_score", "FP32", [-1])]
    return [*typed[kind], ("result", "BYTES", [-1])]


def metadata(service: Any, model_name: str) -> dict[str, Any]:
    p = service.predictor
    kind = p.kind.name
    return {"name": model_name, "versions": [VERSION], "platform": f"albertlm_{p.engine.name}",
            "inputs": [{"name": n, "datatype": "BYTES", "shape": s} for n, s, _ in inputs_of(kind)],
            "outputs": [{"name": n, "datatype": d, "shape": s} for n, d, s in outputs_of(kind, p.labels)]}  # fmt: skip


def _bad(message: str, status: int = 422, code: str = "invalid_field") -> RequestError:
    return RequestError(status, code, message)


def _bytes_elements(blob: bytes, where: str) -> list[str]:
    """The binary extension's BYTES tensor: each element a 4-byte little-endian length, then its bytes."""
    out, pos = [], 0
    while pos < len(blob):
        if pos + 4 > len(blob):
            raise _bad(f"{where}: binary BYTES data ends inside an element's length", 400, "invalid_binary")
        (n,) = struct.unpack_from("<I", blob, pos)
        if pos + 4 + n > len(blob):
            raise _bad(f"{where}: binary BYTES element of {n} bytes runs past the data", 400, "invalid_binary")
        try:
            out.append(blob[pos + 4 : pos + 4 + n].decode("utf-8"))
        except UnicodeDecodeError:
            raise _bad(f"{where}: element {len(out)} is not UTF-8 text", 400, "invalid_utf8") from None
        pos += 4 + n
    return out


def split_body(raw: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """(the JSON part, the binary tensors after it)."""
    if header_length is None:
        return raw, b""
    if not header_length.strip().isdigit() or int(header_length) > len(raw):
        raise _bad(f"Inference-Header-Content-Length {header_length!r} is not a length within the {len(raw)}-byte "
                   "body", 400, "invalid_binary")  # fmt: skip
    n = int(header_length)
    return raw[:n], raw[n:]


def _flat(data: Any) -> list[Any]:
    if isinstance(data, list):
        return [x for d in data for x in _flat(d)]
    return [data]


def read_request(service: Any, body: dict, binary: bytes) -> tuple[list[dict], list[tuple[str, bool]] | None]:
    """An infer request -> (the /v1 input objects, the outputs asked for with their binary flag, or None: all)."""
    kind = service.predictor.kind.name
    spec = {n: (s, req) for n, s, req in inputs_of(kind)}
    tensors = body.get("inputs")
    if not isinstance(tensors, list) or not tensors:
        raise _bad(f"'inputs' must be a non-empty list of tensors; this model takes {', '.join(spec)} (BYTES)")
    columns: dict[str, list] = {}
    pos = 0
    for i, t in enumerate(tensors):
        where = f"inputs[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise _bad(f"{where} must be an object with 'name', 'shape', 'datatype' and 'data'")
        name = t["name"]
        if name not in spec:
            raise _bad(f"{where}: no input {name!r}; this model takes {', '.join(spec)}", code="unknown_field")
        if name in columns:
            raise _bad(f"{where}: input {name!r} is given twice")
        if t.get("datatype") != "BYTES":
            raise _bad(f"{where} ({name}): datatype must be BYTES (text), got {t.get('datatype')!r}")
        shape = t.get("shape")
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                          for d in shape)):  # fmt: skip
            raise _bad(f"{where} ({name}): shape must be a list of sizes, e.g. [N]")
        rank = len(spec[name][0])
        if not (len(shape) == rank or rank == 1 and len(shape) == 2 and shape[1] == 1):
            raise _bad(f"{where} ({name}): shape {shape} must be " + ("[N] or [N, 1]" if rank == 1 else "[N, K]"))
        size = int(np.prod(shape))
        params = t.get("parameters") or {}
        if not isinstance(params, dict):
            raise _bad(f"{where} ({name}): 'parameters' must be an object")
        if "binary_data_size" in params:
            n = params["binary_data_size"]
            if not isinstance(n, int) or n < 0 or pos + n > len(binary):
                raise _bad(f"{where} ({name}): binary_data_size {n!r} runs past the binary data", 400,
                           "invalid_binary")  # fmt: skip
            data = _bytes_elements(binary[pos : pos + n], f"{where} ({name})")
            pos += n
        else:
            if "data" not in t:
                raise _bad(f"{where} ({name}) has no 'data'")
            data = _flat(t["data"])
            if not all(isinstance(x, str) for x in data):
                raise _bad(f"{where} ({name}): every element of a BYTES tensor must be a string")
        if len(data) != size:
            raise _bad(f"{where} ({name}): shape {shape} holds {size} elements, the data {len(data)}")
        columns[name] = [data[r * shape[1] : (r + 1) * shape[1]] for r in range(shape[0])] if rank == 2 else data
    if pos != len(binary):
        raise _bad(f"the body has {len(binary) - pos} bytes of binary data no input claims", 400, "invalid_binary")
    missing = [n for n, (_, req) in spec.items() if req and n not in columns]
    if missing:
        raise _bad(f"'inputs' lacks {', '.join(missing)}; this model takes {', '.join(spec)}")
    counts = {len(v) for v in columns.values()}
    if len(counts) != 1:
        rows = ", ".join(f"{k}: {len(v)}" for k, v in columns.items())
        raise _bad(f"the inputs have different numbers of rows ({rows})")
    n = counts.pop()
    if n == 0:
        raise _bad("the inputs have no rows")
    if n > service.max_items:
        raise RequestError(422, "too_many_inputs", f"{n} inputs; at most {service.max_items} per request")
    items = [{k: v[r] for k, v in columns.items()} for r in range(n)]
    if kind.startswith("qa"):
        items = [{"id": str(r), **x} for r, x in enumerate(items)]
    asked = body.get("outputs")
    if asked is None:
        return items, None
    names = {o[0] for o in outputs_of(kind, service.predictor.labels)}
    if not isinstance(asked, list):
        raise _bad("'outputs' must be a list of {\"name\": ...}")
    wanted = []
    for i, o in enumerate(asked):
        if not isinstance(o, dict) or o.get("name") not in names:
            raise _bad(f"outputs[{i}]: no output {o.get('name') if isinstance(o, dict) else o!r}; this model gives "
                       f"{', '.join(sorted(names))}", code="unknown_field")  # fmt: skip
        wanted.append((o["name"], bool((o.get("parameters") or {}).get("binary_data", False))))
    return items, wanted


def output_tensors(service: Any, rows: list[dict], wanted: list[tuple[str, bool]] | None) -> list[tuple[dict, bytes]]:
    """(the JSON description, its binary data or b"") per output tensor."""
    p = service.predictor
    kind = p.kind.name
    specs = {n: (d, s) for n, d, s in outputs_of(kind, p.labels)}
    wanted = wanted if wanted is not None else [(n, False) for n in specs]
    out = []
    for name, binary in wanted:
        dtype, shape = specs[name]
        if name == "result":
            values: list = [json.dumps(r, ensure_ascii=False) for r in rows]
        elif name == "probabilities":
            values = [[r[name][lab] for lab in p.labels] for r in rows]
        elif name == "answer" and kind == "choice":
            values = [r["option"] for r in rows]
        else:
            values = [r[name] if r[name] is not None else -1 for r in rows]
        shape = [len(rows), *shape[1:]]
        desc = {"name": name, "datatype": dtype, "shape": shape}
        if binary:
            if dtype == "BYTES":
                blob = b"".join(struct.pack("<I", len(b)) + b for b in (str(v).encode("utf-8") for v in values))
            else:
                blob = np.asarray(values, dtype=np.float32 if dtype == "FP32" else np.int64).tobytes()
            desc["parameters"] = {"binary_data_size": len(blob)}
            out.append((desc, blob))
        else:
            desc["data"] = [str(v) for v in values] if dtype == "BYTES" else np.asarray(values).reshape(-1).tolist()
            out.append((desc, b""))
    return out


def mount(app: Any, service: Any, model_name: str) -> None:
    """Add the v2 routes to ``app`` (``serve.create_app`` calls this)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response

    import albertlm
    from albertlm.deploy.serve import read_body

    def error(e: RequestError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    def check_model(name: str, version: str | None) -> None:
        if name != model_name:
            raise RequestError(404, "not_found", f"no model {name!r} here; this server serves {model_name!r}")
        if version is not None and version != VERSION:
            raise RequestError(404, "not_found", f"model {name!r} has version {VERSION} only, not {version!r}")

    async def server_metadata() -> dict[str, Any]:
        return {"name": "albertlm", "version": albertlm.__version__, "extensions": ["binary_tensor_data"]}

    async def live() -> dict[str, Any]:
        return {"live": True}

    async def ready() -> JSONResponse:
        return JSONResponse({"ready": not service.failure}, status_code=503 if service.failure else 200)

    async def model_metadata(name: str, version: str | None = None) -> Any:
        try:
            check_model(name, version)
        except RequestError as e:
            return error(e)
        return metadata(service, model_name)

    async def model_ready(name: str, version: str | None = None) -> Any:
        try:
            check_model(name, version)
        except RequestError as e:
            return error(e)
        return JSONResponse({"name": model_name, "ready": not service.failure},
                            status_code=503 if service.failure else 200)  # fmt: skip

    async def infer(request: Request, name: str, version: str | None = None) -> Any:
        try:
            check_model(name, version)
            header = request.headers.get(BINARY_HEADER)
            media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
            if header is None or media not in ("", "application/octet-stream", "application/json"):
                raw = await read_body(request, service.max_request_bytes)  # JSON, under /v1's rule
            else:
                raw = await read_body(request, service.max_request_bytes, json_only=False)
            head, binary = split_body(raw, header)
            body = service.parse(head, {"id", "parameters", "inputs", "outputs"})
            items, wanted = read_request(service, body, binary)
            tensors = output_tensors(service, await service.rows(items), wanted)
        except RequestError as e:
            return error(e)
        reply = {"model_name": model_name, "model_version": VERSION, "outputs": [d for d, _ in tensors]}
        if isinstance(body.get("id"), str):
            reply["id"] = body["id"]
        blobs = b"".join(b for _, b in tensors)
        if not blobs:
            return JSONResponse(reply)
        head = json.dumps(reply, ensure_ascii=False).encode("utf-8")
        return Response(head + blobs, media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(head))})  # fmt: skip

    kind = service.predictor.kind.name
    tensor = {"type": "object", "required": ["name", "shape", "datatype"],
              "properties": {"name": {"type": "string", "enum": [n for n, _, _ in inputs_of(kind)]},
                             "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                             "datatype": {"type": "string", "enum": ["BYTES"]}, "data": {"type": "array"},
                             "parameters": {"type": "object"}}}  # fmt: skip
    request_schema = {"type": "object", "required": ["inputs"], "properties": {
        "id": {"type": "string"}, "parameters": {"type": "object"}, "inputs": {"type": "array", "items": tensor},
        "outputs": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}
    err = {"application/json": {"schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}
    infer_doc = {"requestBody": {"required": True, "content": {"application/json": {"schema": request_schema}}},
                 "responses": {"4XX": {"description": "a rejected request", "content": err}}}
    app.add_api_route("/v2", server_metadata, methods=["GET"], summary="v2: server metadata")
    app.add_api_route("/v2/health/live", live, methods=["GET"], summary="v2: the server is up")
    app.add_api_route("/v2/health/ready", ready, methods=["GET"], summary="v2: the model answers (503 once broken)",
                      openapi_extra={"responses": {"503": {"description": "the model computed NaN"}}})
    # A name other than the served model's (or a version other than 1) answers 404 in the protocol's error shape.
    other = {"404": {"description": "no such model or version", "content": err}}
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        app.add_api_route(prefix, model_metadata, methods=["GET"], summary="v2: the model's input and output tensors",
                          openapi_extra={"responses": other})  # fmt: skip
        app.add_api_route(f"{prefix}/ready", model_ready, methods=["GET"], summary="v2: the model answers",
                          openapi_extra={"responses": {**other, "503": {"description": "the model computed NaN"}}})
        app.add_api_route(f"{prefix}/infer", infer, methods=["POST"], summary="v2: inference on BYTES tensors",
                          openapi_extra=infer_doc)
