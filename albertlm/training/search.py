"""``finetune --search N``: a hyperparameter search that respects seeds, on Optuna.

ALBERT is sensitive to the learning rate and the seed (large models stay at chance unless the rate is small;
small GLUE sets move by points between seeds). The search runs N trials over the learning rate, batch size,
warmup and epochs (ranges from the model's size, each overridable), each scored on dev; a trial whose loss
is no longer finite, or whose dev score falls below the median of the trials before it at the same step, is
pruned at that evaluation. The best setting is then trained again with ``--search-seeds`` seeds, so the
report shows how much of the score is the seed: their mean, spread and best. The best seed's model becomes
the run's model in ``--out``.

    RUN/search.db          the Optuna study (SQLite): run the same command again to resume it (the choices
                           its trials ran under are recorded in it; resuming under others is refused)
    RUN/trials/NNN/        one fine-tuning run per trial (search_run.json: the trial and seed it ran for)
    RUN/seeds/seed_S/      the best setting under seed S (retrained when search_run.json names another trial)
    RUN/search.json, search.md, search.png     every trial and seed, the table and the curve
    RUN/config.json, model.safetensors, ...    the best seed's model (and its metrics.json)
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from albertlm.card import CARD, read_card
from albertlm.config import PRESETS, AlbertConfig
from albertlm.errors import UserError
from albertlm.files import write_text_atomic
from albertlm.tasks.registry import Task
from albertlm.tokenizer import Tokenizer
from albertlm.training.finetune import Settings, check_out, train
from albertlm.training.finetune_data import Data
from albertlm.training.rundir import FINAL_FILES
from albertlm.training.tracking import Tracker

_log = logging.getLogger(__name__)
STUDY_FILE = "search.db"
REPORT_FILES = ("search.json", "search.md", "search.png")


@dataclass
class SearchSettings:
    """How the search runs; a range given as "LOW,HIGH" (or a list of batch sizes) replaces the default."""

    search: int = field(default=0, metadata={"help": "run N trials of a hyperparameter search (Optuna) before "
                                                     "training the best setting over --search-seeds seeds", "min": 0})
    search_seeds: int = field(default=3, metadata={"help": "seeds the best setting is trained with", "min": 1})
    search_lr: str | None = field(default=None, metadata={
        "help": "learning-rate range LOW,HIGH, sampled on a log scale (default: by model size, 1e-4,1e-3 up to "
                "H=512, 1e-5,1e-4 up to H=1024, else 5e-6,5e-5)", "metavar": "LOW,HIGH"})
    search_batch_sizes: str = field(default="16,32", metadata={"help": "batch sizes to choose from",
                                                                "metavar": "LIST"})
    search_warmup: str = field(default="0,0.2", metadata={"help": "warmup range (a fraction of the steps)",
                                                           "metavar": "LOW,HIGH"})
    search_epochs: str = field(default="1,4", metadata={
        "help": "epochs range (not searched when --max-steps is given)", "metavar": "LOW,HIGH"})
    search_evals: int = field(default=4, metadata={"help": "dev evaluations per trial (where pruning can stop it)",
                                                   "min": 1})


def _pair(text: str, flag: str) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"--{flag} {text!r}: give LOW,HIGH, e.g. 1e-5,1e-4") from None
    if not 0 <= low <= high or not math.isfinite(high):
        raise UserError(f"--{flag} {text!r}: need 0 <= LOW <= HIGH")
    return low, high


def lr_range(model_arg: str, overrides: dict[str, Any], given: str | None) -> tuple[float, float]:
    """The learning-rate range: given, else by hidden size (small models take larger rates)."""
    if given:
        low, high = _pair(given, "search-lr")
        if low <= 0:
            raise UserError(f"--search-lr {given!r}: learning rates are > 0")
        return low, high
    if model_arg in PRESETS:
        hidden = AlbertConfig.from_preset(model_arg, **overrides).hidden_size
    else:
        hidden = AlbertConfig.load(model_arg).hidden_size
    return (1e-4, 1e-3) if hidden <= 512 else (1e-5, 1e-4) if hidden <= 1024 else (5e-6, 5e-5)


def check_search(ss: SearchSettings, model_arg: str, overrides: dict[str, Any]) -> None:
    """Every range parses (one line otherwise) and Optuna is installed, before any data is read."""
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise UserError("--search needs optuna; pip install 'albertlm[search]'")
    lr_range(model_arg, overrides, ss.search_lr)
    _warmup(ss.search_warmup)
    _epochs(ss.search_epochs)
    _batch_sizes(ss.search_batch_sizes)


def _warmup(text: str) -> tuple[float, float]:
    low, high = _pair(text, "search-warmup")
    if high > 1:
        raise UserError(f"--search-warmup {text!r}: warmup is a fraction of the steps, from 0 to 1")
    return low, high


def _epochs(text: str) -> tuple[float, float]:
    low, high = _pair(text, "search-epochs")
    if low <= 0:
        raise UserError(f"--search-epochs {text!r}: a trial trains for more than 0 epochs, e.g. 1,4")
    return low, high


def _batch_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise UserError(f"--search-batch-sizes {text!r}: give sizes >= 1, e.g. 16,32")
    return sizes


class Pruning:
    """A trial's ``on_eval``: each dev evaluation goes to Optuna as the trial's k-th (trials of other batch
    sizes and epochs evaluate at other steps, so the median compares evaluations by their rank); raises
    TrialPruned when the loss is not finite or the pruner says the trial is hopeless."""

    def __init__(self, trial: Any):
        self.trial, self.evaluations = trial, 0

    def __call__(self, step: int, score: float | None, loss: float) -> None:
        import optuna

        self.evaluations += 1
        if not math.isfinite(loss):
            self.trial.set_user_attr("pruned_because", f"loss {loss} at step {step}")
            raise optuna.TrialPruned(f"the loss is {loss} at step {step}")
        if score is not None:
            self.trial.report(score, self.evaluations)
            if self.trial.should_prune():
                self.trial.set_user_attr("pruned_because", f"dev {score:.4f} below the median at evaluation "
                                                           f"{self.evaluations} (step {step})")  # fmt: skip
                raise optuna.TrialPruned(f"dev score {score:.4f} at step {step}")


def search(task: Task, data: Data, model_arg: str, tok: Tokenizer, out: Path, s: Settings, ss: SearchSettings,
           overwrite: bool = False) -> dict[str, Any]:  # fmt: skip
    """Run (or resume) the search into ``out``; returns the report (also search.json)."""
    import optuna

    check_search(ss, model_arg, s.config_overrides)
    _claim(out, model_arg, overwrite)
    out.mkdir(parents=True, exist_ok=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name="finetune", storage=f"sqlite:///{(out / STUDY_FILE).resolve()}", direction="maximize",
        load_if_exists=True, pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0))  # fmt: skip
    # a resumed study must not draw the first run's samples again: the sampler's seed moves with the history
    study.sampler = optuna.samplers.TPESampler(seed=s.seed + len(study.trials))
    space = _space(ss, model_arg, s)
    _same_choices(study, _choices(space, ss, s), out)
    state = optuna.trial.TrialState
    for stale in [t for t in study.trials if t.state == state.RUNNING]:  # its process was stopped: resume anew
        study.tell(stale.number, state=state.FAIL)
    done = [t for t in study.trials if t.state in (state.COMPLETE, state.PRUNED)]
    tracker = Tracker(out, s.report_to, name=f"{task.name}-{out.name}-search", params={**asdict(ss), **asdict(s)})
    try:
        for t in done:  # a resumed search logs its earlier trials again, so the log holds them all
            tracker.log(_trial_row(t), split="trial")
        for _ in range(max(0, ss.search - len(done))):
            trial = study.ask()
            try:
                params = _suggest(trial, space)
                score = _trial(task, data, model_arg, tok, out / "trials" / f"{trial.number:03d}", s, ss, params,
                               trial)  # fmt: skip
                study.tell(trial, score)
            except optuna.TrialPruned:
                study.tell(trial, state=state.PRUNED)
            except BaseException:  # (an error, or the user's Ctrl-C): never left RUNNING in the study
                study.tell(trial, state=state.FAIL)
                raise
            tracker.log(_trial_row(study.trials[trial.number]), split="trial")
        complete = [t for t in study.trials if t.state == state.COMPLETE]
        if not complete:
            lr = f"--search-lr {ss.search_lr}" if ss.search_lr else f"the default --search-lr {_shown(space['lr'])}"
            why = "; ".join(sorted({t.user_attrs.get("pruned_because", "hopeless") for t in study.trials}))
            raise UserError(f"every one of the {len(study.trials)} trials was pruned ({why}): try a lower range than "
                            f"{lr}, or more --search-evals")  # fmt: skip
        best = study.best_trial
        seeds = {}
        for i in range(ss.search_seeds):
            seed = s.seed + i
            seeds[seed] = _run(task, data, model_arg, tok, out / "seeds" / f"seed_{seed}", s, ss, best.params, seed,
                               trial=best.number)  # fmt: skip
            tracker.log({"step": len(study.trials) + i, "score": seeds[seed], "seed": seed}, split="seed")
        result = _report(study, best, seeds, task, space)
        _keep(out / "seeds" / f"seed_{result['seeds']['best_seed']}", out)
        _write_reports(result, out, task)
    except BaseException:
        tracker.finish(failed=True)
        raise
    tracker.finish({"best_trial_score": best.value, "seed_mean": result["seeds"]["mean"],
                    "seed_stdev": result["seeds"]["stdev"]}, len(study.trials))  # fmt: skip
    return result


def _trial_row(t: Any) -> dict[str, Any]:
    return {"step": t.number, **t.params, **({"score": t.value} if t.value is not None else {"pruned": 1})}


def _claim(out: Path, model_arg: str, overwrite: bool) -> None:
    """A search's folder: new, its own search to resume, or (--overwrite) replaced; never another run's."""
    if (out / STUDY_FILE).exists() and not overwrite:
        return  # resume
    check_out(out, model_arg, overwrite)
    if overwrite:
        for name in (STUDY_FILE, *REPORT_FILES):
            (out / name).unlink(missing_ok=True)
        for sub in ("trials", "seeds"):
            if (out / sub).is_dir():
                for run in (out / sub).iterdir():
                    if run.is_dir() and (run / "metrics.json").exists():  # our runs: they hold our metrics
                        shutil.rmtree(run)


def _space(ss: SearchSettings, model_arg: str, s: Settings) -> dict[str, Any]:
    space: dict[str, Any] = {"lr": lr_range(model_arg, s.config_overrides, ss.search_lr),
                             "batch_size": _batch_sizes(ss.search_batch_sizes),
                             "warmup": _warmup(ss.search_warmup)}  # fmt: skip
    if s.max_steps is None:
        space["epochs"] = _epochs(ss.search_epochs)
    return space


def _choices(space: dict[str, Any], ss: SearchSettings, s: Settings) -> dict[str, Any]:
    """What a study's trials are comparable under, by the flag that sets it: the space searched and how each
    trial trains and is scored. Recorded in the study; resuming it under other choices is refused."""
    return {"--search-lr": list(space["lr"]), "--search-batch-sizes": list(space["batch_size"]),
            "--search-warmup": list(space["warmup"]), "--search-epochs": list(space.get("epochs", [])),
            "--search-evals": ss.search_evals, "--max-steps": s.max_steps,
            "--max-seq-length": s.inference.max_seq_length, "--seed": s.seed}  # fmt: skip


def _same_choices(study: Any, choices: dict[str, Any], out: Path) -> None:
    recorded = study.user_attrs.get("choices")
    if recorded is None:
        if study.trials:
            return  # a study from before choices were recorded: nothing to compare
        study.set_user_attr("choices", choices)
        return
    changed = [f"{flag} was {_shown(recorded.get(flag))}, now {_shown(now)}" for flag, now in choices.items()
               if recorded.get(flag) != now]  # fmt: skip
    if changed:
        raise UserError(f"the search in {out} ran its trials with other choices ({'; '.join(changed)}): their scores "
                        "would not compare; resume it with the same flags, or start another search (another --out, "
                        "or --overwrite)")  # fmt: skip


def _shown(value: Any) -> str:
    return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) if isinstance(value, list) else \
        str(value)


def _suggest(trial: Any, space: dict[str, Any]) -> dict[str, Any]:
    params = {"lr": trial.suggest_float("lr", *space["lr"], log=True),
              "batch_size": trial.suggest_categorical("batch_size", space["batch_size"]),
              "warmup": trial.suggest_float("warmup", *space["warmup"])}  # fmt: skip
    if "epochs" in space:
        params["epochs"] = trial.suggest_float("epochs", *space["epochs"])
    return params


def _trial(task: Task, data: Data, model_arg: str, tok: Tokenizer, out: Path, s: Settings, ss: SearchSettings,
           params: dict[str, Any], trial: Any) -> float:  # fmt: skip
    """One trial's run; pruned (TrialPruned, the reason in its user attrs) when it diverges (its loss or
    gradient stays non-finite, which ends a run) or its dev score is not a number."""
    import optuna

    from albertlm.errors import NonFiniteOutput, TrainingError

    try:
        score = _run(task, data, model_arg, tok, out, s, ss, params, s.seed, Pruning(trial), trial=trial.number)
    except (TrainingError, NonFiniteOutput) as e:  # the run's stop on non-finite steps, or NaN logits on dev
        if "non-finite" not in str(e):
            raise
        trial.set_user_attr("pruned_because", f"diverged at lr {params['lr']:.3g} (non-finite loss or gradient)")
        raise optuna.TrialPruned(str(e)) from None
    if not math.isfinite(score):
        trial.set_user_attr("pruned_because", f"dev {task.main_metric} is {score}")
        raise optuna.TrialPruned(f"dev {task.main_metric} is {score}")
    return score


RUN_RECORD = "search_run.json"  # in each trial and seed folder: the trial and seed its model was trained for


def _run(task: Task, data: Data, model_arg: str, tok: Tokenizer, out: Path, s: Settings, ss: SearchSettings,
         params: dict[str, Any], seed: int, on_eval: Any = None, trial: int | None = None) -> float:  # fmt: skip
    """One fine-tuning run with ``params``; its best dev score. A finished run (metrics.json) trained for this
    trial, seed and parameters (its RUN_RECORD says so) is not redone; any other is trained again, so the
    model kept is the one the report names."""
    record = {"trial": trial, "seed": seed, "params": params}
    if (out / "metrics.json").exists() and _read_record(out) == record:
        return float(json.loads((out / "metrics.json").read_text())["metrics"][task.main_metric])
    run = replace(s, **params, seed=seed, progress=False, max_steps=s.max_steps if "epochs" not in params else None)
    steps = run.max_steps or math.ceil(run.epochs * math.ceil(len(data.train) / run.batch_size))
    run.eval_every = max(1, steps // ss.search_evals)
    (out / RUN_RECORD).unlink(missing_ok=True)  # (the folder's model is about to change)
    final = train(task, data, model_arg, tok, out, run, overwrite=True, on_eval=on_eval)
    write_text_atomic(out / RUN_RECORD, json.dumps(record, indent=1) + "\n")
    return float(final["metrics"][task.main_metric])


def _read_record(out: Path) -> Any:
    try:
        return json.loads((out / RUN_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _keep(src: Path, out: Path) -> None:
    """The best seed's model (its metrics.json and card too) become the run's own files in ``out``; the run's
    metrics.jsonl stays the search's log. A README.md of the user's own in ``out`` stays as it is."""
    for name in (*FINAL_FILES, "metrics.json", CARD):
        if name == CARD and not read_card(out)[1]:
            _log.warning("%s is not an albertlm model card; left as it is (the best seed's is in %s)", out / CARD, src)
            continue
        if (src / name).is_file():
            tmp = out / f".{name}.keep.tmp"
            shutil.copyfile(src / name, tmp)
            tmp.replace(out / name)


def _report(study: Any, best: Any, seeds: dict[int, float], task: Task, space: dict[str, Any]) -> dict[str, Any]:
    scores = list(seeds.values())
    trials = [{"number": t.number, "state": t.state.name.lower(), "params": t.params, "score": t.value,
               "pruned_because": t.user_attrs.get("pruned_because"),
               "evaluations": dict(sorted(t.intermediate_values.items()))} for t in study.trials]  # fmt: skip
    return {
        "task": task.name, "metric": task.main_metric, "space": space, "trials": trials,
        "best_trial": {"number": best.number, "params": best.params, "score": best.value},
        "seeds": {"scores": {str(k): v for k, v in seeds.items()}, "mean": statistics.fmean(scores),
                  "stdev": statistics.stdev(scores) if len(scores) > 1 else 0.0,
                  "min": min(scores), "max": max(scores), "best_seed": max(seeds, key=seeds.get)},
    }  # fmt: skip


def table(result: dict[str, Any]) -> str:
    keys = list(result["space"])
    lines = ["| trial | state | " + " | ".join(keys) + f" | {result['metric']} |",
             "|---" * (len(keys) + 3) + "|"]  # fmt: skip
    for t in result["trials"]:
        cells = [f"{t['params'].get(k, float('nan')):.3g}" for k in keys]
        score = f"{t['score']:.4f}" if t["score"] is not None else "-"
        if t["state"] == "pruned":
            score += f" (pruned: {t['pruned_because'] or 'hopeless'})"
        lines.append(f"| {t['number']} | {t['state']} | " + " | ".join(cells) + f" | {score} |")
    sd = result["seeds"]
    seeds = ", ".join(f"seed {k}: {v:.4f}" for k, v in sd["scores"].items())
    lines += ["", f"Best trial {result['best_trial']['number']} over {len(sd['scores'])} seeds: mean "
              f"{sd['mean']:.4f}, stdev {sd['stdev']:.4f}, range {sd['min']:.4f}-{sd['max']:.4f} ({seeds}); "
              f"the model of seed {sd['best_seed']} is kept.", ""]  # fmt: skip
    return "\n".join(lines)


def _write_reports(result: dict[str, Any], out: Path, task: Task) -> None:
    write_text_atomic(out / "search.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / "search.md", f"# Search: {task.name}\n\n{table(result)}")
    _plot(result, out / "search.png")


def _plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    done = [t for t in result["trials"] if t["score"] is not None]
    for size in sorted({t["params"]["batch_size"] for t in done}):
        pts = [t for t in done if t["params"]["batch_size"] == size]
        axes[0].scatter([t["params"]["lr"] for t in pts], [t["score"] for t in pts], label=f"batch {size}")
    for t in result["trials"]:
        if t["evaluations"]:
            axes[1].plot(list(map(int, t["evaluations"])), list(t["evaluations"].values()), marker="o",
                         alpha=0.6, linestyle="--" if t["state"] == "pruned" else "-")  # fmt: skip
    seeds = result["seeds"]["scores"]
    axes[0].scatter([result["best_trial"]["params"]["lr"]] * len(seeds), list(seeds.values()), marker="x",
                    color="black", label="best setting, seeds")  # fmt: skip
    axes[0].set_xscale("log")
    axes[0].set_xlabel("learning rate")
    axes[1].set_xlabel("step (dashed: pruned)")
    for ax in axes:
        ax.set_ylabel(f"dev {result['metric']}")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"search: {result['task']}, {len(result['trials'])} trials")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


__all__ = ["Pruning", "SearchSettings", "check_search", "search", "table"]
