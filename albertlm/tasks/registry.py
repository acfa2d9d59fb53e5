"""The task registry: a name -> how to read its files, which head, which metric, and the paper's
fine-tuning hyperparameters (spec section 7, ALBERT Table 14; tasks outside the paper get common CLUE
baseline settings). Every hyperparameter is a default the CLI flags override.

The generic tasks (``classification``, ``regression``, ``tagging``, ``qa``, ``choice``) read the user's own
files with the columns the user names (``albertlm.tasks.generic``); they have no paper hyperparameters, so
fine-tuning chooses them from the model and data size (``albertlm.training.finetune.auto_defaults``).

    task = get_task("sst2")
    examples, path = task.read(Path("shared/data/glue_sst2"), "dev", RowPolicy())
    mine = generic_task("classification", UserData(text_column="review", label_column="stars"))
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from albertlm.data.tables import find_split
from albertlm.tasks import choice, generic, metrics, squad, tagging
from albertlm.tasks.examples import DataError, RowPolicy, read_lines
from albertlm.tasks.generic import GENERIC, UserData
from albertlm.tasks.text_readers import Columns, read_cluewsc, read_jsonl, read_parallel, read_tsv

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # a key of albertlm.tasks.kinds.KINDS: the head, the features, decoding and scoring
    files: dict[str, tuple[str, ...]]  # split -> candidate paths inside --data, first existing wins
    reader: Callable[[Path, RowPolicy], list]
    metric: Callable | None = None  # (predictions, gold[, null scores]) -> {name: value}, as the kind calls it
    main_metric: str = "accuracy"  # the number the best checkpoint is chosen by
    labels: tuple[str, ...] | None = None  # fixed label set in id order; None = sorted labels of train
    aliases: dict[str, str] = field(default_factory=dict)  # other spellings of a label in some releases
    lr: float = 2e-5
    batch_size: int = 32
    steps: int | None = None  # paper's step count; None = `epochs` passes over the train set
    epochs: float = 3.0
    warmup: int | float = 0.1  # steps, or a fraction of the total when < 1
    max_seq_length: int = 512
    description: str = ""
    columns: UserData | None = None  # generic tasks: the user's columns and format; None: a benchmark's reader

    @property
    def generic(self) -> bool:
        """A task over the user's own files: its hyperparameters are chosen from the model and the data."""
        return self.columns is not None

    def path(self, data: Path, split: str) -> Path:
        """The file (or directory) holding ``split`` inside ``data``; ``data`` may be the file itself."""
        if data.is_file():
            return data
        if not data.exists():
            raise FileNotFoundError(f"--data {data} does not exist")
        for rel in self.files.get(split, ()):
            if (data / rel).exists():
                return data / rel
        if self.generic and (found := find_split(data, split)) is not None:  # datasets / Hub-layout folders
            return found
        want = ", ".join(self.files.get(split, ())) or "(none defined)"
        raise DataError(f"{data}: no {split} file for task {self.name} (looked for {want}); pass --{split}-file")

    def has(self, data: Path, split: str) -> bool:
        """``data`` (a folder) holds ``split``."""
        try:
            return data.is_dir() and self.path(data, split).exists()
        except DataError:
            return False

    def read(self, data: Path, split: str, policy: RowPolicy, file: Path | None = None) -> tuple[list, Path]:
        path = file if file is not None else self.path(data, split)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        return self.reader(path, policy), path


def _text(cols: Columns) -> Callable[[Path, RowPolicy], list]:
    def read(path: Path, policy: RowPolicy) -> list:
        if path.is_dir():
            return read_parallel(path, policy)
        if path.suffix in (".json", ".jsonl"):
            return read_jsonl(path, cols, policy)
        return read_tsv(path, cols, policy)

    return read


def _tagging_reader(path: Path, policy: RowPolicy) -> list:
    return tagging.read_conll(path, policy)


def _pku_reader(split: str) -> Callable[[Path, RowPolicy], list]:
    def read(path: Path, policy: RowPolicy) -> list:
        if path.name.endswith("199801.txt"):  # the raw POS corpus: convert this split on the fly
            n = len(read_lines(path))
            return tagging.pku_sentences(path, tagging.pku_split_lines(n, split))
        return tagging.read_conll(path, policy)

    return read


def _glue(name: str, cols: Columns, files: dict, **kw) -> Task:
    return Task(name=name, kind=kw.pop("kind", "classification"), files=files, reader=_text(cols), **kw)


def _tsv_files(dev: tuple[str, ...] = ("dev.tsv",), train: tuple[str, ...] = ("train.tsv",)) -> dict:
    return {"train": train, "dev": dev, "test": ("test.tsv",)}


def _few(name: str) -> dict:
    # full CLUE release names first, then the FewCLUE ones
    return {
        "train": ("train.json", "train_few_all.json"),
        "dev": ("dev.json", "dev_few_all.json"),
        "test": ("test_public.json", "test.json"),
    }


NLI3 = ("contradiction", "entailment", "neutral")  # GLUE's MNLI label order
NLI3_HF = {"0": "entailment", "1": "neutral", "2": "contradiction"}  # HF datasets' integer labels
ENT2 = ("entailment", "not_entailment")
ENT2_HF = {"0": "entailment", "1": "not_entailment"}
CLUE = dict(lr=2e-5, batch_size=32, epochs=3.0, max_seq_length=128)


_TASKS: list[Task] = [
    # --- GLUE (spec section 7 table) ---
    _glue("cola", Columns(a=("sentence",), positions=(3, None, 1)), _tsv_files(("dev.tsv", "val.tsv")),
          labels=("0", "1"), metric=metrics.matthews, main_metric="mcc",
          lr=1e-5, batch_size=16, steps=5336, warmup=320, description="GLUE CoLA acceptability (MCC)"),
    _glue("sst2", Columns(a=("sentence",)), _tsv_files(train=("train.tsv", "train_full.tsv")),
          labels=("0", "1"), metric=metrics.accuracy,
          lr=1e-5, batch_size=32, steps=20935, warmup=1256, description="GLUE SST-2 sentiment"),
    _glue("mrpc", Columns(a=("#1 String",), b=("#2 String",), label=("Quality",)),
          {"train": ("train.tsv", "msr_paraphrase_train.txt"), "dev": ("dev.tsv",),
           "test": ("test.tsv", "msr_paraphrase_test.txt")},
          labels=("0", "1"), metric=metrics.accuracy_f1, main_metric="f1",
          lr=2e-5, batch_size=32, steps=800, warmup=200, description="GLUE MRPC paraphrase (acc/F1)"),
    _glue("stsb", Columns(a=("sentence1",), b=("sentence2",), label=("score",), positions=(7, 8, 9)),
          _tsv_files(), kind="regression", metric=metrics.pearson_spearman, main_metric="pearson",
          lr=2e-5, batch_size=16, steps=3598, warmup=214, description="GLUE STS-B similarity (Pearson/Spearman)"),
    _glue("qqp", Columns(a=("question1",), b=("question2",), label=("is_duplicate",)), _tsv_files(),
          labels=("0", "1"), metric=metrics.accuracy_f1, main_metric="f1",
          lr=5e-5, batch_size=128, steps=14000, warmup=1000, description="GLUE QQP duplicates (acc/F1)"),
    _glue("mnli", Columns(a=("sentence1", "premise"), b=("sentence2", "hypothesis"), label=("gold_label", "label")),
          {"train": ("train.tsv",), "dev": ("dev_matched.tsv", "MNLIMatchedHardWithHardTest"),
           "test": ("test_matched.tsv",)},
          labels=NLI3, aliases=NLI3_HF, metric=metrics.accuracy,
          lr=3e-5, batch_size=128, steps=10000, warmup=1000, description="GLUE MNLI matched"),
    _glue("mnli-mm", Columns(a=("sentence1", "premise"), b=("sentence2", "hypothesis"),
                             label=("gold_label", "label")),
          {"train": ("train.tsv",), "dev": ("dev_mismatched.tsv", "MNLIMismatchedHardWithHardTest"),
           "test": ("test_mismatched.tsv",)},
          labels=NLI3, aliases=NLI3_HF, metric=metrics.accuracy,
          lr=3e-5, batch_size=128, steps=10000, warmup=1000, description="GLUE MNLI mismatched"),
    _glue("qnli", Columns(a=("question",), b=("sentence",)), _tsv_files(),
          labels=ENT2, aliases=ENT2_HF, metric=metrics.accuracy,
          lr=1e-5, batch_size=32, steps=33112, warmup=1986, description="GLUE QNLI"),
    _glue("rte", Columns(a=("sentence1",), b=("sentence2",)), _tsv_files(),
          labels=ENT2, aliases=ENT2_HF, metric=metrics.accuracy,
          lr=3e-5, batch_size=32, steps=800, warmup=200, description="GLUE RTE entailment"),
    _glue("wnli", Columns(a=("sentence1",), b=("sentence2",)), _tsv_files(),
          labels=("0", "1"), metric=metrics.accuracy, description="GLUE WNLI"),
    # --- CLUE / Chinese classification ---
    _glue("tnews", Columns(a=("sentence",), label=("label_desc",), positions=(0, None, 1)),
          {"train": ("train.tsv", "train.json"), "dev": ("dev.tsv", "dev.json"), "test": ("test.json",)},
          metric=metrics.accuracy, description="CLUE TNEWS 15-class news titles", **CLUE),
    _glue("afqmc", Columns(a=("sentence1",), b=("sentence2",), positions=(0, 1, 2)),
          {"train": ("train.txt", "train.json"), "dev": ("dev.txt", "dev.json"), "test": ("test.txt", "test.json")},
          labels=("0", "1"), metric=metrics.accuracy, description="CLUE AFQMC question matching", **CLUE),
    _glue("cmnli", Columns(a=("sentence1",), b=("sentence2",), positions=(0, 1, 2)),
          {"train": ("train.txt", "train.json"), "dev": ("dev.txt", "dev.json"), "test": ("test.json",)},
          labels=NLI3, metric=metrics.accuracy, description="CLUE CMNLI", **CLUE),
    _glue("chnsenticorp", Columns(a=("text_a",)), _tsv_files(),
          labels=("0", "1"), metric=metrics.accuracy, description="ChnSentiCorp sentiment", **CLUE),
    _glue("fewclue-tnews", Columns(a=("sentence",), label=("label_desc",)), _few("tnews"),
          metric=metrics.accuracy, description="FewCLUE TNEWS", **CLUE),
    _glue("eprstmt", Columns(a=("sentence",)), _few("eprstmt"), labels=("Negative", "Positive"),
          metric=metrics.accuracy, description="FewCLUE EPRSTMT review sentiment", **CLUE),
    _glue("bustm", Columns(a=("sentence1",), b=("sentence2",)), _few("bustm"), labels=("0", "1"),
          metric=metrics.accuracy, description="FewCLUE BUSTM paraphrase", **CLUE),
    _glue("ocnli", Columns(a=("sentence1",), b=("sentence2",)), _few("ocnli"), labels=NLI3,
          metric=metrics.accuracy, description="(Few)CLUE OCNLI", **CLUE),
    _glue("iflytek", Columns(a=("sentence",), label=("label_des", "label_desc")), _few("iflytek"),
          metric=metrics.accuracy, description="(Few)CLUE IFLYTEK app classes", **CLUE),
    _glue("csldcp", Columns(a=("content",)), _few("csldcp"), metric=metrics.accuracy,
          description="FewCLUE CSLDCP paper disciplines", **CLUE),
    _glue("csl", Columns(a=("abst",), b=("keyword",)), _few("csl"), labels=("0", "1"), metric=metrics.accuracy,
          description="(Few)CLUE CSL keyword match", **{**CLUE, "max_seq_length": 256}),
    Task("cluewsc", "classification", _few("cluewsc"), read_cluewsc, metrics.accuracy, labels=("false", "true"),
         description="(Few)CLUE WSC coreference, spans marked in the text", **CLUE),
    # --- span QA ---
    Task("squad", "qa", {"train": ("train-v1.1.json",), "dev": ("dev-v1.1.json",)}, squad.read_squad,
         metrics.squad_v1, main_metric="f1", lr=5e-5, batch_size=48, steps=3649, warmup=365, max_seq_length=384,
         description="SQuAD v1.1 (EM/F1)"),
    Task("squad2", "qa_v2", {"train": ("train-v2.0.json",), "dev": ("dev-v2.0.json",)}, squad.read_squad,
         metrics.squad_v2, main_metric="best_f1", lr=3e-5, batch_size=48, steps=8144, warmup=814, max_seq_length=384,
         description="SQuAD v2.0 with the answerability head (best-threshold F1)"),
    Task("cmrc2018", "qa",
         {"train": ("cmrc2018_train.json", "squad-style-data/cmrc2018_train.json",
                    "squad-style-data/cmrc2018_trial.json"),
          "dev": ("cmrc2018_dev.json", "squad-style-data/cmrc2018_dev.json"),
          "test": ("squad-style-data/cmrc2018_trial.json",)},
         squad.read_squad, metrics.cmrc2018, main_metric="f1", lr=3e-5, batch_size=32, epochs=2.0,
         max_seq_length=512,
         description="CMRC 2018 Chinese span QA (official char-level EM/F1)"),
    # --- multiple choice ---
    Task("race", "choice", {"train": ("train",), "dev": ("dev",), "test": ("test",)}, choice.read_race,
         metrics.accuracy, lr=2e-5, batch_size=32, steps=12000, warmup=1000, description="RACE reading comprehension"),
    Task("chid", "choice", _few("chid"), choice.read_chid, metrics.accuracy, description="FewCLUE CHID idiom cloze",
         **CLUE),
    # --- tagging ---
    Task("conll-ner", "tagging", {"train": ("train.txt",), "dev": ("dev.txt", "valid.txt"), "test": ("test.txt",)},
         _tagging_reader, metrics.entity_f1, main_metric="f1", lr=5e-5, epochs=3.0, max_seq_length=128,
         description="CoNLL-format tagging (entity F1)"),
]
PKU_FILES = ("tag/199801.txt", "199801.txt")
_TASKS.append(
    Task("pku-ner", "tagging",
         {"train": ("train.txt", *PKU_FILES), "dev": ("dev.txt", *PKU_FILES), "test": ("test.txt", *PKU_FILES)},
         _tagging_reader, metrics.entity_f1, main_metric="f1", labels=tuple(tagging.NER_LABELS),
         lr=5e-5, epochs=3.0, max_seq_length=128,
         description="People's Daily 1998-01 NER (nr/ns/nt -> PER/LOC/ORG, char BIO)")
)

# --- your own data (albertlm.tasks.generic) ---
_GENERIC: dict[str, dict[str, Any]] = {
    "classification": dict(kind="classification", metric=metrics.accuracy_macro_f1, main_metric="macro_f1",
                           description="your data: label a text or text pair (CSV/TSV/JSONL/JSON, your label names)"),
    "regression": dict(kind="regression", metric=metrics.pearson_spearman, main_metric="pearson",
                       description="your data: a number for a text or text pair (Pearson/Spearman)"),
    "tagging": dict(kind="tagging", metric=metrics.entity_f1, main_metric="f1",
                    description="your data: a tag per token (CoNLL or JSON lists; entity F1, or token accuracy)"),
    "qa": dict(kind="qa", metric=metrics.squad_v1, main_metric="f1",
               description="your data: SQuAD-format JSON span QA (v2.0 when questions are marked impossible)"),
    "choice": dict(kind="choice", metric=metrics.accuracy, main_metric="accuracy",
                   description="your data: pick one of N options (a list field or N columns)"),
}  # fmt: skip


def generic_task(name: str, data: UserData | None = None) -> Task:
    """Generic task ``name`` reading files with the columns and format of ``data``."""
    data = data or UserData()
    return Task(name=name, files=generic.SPLIT_FILES, reader=generic.reader(name, data), columns=data,
                **_GENERIC[name])  # fmt: skip


def fit_to_data(task: Task, train: list) -> Task:
    """A generic task adjusted to its training file: SQuAD 2.0 scoring and head when some questions are
    impossible; token accuracy instead of entity F1 for tags that are not BIO."""
    from albertlm.tasks.kinds import kind_of

    return kind_of(task).fit(task, train) if task.generic else task


def task_from_info(name: str, info: dict[str, Any]) -> Task:
    """The task a fine-tuned model records in config.json (``albertlm_task``): for a generic task, with the
    user's column choices and what fitting it to the training file changed."""
    task = get_task(name)
    if not task.generic:
        return task
    saved = info.get("data") or {}
    task = generic_task(task.name, UserData(**{k: v for k, v in saved.items() if k in UserData.__dataclass_fields__}))
    from albertlm.tasks.kinds import kind_of

    return kind_of(task).restore(task, info)


_TASKS.extend(generic_task(name) for name in GENERIC)
TASKS: dict[str, Task] = {t.name: t for t in _TASKS}


def get_task(name: str) -> Task:
    key = name.lower().replace("_", "-")
    key = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "cmrc": "cmrc2018", "squad1": "squad",
           "squad-v2": "squad2", "squad2.0": "squad2"}.get(key, key)  # fmt: skip
    if key not in TASKS:
        close = difflib.get_close_matches(key, list(TASKS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise DataError(f"unknown task {name!r}; {hint}`albertlm tasks` lists them (your own data: "
                        f"{', '.join(t.name for t in TASKS.values() if t.generic)})")
    return TASKS[key]


def read_split(task: Task, data: Path, split: str, policy: RowPolicy, file: Path | None = None) -> tuple[list, Path]:
    """Like ``task.read`` but the PKU corpus is split by line number according to ``split``."""
    path = file if file is not None else task.path(data, split)
    if task.name == "pku-ner" and path.name.endswith("199801.txt"):
        return _pku_reader(split)(path, policy), path
    return task.read(data, split, policy, path)
