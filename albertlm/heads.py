"""Task heads on top of the encoder (spec sections 2 and 8). Each returns logits and, given labels, the loss.

Names follow HuggingFace (``albert.``, ``predictions.``, ``sop_classifier.classifier``, ``classifier``,
``qa_outputs``), so every head but the SQuAD 2.0 one loads and saves in the HF layout.
Shape letters as in ``albertlm.model``; C = choices, M = packed instances per row, N = masked tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from albertlm.config import AlbertConfig
from albertlm.model import AlbertModel, AlbertPreTrainedModel, activation, attention_bias

IGNORE = -100  # label value that contributes no loss (HF convention)


@dataclass
class PreTrainingOutput:
    loss: torch.Tensor | None  # mlm_loss + sop_loss
    mlm_loss: torch.Tensor | None
    sop_loss: torch.Tensor | None
    # (N, V) at the masked positions when labels are given (the original's gather), else (B, S, V)
    prediction_logits: torch.Tensor
    sop_logits: torch.Tensor | None  # (B, 2), or (B, M, 2) with cls_positions
    mlm_labels: torch.Tensor | None = None  # (N,) the labels matching prediction_logits rows
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class ClassifierOutput:
    loss: torch.Tensor | None
    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class SpanOutput:
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # (B, S)
    end_logits: torch.Tensor  # (B, S)
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class SquadV2Output:
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # (B, S), impossible positions at -1e30
    end_logits: torch.Tensor | None  # (B, S) given gold start positions (training), else None
    cls_logits: torch.Tensor  # (B,) answerability: > 0 means "no answer"
    start_top_log_probs: torch.Tensor | None = None  # (B, k) inference beam
    start_top_index: torch.Tensor | None = None  # (B, k)
    end_top_log_probs: torch.Tensor | None = None  # (B, k, k)
    end_top_index: torch.Tensor | None = None  # (B, k, k)


class AlbertMLMHead(nn.Module):
    """H -> E -> act -> LayerNorm(E) -> logits over V with the decoder tied to the word embedding.

    With ``embedding_projection_before_position`` (albert_zh): H -> H -> act -> LayerNorm(H), then back
    through the tied word projection transposed (H -> E) and the word embedding (E -> V).
    """

    def __init__(self, config: AlbertConfig):
        super().__init__()
        width = config.hidden_size if config.embedding_projection_before_position else config.embedding_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.activation = activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(
        self, h: torch.Tensor, word_embeddings: torch.Tensor, word_projection: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.LayerNorm(self.activation(self.dense(h)))  # (..., E), or H with word_projection
        if word_projection is not None:
            x = x @ word_projection  # (..., H) @ (H, E) -> (..., E)
        return F.linear(x, word_embeddings, self.bias)  # (..., V)


def _decoder(model: AlbertModel) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The tied decoder weights: the word embedding, and the word projection when it has one."""
    emb = model.embeddings
    return emb.word_embeddings.weight, (emb.word_projection.weight if emb.word_projection is not None else None)


class AlbertSOPHead(nn.Module):
    """Sentence-order (or next-sentence) prediction on the pooled output: label 1 = swapped."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        # The original applies no dropout here; HF applies classifier dropout. HF's is kept for parity.
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(pooled))


def _ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)


class ExitHeads:
    """Early exit over the computed layers (``config.exit_heads``), for the heads that read the pooled [CLS]:
    after computed layer j (0-based) the pooler and classifier j give that layer's logits.

    ``per-layer`` (PABEE, Zhou et al. 2020): a classifier of its own after every layer before the last, the
    last layer keeping the model's ``classifier`` (so full depth answers as a model without exits);
    ``shared``: the one ``classifier`` after every layer (no new parameters: every ALBERT layer is the
    same function, so one head can read them all). Training with labels minimises the depth-weighted mean
    sum_j (j+1) L_j / sum_j (j+1) of the layers' losses (PABEE's weighting). Inference steps one layer at a
    time (``exit_start`` / ``exit_step``); ``albertlm.deploy.early_exit`` decides which rows stop.
    """

    albert: AlbertModel
    classifier: nn.Linear
    dropout: nn.Dropout
    config: AlbertConfig

    def _init_exits(self, width: int) -> None:
        c = self.config
        if c.exit_heads == "per-layer":
            layers = range(c.num_hidden_layers - 1)
            self.exit_classifiers = nn.ModuleList(nn.Linear(c.hidden_size, width) for _ in layers)

    @property
    def has_exits(self) -> bool:
        return self.config.exit_heads != "none"

    def exit_classifier(self, layer: int) -> nn.Linear:
        """The classifier that reads computed layer ``layer`` (0-based)."""
        if self.config.exit_heads == "per-layer" and layer < self.config.num_hidden_layers - 1:
            return self.exit_classifiers[layer]
        return self.classifier

    def layer_logits(self, h: torch.Tensor, layer: int) -> torch.Tensor:
        """(N, S|1, H) output of computed layer ``layer`` -> (N, width) logits of its exit."""
        return self.exit_classifier(layer)(self.dropout(self.albert.pool(h)))

    def all_layer_logits(self, states: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """Every computed layer's logits from ``hidden_states`` (embeddings first, then each layer)."""
        return [self.layer_logits(h, j) for j, h in enumerate(states[1:])]

    def exit_start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """(N, S) inputs -> (the first layer's input (N, S, H), the attention mask it takes)."""
        x = self.albert.embeddings(input_ids, token_type_ids)
        return self.albert.encoder.project(x), attention_bias(attention_mask, x.dtype)

    def exit_step(self, h: torch.Tensor, mask: torch.Tensor | None, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Computed layer ``layer`` on ``h`` -> (its output, its exit's logits (N, width))."""
        h = self.albert.encoder.run_layer(h, mask, layer)
        return h, self.layer_logits(h, layer)


def depth_weighted(losses: list[torch.Tensor]) -> torch.Tensor:
    """sum_j (j+1) L_j / sum_j (j+1): deeper exits weigh more (PABEE's training loss)."""
    total = sum((j + 1) * loss for j, loss in enumerate(losses))
    return total / (len(losses) * (len(losses) + 1) / 2)


class AlbertForPreTraining(AlbertPreTrainedModel):
    """MLM + SOP (or NSP): loss = MLM cross-entropy + sentence-order cross-entropy (spec section 2).

    Given ``labels`` (B, S) with -100 at unpredicted positions, the MLM head runs only at the masked
    positions (N of them), as the original does: the (B, S, V) logits tensor is never built.
    Packed batches pass ``cls_positions`` (B, M) and ``sentence_order_label`` (B, M), -100 for padding.
    """

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
        cls_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> PreTrainingOutput:
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        h = out.last_hidden_state  # (B, S, H)
        decoder = _decoder(self.albert)
        mlm_loss = mlm_labels = None
        if labels is not None:
            selected = labels != IGNORE  # (B, S)
            mlm_labels = labels[selected]  # (N,)
            logits = self.predictions(h[selected], *decoder)  # (N, V)
            mlm_loss = _ce(logits, mlm_labels) if mlm_labels.numel() else logits.sum() * 0.0
        else:
            logits = self.predictions(h, *decoder)  # (B, S, V)
        pooled = out.pooler_output if cls_positions is None else self.albert.pool(h, cls_positions)
        sop_logits = self.sop_classifier(pooled)
        sop_loss = _ce(sop_logits, sentence_order_label) if sentence_order_label is not None else None
        losses = [x for x in (mlm_loss, sop_loss) if x is not None]
        return PreTrainingOutput(
            loss=sum(losses) if losses else None,
            mlm_loss=mlm_loss,
            sop_loss=sop_loss,
            prediction_logits=logits,
            sop_logits=sop_logits,
            mlm_labels=mlm_labels,
            hidden_states=out.hidden_states,
        )


class AlbertForMaskedLM(AlbertPreTrainedModel):
    """MLM only (no pooler, as HF). With labels, logits are computed at the masked positions only."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.predictions = AlbertMLMHead(config)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> ClassifierOutput:
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        h, decoder = out.last_hidden_state, _decoder(self.albert)
        if labels is None:
            return ClassifierOutput(None, self.predictions(h, *decoder), out.hidden_states)
        selected = labels != IGNORE
        logits = self.predictions(h[selected], *decoder)  # (N, V)
        return ClassifierOutput(_ce(logits, labels[selected]), logits, out.hidden_states)


class AlbertForSequenceClassification(ExitHeads, AlbertPreTrainedModel):
    """pooled -> dropout -> Linear(H, num_labels); one label = regression with MSE (STS-B).

    Only the pooled [CLS] vector is read, so the last block computes that one position
    (``pooled_only``): the logits are HF's, the work ~1/L less. Set it False for the full last layer.
    With ``config.exit_heads`` the model also has early exits (``ExitHeads``).
    """

    pooled_only = True

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self._init_exits(self.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> ClassifierOutput:
        exits = self.has_exits and labels is not None  # training with exits: every layer's loss
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states or exits,
                          self.pooled_only and not exits)  # fmt: skip
        if exits:
            layer_logits = self.all_layer_logits(out.hidden_states)
            logits = layer_logits[-1]
            loss = depth_weighted([self._loss(x, labels) for x in layer_logits])
        else:
            logits = self.classifier(self.dropout(out.pooler_output))  # (B, num_labels)
            loss = self._loss(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits, out.hidden_states if output_hidden_states else None)

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        kind = self.config.problem_type or (
            "regression"
            if self.num_labels == 1
            else "single_label_classification"
            if labels.dtype in (torch.long, torch.int)
            else "multi_label_classification"
        )
        if kind == "regression":
            return F.mse_loss(logits.squeeze(-1).float(), labels.float().reshape(-1))
        if kind == "single_label_classification":
            return _ce(logits, labels)
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class AlbertForTokenClassification(AlbertPreTrainedModel):
    """Per-token tagging (NER, POS): sequence output -> dropout -> Linear(H, num_labels)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, self.num_labels)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> ClassifierOutput:
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (B, S, num_labels)
        loss = _ce(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits, out.hidden_states)


class AlbertForQuestionAnswering(AlbertPreTrainedModel):
    """SQuAD 1.1 span extraction: Linear(H, 2) -> start and end logits over the sequence."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> SpanOutput:
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states)
        start, end = self.qa_outputs(out.last_hidden_state).unbind(-1)  # (B, S) each
        loss = None
        if start_positions is not None and end_positions is not None:
            # Positions outside the window (clamped to S) are ignored, as in HF.
            S = start.shape[1]
            s_pos, e_pos = start_positions.reshape(-1).clamp(0, S), end_positions.reshape(-1).clamp(0, S)
            loss = (
                F.cross_entropy(start.float(), s_pos, ignore_index=S)
                + F.cross_entropy(end.float(), e_pos, ignore_index=S)
            ) / 2
        return SpanOutput(loss, start.contiguous(), end.contiguous(), out.hidden_states)


class AlbertForMultipleChoice(ExitHeads, AlbertPreTrainedModel):
    """RACE-style: each (passage, question, option) row pooled -> Linear(H, 1); softmax over C options.

    ``pooled_only`` and early exits as in AlbertForSequenceClassification (an exit's logits are per row,
    (B * C, 1); the C rows of one example stop together).
    """

    pooled_only = True

    def __init__(self, config: AlbertConfig):
        super().__init__(config)
        self.albert = AlbertModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self._init_exits(1)
        self.init_weights()

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, C, S)
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,  # (B,) index of the right option
        output_hidden_states: bool = False,
    ) -> ClassifierOutput:
        B, C, S = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(B * C, *t.shape[2:])

        exits = self.has_exits and labels is not None
        out = self.albert(
            flat(input_ids),
            flat(attention_mask),
            flat(token_type_ids),
            flat(position_ids),
            output_hidden_states or exits,
            self.pooled_only and not exits,
        )
        if exits:
            layer_logits = [x.view(B, C) for x in self.all_layer_logits(out.hidden_states)]
            logits, loss = layer_logits[-1], depth_weighted([_ce(x, labels) for x in layer_logits])
        else:
            logits = self.classifier(self.dropout(out.pooler_output)).view(B, C)
            loss = _ce(logits, labels) if labels is not None else None
        return ClassifierOutput(loss, logits, out.hidden_states if output_hidden_states else None)

    def exit_start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                   token_type_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
        """(B, C, S) inputs -> the B * C rows' first-layer input, as ``ExitHeads.exit_start``."""
        S = input_ids.shape[-1]
        flat = [None if t is None else t.reshape(-1, S) for t in (input_ids, attention_mask, token_type_ids)]
        return super().exit_start(*flat)


class AlbertForQuestionAnsweringV2(AlbertPreTrainedModel):
    """SQuAD 2.0 head of the original (XLNet-style, spec section 8); HF has no equivalent.

    start: Linear(H, 1), masked where ``p_mask`` is 1 (question and special tokens).
    end: concat(h, h_start) -> Linear(2H, H) tanh -> LayerNorm -> Linear(H, 1); teacher-forced with the
    gold start in training, a top-k x top-k beam at inference.
    answerable: concat(sum_s softmax(start)_s h_s, h_CLS) -> Linear(2H, H) tanh -> dropout -> Linear(H, 1).
    loss = (start CE + end CE) / 2 + 0.5 BCE(cls_logits, is_impossible).
    """

    def __init__(self, config: AlbertConfig, top_k: int = 5):
        super().__init__(config)
        H = config.hidden_size
        self.top_k = top_k
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.start_logits = nn.Linear(H, 1)
        self.end_dense = nn.Linear(2 * H, H)
        self.end_LayerNorm = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.end_logits = nn.Linear(H, 1)
        self.answer_dense = nn.Linear(2 * H, H)
        self.answer_dropout = nn.Dropout(config.classifier_dropout_prob)
        self.answer_logits = nn.Linear(H, 1, bias=False)
        self.init_weights()

    def _end(self, h: torch.Tensor, h_start: torch.Tensor, p_mask: torch.Tensor | None) -> torch.Tensor:
        # h (B, S, H), h_start (B, ..., H) broadcast over S -> end logits (B, ..., S)
        x = torch.cat([h, h_start.expand_as(h)], dim=-1)
        logits = self.end_logits(self.end_LayerNorm(torch.tanh(self.end_dense(x)))).squeeze(-1)
        return _masked(logits, p_mask)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        p_mask: torch.Tensor | None = None,  # (B, S) 1 where no answer can start or end
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        is_impossible: torch.Tensor | None = None,
    ) -> SquadV2Output:
        h = self.albert(input_ids, attention_mask, token_type_ids, position_ids).last_hidden_state
        B, S, H = h.shape
        start = _masked(self.start_logits(h).squeeze(-1), p_mask)  # (B, S)
        start_p = torch.softmax(start.float(), dim=-1).to(h.dtype)
        answer = torch.cat([torch.einsum("bs,bsh->bh", start_p, h), h[:, 0]], dim=-1)  # (B, 2H)
        cls_logits = self.answer_logits(self.answer_dropout(torch.tanh(self.answer_dense(answer)))).squeeze(-1)

        if start_positions is not None and end_positions is not None:
            idx = start_positions.reshape(B, 1, 1).expand(B, 1, H)
            end = self._end(h, h.gather(1, idx), p_mask)  # (B, S)
            loss = (_ce(start, start_positions) + _ce(end, end_positions)) / 2
            if is_impossible is not None:
                bce = F.binary_cross_entropy_with_logits(cls_logits.float(), is_impossible.float().reshape(-1))
                loss = loss + 0.5 * bce
            return SquadV2Output(loss, start, end, cls_logits)

        k = min(self.top_k, S)
        start_log_probs = torch.log_softmax(start.float(), dim=-1)
        top_lp, top_idx = start_log_probs.topk(k, dim=-1)  # (B, k)
        h_start = h.gather(1, top_idx.unsqueeze(-1).expand(B, k, H))  # (B, k, H)
        # (B, k, S, H): every candidate start against every end position
        end = self._end(h.unsqueeze(1).expand(B, k, S, H), h_start.unsqueeze(2), _expand_mask(p_mask, k))
        end_lp, end_idx = torch.log_softmax(end.float(), dim=-1).topk(k, dim=-1)  # (B, k, k)
        return SquadV2Output(None, start, None, cls_logits, top_lp, top_idx, end_lp, end_idx)


def _masked(logits: torch.Tensor, p_mask: torch.Tensor | None) -> torch.Tensor:
    if p_mask is None:
        return logits
    return logits.masked_fill(p_mask.bool(), -1e30 if logits.dtype == torch.float32 else -1e4)


def _expand_mask(p_mask: torch.Tensor | None, k: int) -> torch.Tensor | None:
    return None if p_mask is None else p_mask.unsqueeze(1).expand(-1, k, -1)



@dataclass(frozen=True)
class Head:
    """One model class: its ``albertlm init --head`` name, the ONNX graph's inputs and outputs, and whether
    ``transformers`` has a class of the same name (written into config.json ``architectures``)."""

    name: str
    cls: type
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ("input_ids", "attention_mask", "token_type_ids")
    in_transformers: bool = True

    @property
    def architecture(self) -> str:
        return self.cls.__name__


# The one table of heads, keyed by architecture (our class name = the transformers class name).
HEADS: dict[str, Head] = {
    h.architecture: h
    for h in (
        Head("base", AlbertModel, ("last_hidden_state", "pooler_output")),
        Head("pretraining", AlbertForPreTraining, ("prediction_logits", "sop_logits")),
        Head("mlm", AlbertForMaskedLM, ("logits",)),
        Head("classification", AlbertForSequenceClassification, ("logits",)),
        Head("tagging", AlbertForTokenClassification, ("logits",)),
        Head("qa", AlbertForQuestionAnswering, ("start_logits", "end_logits")),
        Head("qa-v2", AlbertForQuestionAnsweringV2,
             ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits"),
             inputs=("input_ids", "attention_mask", "token_type_ids", "p_mask"), in_transformers=False),
        Head("multiple-choice", AlbertForMultipleChoice, ("logits",)),
    )
}


def head_named(name: str) -> Head:
    """A head by its ``--head`` name or its architecture."""
    for h in HEADS.values():
        if name in (h.name, h.architecture):
            return h
    raise KeyError(name)
