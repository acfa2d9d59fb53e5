"""Model behaviour that parity with HF cannot show: configuration, sharing, packing, heads, errors."""

import json

import pytest
import torch

import albertlm
from albertlm import AlbertConfig, group_index
from albertlm.convert.names import tf_to_hf_name, tf_to_hf_state_dict
from albertlm.hf import CheckpointError


def tiny(**kw) -> AlbertConfig:
    base = dict(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
                intermediate_size=24, max_position_embeddings=32, classifier_dropout_prob=0.0)
    return AlbertConfig(**{**base, **kw})


def test_group_index_matches_original_formula():
    for L, G in [(12, 1), (12, 2), (12, 3), (12, 12), (24, 4), (6, 6)]:
        assert [group_index(l, L, G) for l in range(L)] == [int(l / (L / G)) for l in range(L)]


@pytest.mark.parametrize(
    "kw,needle",
    [
        (dict(hidden_size=30, num_attention_heads=4), "not divisible by num_attention_heads"),
        (dict(num_hidden_layers=4, num_hidden_groups=3), "not divisible by num_hidden_groups"),
        (dict(embedding_size=0), "embedding_size (E) must be > 0"),
        (dict(hidden_act="gelu_fast_typo"), "unknown hidden_act"),
        (dict(sharing="half"), "unknown sharing"),
        (dict(project_embeddings=False), "project_embeddings=False needs embedding_size == hidden_size"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be in [0, 1)"),
    ],
)
def test_validation_says_what_to_change(kw, needle):
    with pytest.raises(ValueError, match=None) as e:
        tiny(**kw)
    assert needle in str(e.value)


def test_unknown_preset_lists_choices():
    with pytest.raises(ValueError, match="albert-base-v2"):
        AlbertConfig.from_preset("albert-huge")


def test_presets_build_and_chinese_use_relu_and_21128():
    for name in ("albert-zh-tiny", "albert-zh-base"):
        c = AlbertConfig.from_preset(name)
        assert c.vocab_size == 21128 and c.hidden_act == "relu"
    assert AlbertConfig.from_preset("albert-base-v1").hidden_act == "gelu"
    assert AlbertConfig.from_preset("albert-base-v2").hidden_act == "gelu_new"


def test_dead_and_unknown_config_keys(tmp_path):
    d = tiny().to_dict()
    d.update(net_structure_type=0, gap_size=0, layers_to_keep=[], position_embedding_type="absolute",
             custom_field=7)
    (tmp_path / "config.json").write_text(json.dumps(d))
    c = AlbertConfig.load(tmp_path)
    assert c.extra == {"custom_field": 7} and c.to_dict()["custom_field"] == 7
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(ValueError, match="line 1"):
        AlbertConfig.load(tmp_path)


@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_sharing_modes_share_exactly_what_they_say(sharing):
    m = albertlm.AlbertModel(tiny(num_hidden_groups=2, sharing=sharing))
    enc = m.encoder
    layers = [enc.layer_group(l).albert_layers[0] for l in range(4)]
    same_attn = layers[0].attention is layers[1].attention
    same_ffn = layers[0].ffn is layers[1].ffn
    assert (same_attn, same_ffn) == {"all": (True, True), "attention": (True, False),
                                      "ffn": (False, True), "none": (False, False)}[sharing]
    # G = 2: layers 0-1 and 2-3 form two share groups
    assert layers[1].attention is not layers[2].attention


def test_shared_weights_get_summed_gradients():
    m = albertlm.AlbertModel(tiny(sharing="attention"))
    m(torch.randint(0, 50, (2, 6))).last_hidden_state.sum().backward()
    q = m.encoder.albert_layer_groups[0].albert_layers[0].attention.query.weight
    assert q.grad is not None and q is m.encoder.albert_layer_groups[3].albert_layers[0].attention.query.weight


def test_hidden_states_per_layer_and_inner_groups():
    m = albertlm.AlbertModel(tiny(inner_group_num=2)).eval()
    out = m(torch.randint(0, 50, (2, 6)), output_hidden_states=True)
    assert len(out.hidden_states) == 1 + 4
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)


def test_padding_does_not_change_real_tokens():
    m = albertlm.AlbertModel(tiny()).eval()
    ids = torch.randint(5, 50, (1, 5))
    padded = torch.cat([ids, torch.zeros(1, 3, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    a = m(ids).last_hidden_state
    b = m(padded, mask).last_hidden_state[:, :5]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_packed_rows_equal_separate_sequences():
    """A (B, S, S) block mask + restarting position ids + cls_positions = two independent sequences."""
    torch.manual_seed(0)
    m = albertlm.AlbertForPreTraining(tiny()).eval()
    a, b = torch.randint(5, 50, (1, 4)), torch.randint(5, 50, (1, 3))
    packed = torch.cat([a, b], 1)
    block = torch.zeros(1, 7, 7, dtype=torch.bool)
    block[0, :4, :4] = True
    block[0, 4:, 4:] = True
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2]])
    with torch.no_grad():
        out = m(packed, block, position_ids=pos, cls_positions=torch.tensor([[0, 4]]))
        sa, sb = m(a).sop_logits, m(b).sop_logits
    torch.testing.assert_close(out.sop_logits[0], torch.cat([sa, sb]), atol=1e-5, rtol=0)


def test_pretraining_loss_and_masked_only_logits():
    m = albertlm.AlbertForPreTraining(tiny())
    ids = torch.randint(5, 50, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5] = 7, 9
    out = m(ids, labels=labels, sentence_order_label=torch.tensor([0, 1]))
    assert out.prediction_logits.shape == (2, 50)
    assert torch.allclose(out.loss, out.mlm_loss + out.sop_loss)
    out.loss.backward()
    # the decoder is tied: the word embedding receives the MLM gradient
    assert m.albert.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_heads_return_losses():
    ids = torch.randint(5, 50, (2, 6))
    reg = albertlm.AlbertForSequenceClassification(tiny(id2label={0: "score"}))
    assert reg(ids, labels=torch.tensor([0.5, 1.0])).loss.ndim == 0
    cls = albertlm.AlbertForSequenceClassification(tiny(id2label={0: "a", 1: "b", 2: "c"}))
    assert cls(ids, labels=torch.tensor([0, 2])).logits.shape == (2, 3)
    tag = albertlm.AlbertForTokenClassification(tiny(id2label={0: "O", 1: "B"}))
    assert tag(ids, labels=torch.zeros(2, 6, dtype=torch.long)).loss.item() > 0
    qa = albertlm.AlbertForQuestionAnswering(tiny())
    assert qa(ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 99])).loss.item() > 0
    mc = albertlm.AlbertForMultipleChoice(tiny())
    assert mc(ids.unsqueeze(1).repeat(1, 4, 1), labels=torch.tensor([1, 3])).logits.shape == (2, 4)


def test_squad_v2_head_train_and_beam():
    torch.manual_seed(0)
    m = albertlm.AlbertForQuestionAnsweringV2(tiny())
    ids = torch.randint(5, 50, (2, 10))
    p_mask = torch.zeros(2, 10, dtype=torch.long)
    p_mask[:, 1:4] = 1  # question tokens cannot be answers
    out = m(ids, p_mask=p_mask, start_positions=torch.tensor([5, 0]), end_positions=torch.tensor([7, 0]),
            is_impossible=torch.tensor([0, 1]))
    out.loss.backward()
    assert out.end_logits.shape == (2, 10) and out.cls_logits.shape == (2,)
    m.eval()
    with torch.no_grad():
        beam = m(ids, p_mask=p_mask)
    assert beam.start_top_index.shape == (2, 5) and beam.end_top_log_probs.shape == (2, 5, 5)
    assert not set(beam.start_top_index.flatten().tolist()) & {1, 2, 3}
    assert (beam.end_top_log_probs <= 0).all()


def test_bad_checkpoints_name_keys_and_shapes(tmp_path):
    m = albertlm.AlbertModel(tiny())
    m.save_pretrained(tmp_path / "ok")
    with pytest.raises(CheckpointError, match="shape mismatch: embeddings.word_embeddings.weight"):
        albertlm.AlbertModel.from_pretrained(tmp_path / "ok", vocab_size=60)
    with pytest.raises(CheckpointError, match="missing keys: encoder.albert_layer_groups.1"):
        albertlm.AlbertModel.from_pretrained(tmp_path / "ok", num_hidden_groups=2)
    (tmp_path / "ok" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a valid safetensors file"):
        albertlm.AlbertModel.from_pretrained(tmp_path / "ok")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        albertlm.AlbertModel.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        albertlm.AlbertModel.from_pretrained(tmp_path / "empty")


def test_pickle_payload_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    m = albertlm.AlbertModel(tiny())
    m.config.save(tmp_path)
    torch.save({"x": Evil()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="tensor-only"):
        albertlm.AlbertModel.from_pretrained(tmp_path)


def test_task_head_from_pretraining_checkpoint_initialises_only_the_head(tmp_path):
    albertlm.AlbertForPreTraining(tiny()).save_pretrained(tmp_path)
    clf = albertlm.AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert sorted(clf.newly_initialized_keys) == ["classifier.bias", "classifier.weight"]


def test_tf_names_map_and_transpose():
    assert tf_to_hf_name("bert/encoder/transformer/group_0/inner_group_1/attention_1/self/query/kernel") == (
        "albert.encoder.albert_layer_groups.0.albert_layers.1.attention.query.weight", True)
    assert tf_to_hf_name("bert/encoder/transformer/group_0/inner_group_0/LayerNorm_1/gamma")[0].endswith(
        "full_layer_layer_norm.weight")
    assert tf_to_hf_name("cls/seq_relationship/output_weights") == ("sop_classifier.classifier.weight", False)
    assert tf_to_hf_name("bert/embeddings/word_embeddings/adam_m") is None
    sd = tf_to_hf_state_dict({"bert/pooler/dense/kernel": torch.arange(6.0).view(2, 3)})
    assert sd["albert.pooler.weight"].shape == (3, 2)
    with pytest.raises(CheckpointError, match="unknown TF variable"):
        tf_to_hf_name("bert/something/else")


def original_tf_names(groups: int, inner: int) -> list[str]:
    """Every variable name the original modeling.py creates for a pretraining model."""
    names = [f"bert/embeddings/{k}_embeddings" for k in ("word", "position", "token_type")]
    names += ["bert/embeddings/LayerNorm/gamma", "bert/embeddings/LayerNorm/beta",
              "bert/encoder/embedding_hidden_mapping_in/kernel", "bert/encoder/embedding_hidden_mapping_in/bias",
              "bert/pooler/dense/kernel", "bert/pooler/dense/bias",
              "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
              "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
              "cls/predictions/output_bias", "cls/seq_relationship/output_weights",
              "cls/seq_relationship/output_bias"]
    for g in range(groups):
        for k in range(inner):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{k}"
            for dense in ("attention_1/self/query", "attention_1/self/key", "attention_1/self/value",
                          "attention_1/output/dense", "ffn_1/intermediate/dense",
                          "ffn_1/intermediate/output/dense"):
                names += [f"{p}/{dense}/kernel", f"{p}/{dense}/bias"]
            for norm in ("LayerNorm", "LayerNorm_1"):
                names += [f"{p}/{norm}/gamma", f"{p}/{norm}/beta"]
    return names


def test_tf_checkpoint_round_trip_through_our_model():
    """Our weights under the original TF names ([in, out] kernels) come back identical."""
    from albertlm.hf import load_into

    m = albertlm.AlbertForPreTraining(tiny(num_hidden_groups=2, inner_group_num=2))
    own = m.state_dict()
    variables = {}
    for name in original_tf_names(2, 2) + ["global_step", "bert/pooler/dense/kernel/adam_m"]:
        mapped = tf_to_hf_name(name)
        if mapped is not None:
            key, transpose = mapped
            variables[name] = (own[key].t() if transpose else own[key]).numpy()
    hf_sd = tf_to_hf_state_dict(variables)
    assert set(hf_sd) == set(own), "every weight has exactly one original TF name"
    clone = albertlm.AlbertForPreTraining(tiny(num_hidden_groups=2, inner_group_num=2))
    load_into(clone, hf_sd)
    for k, v in own.items():
        assert torch.equal(v, clone.state_dict()[k]), k


@pytest.mark.parametrize("head", [albertlm.AlbertForTokenClassification, albertlm.AlbertForQuestionAnswering,
                                  albertlm.AlbertForQuestionAnsweringV2])
def test_pretraining_checkpoint_loads_into_heads_without_pooler(tmp_path, head):
    albertlm.AlbertForPreTraining(tiny()).save_pretrained(tmp_path)
    model = head.from_pretrained(tmp_path)
    assert model.albert.pooler is None and model.newly_initialized_keys
