"""The Python API in one call each: fine-tune a model, load any model or export folder, answer inputs.

    import albertlm
    result = albertlm.finetune("sst2", "data/glue_sst2", "runs/pretrain/final", "runs/sst2", lr=2e-5,
                               max_seq_length=128)
    predictor = albertlm.load("runs/sst2")                  # or an `albertlm export` folder
    predictor(["a charming film", "an awful , boring mess"])  # [{"label": "1", "score": ...}, ...]
    albertlm.predict("runs/mnli", [("a man sleeps", "nobody sleeps")])

``finetune`` is what ``albertlm finetune`` does (the command is a thin caller of it): its keywords are the
fields of ``Settings`` (lr, batch_size, max_steps, device, precision, ...) and of ``InferenceSettings``
(max_seq_length, doc_stride, ...), or whole ``settings`` / ``search`` objects.
"""

from __future__ import annotations

import logging
import os
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from albertlm.errors import UserError, check_settings
from albertlm.files import local_path

_log = logging.getLogger(__name__)


def finetune(task: str, data: str | Path, model: str | Path, out: str | Path, *, tokenizer: str | Path | None = None,
             settings: Any = None, columns: dict[str, Any] | None = None, train_file: str | Path | None = None,
             eval_file: str | Path | None = None, holdout: int = 0, limit_train: int = 0, limit_eval: int = 0,
             skip_bad_rows: bool = False, overwrite: bool = False, resume: bool = False, search: Any = None,
             **changes: Any) -> dict[str, Any]:  # fmt: skip
    """Fine-tune ``model`` (a model folder or a preset) on ``task`` (a registered name, or classification /
    regression / tagging / qa / choice for your own data with ``columns``) from ``data``; the kept model,
    its tokenizer and metrics go to ``out``. Returns the run's summary (metrics.json), or with ``search``
    (a ``SearchSettings`` whose ``search`` is the number of trials) the search's."""
    from albertlm.tasks import RowPolicy, get_task
    from albertlm.tasks.generic import with_columns
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.training.finetune import Settings, check_exit_settings, check_out, resolve_tokenizer, train
    from albertlm.training.finetune_data import load_data
    from albertlm.training.search import STUDY_FILE, SearchSettings, check_search
    from albertlm.training.search import search as run_search
    from albertlm.training.tracking import check_reachable

    out, model = Path(local_path(str(out), "out")), local_path(str(model), "model")
    data = local_path(str(data), "data")
    s = _settings(settings or Settings(), changes, Settings, InferenceSettings)
    check_settings(s)  # each setting as its flag checks it, before any work
    if search is not None:
        if not isinstance(search, SearchSettings):
            raise UserError(f"search must be a SearchSettings (e.g. SearchSettings(search={search!r})), not "
                            f"{type(search).__name__}")  # fmt: skip
        check_settings(search)
    searching = search is not None and search.search
    if not resume and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0 and not searching:
        # torchrun's agent restarted this worker: --out holds this job's own run, which goes on (from its
        # newest checkpoint, or afresh when none was written yet); the command's --overwrite was done at its start
        from albertlm.training.checkpoint import latest_valid
        from albertlm.training.finetune import CHECKPOINTS

        saved = (out / CHECKPOINTS).is_dir() and latest_valid(out / CHECKPOINTS) is not None
        resume, overwrite = (True, False) if saved else (False, True)
    if not (searching and (out / STUDY_FILE).exists()):  # (a search's own folder resumes it)
        check_out(out, model, overwrite, resume)  # before the data is read: a used --out fails at once
    the_task = with_columns(get_task(task), columns or {})
    check_exit_settings(the_task, s)
    check_reachable(s.report_to)  # a tracker not installed, or its server down: one line before the data is read
    if searching:
        if resume:
            raise UserError("--resume continues one run; a search resumes from its own study (run it again)")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise UserError("--search runs its trials one after another in one process; start it without torchrun")
        check_search(search, model, s.config_overrides)
    policy = RowPolicy(skip_bad_rows)
    tok = resolve_tokenizer(model, str(tokenizer) if tokenizer else None)
    found = load_data(the_task, data, policy, _path(train_file), _path(eval_file), holdout, limit_train, limit_eval,
                      s.seed)  # fmt: skip
    if policy.skipped:
        _log.info("skipped %d bad rows (first: %s)", policy.skipped, policy.first)
    if searching:
        result = run_search(the_task, found, model, tok, out, s, search, overwrite=overwrite)
    else:
        result = train(the_task, found, model, tok, out, s, overwrite=overwrite, resume=resume)
    result["task"] = (found.task or the_task).name
    result["skipped_rows"] = {"count": policy.skipped, "first": policy.first}
    return result


def distill(task: str, data: str | Path, teacher: str | Path, student: str | Path, out: str | Path, *,
            settings: Any = None, distill_settings: Any = None, columns: dict[str, Any] | None = None,
            train_file: str | Path | None = None, eval_file: str | Path | None = None, holdout: int = 0,
            limit_train: int = 0, limit_eval: int = 0, skip_bad_rows: bool = False, overwrite: bool = False,
            resume: bool = False, **changes: Any) -> dict[str, Any]:  # fmt: skip
    """Distil ``teacher`` (a model folder: albertlm or HuggingFace) into ``student`` (a preset, shaped by
    ``settings.config_overrides``, or a model folder) on ``task``; what ``albertlm distill`` does. The student
    uses the teacher's tokenizer; it, its tokenizer and metrics go to ``out`` (with ``finetune_teacher``
    the teacher fine-tuned first goes to ``out/teacher``). ``changes`` set fields of ``Settings`` /
    ``InferenceSettings`` as ``finetune``'s do. Returns the run's summary (metrics.json)."""
    from albertlm.tasks import RowPolicy, get_task
    from albertlm.tasks.generic import with_columns
    from albertlm.tasks.kinds import InferenceSettings
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.distill import DistillSettings, prepare_teacher
    from albertlm.training.distill import distill as run_distill
    from albertlm.training.finetune import Settings, check_exit_settings, check_out
    from albertlm.training.finetune_data import load_data
    from albertlm.training.tracking import check_reachable

    out, teacher, student = Path(out), str(teacher), str(student)
    s = _settings(settings or Settings(), changes, Settings, InferenceSettings)
    d = replace(distill_settings or DistillSettings(), teacher=teacher)
    check_settings(s)
    check_settings(d)
    if not Path(teacher).is_dir():
        raise UserError(f"--teacher {teacher} is not a folder; give a model folder (albertlm or HuggingFace)")
    if task == "general":  # task-agnostic: raw text, the encoder's hidden states and attention
        from albertlm.training.general_distill import distill_general

        if d.finetune_teacher or d.augment:
            raise UserError("--task general distils the pretrained teacher on raw text: --finetune-teacher and "
                            "--augment are for a task")  # fmt: skip
        return distill_general(data, teacher, student, out, s, d, overwrite=overwrite, resume=resume)
    check_out(out, student, overwrite, resume)
    the_task = with_columns(get_task(task), columns or {})
    check_exit_settings(the_task, s)
    check_reachable(s.report_to)
    policy = RowPolicy(skip_bad_rows)
    found = load_data(the_task, data, policy, _path(train_file), _path(eval_file), holdout, limit_train, limit_eval,
                      s.seed)  # fmt: skip
    if policy.skipped:
        _log.info("skipped %d bad rows (first: %s)", policy.skipped, policy.first)
    teacher_dir = prepare_teacher(the_task, found, teacher, out, s, d)
    tok = load_tokenizer(teacher_dir)  # the student reads the teacher's tokens
    if d.augment:
        from albertlm.tasks.kinds import kind_of
        from albertlm.training.augment import augment
        from albertlm.training.distill import Teacher

        emb = Teacher.load(teacher_dir, kind_of(found.task or the_task).architecture).word_embeddings()
        more = augment(found.train, emb, tok, d.augment, d.augment_prob, d.augment_neighbours, s.seed,
                       out / "augment", {"teacher": teacher_dir, "train": found.train_path})  # fmt: skip
        found = replace(found, train=more)
    result = run_distill(the_task, found, student, teacher_dir, tok, out, s, d, overwrite=overwrite, resume=resume)
    result["task"] = (found.task or the_task).name
    result["skipped_rows"] = {"count": policy.skipped, "first": policy.first}
    return result


def _settings(base: Any, changes: dict[str, Any], cls: type, inference_cls: type) -> Any:
    """``base`` with the keyword changes, each routed to the settings or their ``inference`` part."""
    own = {f.name for f in fields(cls)} - {"inference"}
    inference = {f.name for f in fields(inference_cls)}
    unknown = sorted(set(changes) - own - inference)
    if unknown:
        raise UserError(f"finetune() got unknown settings {', '.join(unknown)}; the settings are the fields of "
                        f"{cls.__name__} and {inference_cls.__name__}")  # fmt: skip
    s = replace(base, **{k: v for k, v in changes.items() if k in own})
    return replace(s, inference=replace(s.inference, **{k: v for k, v in changes.items() if k in inference}))


def _path(value: str | Path | None) -> Path | None:
    return Path(local_path(str(value))) if value is not None else None


def load(model: str | Path, *, engine: str = "auto", device: str = "auto", precision: str = "auto",
         threads: int | None = None, tokenizer: str | Path | None = None, task: str | None = None,
         **inference: Any) -> Any:
    """A ``Predictor`` for a model folder (the torch engine, on ``device``) or an `albertlm export` folder
    (``engine="auto"``: onnx, or executorch for a ``--format executorch`` folder; or openvino); ``inference``
    sets InferenceSettings fields (max_seq_length, eval_batch_size, an exit rule, ...). Call it on a list of
    inputs."""
    from albertlm.deploy.export import MANIFEST_FILE
    from albertlm.deploy.inference import Predictor

    if engine == "auto":
        engine = _export_engine(Path(model) / MANIFEST_FILE)
    return Predictor.load(model, engine=engine, threads=threads, tokenizer=tokenizer, task=task,
                          overrides=inference or None, precision=precision, device=device)  # fmt: skip


def _export_engine(manifest: Path) -> str:
    """torch for a model folder; for an export, the engine of its format (a damaged deploy.json is left to the
    engine, which names it)."""
    import json

    if not manifest.is_file():
        return "torch"
    try:
        return "executorch" if "pte" in json.loads(manifest.read_text()) else "onnx"
    except (OSError, ValueError, TypeError):
        return "onnx"


def predict(model: str | Path, inputs: list[Any], **options: Any) -> list[dict[str, Any]]:
    """``load(model, **options)(inputs)``: one answer per input (a text, a pair, or a JSON-style object)."""
    return load(model, **options)(inputs)
