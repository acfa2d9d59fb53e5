"""Converted original checkpoints vs the ORIGINAL TensorFlow code's outputs (and vs transformers).

For every fixture under tests/fixtures/tf (made by running google-research/albert and brightmart/albert_zh
themselves, see generate.py there): convert with albertlm.convert.original.from_tf, run albertlm (and, for the
Google structure, transformers) on the recorded inputs, and report the max |difference| per output.

    python benchmarks/convert_parity.py --json docs/results/convert_parity.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import numpy as np
import torch

import albertlm
from albertlm.convert.original import from_tf
from albertlm.heads import IGNORE

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tf"
INPUTS = ("input_ids", "input_mask", "token_type_ids", "masked_lm_positions", "p_mask")


def outputs(model, ids, mask, types, positions, hf: bool, p_mask=None) -> dict[str, np.ndarray]:
    out = {}
    with torch.no_grad():
        if isinstance(model, albertlm.AlbertForQuestionAnsweringV2):  # the original's SQuAD 2.0 beam
            r = model(ids, mask, types, p_mask=p_mask)
            B = ids.shape[0]
            out = dict(start_top_log_probs=r.start_top_log_probs, start_top_index=r.start_top_index.float(),
                       end_top_log_probs=r.end_top_log_probs.reshape(B, -1),
                       end_top_index=r.end_top_index.reshape(B, -1).float(), cls_logits=r.cls_logits)
            return {k: v.numpy() for k, v in out.items()}
        if hasattr(model, "classifier"):
            out["classifier_logits"] = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
            return {k: v.numpy() for k, v in out.items()}
        if hf:
            r = model(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)
            out["sequence_output"] = r.hidden_states[-1]
            if hasattr(r, "pooler_output"):
                out["pooled_output"] = r.pooler_output
            if hasattr(r, "prediction_logits"):
                V = r.prediction_logits.shape[-1]
                logits = r.prediction_logits.gather(1, positions[..., None].expand(-1, -1, V))
                out["mlm_logits"], out["sop_logits"] = logits.reshape(-1, logits.shape[-1]), r.sop_logits
        else:
            base = model.albert if hasattr(model, "albert") else model
            r = base(ids, mask, types)
            out["sequence_output"], out["pooled_output"] = r.last_hidden_state, r.pooler_output
            if hasattr(model, "predictions"):
                labels = torch.full_like(ids, IGNORE).scatter_(1, positions, 0)
                pt = model(ids, mask, types, labels=labels)
                out["mlm_logits"], out["sop_logits"] = pt.prediction_logits, pt.sop_logits
    return {k: v.numpy() for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    rows = []
    for d in sorted(p for p in FIXTURES.iterdir() if (p / "expected.npz").is_file()):
        e = dict(np.load(d / "expected.npz"))
        ids, mask, types, positions = (torch.from_numpy(e[k]).long() for k in INPUTS[:4])
        with tempfile.TemporaryDirectory() as tmp:
            report = from_tf(d / "model.ckpt", d / "albert_config.json", Path(tmp) / "out")
            ours = getattr(albertlm, report.architecture).from_pretrained(Path(tmp) / "out").eval()
            p_mask = torch.from_numpy(e["p_mask"]).long() if "p_mask" in e else None
            engines = {"albertlm": outputs(ours, ids, mask, types, positions, hf=False, p_mask=p_mask)}
            if report.transformers_compatible:
                import transformers

                hf = getattr(transformers, report.architecture).from_pretrained(Path(tmp) / "out").eval()
                engines["transformers"] = outputs(hf, ids, mask, types, positions, hf=True)
        for engine, got in engines.items():
            for k in (k for k in e if k not in INPUTS and k in got):
                rows.append(dict(fixture=d.name, structure=report.structure, engine=engine, output=k,
                                 max_abs_diff=float(np.abs(got[k] - e[k]).max()),
                                 max_abs_value=float(np.abs(e[k]).max())))
    worst = max(r["max_abs_diff"] for r in rows)
    for r in rows:
        print(f"{r['fixture']:<24} {r['engine']:<12} {r['output']:<18} max|diff| {r['max_abs_diff']:.2e}"
              f"  (max|value| {r['max_abs_value']:.2f})")
    print(f"worst {worst:.2e} (tolerance 2e-5)")
    if args.json:
        meta = dict(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                    command="python benchmarks/convert_parity.py --json " + args.json)
        Path(args.json).write_text(json.dumps(dict(meta=meta, worst=worst, rows=rows), indent=2) + "\n")


if __name__ == "__main__":
    main()
