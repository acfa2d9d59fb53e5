"""``albertlm ablate``: reproduce one of the paper's ablation tables at a small, equal budget.

    albertlm ablate --study objective --corpus ../shared/corpus/en --out runs/ablate/objective-en
    albertlm ablate --study sharing --corpus ../shared/corpus/en --out runs/ablate/sharing --variants all,none
    albertlm ablate --study sharing --corpus ../shared/corpus/en --out runs/ablate/sharing --report-only
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from albertlm.ablation import STUDIES

    p = sub.add_parser("ablate", help="run one of the paper's ablation studies (Tables 3, 4, 5, 11, 12)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", required=True, choices=STUDIES, help="which table")
    p.add_argument("--corpus", required=True, help="directory of classic-format *.txt with a heldout.txt")
    p.add_argument("--out", help="study directory (default runs/ablate/STUDY)")
    p.add_argument("--steps", type=int, default=300, help="pretraining steps per variant (the equal budget)")
    p.add_argument("--global-batch-size", type=int, default=64, help="instances per step")
    p.add_argument("--micro-batch-size", type=int, default=32, help="instances per forward")
    p.add_argument("--lr", type=float, default=3e-3, help="LAMB learning rate")
    p.add_argument("--max-seq-length", type=int, default=128, help="tokens per instance")
    p.add_argument("--vocab-size", type=int, default=8000, help="tokenizer vocabulary trained on the corpus")
    p.add_argument("--seed", type=int, default=0, help="the one seed every variant shares")
    p.add_argument("--finetune-task", help="downstream task (default sst2 for English, chnsenticorp for Chinese)")
    p.add_argument("--finetune-data", help="downstream data directory (default ../shared/data/<task>)")
    p.add_argument("--finetune-steps", type=int, default=300, help="fine-tuning steps per variant (0 = skip)")
    p.add_argument("--finetune-lr", type=float, default=3e-4, help="fine-tuning peak learning rate (AdamW)")
    p.add_argument("--finetune-limit-train", type=int, default=8000, help="training examples used downstream")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="change the base model (H=256, L=4, E=128) of every variant, e.g. --set hidden_size=128")
    p.add_argument("--variants", help="comma-separated subset to run in this process")
    p.add_argument("--report-only", action="store_true", help="only gather finished variants into the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from albertlm.ablation import StudySettings, run_study
    from albertlm.config import parse_overrides

    start = time.time()
    s = StudySettings(
        study=args.study, corpus=args.corpus, out=args.out or f"runs/ablate/{args.study}", steps=args.steps,
        global_batch_size=args.global_batch_size, micro_batch_size=args.micro_batch_size, lr=args.lr,
        max_seq_length=args.max_seq_length, vocab_size=args.vocab_size, seed=args.seed,
        finetune_task=args.finetune_task, finetune_data=args.finetune_data, finetune_steps=args.finetune_steps,
        finetune_lr=args.finetune_lr,
        finetune_limit_train=args.finetune_limit_train,
        variants=args.variants.split(",") if args.variants else None, model=parse_overrides(args.set),
    )
    results, paths = run_study(s, report_only=args.report_only)
    print(f"{args.study} study: {len(results)} variant(s) in {(time.time() - start) / 60:.1f} min; wrote "
          + ", ".join(map(str, paths)))
    return 0
