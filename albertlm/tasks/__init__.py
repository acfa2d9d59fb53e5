"""Fine-tuning tasks: readers for GLUE / CLUE / SQuAD / CMRC / RACE / CoNLL files and for the user's own
files (generic tasks), metrics, span QA post-processing, the task kinds (how each kind encodes, decodes and
scores) and the registry that ties a task name to its kind, reader, metric and defaults."""

from albertlm.tasks.examples import ChoiceExample, DataError, QAExample, RowPolicy, TaggingExample, TextExample
from albertlm.tasks.generic import UserData
from albertlm.tasks.kinds import KINDS, InferenceSettings, TaskKind, get_kind, kind_of
from albertlm.tasks.registry import TASKS, Task, generic_task, get_task, read_split

__all__ = [
    "KINDS",
    "TASKS",
    "InferenceSettings",
    "ChoiceExample",
    "DataError",
    "QAExample",
    "RowPolicy",
    "TaggingExample",
    "Task",
    "TaskKind",
    "TextExample",
    "UserData",
    "generic_task",
    "get_kind",
    "get_task",
    "kind_of",
    "read_split",
]
