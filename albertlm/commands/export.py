"""``albertlm export``: a model directory -> a self-contained ONNX directory, optionally int8 (onnxruntime's
dynamic int8; with --calibration also OpenVINO's static int8), or an ExecuTorch ``.pte`` program for phones
(--format executorch; int8 static with --calibration, else dynamic), or a folder a browser runs (--format web: the
ONNX graphs on onnxruntime-web, with a page). Every int8 export passes an accuracy gate
when --gate-data (labelled) or --calibration is given.

albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx
albertlm export --model runs/sst2 --format onnx --out runs/sst2-onnx --quantize int8 --opset 17
albertlm export --model runs/sst2 --format onnx --out runs/sst2-std --graph standard   # plain ONNX ops
albertlm export --model runs/sst2 --out runs/sst2-onnx --quantize int8 --calibration sentences.txt  # + OpenVINO int8
albertlm export --model runs/sst2 --format executorch --out runs/sst2-pte --quantize int8 --gate-data data/glue_sst2
albertlm export --model runs/sst2 --format web --out runs/sst2-web --web-runtime web/node_modules  # a browser page
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.deploy.export import ExportSettings

    p = sub.add_parser(
        "export",
        help="export a model to ONNX (every head; optional int8 for onnxruntime and OpenVINO), "
        "to an ExecuTorch .pte (XNNPACK, fp32 and int8), or to a page a browser runs",
    )
    p.add_argument("--model", required=True, help="HF-layout model directory (config.json + model.safetensors)")
    p.add_argument("--format", choices=["onnx", "executorch", "web"], default="onnx",
                   help="onnx: graphs for onnxruntime and OpenVINO; executorch: model.pte (and model.int8.pte) for "
                        "ExecuTorch's XNNPACK delegate, phones and --engine executorch; web: the ONNX graphs plus a "
                        "page that runs them in the browser (onnxruntime-web), served by any static file "
                        "server")  # fmt: skip
    p.add_argument("--web-runtime", metavar="DIR",
                   help="with --format web: a node_modules folder holding the page's pinned runtime (`npm ci --prefix "
                        "web` in a clone makes web/node_modules), copied into the export so the page needs no "
                        "network; without it the page loads the same versions from the jsDelivr CDN")  # fmt: skip
    p.add_argument("--gate-data", metavar="DIR_OR_FILE",
                   help="with --quantize int8: labelled examples (as `albertlm evaluate --data` reads them; the dev "
                        "split) on which int8 is scored against fp32 before the export is written; without it, "
                        "--calibration's inputs give the share of answers int8 changes")  # fmt: skip
    p.add_argument("--out", required=True, help="output directory (graph, config.json, tokenizer, deploy.json)")
    p.add_argument("--calibration", metavar="FILE",
                   help="with --quantize int8: also write OpenVINO's static int8 (model.openvino-int8.xml, by NNCF; "
                        "--engine openvino then runs it), or with --format executorch make the .pte's int8 static, "
                        "its activation ranges measured on FILE: inputs like those the model will serve, one per "
                        "line as `albertlm predict` reads them (the first 300 are used)")  # fmt: skip
    p.add_argument("--tokenizer", help="tokenizer directory, when the model directory holds none")
    add_flags(p, ExportSettings)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from albertlm.commands.flags import build
    from albertlm.deploy.export import DEFAULT_OPSET, MIN_OPSET, ExportSettings, export_onnx
    from albertlm.deploy.gate import Int8Gate
    from albertlm.errors import UserError

    s = build(args, ExportSettings)
    if s.opset < MIN_OPSET:
        raise UserError(f"--opset {s.opset} is too old; use {MIN_OPSET} or newer ({DEFAULT_OPSET} is the default)")
    if args.web_runtime is not None and args.format != "web":
        raise UserError("--web-runtime is for --format web")
    if args.gate_data is not None and s.quantize != "int8":
        raise UserError("--gate-data measures int8 against fp32: add --quantize int8")
    gate = Int8Gate(Path(args.gate_data) if args.gate_data else None,
                    Path(args.calibration) if args.calibration else None,
                    Path(args.tokenizer) if args.tokenizer else None, s.max_int8_drop)  # fmt: skip
    if args.format == "executorch":
        from albertlm.deploy.executorch import export_executorch

        manifest = export_executorch(args.model, args.out, quantize=s.quantize, tokenizer_dir=args.tokenizer,
                                     calibration=args.calibration, gate=gate)  # fmt: skip
        sizes, planned = manifest["sizes_bytes"], manifest["planned_memory_bytes"]
        line = (f"model.pte {sizes['fp32'] / 1e6:.1f} MB + {planned['fp32'] / 1e6:.1f} MB planned activations (max "
                f"|diff| vs torch {manifest['fp32_max_abs_diff']:.1e})")  # fmt: skip
        if "int8" in sizes:
            line += (f", model.int8.pte {sizes['int8'] / 1e6:.1f} MB + {planned['int8'] / 1e6:.1f} MB "
                     f"({manifest['int8_activations']} activations; max |diff| vs torch "
                     f"{manifest['int8_max_abs_diff']:.1e})")  # fmt: skip
    elif args.format == "web":
        from albertlm.deploy.web import export_web

        manifest = export_web(args.model, args.out, quantize=s.quantize, runtime=args.web_runtime,
                              tokenizer_dir=args.tokenizer, opset=s.opset, graph=s.graph,
                              calibration=args.calibration, device=s.device, gate=gate)  # fmt: skip
        line = _onnx_line(manifest)
    else:
        manifest = export_onnx(args.model, args.out, quantize=s.quantize, opset=s.opset,
                               tokenizer_dir=args.tokenizer, graph=s.graph, calibration=args.calibration,
                               device=s.device, gate=gate)  # fmt: skip
        line = _onnx_line(manifest)
    if "int8_gate" in manifest:
        line += f"; int8 gate passed ({_gate_line(manifest['int8_gate'])})"
    if not manifest["tokenizer"]:
        line += "; no tokenizer found (pass --tokenizer DIR for text serving)"
    if "web" in manifest:
        line += (f"; a web page on the {manifest['web']['precision']} graphs (runtime from "
                 f"{manifest['web']['runtime']['from']})")  # fmt: skip
        after = f"python -m http.server -d {args.out}, and open index.html"
    else:
        engine = "executorch" if args.format == "executorch" else "onnx"
        after = f"albertlm predict --model {args.out} --engine {engine}"
    print(f"wrote {manifest['architecture']} to {args.out}: {line}; next: {after}")
    return 0


def _gate_line(gate: dict) -> str:
    entries = gate.values() if "metric" not in gate else [gate]
    parts = []
    for g in entries:
        drops = ", ".join(f"{k} {v['drop_points']:.2f}" for k, v in g.items() if isinstance(v, dict))
        parts.append(f"{g['metric']}: fp32 {g['fp32']:.2f}, drop {drops}" if "fp32" in g else f"{g['metric']}: {drops}")
    return "; ".join(parts)


def _onnx_line(manifest: dict) -> str:
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
    return line
