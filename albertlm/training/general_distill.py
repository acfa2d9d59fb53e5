"""Task-agnostic distillation: the teacher's hidden states and attention taught on raw text, giving a general
small ALBERT that is then fine-tuned (or task-distilled) as usual (TinyBERT's general distillation, MiniLM).

    albertlm distill --task general --data corpus/ --teacher path/to/bert --student albert-tiny \\
        --set num_hidden_layers=4 --max-steps 20000 --out runs/general-student
    albertlm finetune --task sst2 --data shared/data/glue_sst2 --model runs/general-student --out runs/sst2

``--data`` is a text file or a folder of ``*.txt`` files; each line (blank lines skipped) is encoded with the
teacher's tokenizer and lines are packed into sequences of up to ``--max-seq-length`` tokens ([CLS] ... [SEP]).
With ``--mask-prob p`` both models see a share p of the tokens as [MASK] (MLM-style inputs); 0 shows the text
as it is, as TinyBERT's general distillation does. The losses are the task distillation's hidden and attention
terms (``albertlm.training.distill``; there are no logits to match). The last 2 % of the sequences (at least
one) are held out: their loss is the run's evaluation, and the student of the lowest one is kept. Steps,
checkpoints and ``--resume`` use fine-tuning's step machinery and checkpoint format.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from albertlm.card import update_card
from albertlm.config import PRESETS, AlbertConfig
from albertlm.errors import DataError, TrainingError, UserError
from albertlm.files import write_text_atomic
from albertlm.model import AlbertModel
from albertlm.tokenizer import Tokenizer, load_tokenizer
from albertlm.training.distill import (
    DistillSettings,
    DistillStudent,
    Teacher,
    check_student_init,
    embeddings_from_teacher,
)
from albertlm.training.finetune import CHECKPOINTS, OUTPUT_FILES, Settings, check_out
from albertlm.training.optim import build_optimizer, build_scheduler
from albertlm.training.steps import Stepper, to_device
from albertlm.training.tracking import Tracker

_log = logging.getLogger(__name__)
HELD_OUT = 0.02  # the share of sequences held out for the evaluation loss


def read_lines(data: Path) -> list[str]:
    files = sorted(data.glob("*.txt")) if data.is_dir() else [data]
    if not files or not all(f.is_file() for f in files):
        raise DataError(f"--data {data}: give a text file or a folder of *.txt files (one sentence or paragraph a "
                        "line) for --task general")  # fmt: skip
    lines = []
    for f in files:
        try:
            lines += [line.strip() for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        except UnicodeDecodeError:
            raise DataError(f"{f} is not UTF-8 text; --task general reads plain text files") from None
    return lines


def pack(lines: list[str], tok: Tokenizer, length: int) -> list[list[int]]:
    """Lines -> token sequences of at most ``length`` ([CLS] + pieces + [SEP]), consecutive lines packed."""
    room, seqs, cur = length - 2, [], []
    for ids in tok.encode_batch(lines):
        ids = ids[:room]
        if cur and len(cur) + len(ids) > room:
            seqs.append([tok.cls_id, *cur, tok.sep_id])
            cur = []
        cur += ids
    if cur:
        seqs.append([tok.cls_id, *cur, tok.sep_id])
    return seqs


def collate(seqs: list[list[int]], tok: Tokenizer, mask_prob: float, rng: np.random.Generator) -> dict:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tok.pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
    attention = (ids != tok.pad_id).long()
    if mask_prob:
        real = attention.bool() & (ids != tok.cls_id) & (ids != tok.sep_id)
        chosen = torch.from_numpy(rng.random(ids.shape) < mask_prob) & real
        ids = ids.masked_fill(chosen, tok.mask_id)
    return {"input_ids": ids, "attention_mask": attention, "token_type_ids": torch.zeros_like(ids)}


def distill_general(data: str | Path, teacher_dir: str, student: str, out: Path, s: Settings, d: DistillSettings,
                    overwrite: bool = False, resume: bool = False) -> dict[str, Any]:  # fmt: skip
    """Teach ``student`` (a preset shaped by ``s.config_overrides``, or a model folder) the teacher's hidden
    states and attention on the text under ``data``; the student (an ``AlbertModel``) and the teacher's
    tokenizer go to ``out``. Returns the run's summary (metrics.json)."""
    from albertlm.training.distributed import cleanup, init_distributed
    from albertlm.training.rundir import remove_checkpoints

    check_out(out, student, overwrite, resume)
    _check_request(s, d)
    check_student_init(d, student)
    d = replace(d, soft_weight=0.0, hard_weight=0.0)
    tok = load_tokenizer(teacher_dir)
    length = s.inference.max_seq_length or 128
    train, dev = _split(data, tok, length)
    batch, per_epoch, total, lr, warmup_steps = _schedule(s, len(train))
    torch.manual_seed(s.seed)
    model = _student(student, s, tok)
    teacher = Teacher.load(teacher_dir, "AlbertModel")
    if d.student_init == "teacher-embeddings":
        embeddings_from_teacher(model, teacher)
    info = init_distributed(s.device)
    if info.enabled:
        cleanup(info)
        raise UserError("--task general runs in one process; start it without torchrun")
    teacher.to(info.device)
    module = DistillStudent(model, teacher, d)

    def optimizer(m: torch.nn.Module) -> tuple[Any, Any]:
        opt = build_optimizer(m, "adamw", lr, s.weight_decay)
        return opt, build_scheduler(opt, warmup_steps, total)

    stepper = Stepper(module, info, s.precision, optimizer, s.clip_norm, s.max_nonfinite, compile=s.compile)
    order, masks = random.Random(s.seed), np.random.default_rng(s.seed)
    step, losses, best, elapsed = 0, [], {}, 0.0
    run_settings = {"task": "general", "data": str(data), "student": student, "lr": lr, "batch_size": batch,
                    "total": total, "max_seq_length": length, "seed": s.seed, "distill": asdict(d),
                    "overrides": s.config_overrides}  # fmt: skip
    if resume:
        step, losses, best, elapsed = _restore(out, info, stepper, module, run_settings, order, masks)
    elif overwrite:
        for name in OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
        remove_checkpoints(out / CHECKPOINTS)
    out.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(out, s.report_to, name=f"general-{out.name}", params=run_settings, resumed_step=step or None)
    from tqdm import tqdm

    bar = tqdm(total=total, initial=step, desc="distill general", disable=not s.progress, unit="step")
    t0 = time.time() - elapsed
    eval_every = s.eval_every or max(1, min(total, per_epoch))
    batches: list[list[int]] = []
    pass_start = order.getstate()  # the order before this pass's shuffle: a resume draws the same one again
    try:
        while step < total:
            if not batches:  # a fresh shuffled pass (its position is the step: the order is replayed on resume)
                idx = list(range(len(train)))
                pass_start = order.getstate()
                order.shuffle(idx)
                batches = [idx[i : i + batch] for i in range(0, len(idx), batch)][step % per_epoch :]
            rows = batches.pop(0)
            module.train()
            inputs = to_device(collate([train[i] for i in rows], tok, d.mask_prob, masks), info.device)
            with stepper.autocast():
                loss = stepper.forward(**inputs).loss
            stepper.backward(loss)
            stepper.apply(float(loss.detach()))
            step += 1
            losses = [*losses[-49:], float(loss.detach())]
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", lr=f"{stepper.lr():.2e}")
            if step % eval_every == 0 or step == total:
                row = {"step": step, "train_loss": float(np.mean(losses[-50:])), "lr": stepper.lr(),
                       "dev_loss": _evaluate(module, dev, tok, batch, info.device, stepper),
                       "elapsed_s": time.time() - t0}  # fmt: skip
                best = _log_and_keep(row, best, tracker, model, tok, out, length)
            if s.save_every and step % s.save_every == 0 and step < total:
                progress = {"step": step, "epoch": step // per_epoch, "step_in_epoch": step % per_epoch,
                            "losses": losses, "best": best, "elapsed": time.time() - t0}  # fmt: skip
                _save_checkpoint(out, stepper, module, info, s, progress, pass_start, masks, batch, run_settings)
        bar.close()
        stepper.check_trained(step, "the student was not kept")
    except BaseException:
        tracker.finish(failed=True)
        raise
    finally:
        cleanup(info)
    final = {"task": "general", "teacher": teacher_dir, "student": student, "data": str(data),
             "train_sequences": len(train), "dev_sequences": len(dev), "steps": total, "batch_size": batch, "lr": lr,
             "max_seq_length": length, "mask_prob": d.mask_prob, "student_init": d.student_init, "seed": s.seed,
             "train_seconds": time.time() - t0,
             "student_parameters": model.num_parameters(), "losses": {k: v for k, v in d.losses().items() if v},
             "layer_pairs": module.pairs, "best_step": best["step"],
             "metrics": {"dev_loss": best["dev_loss"]}}  # fmt: skip
    _write_results(out, final)
    tracker.finish(final["metrics"], best["step"])
    return final


def _schedule(s: Settings, sequences: int) -> tuple[int, int, int, float, int]:
    """Batch size, steps per pass, total steps, peak learning rate and warmup steps, from the settings' values
    or general distillation's defaults (TinyBERT's: batch 32, lr 1e-4, a tenth of the steps warming up)."""
    batch = s.batch_size or 32
    per_epoch = math.ceil(sequences / batch)
    total = s.max_steps or max(1, math.ceil((s.epochs or 1.0) * per_epoch))
    warmup = s.warmup if s.warmup is not None else 0.1
    warmup_steps = int(warmup * total) if warmup < 1 else int(min(warmup, total))
    return batch, per_epoch, total, s.lr or 1e-4, warmup_steps


def _check_request(s: Settings, d: DistillSettings) -> None:
    """Refuse what a task-agnostic distillation cannot do, before anything loads."""
    if not (d.hidden_weight or d.attention_weight):
        raise UserError("--task general teaches hidden states and attention: give --hidden-weight or "
                        "--attention-weight above 0")  # fmt: skip
    if s.exits not in (None, "none"):
        raise UserError("--exits: a general student has no classifier yet; add exits when it is fine-tuned")


def _split(data: str | Path, tok: Tokenizer, length: int) -> tuple[list, list]:
    """The text under ``data`` packed into ``length``-token sequences of the teacher's tokens: (train, held out),
    the last ``HELD_OUT`` share (at least one) held out."""
    seqs = pack(read_lines(Path(data)), tok, length)
    if len(seqs) < 2:
        raise DataError(f"--data {data}: {len(seqs)} sequence(s) of text; general distillation needs more text")
    held = max(1, round(len(seqs) * HELD_OUT))
    return seqs[:-held], seqs[-held:]


def _log_and_keep(row: dict[str, float], best: dict, tracker: Tracker, model: AlbertModel, tok: Tokenizer,
                  out: Path, length: int) -> dict:  # fmt: skip
    """One evaluation's row logged; the student saved to ``out`` when its held-out loss is the lowest yet (the
    tokenizer with the first). Returns the best so far."""
    tracker.log(row, split="eval")
    _log.info("step %d: %s", row["step"], ", ".join(f"{k}={v:.4f}" for k, v in row.items() if k != "step"))
    if best and row["dev_loss"] >= best["dev_loss"]:
        return best
    model.save_pretrained(out)
    if not best:
        tok.save(out, model_max_length=min(length, model.config.max_position_embeddings))
    return {"dev_loss": row["dev_loss"], "step": row["step"]}


def _save_checkpoint(out: Path, stepper: Stepper, module: DistillStudent, info: Any, s: Settings,
                     progress: dict[str, Any], pass_start: tuple, masks: np.random.Generator, batch: int,
                     run_settings: dict) -> None:  # fmt: skip
    """A training checkpoint under ``out`` (as fine-tuning writes them): the student and its projections, the
    optimizer, both random streams (the pass's shuffle from its start), ``progress`` and the run's settings."""
    from albertlm.training import checkpoint as ckpt

    state = {"model": module.state_dict(), "sharded": None, "model_config": module.student.config,
             "architecture": "AlbertModel", "optimizer": stepper.optimizer.state_dict(),
             "scheduler": stepper.scheduler.state_dict(), "scaler": None, "rng": ckpt.rng_state(),
             "host_rng": ckpt.host_rng_state(), "order_rng": [pass_start[0], list(pass_start[1]), pass_start[2]],
             "mask_rng": masks.bit_generator.state, "nonfinite": stepper.nonfinite, "tokens_seen": 0,
             "world_size": 1, "global_batch_size": batch, **progress,
             "config": json.loads(json.dumps(run_settings, default=str))}  # fmt: skip
    ckpt.save_training_state(out / CHECKPOINTS, state, info, s.keep_last)


def _student(student: str, s: Settings, tok: Tokenizer) -> AlbertModel:
    """The student: a preset shaped by ``s.config_overrides`` and sized to the teacher's vocabulary, or a model
    folder whose vocabulary covers it."""
    if student in PRESETS:
        return AlbertModel(AlbertConfig.from_preset(student, vocab_size=tok.vocab_size, **s.config_overrides))
    if not Path(student).is_dir():
        raise UserError(f"--student {student}: neither a preset ({', '.join(PRESETS)}) nor a model folder")
    model = AlbertModel.from_pretrained(Path(student), **s.config_overrides)
    if model.config.vocab_size < tok.vocab_size:
        raise UserError(f"the student's vocab ({model.config.vocab_size}) is smaller than the teacher's tokenizer "
                        f"({tok.vocab_size})")  # fmt: skip
    return model


def _restore(out: Path, info: Any, stepper: Stepper, module: DistillStudent, run_settings: dict,
             order: random.Random, masks: np.random.Generator) -> tuple[int, list, dict, float]:  # fmt: skip
    """--resume: the newest valid checkpoint under ``out`` put back into the stepper, the student and both
    random streams (refused when its settings are not these); returns (step, losses, best, elapsed)."""
    from albertlm.training import checkpoint as ckpt

    state = ckpt.load_training_state(out / CHECKPOINTS, info, None)
    if state is None:
        raise TrainingError(f"--resume: no valid checkpoint under {out / CHECKPOINTS}; start afresh with "
                            "--overwrite")  # fmt: skip
    if state["config"] != json.loads(json.dumps(run_settings, default=str)):
        raise TrainingError(f"--resume: {state['path']} was written with other settings; resume with the same "
                            "ones, or start afresh with --overwrite")  # fmt: skip
    ckpt.restore(state, stepper.wrapped, module, stepper.optimizer, stepper.scheduler, stepper.scaler, info, False)
    v, internal, gauss = state["order_rng"]
    order.setstate((v, tuple(internal), gauss))
    masks.bit_generator.state = state["mask_rng"]
    ckpt.set_host_rng_state(state["host_rng"])
    if state["rng"] is not None:
        ckpt.set_rng_state(state["rng"])
    _log.info("resumed from %s at step %d", state["path"], state["step"])
    return state["step"], state["losses"], state["best"], state["elapsed"]


def _write_results(out: Path, final: dict[str, Any]) -> None:
    """metrics.json and the model card of a finished general distillation."""
    write_text_atomic(out / "metrics.json", json.dumps(final, indent=2) + "\n")
    losses_text = ", ".join(f"{k} x{v:g}" for k, v in final["losses"].items())
    student = final["student"]
    update_card(out, f"distilled task-agnostically from the teacher {final['teacher']} on "
                f"{final['train_sequences']} sequences of {final['data']} for {final['steps']} steps ({losses_text}), "
                f"the student of step {final['best_step']} kept",
                base_model=None if student in PRESETS else student, fresh=True,
                facts={"teacher": final["teacher"], "losses": losses_text, "mask prob": final["mask_prob"],
                       "lr": final["lr"], "batch size": final["batch_size"], "max_seq_length": final["max_seq_length"],
                       "seed": final["seed"], "student init": final["student_init"]})  # fmt: skip


@torch.no_grad()
def _evaluate(module: DistillStudent, dev: list, tok: Tokenizer, batch: int, device: torch.device,
              stepper: Stepper) -> float:  # fmt: skip
    """The mean distillation loss over the held-out sequences (plain text: no masking)."""
    module.eval()
    total, n = 0.0, 0
    for i in range(0, len(dev), batch):
        rows = dev[i : i + batch]
        inputs = to_device(collate(rows, tok, 0.0, np.random.default_rng(0)), device)
        with stepper.autocast():
            total += float(module(**inputs).loss) * len(rows)
        n += len(rows)
    return total / n
