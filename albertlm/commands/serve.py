"""``albertlm serve``: an HTTP JSON inference server for any fine-tuned model (see ``albertlm.deploy.serve``).

albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
albertlm serve --model runs/sst2 --engine torch --max-items 16 --max-seq-length 256
albertlm serve --model runs/sst2-onnx --engine openvino --threads 2   # its int8 file if exported, else bf16 / fp32
albertlm serve --model runs/sst2-onnx --engine onnx --batch-window-ms 10 --max-batch 64   # batch harder
albertlm serve --model runs/sst2-onnx --engine onnx --batch-window-ms 0 --max-batch 1     # no batching
albertlm serve --model runs/sst2 --model-name sst2   # also POST /predict (HF / TEI), /v2/models/sst2/infer
albertlm serve --model runs/sst2 --host 0.0.0.0 --allowed-hosts api.example.com --cors-origin https://app.example.com
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
from pathlib import Path

from albertlm.errors import UserError


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands import flags
    from albertlm.commands.common import add_engine_flags, add_inference_flags
    from albertlm.commands.flags import add_flags, bounded, count
    from albertlm.deploy.serve import BatchSettings

    p = sub.add_parser("serve", help="serve a fine-tuned model over HTTP (POST /v1/predict, and its head's shortcut)")
    p.add_argument("--model", required=True, help="model directory (torch) or exported directory (onnx, openvino)")
    p.add_argument("--task", type=flags.task, default=None,
                    help="task name, see `albertlm tasks` (default: the one the model was fine-tuned on)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=bounded(int, 0, 65535), default=8000,
                   help="TCP port (default: 8000; 0: any free port, printed at the start)")
    p.add_argument("--max-items", type=count, default=32, help="most inputs per request (default: 32)")
    p.add_argument("--max-request-bytes", type=count, default=1 << 20,
                   help="largest request body accepted (default: 1 MiB)")  # fmt: skip
    p.add_argument("--allowed-hosts", default=None, metavar="NAMES",
                   help="comma-separated Host names answered, e.g. the name a reverse proxy forwards ('*': any); "
                        "others get 400, so a web page cannot reach the server under its own name (DNS "
                        "rebinding) (default: the --host address, plus the loopback names and this machine's "
                        "name when it is loopback or 0.0.0.0)")  # fmt: skip
    p.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                   help="a web origin (https://app.example) whose pages may call the server and read its answers "
                        "(CORS); repeat for more (default: none, no page may)")  # fmt: skip
    p.add_argument("--model-name", default=None, metavar="NAME",
                   help="the model's name in the Open Inference Protocol routes, /v2/models/NAME/infer, and in /info "
                        "(default: the --model folder's name)")  # fmt: skip
    add_flags(p, BatchSettings)
    add_engine_flags(p)
    add_inference_flags(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.commands.common import load_predictor
    from albertlm.commands.flags import build
    from albertlm.deploy.engines import require
    from albertlm.deploy.serve import BatchSettings

    batching = build(args, BatchSettings)  # checks the values before the model loads
    hosts, origins = web_settings(args)
    uvicorn = require("uvicorn")
    from albertlm.deploy.serve import create_app

    sock = listen(args.host, args.port)  # a port in use fails here, before the model loads
    try:
        predictor = load_predictor(args)
        name = args.model_name or Path(args.model).resolve().name
        app = create_app(predictor, args.max_items, args.max_request_bytes, batching, allowed_hosts=hosts,
                         cors_origins=origins, model_name=name)  # fmt: skip
        port = sock.getsockname()[1]
        print(f"serving a {predictor.kind.name} {predictor.engine.architecture} ({predictor.engine.name}) on "
              f"http://{args.host}:{port} (POST /v1/predict, /predict, /v2/models/{name}/infer; schemas at "
              f"/openapi.json; batches of up to {batching.max_batch} inputs within {batching.batch_window_ms:g} ms); "
              "Ctrl-C stops", flush=True)
        uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C is how a server stops: uvicorn has shut down cleanly and re-raised it
        pass
    finally:
        sock.close()
    return 0


def web_settings(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the Host names answered, the CORS origins granted) from --host / --allowed-hosts / --cors-origin."""
    from albertlm.deploy.serve import default_allowed_hosts

    if args.allowed_hosts is None:
        hosts = default_allowed_hosts(args.host)
    else:
        hosts = [h.strip().lower() for h in args.allowed_hosts.split(",") if h.strip()]
        if not hosts or any("/" in h or " " in h for h in hosts):
            raise UserError(f"--allowed-hosts {args.allowed_hosts!r}: give comma-separated host names without "
                            "scheme or path (api.example.com,127.0.0.1), or '*'")  # fmt: skip
    origins = args.cors_origin or []
    for origin in origins:
        scheme, _, rest = origin.partition("://")
        if origin != "*" and (scheme not in ("http", "https") or not rest or "/" in rest):
            raise UserError(f"--cors-origin {origin!r}: give an origin, scheme://host[:port] with no path "
                            "(https://app.example.com), or '*'")  # fmt: skip
    return hosts, origins


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (IPv4 or IPv6, as the host resolves), or one clear line."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family)
    except OSError as e:
        reason = e.strerror if isinstance(e, socket.gaierror) or not e.errno else os.strerror(e.errno)
        fix = ("pick a free port (--port 0 takes any)" if e.errno == errno.EADDRINUSE
               else "give an address of this machine (127.0.0.1 loopback, 0.0.0.0 every interface)")
        raise UserError(f"cannot listen on --host {host} --port {port}: {reason}; {fix}") from None
