"""``albertlm serve``: an HTTP JSON inference server for a classification, tagging or QA model.

albertlm serve --model runs/sst2-onnx --engine onnx --port 8000
albertlm serve --model runs/sst2 --engine torch --max-batch-size 16 --max-length 256
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model over HTTP (POST /v1/classify, /v1/tag, /v1/answer)")
    p.add_argument("--model", required=True, help="model directory (torch) or exported directory (onnx)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (loopback by default)")
    p.add_argument("--port", type=int, default=8000, help="TCP port")
    p.add_argument("--engine", choices=["torch", "onnx"], default="torch", help="inference engine")
    p.add_argument("--fp32", action="store_true", help="onnx: use model.onnx even when model.int8.onnx exists")
    p.add_argument("--threads", type=int, help="intra-op threads (default: all cores)")
    p.add_argument("--max-batch-size", type=int, default=32, help="most texts per request (and per forward)")
    p.add_argument("--max-length", type=int, default=512, help="most tokens per input, specials included")
    p.add_argument("--max-request-bytes", type=int, default=1 << 20, help="largest request body accepted")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.cli import UserError
    from albertlm.export import Predictor, require

    for flag, value in (
        ("--max-batch-size", args.max_batch_size),
        ("--max-length", args.max_length),
        ("--max-request-bytes", args.max_request_bytes),
    ):
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    try:
        uvicorn = require("uvicorn")
        from albertlm.serve import create_app

        predictor = Predictor(
            args.model,
            engine=args.engine,
            threads=args.threads,
            max_batch_size=args.max_batch_size,
            max_length=args.max_length,
            quantized=False if args.fp32 else None,
        )
        app = create_app(predictor, args.max_batch_size, args.max_request_bytes)
    except ImportError as e:
        raise UserError(str(e)) from None
    if predictor.task is None:
        raise UserError(
            f"{predictor.architecture} has no serving endpoint; serve a classification, tagging or QA model"
        )
    print(f"serving {predictor.architecture} ({args.engine}) on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
