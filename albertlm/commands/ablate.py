"""``albertlm ablate``: reproduce one of the paper's ablation tables at a small, equal budget, on a folder of
classic-format text (``albertlm data demo-corpus --out corpus/en`` writes one; docs/results/ablations used the
project's full corpora).

    albertlm ablate --study objective --corpus corpus/en --out runs/ablate/objective-en
    albertlm ablate --study sharing --corpus corpus/en --out runs/ablate/sharing --variants all,none
    albertlm ablate --study sharing --corpus corpus/en --out runs/ablate/sharing --report-only
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.commands.flags import add_flags
    from albertlm.research.ablation import StudySettings

    p = sub.add_parser("ablate", help="run one of the paper's ablation studies (Tables 3, 4, 5, 11, 12)")
    add_flags(p, StudySettings)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="change the base model (H=256, L=4, E=128) of every variant, e.g. --set hidden_size=128")
    p.add_argument("--variants", help="comma-separated subset to run in this process")
    p.add_argument("--report-only", action="store_true", help="only gather finished variants into the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from albertlm.commands.flags import build
    from albertlm.config import parse_overrides
    from albertlm.research.ablation import StudySettings, run_study

    start = time.time()
    s = build(args, StudySettings, variants=args.variants.split(",") if args.variants else None,
              model=parse_overrides(args.set))
    results, paths = run_study(s, report_only=args.report_only)
    print(f"{s.study} study: {len(results)} variant(s) in {(time.time() - start) / 60:.1f} min; wrote "
          + ", ".join(map(str, paths)) + _downstream_note(results))
    return 0


def _downstream_note(results: list[dict]) -> str:
    """Said when no variant's downstream score clears the majority baseline: then the study is too small for
    the downstream column to tell the variants apart, whatever it shows."""
    from albertlm.tasks import get_task

    above = []
    for r in results:
        scores = r.get("downstream") or {}
        base = next((k for k in scores if k.endswith(" majority_baseline")), None)
        if base is None:
            return ""
        main = f"{base.split()[0]} {get_task(base.split()[0]).main_metric}"
        if main not in scores:
            return ""
        above.append(scores[main] > scores[base])
    if not above or any(above):
        return ""
    return ("; no variant's downstream score is above its majority baseline, so this budget is too small for the "
            "downstream column to tell the variants apart (raise --steps and --finetune-steps)")
