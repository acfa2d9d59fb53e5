"""albertlm: ALBERT (A Lite BERT, Lan et al. 2019) in PyTorch.

    from albertlm import AlbertConfig, AlbertForPreTraining
    model = AlbertForPreTraining(AlbertConfig.from_preset("albert-base-v2"))
    model = AlbertForSequenceClassification.from_pretrained("path/to/hf_dir")

    albertlm.finetune("sst2", "data/glue_sst2", "runs/pretrain/final", "runs/sst2")   # what `albertlm finetune` does
    albertlm.predict("runs/sst2", ["a charming film"])                                 # or albertlm.load(...)(texts)
"""

from albertlm.api import finetune, load, predict
from albertlm.config import PRESETS, AlbertConfig
from albertlm.heads import (
    AlbertForMaskedLM,
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForQuestionAnsweringV2,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albertlm.model import AlbertModel, AlbertPreTrainedModel, group_index

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AlbertConfig",
    "AlbertModel",
    "AlbertPreTrainedModel",
    "AlbertForPreTraining",
    "AlbertForMaskedLM",
    "AlbertForSequenceClassification",
    "AlbertForTokenClassification",
    "AlbertForQuestionAnswering",
    "AlbertForQuestionAnsweringV2",
    "AlbertForMultipleChoice",
    "group_index",
    "finetune",
    "load",
    "predict",
]
