"""Task distillation: a teacher (an albertlm folder, or a HuggingFace folder of any BERT-family architecture)
teaches an ALBERT student on the task's data, through fine-tuning's own loop (``FineTuning``: data, steps,
evaluation, the kept best model, checkpoints, ``--resume``, trackers), with the teacher's losses in place of
(or beside) the gold labels.

    albertlm distill --task sst2 --data shared/data/glue_sst2 --teacher runs/ft/teacher --student albert-tiny \\
        --set num_hidden_layers=4 --out runs/distill/sst2
    albertlm distill ... --teacher path/to/bert --finetune-teacher    # fine-tune the teacher first (out/teacher)

The loss of one batch (each term weighted by its flag; TextBrewer's defaults unless said):

- soft (``--soft-weight`` 1, ``--temperature`` 4): KL(softmax(t / T) || softmax(s / T)) x T^2 over the
  classes, the choices, each token's tags (tagging) or the start and end positions (span QA); MSE for
  regression. Hinton's T^2 keeps the gradient's size the same whatever T.
- hard (``--hard-weight`` 0): the student's own loss on the gold labels.
- hidden (``--hidden-weight`` 1): MSE between W h_s and h_t over the real tokens, for each pair of the layer
  map (TinyBERT's one learned W: H_s -> H_t, shared by the layers, embeddings included as layer 0).
- attention (``--attention-weight`` 1): where student and teacher have as many heads, KL between their
  attention distributions (MiniLM); where not, KL between their value relations softmax(V V^T / sqrt(d))
  over R relation heads (MiniLM's value relation, split into R = gcd(N_s, N_t) heads as MiniLMv2 does).

The layer map pairs the student's computed layers with the teacher's: ``uniform`` pairs student layer j of
L_s with teacher layer round(j L_t / L_s) (TinyBERT's g(m) = m L_t / L_s), so a shared-layer student maps
its computed depth, not its stored groups; or ``0:0,1:3,2:6`` by hand. With ``--exits`` every exit's logits
learn from the teacher's too (depth-weighted as PABEE's exits are).

The student uses the teacher's tokenizer (its vocab sizes the student's embeddings), and is saved as a normal
albertlm model folder: evaluate / predict / export / serve take it as they take any fine-tuned model.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.card import update_card
from albertlm.config import PRESETS
from albertlm.errors import DataError, UserError
from albertlm.files import read_json
from albertlm.heads import HEADS, depth_weighted
from albertlm.model import AlbertPreTrainedModel
from albertlm.tasks.kinds import kind_of
from albertlm.training.distill_losses import (
    capture_attention,
    capture_values,
    hidden_loss,
    last_blocks,
    layer_pairs,
    relation_kl,
    soft_loss,
    value_relation,
)
from albertlm.training.finetune import FineTuning, Settings, check_out
from albertlm.training.finetune_data import Data

_log = logging.getLogger(__name__)

# the transformers Auto class that loads a teacher for each of our head classes
HF_AUTO = {
    "AlbertForSequenceClassification": "AutoModelForSequenceClassification",
    "AlbertForTokenClassification": "AutoModelForTokenClassification",
    "AlbertForQuestionAnswering": "AutoModelForQuestionAnswering",
    "AlbertForMultipleChoice": "AutoModelForMultipleChoice",
    "AlbertModel": "AutoModel",  # task-agnostic distillation: the encoder alone
}
LABEL_KEYS = ("labels", "start_positions", "end_positions", "is_impossible")  # gold answers: the teacher gets none
STUDENT_LR = 1e-4  # a random-init student's default peak lr (TextBrewer's T4-tiny / T3 examples)
LOSSES = ("soft", "hard", "hidden", "attention")
STUDENT_INITS = ("random", "teacher-embeddings")


@dataclass
class DistillSettings:
    """What the teacher teaches and how much each loss weighs (the module docstring gives the rule)."""

    teacher: str = field(default="", metadata={"help": "the teacher: an albertlm model folder or a HuggingFace "
                                                       "folder (BERT, RoBERTa, ELECTRA, DistilBERT, ...)"})
    temperature: float = field(default=4.0, metadata={"help": "softmax temperature of the soft loss (TextBrewer's "
                                                              "default)", "above": 0})  # fmt: skip
    soft_weight: float = field(default=1.0, metadata={"help": "weight of the teacher's logits (KL; MSE for "
                                                              "regression)", "min": 0})  # fmt: skip
    hard_weight: float = field(default=0.0, metadata={"help": "weight of the gold labels' loss", "min": 0})
    hidden_weight: float = field(default=1.0, metadata={"help": "weight of the hidden-state MSE (through a learned "
                                                                "projection)", "min": 0})  # fmt: skip
    attention_weight: float = field(default=1.0, metadata={
        "help": "weight of the attention KL (MiniLM's value relation where the head counts differ)", "min": 0})
    layer_map: str = field(default="uniform", metadata={
        "help": "student:teacher layer pairs, e.g. 0:0,1:3,2:6 (0 = embeddings), or uniform", "metavar": "MAP"})
    relation_heads: int = field(default=0, metadata={
        "help": "relation heads of the value relation (0: gcd of the two head counts)", "min": 0})
    finetune_teacher: bool = field(default=False, metadata={
        "help": "fine-tune the teacher on the task first (albertlm finetune into OUT/teacher; a BERT folder is "
                "converted), then distill from it"})
    teacher_lr: float | None = field(default=None, metadata={"help": "the teacher's fine-tuning lr (default: the "
                                                                     "task's)", "above": 0})  # fmt: skip
    teacher_epochs: float | None = field(default=None, metadata={
        "help": "the teacher's fine-tuning epochs (default: the task's)", "above": 0})

    augment: int = field(default=0, metadata={
        "help": "augmented copies of each training sentence, words replaced by their nearest neighbours in the "
                "teacher's embeddings (TinyBERT's augmentation; its paper uses 20); 0: none", "min": 0})
    augment_prob: float = field(default=0.4, metadata={"help": "probability that a word is replaced (TinyBERT's)",
                                                         "min": 0, "max": 1})  # fmt: skip
    augment_neighbours: int = field(default=15, metadata={"help": "neighbours a replacement is drawn from "
                                                                  "(TinyBERT's K)", "min": 1})  # fmt: skip

    student_init: str = field(default="random", metadata={
        "help": "random (the preset's init), or teacher-embeddings: the student's E-wide word table starts as the "
                "teacher's word table projected on its top E singular directions (U_E S_E of its SVD), so a preset "
                "student begins with the teacher's lexicon; a preset student only",
        "choices": STUDENT_INITS})

    mask_prob: float = field(default=0.0, metadata={
        "help": "--task general: share of the tokens both models see as [MASK] (0: the text as it is)",
        "min": 0, "max": 1})

    def losses(self) -> dict[str, float]:
        return {name: getattr(self, f"{name}_weight") for name in LOSSES}


# --- the teacher ------------------------------------------------------------------------------------
@dataclass
class TeacherOutput:
    logits: dict[str, torch.Tensor]  # "logits", or "start_logits" and "end_logits"
    hidden_states: tuple[torch.Tensor, ...] | None  # embeddings, then each layer: (N, S, H_t)
    attentions: list[torch.Tensor] | None  # each layer's (N, N_t, S, S) distributions
    values: list[torch.Tensor] | None  # each layer's (N, S, H_t) values


class Teacher:
    """A frozen teacher in eval mode: an albertlm head, or a transformers model of the same task."""

    def __init__(self, model: nn.Module, architecture: str, hf: bool, path: str):
        self.model, self.architecture, self.hf, self.path = model.eval().requires_grad_(False), architecture, hf, path
        cfg = model.config
        # num_hidden_layers: an albertlm teacher's computed depth (of K blocks each, the last one read)
        self.hidden_size, self.num_layers = cfg.hidden_size, cfg.num_hidden_layers
        self.num_heads = cfg.num_attention_heads
        self.labels = _label_names(cfg)
        params = inspect.signature(model.forward).parameters
        self.takes_types = "token_type_ids" in params and getattr(cfg, "type_vocab_size", 2) > 1

    @classmethod
    def load(cls, path: str | Path, architecture: str) -> Teacher:
        path = Path(path)
        if not (path / "config.json").is_file():
            raise UserError(f"--teacher {path}: no config.json there; give a fine-tuned model folder (albertlm or "
                            "HuggingFace), or a pretrained one with --finetune-teacher")  # fmt: skip
        cfg = read_json(path / "config.json")
        if cfg.get("model_type", "albert") == "albert":
            have = (cfg.get("architectures") or [None])[0]
            if have != architecture and architecture != "AlbertModel":  # (any albertlm model has the encoder)
                raise UserError(f"--teacher {path} is a {have}, the task needs a {architecture}; fine-tune it on "
                                "the task first (--finetune-teacher)")  # fmt: skip
            return cls(HEADS[architecture].cls.from_pretrained(path), architecture, False, str(path))
        if architecture not in HF_AUTO:
            raise UserError(f"--teacher {path}: a transformers teacher for {architecture} is not supported; "
                            "distill from an albertlm teacher (--finetune-teacher)")  # fmt: skip
        import transformers

        auto = getattr(transformers, HF_AUTO[architecture])
        model = auto.from_pretrained(str(path), attn_implementation="eager")  # eager: attentions come out
        return cls(model, architecture, True, str(path))

    def word_embeddings(self) -> torch.Tensor:
        """(V, E) the teacher's input word embeddings."""
        if self.hf:
            return self.model.get_input_embeddings().weight
        return self.model.albert.embeddings.word_embeddings.weight

    def to(self, device: torch.device) -> Teacher:
        self.model.to(device)
        return self

    @torch.no_grad()
    def __call__(self, batch: dict[str, torch.Tensor], hidden: bool, attention: bool, values: bool) -> TeacherOutput:
        inputs = {k: v for k, v in batch.items() if k not in LABEL_KEYS and k != "p_mask"}
        if self.hf:
            if not self.takes_types:
                inputs.pop("token_type_ids", None)
            with capture_values(self.model) if values else contextlib.nullcontext([]) as found:
                out = self.model(**inputs, output_hidden_states=hidden, output_attentions=attention and not values)
            logits = _logits(out)
            return TeacherOutput(logits, out.hidden_states if hidden else None,
                                 list(out.attentions) if attention and not values else None,
                                 [v for v in found] if values else None)  # fmt: skip
        with capture_attention(self.model) if attention or values else contextlib.nullcontext(None) as calls:
            out = self.model(**inputs, output_hidden_states=hidden)
        att = vals = None
        if calls is not None:
            last = last_blocks(calls, self.model.config)
            att = [c.probs() for c in last] if not values else None
            vals = [c.values() for c in last] if values else None
        return TeacherOutput(_logits(out), out.hidden_states if hidden else None, att, vals)


def _label_names(cfg: Any) -> list[str] | None:
    id2label = getattr(cfg, "id2label", None)
    if not id2label:
        return None
    return [str(id2label[i]) for i in sorted(int(k) for k in id2label)]


def _logits(out: Any) -> dict[str, torch.Tensor]:
    if getattr(out, "start_logits", None) is None and getattr(out, "logits", None) is None:
        return {}  # an encoder alone (task-agnostic distillation)
    if getattr(out, "start_logits", None) is not None:
        return {"start_logits": out.start_logits, "end_logits": out.end_logits}
    return {"logits": out.logits}


@dataclass
class DistillOutput:
    loss: torch.Tensor
    parts: dict[str, float]


class DistillStudent(nn.Module):
    """The student, the projection its hidden states learn through, and the teacher beside them (held outside
    the module tree: neither trained nor saved). Called as the student is, with a batch; returns the loss."""

    def __init__(self, student: AlbertPreTrainedModel, teacher: Teacher, d: DistillSettings):
        super().__init__()
        self.student, self.d = student, d
        object.__setattr__(self, "teacher", teacher)
        cfg = student.config
        self.config = cfg
        self.student_layers = cfg.num_hidden_layers
        self.pairs = layer_pairs(d.layer_map, self.student_layers, teacher.num_layers)
        self.same_heads = cfg.num_attention_heads == teacher.num_heads
        self.relation_heads = d.relation_heads or math.gcd(cfg.num_attention_heads, teacher.num_heads)
        for name, width in (("student", cfg.hidden_size), ("teacher", teacher.hidden_size)):
            if width % self.relation_heads:
                raise UserError(f"--relation-heads {self.relation_heads} does not divide the {name}'s hidden size "
                                f"{width}")  # fmt: skip
        # TinyBERT's W_h: one projection for every layer pair (only when the hidden loss is on)
        self.projection = nn.Linear(cfg.hidden_size, teacher.hidden_size) if d.hidden_weight else None
        self.permutation = _label_permutation(student, teacher)
        self.newly_initialized_keys = getattr(student, "newly_initialized_keys", [])

    def forward(self, **batch: torch.Tensor) -> DistillOutput:
        d = self.d
        want_att = d.attention_weight > 0
        with capture_attention(self.student) if want_att else contextlib.nullcontext(None) as calls:
            out = self.student(**batch, output_hidden_states=True)
        t = self.teacher(batch, hidden=d.hidden_weight > 0, attention=want_att and self.same_heads,
                         values=want_att and not self.same_heads)  # fmt: skip
        keys = batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1])  # (N, S): choice rows flat
        parts: dict[str, torch.Tensor] = {}
        if d.soft_weight:
            parts["soft"] = self._soft(out, t, batch)
        if d.hard_weight:
            if out.loss is None:
                raise DataError("--hard-weight needs gold labels in the training data")
            parts["hard"] = out.loss
        if d.hidden_weight:
            hs = out.hidden_states
            parts["hidden"] = sum(hidden_loss(self.projection(hs[s]), t.hidden_states[k], keys)
                                  for s, k in self.pairs) / len(self.pairs)  # fmt: skip
        if want_att:
            mine = last_blocks(calls, self.config)
            layers = [(s, k) for s, k in self.pairs if s > 0 and k > 0]
            if self.same_heads:
                terms = [relation_kl(t.attentions[k - 1], mine[s - 1].probs(), keys) for s, k in layers]
            else:
                R = self.relation_heads
                terms = [relation_kl(value_relation(t.values[k - 1], R, keys),
                                     value_relation(mine[s - 1].values(), R, keys), keys)
                         for s, k in layers]  # fmt: skip
            if terms:
                parts["attention"] = sum(terms) / len(terms)
        weights = d.losses()
        loss = sum(weights[k] * v for k, v in parts.items())
        return DistillOutput(loss, {k: float(v.detach()) for k, v in parts.items()})

    def _soft(self, out: Any, t: TeacherOutput, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        T, student = self.d.temperature, self.student
        if "start_logits" in t.logits:  # span QA: where the answer starts and ends, over the real tokens
            keep = batch["attention_mask"].bool()
            losses = []
            for name in ("start_logits", "end_logits"):
                s, tt = getattr(out, name), t.logits[name]
                if s is None:
                    raise UserError("distillation of span QA needs start and end logits (SQuAD 1.1's head)")
                losses.append(soft_loss(s.masked_fill(~keep, -1e4), tt.masked_fill(~keep, -1e4), T))
            return sum(losses) / 2
        teacher = t.logits["logits"]
        if self.permutation is not None:
            teacher = teacher[..., self.permutation]
        layer_logits = [out.logits]
        if getattr(student, "has_exits", False):  # every exit learns from the teacher too (depth-weighted)
            layer_logits = student.all_layer_logits(out.hidden_states)
            if self.architecture == "AlbertForMultipleChoice":
                layer_logits = [x.view_as(out.logits) for x in layer_logits]
        return depth_weighted([self._soft_one(x, teacher, batch, T) for x in layer_logits])

    @property
    def architecture(self) -> str:
        return type(self.student).__name__

    def _soft_one(self, s: torch.Tensor, t: torch.Tensor, batch: dict[str, torch.Tensor], T: float) -> torch.Tensor:
        cfg = self.config
        if cfg.problem_type == "regression" or (self.architecture == "AlbertForSequenceClassification"
                                                 and cfg.num_labels == 1):  # fmt: skip
            return F.mse_loss(s.float(), t.float())
        if cfg.problem_type == "multi_label_classification":
            return F.binary_cross_entropy_with_logits(s.float() / T, torch.sigmoid(t.float() / T)) * T * T
        if self.architecture == "AlbertForTokenClassification":
            return soft_loss(s, t, T, batch["attention_mask"])
        return soft_loss(s, t, T)


def _label_permutation(student: nn.Module, teacher: Teacher) -> list[int] | None:
    """Teacher logit columns in the student's label order; None when the orders agree (or there are none)."""
    mine = _label_names(student.config)
    if teacher.architecture not in ("AlbertForSequenceClassification", "AlbertForTokenClassification"):
        return None
    theirs = teacher.labels
    n = student.config.num_labels
    if theirs is None or len(theirs) != n:
        if theirs is not None and len(theirs) != n:
            raise UserError(f"--teacher {teacher.path} has {len(theirs)} labels, the task {n}; give a teacher "
                            "fine-tuned on this task, or --finetune-teacher")  # fmt: skip
        return None
    if mine is None or theirs == mine:
        return None
    if set(theirs) == set(mine):
        return [theirs.index(name) for name in mine]
    if all(re.fullmatch(r"LABEL_\d+", name) for name in theirs):
        _log.warning("the teacher's labels are unnamed (%s); taken in the task's order (%s)", ", ".join(theirs),
                     ", ".join(mine))  # fmt: skip
        return None
    raise UserError(f"--teacher {teacher.path}'s labels ({', '.join(theirs)}) are not the task's ({', '.join(mine)}); "
                    "give a teacher fine-tuned on this task, or --finetune-teacher")  # fmt: skip


# --- the run --------------------------------------------------------------------------------------------
class Distillation(FineTuning):
    """Fine-tuning's run with the student wrapped in ``DistillStudent``: the loop, evaluation (of the student
    alone), the kept best, checkpoints (student and projection) and resume are fine-tuning's."""

    verb = "distill"

    def __init__(self, task: Any, data: Data, student_arg: str, tok: Any, out: Path, s: Settings, info: Any,
                 d: DistillSettings, teacher: Teacher):  # fmt: skip
        self.d, self.teacher = d, teacher
        super().__init__(task, data, student_arg, tok, out, s, info)

    def trained_module(self, model: nn.Module) -> nn.Module:
        if model.config.vocab_size < self.tok.vocab_size:
            raise UserError(f"the student's vocab ({model.config.vocab_size}) is smaller than the teacher's "
                            f"tokenizer ({self.tok.vocab_size}); the student uses the teacher's tokenizer")  # fmt: skip
        if self.d.student_init == "teacher-embeddings":
            embeddings_from_teacher(model, self.teacher)
        self.teacher.to(self.info.device)
        return DistillStudent(model, self.teacher, self.d)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "distill": asdict(self.d)}

    def summary_extra(self) -> dict[str, Any]:
        return {"teacher": self.teacher.path, "student_parameters": self.kept.num_parameters(),
                "losses": {k: v for k, v in self.d.losses().items() if v},
                "temperature": self.d.temperature, "layer_pairs": self.model.pairs,
                "attention_kind": "attention KL" if self.model.same_heads else
                f"value relation ({self.model.relation_heads} heads)"}  # fmt: skip

    def write_card(self, final: dict) -> None:
        d = self.d
        losses = ", ".join(f"{k} x{v:g}" for k, v in d.losses().items() if v)
        facts = {"teacher": self.teacher.path, "losses": losses, "temperature": d.temperature,
                 "layer map": " ".join(f"{s}:{t}" for s, t in self.model.pairs), "lr": self.s.lr,
                 "batch size": self.s.batch_size, "max_seq_length": self.s.inference.max_seq_length,
                 "seed": self.s.seed, "train file": self.data.train_path, "eval file": self.data.eval_path,
                 "train seconds": f"{final['train_seconds']:.0f}", "student init": d.student_init}  # fmt: skip
        update_card(self.out, f"distilled on {self.task.name} from the teacher {self.teacher.path} for "
                    f"{final['steps']} steps ({losses}), the model of step {final['best_step']} kept",
                    datasets=(self.task.name,), base_model=None if self.model_arg in PRESETS else self.model_arg,
                    scores=final["metrics"], task=self.task.name, fresh=True, facts=facts)  # fmt: skip


def check_student_init(d: DistillSettings, student: str) -> None:
    """Refuse ``--student-init`` for a student folder: it has trained weights, which an init would overwrite."""
    if d.student_init != "random" and student not in PRESETS:
        raise UserError(f"--student-init {d.student_init} starts a preset student; {student} is a model folder "
                        "with weights of its own (leave out --student-init, or give a preset)")  # fmt: skip


@torch.no_grad()
def embeddings_from_teacher(student: nn.Module, teacher: Teacher) -> None:
    """The student's (V, E) word table <- the teacher's (V, D) table on its top E singular directions.

    W = U S V^T, and U_E S_E holds each word's coordinates along the E directions that carry most of the
    table's variance: the best rank-E approximation of W (Eckart-Young) is U_E S_E V_E^T, so the student's
    E -> H projection has the teacher's lexicon to start from, in the teacher's own scale. Rows past the
    teacher's vocab keep their init."""
    base = getattr(student, "albert", student)  # a task head's encoder, or an AlbertModel (--task general)
    table = base.embeddings.word_embeddings.weight  # (V_s, E)
    words = teacher.word_embeddings().detach().float().cpu()  # (V_t, D)
    E, (V, D) = table.shape[1], words.shape
    if E > D:
        raise UserError(f"--student-init teacher-embeddings: the student's embedding size {E} is wider than the "
                        f"teacher's {D}; give the student --set embedding_size={D} or less")  # fmt: skip
    if V > table.shape[0]:
        raise UserError(f"the student's vocab ({table.shape[0]}) is smaller than the teacher's word table ({V})")
    U, S, _ = torch.linalg.svd(words, full_matrices=False)  # (V, D), (D,)
    table[:V] = (U[:, :E] * S[:E]).to(table.dtype)


def distill(task: Any, data: Data, student: str, teacher_dir: str, tok: Any, out: Path, s: Settings,
            d: DistillSettings, overwrite: bool = False, resume: bool = False) -> dict:  # fmt: skip
    """Distil ``teacher_dir`` into ``student`` (a preset or a model folder) on ``data``; the kept student,
    its tokenizer (the teacher's) and metrics go to ``out``. Returns fine-tuning's summary with the teacher
    and losses added."""
    from albertlm.training.distributed import cleanup, init_distributed, same_settings

    check_out(out, student, overwrite, resume)
    check_student_init(d, student)
    if s.lr is None and student in PRESETS:
        s = _with_lr(s, STUDENT_LR)
    arch = kind_of(data.task or task).architecture
    teacher = Teacher.load(teacher_dir, arch)
    info = init_distributed(s.device)
    try:
        same_settings(info, {"student": student, "teacher": teacher_dir, "out": str(out), "distill": asdict(d),
                             **{k: v for k, v in asdict(s).items() if k != "progress"}})  # fmt: skip
        return Distillation(task, data, student, tok, out, s, info, d, teacher).start(resume, overwrite)
    finally:
        cleanup(info)


def _with_lr(s: Settings, lr: float) -> Settings:
    from dataclasses import replace

    return replace(s, lr=lr)


# --- a teacher fine-tuned first ------------------------------------------------------------------------
TEACHER_DIR = "teacher"  # in --out: the teacher fine-tuned by --finetune-teacher (kept; a rerun reuses it)
TEACHER_BASE = "teacher-base"  # in --out: a BERT teacher converted to an albertlm folder before fine-tuning


def prepare_teacher(task: Any, data: Data, teacher: str, out: Path, s: Settings, d: DistillSettings) -> str:
    """The teacher folder to distil from: ``teacher`` itself, or (``d.finetune_teacher``) ``out/teacher``,
    fine-tuned on the task by fine-tuning's own loop from ``teacher`` (a BERT folder converted first). A
    finished ``out/teacher`` is reused, an interrupted one resumed; delete it to fine-tune afresh."""
    from dataclasses import replace

    from albertlm.convert.bert import from_bert, is_bert
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.finetune import CHECKPOINTS
    from albertlm.training.finetune import train as finetune

    if not d.finetune_teacher:
        return teacher
    target = out / TEACHER_DIR
    if (target / "metrics.json").is_file():
        _log.info("the teacher fine-tuned earlier is in %s; using it (delete it to fine-tune afresh)", target)
        return str(target)
    source = teacher
    if is_bert(teacher):
        source = str(out / TEACHER_BASE)
        if not (Path(source) / "config.json").is_file():
            report = from_bert(teacher, source)
            _log.info("converted the BERT teacher %s to %s (%d layers, H=%d, %d parameters)", teacher, source,
                      report["layers"], report["hidden_size"], report["parameters"])  # fmt: skip
    elif read_json(Path(teacher) / "config.json").get("model_type", "albert") != "albert":
        raise UserError(f"--finetune-teacher fine-tunes albertlm and BERT folders; {teacher} is another "
                        "architecture: fine-tune it with transformers and give the result as --teacher")  # fmt: skip
    # the task's own schedule (or --teacher-lr / --teacher-epochs); the run's seed, device, precision, trackers
    ts = replace(s, lr=d.teacher_lr, epochs=d.teacher_epochs, batch_size=None, max_steps=None, warmup=None,
                 eval_every=0, exits=None, train_exits_only=False, config_overrides={})  # fmt: skip
    resume = (target / CHECKPOINTS).is_dir()
    _log.info("fine-tuning the teacher %s on %s into %s%s", source, task.name, target, " (resumed)" if resume else "")
    # out/teacher is this command's own folder: what an interrupted run left there without a checkpoint goes
    finetune(task, data, source, load_tokenizer(source), target, ts, overwrite=not resume and target.exists(),
             resume=resume)  # fmt: skip
    return str(target)
