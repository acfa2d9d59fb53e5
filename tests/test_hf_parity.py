"""Parity with the reference: transformers' ALBERT, random weights, CPU fp32, both directions.

Build a tiny random HF model, save it, load it into ours (HF -> ours); save ours, load it into HF
(ours -> HF); every head's outputs must agree within 1e-5.
"""

from __future__ import annotations

import logging

import pytest
import torch

import albertlm
from albertlm import AlbertConfig

transformers = pytest.importorskip("transformers")
TOL = 1e-5

# (G, K, E, H, activation): every sharing layout, E != H and E == H, every activation.
CONFIGS = [
    dict(num_hidden_groups=1, inner_group_num=1, embedding_size=16, hidden_act="gelu_new"),
    dict(num_hidden_groups=2, inner_group_num=1, embedding_size=16, hidden_act="gelu"),
    dict(num_hidden_groups=4, inner_group_num=2, embedding_size=32, hidden_act="relu"),
    dict(num_hidden_groups=1, inner_group_num=2, embedding_size=32, hidden_act="gelu_new"),
    dict(num_hidden_groups=2, inner_group_num=2, embedding_size=24, hidden_act="gelu"),
]
HEADS = [
    ("AlbertModel", albertlm.AlbertModel),
    ("AlbertForPreTraining", albertlm.AlbertForPreTraining),
    ("AlbertForMaskedLM", albertlm.AlbertForMaskedLM),
    ("AlbertForSequenceClassification", albertlm.AlbertForSequenceClassification),
    ("AlbertForTokenClassification", albertlm.AlbertForTokenClassification),
    ("AlbertForQuestionAnswering", albertlm.AlbertForQuestionAnswering),
    ("AlbertForMultipleChoice", albertlm.AlbertForMultipleChoice),
]


def tiny(**kw) -> dict:
    # initializer_range 0.1, not 0.02: at 0.02 attention is near uniform and a wrong query, key or
    # mask moves the outputs by less than the tolerance.
    base = dict(
        initializer_range=0.1,
        vocab_size=97, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
    )
    return {**base, **kw}


def batch(num_choices: int = 0, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, S = 3, 11
    ids = torch.randint(5, 97, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 7:] = 0  # padding in the batch
    mask[2, 4:] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, 5:] = 1
    if num_choices:
        rep = lambda t: t.unsqueeze(1).repeat(1, num_choices, 1).contiguous()  # noqa: E731
        return rep(ids), rep(mask), rep(types)
    return ids, mask, types


def outputs(name: str, model, ids, mask, types, hf: bool) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    keep = mask.bool()
    if name == "AlbertModel":
        return {"last_hidden_state": out.last_hidden_state[keep], "pooler": out.pooler_output}
    if name == "AlbertForPreTraining":
        return {"mlm": out.prediction_logits[keep], "sop": out.sop_logits}
    if name in ("AlbertForMaskedLM", "AlbertForTokenClassification"):
        return {"logits": out.logits[keep]}
    if name == "AlbertForQuestionAnswering":
        return {"start": out.start_logits[keep], "end": out.end_logits[keep]}
    return {"logits": out.logits}


def config_id(c: dict) -> str:
    return f"G{c['num_hidden_groups']}K{c['inner_group_num']}E{c['embedding_size']}-{c['hidden_act']}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
@pytest.mark.parametrize("name,ours_cls", HEADS, ids=[h[0] for h in HEADS])
def test_hf_to_ours_and_back(tmp_path, cfg, name, ours_cls):
    torch.manual_seed(0)
    hf_cls = getattr(transformers, name)
    # SOP and span heads are 2-way; HF sizes them by num_labels, so only the others get 3 labels here.
    labels = 2 if name in ("AlbertForPreTraining", "AlbertForQuestionAnswering") else 3
    hf_config = transformers.AlbertConfig(**tiny(**cfg), num_labels=labels)
    hf_model = hf_cls(hf_config).eval()
    hf_model.save_pretrained(tmp_path / "hf")

    ours = ours_cls.from_pretrained(tmp_path / "hf").eval()
    args = batch(num_choices=4 if "MultipleChoice" in name else 0)
    ref = outputs(name, hf_model, *args, hf=True)
    got = outputs(name, ours, *args, hf=False)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], atol=TOL, rtol=0, msg=f"HF -> ours: {key}")

    # ours -> HF: a fresh random model of ours, loaded by transformers without missing/unexpected keys
    torch.manual_seed(1)
    ours2 = ours_cls(AlbertConfig(**tiny(**cfg), id2label={i: "abc"[i] for i in range(labels)})).eval()
    ours2.save_pretrained(tmp_path / "ours")
    hf2, info = hf_cls.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info.get("mismatched_keys"), info
    ref2 = outputs(name, hf2.eval(), *args, hf=True)
    got2 = outputs(name, ours2, *args, hf=False)
    for key in ref2:
        torch.testing.assert_close(got2[key], ref2[key], atol=TOL, rtol=0, msg=f"ours -> HF: {key}")


def test_e_equals_h_and_bert_equivalent(tmp_path):
    """E == H keeps ALBERT's projection; BERT presets drop it and are written with an identity one."""
    torch.manual_seed(0)
    hf_model = transformers.AlbertModel(transformers.AlbertConfig(**tiny(embedding_size=32))).eval()
    hf_model.save_pretrained(tmp_path / "hf")
    ours = albertlm.AlbertModel.from_pretrained(tmp_path / "hf")
    args = batch()
    ref, got = outputs("AlbertModel", hf_model, *args, True), outputs("AlbertModel", ours, *args, False)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], atol=TOL, rtol=0)

    bert = albertlm.AlbertModel(
        AlbertConfig(**tiny(embedding_size=32, sharing="none", project_embeddings=False))
    ).eval()
    bert.save_pretrained(tmp_path / "bert")
    hf_bert, info = transformers.AlbertModel.from_pretrained(tmp_path / "bert", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ref, got = outputs("AlbertModel", hf_bert.eval(), *args, True), outputs("AlbertModel", bert, *args, False)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], atol=TOL, rtol=0)
    again = albertlm.AlbertModel.from_pretrained(tmp_path / "bert")
    assert again.encoder.embedding_hidden_mapping_in is None


@pytest.mark.parametrize("sharing", ["attention", "ffn", "none"])
def test_partial_sharing_is_computed_identically_by_hf(tmp_path, sharing):
    """Partial sharing is written as one group per layer (shared weights repeated): HF computes the same."""
    torch.manual_seed(0)
    ours = albertlm.AlbertForPreTraining(AlbertConfig(**tiny(num_hidden_groups=2), sharing=sharing)).eval()
    ours.save_pretrained(tmp_path / "m")
    hf_model, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "m", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    args = batch()
    ref = outputs("AlbertForPreTraining", hf_model.eval(), *args, True)
    got = outputs("AlbertForPreTraining", ours, *args, False)
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], atol=TOL, rtol=0)
    back = albertlm.AlbertForPreTraining.from_pretrained(tmp_path / "m")
    assert back.config.sharing == sharing and back.num_parameters() == ours.num_parameters()


def test_legacy_bin_with_tied_decoder_and_position_ids(tmp_path):
    """pytorch_model.bin with predictions.decoder.* and embeddings.position_ids (old HF saves) loads."""
    torch.manual_seed(0)
    hf_model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**tiny())).eval()
    sd = {k: v.clone() for k, v in hf_model.state_dict().items()}
    sd["predictions.decoder.weight"] = hf_model.albert.embeddings.word_embeddings.weight.detach().clone()
    sd["predictions.decoder.bias"] = sd["predictions.bias"].clone()
    sd["albert.embeddings.position_ids"] = torch.arange(64).unsqueeze(0)
    (tmp_path / "legacy").mkdir()
    torch.save(sd, tmp_path / "legacy" / "pytorch_model.bin")
    cfg = hf_model.config.to_dict()
    cfg.update(net_structure_type=0, gap_size=0, num_memory_blocks=0, down_scale_factor=1, layers_to_keep=[])
    import json

    (tmp_path / "legacy" / "config.json").write_text(json.dumps(cfg))
    ours = albertlm.AlbertForPreTraining.from_pretrained(tmp_path / "legacy")
    args = batch()
    ref, got = outputs("AlbertForPreTraining", hf_model, *args, True), outputs(
        "AlbertForPreTraining", ours, *args, False
    )
    for key in ref:
        torch.testing.assert_close(got[key], ref[key], atol=TOL, rtol=0)


def test_masked_positions_only_matches_full_logits(tmp_path):
    """With labels, MLM logits are computed at masked positions only; they equal HF's full logits there."""
    torch.manual_seed(0)
    hf_model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**tiny())).eval()
    hf_model.save_pretrained(tmp_path / "hf")
    ours = albertlm.AlbertForPreTraining.from_pretrained(tmp_path / "hf")
    ids, mask, types = batch()
    labels = torch.full_like(ids, -100)
    labels[0, [1, 3]] = ids[0, [1, 3]]
    labels[1, 2] = ids[1, 2]
    sop = torch.tensor([0, 1, 1])
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels,
                       sentence_order_label=sop)
        got = ours(ids, mask, types, labels=labels, sentence_order_label=sop)
    assert got.prediction_logits.shape == (3, 97)
    torch.testing.assert_close(got.prediction_logits, ref.prediction_logits[labels != -100], atol=TOL, rtol=0)
    torch.testing.assert_close(got.loss, ref.loss, atol=TOL, rtol=0)


def test_no_loading_warnings_logged(tmp_path, caplog):
    ours = albertlm.AlbertForSequenceClassification(AlbertConfig(**tiny(), id2label={0: "neg", 1: "pos"}))
    ours.save_pretrained(tmp_path)
    with caplog.at_level(logging.WARNING, logger="transformers"):
        hf_model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path)
    assert hf_model.config.id2label == {0: "neg", 1: "pos"}
    assert not [r for r in caplog.records if "newly initialized" in r.getMessage() or "not used" in r.getMessage()]


@pytest.mark.parametrize("name", ["AlbertForSequenceClassification", "AlbertForMultipleChoice"])
def test_pooled_only_training_gradients_match_hf(tmp_path, name):
    """The [CLS]-only last block (``pooled_only``) gives HF's loss and HF's gradient on every weight."""
    torch.manual_seed(0)
    hf_model = getattr(transformers, name)(transformers.AlbertConfig(**tiny(inner_group_num=2), num_labels=3))
    hf_model.save_pretrained(tmp_path)
    ours = getattr(albertlm, name).from_pretrained(tmp_path)
    assert ours.pooled_only
    choice = "MultipleChoice" in name
    ids, mask, types = batch(num_choices=4 if choice else 0)
    labels = torch.tensor([0, 2, 1]) if not choice else torch.tensor([3, 0, 1])
    losses = {}
    for key, model in (("hf", hf_model.train()), ("ours", ours.train())):
        losses[key] = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        losses[key].backward()
    torch.testing.assert_close(losses["ours"], losses["hf"], atol=TOL, rtol=0)
    grads = {n: p.grad for n, p in hf_model.named_parameters()}
    for n, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=TOL, rtol=0, msg=n)
