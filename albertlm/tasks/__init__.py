"""Fine-tuning tasks: readers for GLUE / CLUE / SQuAD / CMRC / RACE / CoNLL files, metrics, span QA
post-processing, and the registry that ties a task name to its reader, head, metric and defaults."""

from albertlm.tasks.examples import ChoiceExample, DataError, QAExample, RowPolicy, TaggingExample, TextExample
from albertlm.tasks.registry import KINDS, TASKS, Task, get_task, read_split

__all__ = [
    "KINDS",
    "TASKS",
    "ChoiceExample",
    "DataError",
    "QAExample",
    "RowPolicy",
    "TaggingExample",
    "Task",
    "TextExample",
    "get_task",
    "read_split",
]
