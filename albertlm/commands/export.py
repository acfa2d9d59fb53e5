"""``albertlm export``: a model directory -> a self-contained ONNX directory, optionally int8 (onnxruntime's
dynamic int8; with --calibration also OpenVINO's static int8).

albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx
albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx --quantize int8 --opset 17
albertlm export --model runs/sst2 --format onnx --out runs/sst2-std --graph standard   # plain ONNX ops
albertlm export --model runs/sst2 --out runs/sst2-onnx --quantize int8 --calibration sentences.txt  # + OpenVINO int8
albertlm export --model runs/sst2 --format web --out runs/sst2-web --web-runtime web/node_modules  # a browser page
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.deploy.export import ExportSettings

    p = sub.add_parser("export", help="export a model to ONNX (every head; optional int8 for onnxruntime and OpenVINO)")
    p.add_argument("--model", required=True, help="HF-layout model directory (config.json + model.safetensors)")
    p.add_argument("--format", choices=["onnx", "web"], default="onnx",
                   help="onnx: graphs for onnxruntime / OpenVINO; web: the same graphs plus a page that runs them in "
                        "the browser (onnxruntime-web), served by any static file server")  # fmt: skip
    p.add_argument("--web-runtime", metavar="DIR",
                   help="with --format web: a node_modules folder holding the page's pinned runtime (`npm ci --prefix "
                        "web` in a clone makes web/node_modules), copied into the export so the page needs no "
                        "network; without it the page loads the same versions from the jsDelivr CDN")  # fmt: skip
    p.add_argument("--out", required=True, help="output directory (graph, config.json, tokenizer, deploy.json)")
    p.add_argument("--calibration", metavar="FILE",
                   help="with --quantize int8: also write OpenVINO's static int8 (model.openvino-int8.xml, by NNCF; "
                        "--engine openvino then runs it), its activation ranges measured on FILE: inputs like "
                        "those the model will serve, one per line as `albertlm predict` reads them (the first "
                        "300 are used)")  # fmt: skip
    p.add_argument("--tokenizer", help="tokenizer directory, when the model directory holds none")
    add_flags(p, ExportSettings)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from albertlm.commands.flags import build
    from albertlm.deploy.export import DEFAULT_OPSET, MIN_OPSET, ExportSettings, export_onnx
    from albertlm.errors import UserError

    s = build(args, ExportSettings)
    if s.opset < MIN_OPSET:
        raise UserError(f"--opset {s.opset} is too old; use {MIN_OPSET} or newer ({DEFAULT_OPSET} is the default)")
    if args.web_runtime is not None and args.format != "web":
        raise UserError("--web-runtime is for --format web")
    if args.format == "web":
        from albertlm.deploy.web import export_web

        manifest = export_web(args.model, args.out, quantize=s.quantize, runtime=args.web_runtime,
                              tokenizer_dir=args.tokenizer, opset=s.opset, graph=s.graph,
                              calibration=args.calibration, device=s.device)  # fmt: skip
    else:
        manifest = export_onnx(args.model, args.out, quantize=s.quantize, opset=s.opset,
                               tokenizer_dir=args.tokenizer, graph=s.graph, calibration=args.calibration,
                               device=s.device)  # fmt: skip
    sizes = manifest["sizes_bytes"]
    line = f"fp32 {sizes['fp32'] / 1e6:.1f} MB (max |diff| vs torch {manifest['fp32_max_abs_diff']:.1e})"
    if "int8" in sizes:
        r = manifest["int8_report"]
        line += (
            f", int8 {sizes['int8'] / 1e6:.1f} MB ({sizes['int8'] / sizes['fp32']:.2f}x;"
            f" {r['int8_matmuls']} int8 MatMuls, {r['fp32_weight_matmuls']} left fp32)"
        )
    if "openvino_int8" in sizes:
        line += (f", OpenVINO int8 {sizes['openvino_int8_weights'] / 1e6:.1f} MB (max |diff| vs torch "
                 f"{manifest['openvino_int8_max_abs_diff']:.1e}; calibrated on "
                 f"{manifest['openvino_int8_calibration']['batches']} inputs)")  # fmt: skip
    if not manifest["tokenizer"]:
        line += "; no tokenizer found (pass --tokenizer DIR for text serving)"
    if "web" in manifest:
        line += (f"; a web page on the {manifest['web']['precision']} graphs (runtime from "
                 f"{manifest['web']['runtime']['from']}): serve the folder, e.g. python -m http.server -d {args.out}, "
                 "and open index.html")  # fmt: skip
    print(f"wrote {manifest['architecture']} to {args.out}: {line}")
    return 0
