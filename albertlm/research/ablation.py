"""The paper's ablations at a small, equal budget: one command per table.

    albertlm ablate --study objective --corpus corpus/en --out runs/ablate/objective-en
    albertlm ablate --study sharing --corpus corpus/en --steps 400 --finetune-steps 400

Each variant pretrains with the same data, steps, batch and seed, is scored on held-out text
(intrinsic MLM accuracy; SOP and NSP accuracy on held-out pairs built both ways, as paper Table 5),
then fine-tuned on a downstream task (SST-2 for English, ChnSentiCorp for Chinese by default) through
``albertlm finetune``. A variant directory with ``result.json`` is done and skipped, and an unfinished
pretraining resumes from its checkpoint, so a study can be stopped and rerun, or split over processes
with ``--variants`` and gathered with ``--report-only``.
"""

from __future__ import annotations

import json
import logging
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from albertlm.errors import SEED_BOUNDS, UserError, check_settings

_log = logging.getLogger(__name__)

# The small model every study varies (CPU-feasible); V comes from the tokenizer.
BASE = dict(hidden_size=256, num_attention_heads=4, intermediate_size=1024, embedding_size=128, num_hidden_layers=4)
DOWNSTREAM = {"en": ("sst2", "glue_sst2"), "zh": ("chnsenticorp", "chnsenticorp")}


@dataclass
class Variant:
    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    task: str = "sop"  # inter-sentence objective of its pretraining data
    paper: str = ""  # what the paper reports for the full-size counterpart


def study_variants(study: str, hidden_size: int = BASE["hidden_size"]) -> list[Variant]:
    H = hidden_size
    if study == "embedding":  # Table 3: the paper's E in {64, 128, 256, H=768}, scaled to H=256
        return [Variant(f"E{e}-{'shared' if s == 'all' else 'not-shared'}", {"embedding_size": e, "sharing": s})
                for s in ("all", "none") for e in (H // 8, H // 4, H // 2, H)]
    if study == "sharing":  # Table 4; the paper's albert-base (E=128) parameters and its reading
        paper = {"all": "12M; the default", "attention": "64M; costs little against none",
                 "ffn": "38M; most of all-shared's drop", "none": "89M; the best"}
        return [Variant(s, {"sharing": s}, paper=paper[s]) for s in ("all", "attention", "ffn", "none")]
    if study == "objective":  # Table 5
        paper = {"none": "MLM 54.9 / NSP 52.4 / SOP 53.3", "nsp": "MLM 54.5 / NSP 90.5 / SOP 52.0",
                 "sop": "MLM 54.0 / NSP 78.9 / SOP 86.5"}
        return [Variant(t, {}, task=t, paper=paper[t]) for t in ("none", "nsp", "sop")]
    if study == "depth":  # Table 11
        return [Variant(f"L{n}", {"num_hidden_layers": n}) for n in (1, 2, 4, 8)]
    if study == "width":  # Table 12
        return [Variant(f"H{h}", {"hidden_size": h, "intermediate_size": 4 * h, "num_attention_heads": h // 64})
                for h in (128, 256, 512)]
    raise UserError(f"unknown --study {study!r}; choose embedding, sharing, objective, depth or width")


STUDIES = ("embedding", "sharing", "objective", "depth", "width")


def _opt(default: Any, help: str, **kw: Any) -> Any:
    """A study setting with its command-line help (``albertlm ablate`` derives its flags from these)."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class StudySettings:
    study: str = _opt("objective", "which table", choices=STUDIES)
    corpus: str = _opt("", "directory of classic-format *.txt with a heldout.txt (held out of training), e.g. the "
                       "one `albertlm data demo-corpus --out corpus/en` writes", required=True)
    out: str | None = _opt(None, "study directory (default: runs/ablate/STUDY)")
    steps: int = _opt(300, "pretraining steps per variant (the equal budget)", min=1)
    global_batch_size: int = _opt(64, "instances per step", min=1)
    micro_batch_size: int = _opt(32, "instances per forward", min=1)
    lr: float = _opt(3e-3, "LAMB learning rate", above=0)
    max_seq_length: int = _opt(128, "tokens per instance (and per held-out pair)", min=8)
    vocab_size: int = _opt(8000, "tokenizer vocabulary trained on the corpus", min=10)
    seed: int = _opt(0, "the one seed every variant shares", **SEED_BOUNDS)
    precision: str = _opt("fp32", "arithmetic of every run (fp32 by default, so a study's numbers do not depend on "
                          "whether the machine has bf16 instructions)", choices=("auto", "fp32", "bf16"))
    eval_batches: int = _opt(20, "held-out MLM accuracy: batches of the held-out SOP shards", min=1)
    eval_pairs: int = _opt(1000, "balanced held-out pairs per contrast, each scored with its negative", min=1)
    finetune_task: str | None = _opt(None, "downstream task (default: sst2 for English, chnsenticorp for Chinese)")
    finetune_data: str | None = _opt(None, "downstream data directory (default: data/<task> two levels above --corpus)")
    finetune_steps: int = _opt(300, "fine-tuning steps per variant and seed (0 = skip)", min=0)
    finetune_lr: float = _opt(3e-4, "fine-tuning peak learning rate (AdamW)", above=0)
    finetune_limit_train: int = _opt(8000, "training examples used downstream (0: all)", min=0)
    finetune_seeds: int = _opt(3, "downstream runs per variant (seeds SEED, SEED+1, ...): mean and spread",
                                min=1)
    variants: list[str] | None = None  # run only these (the others are left for other processes)
    model: dict[str, Any] = field(default_factory=dict)  # changes to BASE shared by every variant

    def __post_init__(self) -> None:
        if self.out is None:
            self.out = f"runs/ablate/{self.study}"
        check_settings(self)


STUDY_RECORD = "study_settings.json"


def _recorded(s: StudySettings) -> dict[str, Any]:
    """The settings that decide a variant's numbers (not where the study lives, nor which variants this
    process runs), paths made absolute so that another working directory reads the same."""
    d = asdict(s)
    for name in ("out", "variants"):
        d.pop(name)
    for name in ("corpus", "finetune_data"):
        if d[name]:
            d[name] = str(Path(d[name]).resolve())
    return d


def claim_study_dir(s: StudySettings, write: bool = True) -> None:
    """A study directory holds one study: finished variants are reused only under the settings they were run
    with (recorded in STUDY_RECORD on the first run), and a folder holding other things is not taken over.
    ``write=False`` (a report) only compares."""
    out = Path(s.out)
    record = out / STUDY_RECORD
    now = _recorded(s)
    if record.is_file():
        saved = json.loads(record.read_text(encoding="utf-8"))
        changed = [f"{k} {saved.get(k)!r} there, {v!r} now" for k, v in now.items() if saved.get(k) != v]
        if changed:
            raise UserError(f"--out {out} holds the {saved.get('study')} study, run with other settings "
                            f"({'; '.join(changed)}); give the same settings to continue it, or another --out")
        return
    variants = study_variants(s.study, {**BASE, **s.model}["hidden_size"])
    ours = {"data", "study.json", "study.md", "study.png", "curves.png", *(v.name for v in variants)}
    foreign = sorted(p.name for p in out.iterdir() if p.name not in ours) if out.is_dir() else []
    if foreign:
        raise UserError(f"--out {out} holds files that are not a study's ({', '.join(foreign[:5])}); "
                        "give a new or empty --out")
    if write:
        from albertlm.files import write_text_atomic

        out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(record, json.dumps(now, indent=1, sort_keys=True))


def _lang(corpus: Path) -> str:
    sample = next((p for p in sorted(corpus.glob("*.txt")) if p.name != "heldout.txt"), None)
    if sample is None:
        raise FileNotFoundError(f"{corpus}: no *.txt files besides heldout.txt")
    text = sample.read_text(encoding="utf-8", errors="replace")[:20000]
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
    return "zh" if cjk > len(text) * 0.2 else "en"


def prepare_data(s: StudySettings, tasks: set[str], log=_log.info) -> dict[str, Path]:
    """Tokenizer and shards for the study (train per objective, held-out for SOP and NSP); reused."""
    from albertlm.data import InstanceConfig, build_dataset, load_manifest
    from albertlm.data.tokenizer_training import train_sentencepiece, train_wordpiece
    from albertlm.tokenizer import load_tokenizer

    corpus, work = Path(s.corpus), Path(s.out) / "data"
    held = corpus / "heldout.txt"
    if not held.exists():
        raise FileNotFoundError(f"{held}: the study needs a held-out file for intrinsic accuracies")
    files = [p for p in sorted(corpus.glob("*.txt")) if p.name != "heldout.txt"]
    lang = _lang(corpus)
    tok_dir = work / "tokenizer"
    if (tok_dir / "spiece.model").exists() or (tok_dir / "vocab.txt").exists():
        tok = load_tokenizer(tok_dir)
    elif lang == "zh":
        tok = train_wordpiece(files, tok_dir, vocab_size=s.vocab_size)
    else:
        tok = train_sentencepiece(files, tok_dir, vocab_size=s.vocab_size, seed=s.seed)
    paths = {"tokenizer": tok_dir, "lang": lang}
    wanted = [(f"train-{t}", files, t, s.seed) for t in sorted(tasks)]
    wanted += [("heldout-sop", [held], "sop", s.seed + 1), ("heldout-nsp", [held], "nsp", s.seed + 1)]
    for name, inputs, task, seed in wanted:
        path = work / name
        try:
            load_manifest(path)
        except ValueError:
            log(f"building {name} shards from {len(inputs)} file(s)")
            build_dataset(inputs, tok, path, cfg=InstanceConfig(task=task, max_seq_length=s.max_seq_length),
                          seed=seed, workers=2 if len(inputs) > 1 else 1)
        paths[name] = path
    return paths


def intrinsic(model_dir: Path, data: dict[str, Path], s: StudySettings) -> dict[str, Any]:
    """Held-out MLM accuracy, and SOP / NSP accuracy on balanced held-out pairs with 95% intervals."""
    from albertlm.data import PretrainingDataset
    from albertlm.heads import AlbertForPreTraining
    from albertlm.research.analysis import build_pair_sets, heldout_scores, pair_accuracy
    from albertlm.tokenizer import load_tokenizer

    model = AlbertForPreTraining.from_pretrained(model_dir)
    held = PretrainingDataset(data["heldout-sop"])
    mlm = heldout_scores(model, held, s.eval_batches, s.micro_batch_size)
    tok = load_tokenizer(data["tokenizer"])
    sets = build_pair_sets(Path(s.corpus) / "heldout.txt", tok, s.max_seq_length, s.eval_pairs, s.seed + 1)
    out: dict[str, Any] = {"mlm_acc": mlm["valid_mlm_acc"]}
    for kind in ("sop", "nsp"):
        r = pair_accuracy(model, sets[kind], tok.pad_id)
        out[f"{kind}_acc"], out[f"{kind}_ci95"] = r[f"{kind}_acc"], [r[f"{kind}_ci95_low"], r[f"{kind}_ci95_high"]]
        out["pairs"] = r[f"{kind}_n"]
    return out


def finetune(model_dir: Path, out: Path, s: StudySettings, lang: str, seed: int) -> dict[str, float]:
    from albertlm.tasks import InferenceSettings, get_task
    from albertlm.training.finetune import Settings, resolve_tokenizer, train
    from albertlm.training.finetune_data import load_data

    task_name, folder = DOWNSTREAM[lang]
    task = get_task(s.finetune_task or task_name)
    data = s.finetune_data or str(Path(s.corpus).resolve().parents[1] / "data" / folder)
    settings = Settings(lr=s.finetune_lr, batch_size=32, max_steps=s.finetune_steps, seed=seed, progress=False,
                        precision=s.precision,
                        inference=InferenceSettings(max_seq_length=s.max_seq_length))  # fmt: skip
    final = train(task, load_data(task, data, limit_train=s.finetune_limit_train), str(model_dir),
                  resolve_tokenizer(str(model_dir), None), out, settings, overwrite=True)  # fmt: skip
    return {f"{task.name} {k}": v for k, v in final["metrics"].items()  # the dev-set scores
            if isinstance(v, float) and not k.endswith(("loss", "examples", "seconds"))}  # fmt: skip


def run_variant(v: Variant, s: StudySettings, data: dict[str, Path], log=_log.info) -> dict[str, Any]:
    from albertlm.files import write_text_atomic
    from albertlm.research.params import count_parameters
    from albertlm.training.checkpoint import latest_valid
    from albertlm.training.pretrain import PretrainConfig, pretrain

    vdir = Path(s.out) / v.name
    done = vdir / "result.json"
    if done.exists():
        log(f"[{v.name}] done before; skipping")
        return json.loads(done.read_text())
    t0 = time.time()
    overrides = {**BASE, **s.model, **v.overrides}
    cfg = PretrainConfig(out=str(vdir / "pretrain"), data=str(data[f"train-{v.task}"]),
                         valid_data=str(data["heldout-sop"]), preset="albert-tiny", model_overrides=overrides,
                         lr=s.lr, warmup_steps=max(1, s.steps // 10), max_steps=s.steps,
                         global_batch_size=s.global_batch_size, micro_batch_size=s.micro_batch_size, seed=s.seed,
                         eval_every=max(1, s.steps // 15), save_every=max(50, min(500, s.steps // 4)),
                         log_every=max(1, s.steps // 30),
                         eval_batches=s.eval_batches, device="cpu", precision=s.precision)
    log(f"[{v.name}] pretraining {s.steps} steps, overrides {v.overrides or '{}'}, objective {v.task}")
    # continue from the variant's checkpoint; one stopped before its first checkpoint starts again
    resume = latest_valid(vdir / "pretrain" / "checkpoints") is not None
    cfg.overwrite = not resume
    pretrain(cfg, resume=resume)
    final = vdir / "pretrain" / "final"
    from albertlm.config import AlbertConfig

    result: dict[str, Any] = {
        "variant": v.name, "objective": v.task, "overrides": v.overrides, "paper": v.paper,
        "parameters": count_parameters(AlbertConfig.load(final)),
        "pretrain_tokens": s.steps * s.global_batch_size * s.max_seq_length,
        **intrinsic(final, data, s),
    }
    if s.finetune_steps > 0:
        runs = []
        for k in range(s.finetune_seeds):
            log(f"[{v.name}] fine-tuning {s.finetune_steps} steps, seed {s.seed + k}")
            runs.append(finetune(final, vdir / f"finetune-seed{s.seed + k}", s, data["lang"], s.seed + k))
        result["downstream_seeds"] = {m: [r[m] for r in runs] for m in runs[0]}
        result["downstream"] = {m: statistics.mean(x) for m, x in result["downstream_seeds"].items()}
        result["downstream_sd"] = {m: statistics.stdev(x) if len(x) > 1 else 0.0
                                   for m, x in result["downstream_seeds"].items()}
    result["minutes"] = (time.time() - t0) / 60
    write_text_atomic(done, json.dumps(result, indent=1))
    log(f"[{v.name}] " + ", ".join(f"{k} {x:.3f}" for k, x in result.items() if isinstance(x, float)))
    return result


def _interval(r: dict[str, Any], kind: str) -> str:
    lo, hi = r[f"{kind}_ci95"]
    return f"{r[f'{kind}_acc']:.3f} [{lo:.3f}, {hi:.3f}]"


def _curves(s: StudySettings, results: list[dict[str, Any]], path: Path) -> None:
    """Held-out MLM and pair accuracy (the pretraining's own evaluations) against tokens seen, per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    tokens_per_step = s.global_batch_size * s.max_seq_length
    for r in results:
        log = Path(s.out) / r["variant"] / "pretrain" / "metrics.jsonl"
        rows = [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
        rows = [x for x in rows if "valid_mlm_acc" in x]
        steps = [x["step"] * tokens_per_step / 1e6 for x in rows]
        axes[0].plot(steps, [x["valid_mlm_acc"] for x in rows], marker=".", label=r["variant"])
        axes[1].plot(steps, [x["valid_sop_acc"] for x in rows], marker=".", label=r["variant"])
    axes[0].set_title("held-out MLM accuracy")
    axes[1].set_title("pair-head accuracy on held-out SOP shards")
    for ax in axes:
        ax.set_xlabel("pretraining tokens (M)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(s: StudySettings, results: list[dict[str, Any]]) -> tuple[Path, ...]:
    """study.json, study.md (the paper's layout), study.png and curves.png in the study directory."""
    from albertlm.files import write_text_atomic

    out = Path(s.out)
    write_text_atomic(out / "study.json", json.dumps({"settings": asdict(s), "results": results}, indent=1))
    score_keys = sorted({k for r in results for k in r.get("downstream", {})})
    seeds = max((len(v) for r in results for v in r.get("downstream_seeds", {}).values()), default=1)
    head = ["variant", "params", "MLM acc", "SOP acc [95% CI]", "NSP acc [95% CI]"] + [
        f"{k} (mean ± sd, {seeds} seeds)" if seeds > 1 else k for k in score_keys] + (
        ["paper"] if any(r.get("paper") for r in results) else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["variant"], f"{r['parameters'] / 1e6:.2f}M", f"{r['mlm_acc']:.3f}", _interval(r, "sop"),
                 _interval(r, "nsp")]
        for k in score_keys:
            mean, sd = r.get("downstream", {}).get(k, float("nan")), r.get("downstream_sd", {}).get(k)
            cells.append(f"{mean:.3f} ± {sd:.3f}" if sd is not None and seeds > 1 else f"{mean:.3f}")
        if "paper" in head:
            cells.append(r.get("paper", ""))
        lines.append("| " + " | ".join(cells) + " |")
    n = results[0]["pairs"]
    lines += ["", f"Pair accuracies on {n // 2} held-out pairs per contrast, each scored with its negative (swapped "
              f"for SOP, another document's segment for NSP; {n} items): answering one label scores 0.500."]
    write_text_atomic(out / "study.md", "\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ["mlm_acc", "sop_acc", "nsp_acc"] + score_keys
    fig, ax = plt.subplots(figsize=(1.6 * len(results) * len(metrics) / 3 + 3, 3.8))
    width = 0.8 / len(metrics)
    for i, m in enumerate(metrics):
        values = [r.get(m, r.get("downstream", {}).get(m, 0.0)) for r in results]
        ax.bar([j + i * width for j in range(len(results))], values, width, label=m)
    ax.axhline(0.5, color="grey", lw=0.8, ls="--")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(results))], [r["variant"] for r in results])
    ax.set_ylim(0, 1)
    tokens = results[0].get("pretrain_tokens", s.steps * s.global_batch_size * s.max_seq_length)
    ax.set_title(f"{s.study} study ({Path(s.corpus).name}, {tokens / 1e6:.1f}M tokens per variant)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "study.png", dpi=110)
    plt.close(fig)
    _curves(s, results, out / "curves.png")
    return out / "study.json", out / "study.md", out / "study.png", out / "curves.png"


def run_study(s: StudySettings, report_only: bool = False, log=_log.info) -> tuple[list[dict[str, Any]], tuple]:
    variants = study_variants(s.study, {**BASE, **s.model}["hidden_size"])
    if s.variants:
        unknown = set(s.variants) - {v.name for v in variants}
        if unknown:
            raise UserError(f"--variants: unknown {sorted(unknown)}; {s.study} has {[v.name for v in variants]}")
    claim_study_dir(s, write=not report_only)
    if not report_only:
        data = prepare_data(s, {v.task for v in variants}, log)
        for v in variants:
            if s.variants is None or v.name in s.variants:
                run_variant(v, s, data, log)
    # A variant directory may be linked from another study (sharing's "all" is objective's "sop": the same
    # model, data and seed), so each row takes this study's name and paper column.
    results = [{**json.loads((Path(s.out) / v.name / "result.json").read_text()), "variant": v.name,
                "paper": v.paper} for v in variants if (Path(s.out) / v.name / "result.json").exists()]
    if not results:
        raise UserError(f"{s.out}: no finished variants to report")
    return results, report(s, results)
