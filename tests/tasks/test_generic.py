"""Your own data: the generic tasks on small real files in each format (tests/data/generic, see its
SOURCE.md): format and header detection, columns by name and index, label names, the seeded hold-out,
bad rows as one line with file:line (or counted under --skip-bad-rows), the chosen defaults, the best
checkpoint, and the saved model answering evaluate / predict / export / serve with the user's columns and
label names."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli import main
from albertlm.errors import DataError
from albertlm.tasks import RowPolicy, TaggingExample, kind_of
from albertlm.tasks.generic import UserData, detect_format
from albertlm.tasks.registry import fit_to_data, generic_task, task_from_info

GEN = Path(__file__).resolve().parents[1] / "data" / "generic"
TINY = dict(hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2, embedding_size=16)
SET = [f"--set={k}={v}" for k, v in TINY.items()]
FAST = ["--quiet", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "64"]
OPTIONS = ",".join(f"option{i}" for i in range(7))


def read(name: str, file: str | Path, policy: RowPolicy | None = None, **columns) -> list:
    return generic_task(name, UserData(**columns)).reader(GEN / file, policy or RowPolicy())


# ------------------------------------------------------------------------- formats and columns
@pytest.mark.parametrize("file, columns, n, first", [
    ("sst2_train.csv", dict(text_column="review", label_column="sentiment"), 60, "positive"),
    ("sst2_dev.json", dict(text_column="review", label_column="sentiment"), 30, "positive"),
    ("chnsenticorp_train.tsv", dict(text_column="1", label_column="0"), 40, "1"),  # no header: by index
    ("chnsenticorp_dev.jsonl", dict(text_column="评论", label_column="情感"), 20, "负面"),
    ("afqmc_pairs.tsv", dict(text_column="0", pair_column="1", label_column="2"), 40, "0"),
])  # fmt: skip
def test_classification_reads_every_format(file, columns, n, first):
    examples = read("classification", file, **columns)
    assert len(examples) == n and examples[0].label == first and examples[0].text_a
    assert examples[0].source.startswith(str(GEN / file) + ":")
    assert (examples[0].text_b is not None) == ("pair_column" in columns)


def test_csv_quoting_and_json_line_numbers():
    rows = read("classification", "sst2_train.csv", text_column="review", label_column="sentiment")
    assert any("," in ex.text_a for ex in rows)  # quoted fields keep their commas
    js = read("classification", "sst2_dev.json", text_column="review", label_column="sentiment")
    assert [ex.source.rsplit(":", 1)[1] for ex in js[:3]] == ["2", "3", "4"]  # the line each object starts on


def test_format_from_content_when_the_name_says_nothing(tmp_path):
    for src, want in (("sst2_train.csv", "csv"), ("chnsenticorp_train.tsv", "tsv"), ("chnsenticorp_dev.jsonl", "jsonl"),
                      ("sst2_dev.json", "json"), ("pku_ner_train.conll", "conll")):  # fmt: skip
        dst = tmp_path / f"{src}.data"
        shutil.copy(GEN / src, dst)
        assert detect_format(dst, UserData(), lines="conll" if want == "conll" else "csv") == want
    rows = read("classification", tmp_path / "sst2_train.csv.data", text_column="review", label_column="sentiment")
    assert len(rows) == 60


def test_header_detection_and_default_columns(tmp_path):
    # default column names are found in a header without any flag
    f = tmp_path / "plain.csv"
    f.write_text("text,label\nthe best film,good\nthe worst film,bad\n", encoding="utf-8")
    assert [ex.label for ex in read("classification", f)] == ["good", "bad"]
    # --no-header makes the first line data
    rows = read("classification", f, text_column="0", label_column="1", header=False)
    assert rows[0].text_a == "text" and len(rows) == 3
    with pytest.raises(DataError, match="--label-column 5 is past the last column"):
        read("classification", "chnsenticorp_train.tsv", text_column="1", label_column="5")
    # a headerless file needs columns by index, and says so
    with pytest.raises(DataError, match="no header line; name the column by index, e.g. --text-column 0"):
        read("classification", "chnsenticorp_train.tsv")


def test_labels_from_training_file_in_a_stable_order(tmp_path):
    task = generic_task("classification", UserData(text_column="review", label_column="sentiment"))
    ex = task.reader(GEN / "sst2_train.csv", RowPolicy())
    assert kind_of(task).label_set(task, ex) == ["negative", "positive"]
    f = tmp_path / "stars.jsonl"
    f.write_text("".join(json.dumps({"text": f"review {i}", "stars": s}) + "\n" for i, s in enumerate([10, 2, 1, 2])))
    t = generic_task("classification", UserData(label_column="stars"))
    assert kind_of(t).label_set(t, t.reader(f, RowPolicy())) == ["1", "2", "10"]  # numbers in numeric order


def test_other_kinds_read_their_files():
    tags = read("tagging", "pku_ner_train.conll")
    assert len(tags) == 16 and tags[0].tags[0] == "B-ORG" and len(tags[0].words) == len(tags[0].tags)
    js = read("tagging", "pku_ner_dev.jsonl")
    assert len(js) == 8 and js[0].tags and len(js[0].words) == len(js[0].tags)
    assert [ex.words for ex in js] == [ex.words for ex in read("tagging", "pku_ner_dev.conll")]
    v2 = generic_task("qa")
    assert fit_to_data(v2, read("qa", "squad_v2_train.json")).kind == "qa_v2"  # impossible questions -> v2
    assert fit_to_data(v2, read("qa", "squad_v1_dev.json")).kind == "qa"
    choice = read("choice", "chid_train.jsonl")
    csv_choice = read("choice", "chid_dev.csv", options_column=OPTIONS)
    assert len(choice) == 16 and len(choice[0].options) == 7 and 0 <= choice[0].label < 7
    assert len(csv_choice) == 8 and all(len(ex.options) == 7 and ex.label is not None for ex in csv_choice)
    reg = read("regression", "chnsenticorp_train.tsv", text_column="1", label_column="0")
    assert {float(ex.label) for ex in reg} == {0.0, 1.0}
    pos = read("tagging", "pku_ner_train.conll", label_column="1")
    assert [ex.tags for ex in pos] == [ex.tags for ex in tags]
    plain = fit_to_data(generic_task("tagging"), [TaggingExample(["a", "dog"], ["DT", "NN"])])
    assert plain.main_metric == "token_accuracy"
    assert plain.metric([["DT", "VB"]], [["DT", "NN"]]) == {"token_accuracy": 0.5}
    # what a saved model records brings the same task back (columns, v2 head, metric)
    back = task_from_info("tagging", {"name": "tagging", "main_metric": "token_accuracy", "data": {"text_column": "w"}})
    assert back.main_metric == "token_accuracy" and back.columns.text_column == "w"
    assert task_from_info("qa", {"name": "qa", "kind": "qa_v2"}).kind == "qa_v2"


# ------------------------------------------------------------------------- bad input
def _one_line(fn, match: str) -> None:
    with pytest.raises(DataError) as e:
        fn()
    assert match in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_bad_rows_name_file_and_line(tmp_path):
    f = tmp_path / "r.csv"
    f.write_text("review,stars\ngreat,5\nawful,1\n,3\nfine,3,extra\nok,4\n", encoding="utf-8")
    _one_line(lambda: read("classification", f, text_column="review", label_column="stars"),
              f"{f}:4: empty text in column 'review'")  # fmt: skip
    f.write_text("review,stars\ngreat,5\nawful,1\nfine,3,extra\nok,4\n", encoding="utf-8")
    _one_line(lambda: read("classification", f, text_column="review", label_column="stars"),
              f"{f}:4: 3 fields where the header has 2")  # fmt: skip
    _one_line(lambda: read("classification", f, text_column="body", label_column="stars"),
              f"{f}:1: no column 'body' for --text-column (the file has: review, stars)")  # fmt: skip
    f.write_text("review,stars\ngreat,5\nawful,1\nbland,n/a\nok,4\n", encoding="utf-8")
    _one_line(lambda: read("classification", f, text_column="review", label_column="stars"),
              f"{f}:4: label 'n/a' is a string, but the 'stars' column's labels are a number")  # fmt: skip
    j = tmp_path / "r.jsonl"
    j.write_text('{"t": "good", "y": 1}\n{"t": "bad", "y": 0}\n{"t": "meh", "y": "0"}\n{"t": 3, "y": 1}\n')
    _one_line(lambda: read("classification", j, text_column="t", label_column="y"),
              f"{j}:4: the text (t) is a number, not a string")  # fmt: skip
    policy = RowPolicy(skip_bad_rows=True)
    rows = read("classification", j, policy, text_column="t", label_column="y")
    assert [ex.label for ex in rows] == ["1", "0"] and policy.skipped == 2  # "0" (a string among numbers), 3
    reg = tmp_path / "reg.tsv"
    reg.write_text("text\tscore\na\t0.5\nb\thigh\n", encoding="utf-8")
    _one_line(lambda: read("regression", reg), f"{reg}:3: label 'high' is not a number")


def test_one_class_unseen_dev_label_and_unlabeled_training(tmp_path):
    from albertlm.training.finetune_data import load_data

    one = tmp_path / "one.csv"
    one.write_text("text,label\na,yes\nb,yes\nc,yes\n", encoding="utf-8")
    task = generic_task("classification")
    _one_line(lambda: load_data(task, one), "every training label is 'yes'; a classifier needs two or more classes")
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"评论": "好", "情感": "正面"}\n{"评论": "还行", "情感": "中性"}\n', encoding="utf-8")
    zh = generic_task("classification", UserData(text_column="评论", label_column="情感"))
    _one_line(lambda: load_data(zh, GEN / "chnsenticorp_train.jsonl", eval_file=dev),
              f"{dev}:2: unknown label '中性'")  # fmt: skip
    tags = tmp_path / "dev.conll"
    tags.write_text("江 B-PER\n苏 I-PER\n\n好 B-MISC\n", encoding="utf-8")
    _one_line(lambda: load_data(generic_task("tagging"), GEN / "pku_ner_train.conll", eval_file=tags),
              f"{tags}:4: tag 'B-MISC' is not among the training tags")  # fmt: skip
    unlabeled = tmp_path / "u.csv"
    unlabeled.write_text("text\na\nb\n", encoding="utf-8")
    _one_line(lambda: load_data(task, unlabeled), f"{unlabeled}:2: no label; training needs a labeled file")


def test_seeded_hold_out_is_reported(caplog):
    from albertlm.training.finetune_data import load_data

    task = generic_task("classification", UserData(text_column="review", label_column="sentiment", dev_fraction=0.2))
    with caplog.at_level("INFO", logger="albertlm"):
        a = load_data(task, GEN / "sst2_train.csv", seed=1)
    b = load_data(task, GEN / "sst2_train.csv", seed=1)
    c = load_data(task, GEN / "sst2_train.csv", seed=2)
    assert len(a.eval) == 12 and len(a.train) == 48 and "seeded hold-out: 12 of 60" in a.eval_path
    assert [ex.source for ex in a.eval] == [ex.source for ex in b.eval] != [ex.source for ex in c.eval]
    assert not {ex.source for ex in a.eval} & {ex.source for ex in a.train}
    assert "holding out 12 of the 60 examples" in caplog.text and "classes in" in caplog.text


def test_a_folder_with_train_and_dev_files(tmp_path):
    from albertlm.training.finetune_data import load_data

    shutil.copy(GEN / "chnsenticorp_train.jsonl", tmp_path / "train.jsonl")
    shutil.copy(GEN / "chnsenticorp_dev.jsonl", tmp_path / "dev.jsonl")
    task = generic_task("classification", UserData(text_column="评论", label_column="情感"))
    data = load_data(task, tmp_path)
    assert (len(data.train), len(data.eval)) == (40, 20) and data.eval_path == str(tmp_path / "dev.jsonl")
    assert data.labels == ["正面", "负面"]


def test_imbalance_is_reported(tmp_path, caplog):
    from albertlm.training.finetune_data import load_data

    f = tmp_path / "skew.csv"
    f.write_text("text,label\n" + "".join(f"row {i},{'spam' if i < 2 else 'ham'}\n" for i in range(20)))
    with caplog.at_level("INFO", logger="albertlm"):
        data = load_data(generic_task("classification"), f)
    assert data.label_counts == {"spam": 2, "ham": 18}
    assert "imbalanced classes: 'ham' has 18 examples, 9.0x the 2 of 'spam'" in caplog.text


def test_auto_defaults_follow_the_documented_rule(en_tok_dir):
    from albertlm import AlbertForSequenceClassification
    from albertlm.config import AlbertConfig
    from albertlm.tokenizer import load_tokenizer
    from albertlm.training.finetune import auto_defaults

    tok = load_tokenizer(en_tok_dir)
    task = generic_task("classification", UserData(text_column="review", label_column="sentiment"))
    ex = task.reader(GEN / "sst2_train.csv", RowPolicy())
    model = AlbertForSequenceClassification(AlbertConfig(vocab_size=tok.vocab_size, hidden_size=768,
                                                         num_attention_heads=12, intermediate_size=64,
                                                         num_hidden_layers=1,
                                                         id2label={0: "negative", 1: "positive"}))  # fmt: skip
    fitted, why = auto_defaults(task, ex, model, tok, random_init=False)
    p95 = np.percentile([len(tok.encode(e.text_a)) for e in ex], 95)  # [CLS] text [SEP]
    assert fitted.max_seq_length == max(32, math.ceil(p95 / 32) * 32)
    assert fitted.lr == 5e-5 and fitted.epochs == 10 and fitted.batch_size == 8
    assert auto_defaults(task, ex, model, tok, random_init=True)[0].lr == 2e-4
    assert auto_defaults(task, ex * 40, model, tok, random_init=False)[0].batch_size == 32
    assert set(why) == {"lr", "batch_size", "epochs", "max_seq_length"}


# ------------------------------------------------------------------------- end to end through the CLI
def test_user_csv_finetune_evaluate_predict_export(en_tok_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    args = ["finetune", "--task", "classification", "--data", str(GEN / "sst2_train.csv"), "--eval-file",
            str(GEN / "sst2_dev.json"), "--text-column", "review", "--label-column", "sentiment", "--model",
            "albert-tiny", "--tokenizer", str(en_tok_dir), "--out", str(out), "--epochs", "2", *FAST, *SET]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "settings for your data: lr 0.001 (given); batch_size 8 (given); epochs 2 (given)" in printed
    assert "classes in" in printed and "wrote model + tokenizer" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    saved = config["albertlm_task"]
    assert saved["name"] == "classification" and saved["data"]["text_column"] == "review"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [8, 16]  # every epoch
    final = json.loads((out / "metrics.json").read_text())
    assert final["best_step"] == saved["best_step"] == max(rows, key=lambda r: r["macro_f1"])["step"]
    assert final["metrics"]["macro_f1"] == max(r["macro_f1"] for r in rows)

    # evaluate reads a CSV with the saved columns and reproduces the kept model's score
    assert main(["evaluate", "--model", str(out), "--data", str(GEN / "sst2_dev.csv")]) == 0
    got = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert got["accuracy"] == pytest.approx(final["metrics"]["accuracy"])
    # ... and a file with other column names through the flags
    other = tmp_path / "other.tsv"
    other.write_text("txt\tlab\nan awful mess\tnegative\na charming film\tpositive\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(out), "--data", str(other), "--text-column", "txt",
                 "--label-column", "lab"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["examples"] == 2.0

    # predict answers with the label names, reading the user's own field name too
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"review": "a charming film"}\n{"text": "an awful mess"}\nplain text line\n', encoding="utf-8")
    assert main(["predict", "--model", str(out), "--input", str(inp)]) == 0
    preds = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(preds) == 3 and all(set(p["probabilities"]) == {"negative", "positive"} for p in preds)

    # ... and reads a file like the training file, one output line per row
    assert main(["predict", "--model", str(out), "--input", str(GEN / "sst2_dev.csv")]) == 0
    table = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(table) == 30 and {p["label"] for p in table} <= {"negative", "positive"}

    # the server answers with them too
    from albertlm.deploy.inference import Predictor
    from albertlm.deploy.serve import Service

    service = Service(Predictor.load(out))
    assert service.health()["labels"] == ["negative", "positive"]
    assert service.call("predict", b'{"review": "a charming film"}')["results"][0]["label"] in {"negative", "positive"}

    if importlib.util.find_spec("onnxruntime") is not None:
        assert main(["export", "--model", str(out), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 0
        capsys.readouterr()
        assert main(["predict", "--model", str(tmp_path / "onnx"), "--engine", "onnx", "--input", str(inp)]) == 0
        onnx = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [p["label"] for p in onnx] == [p["label"] for p in preds]


@pytest.mark.parametrize("task, data, extra, main_metric", [
    ("classification", "chnsenticorp_train.jsonl",
     ["--eval-file", str(GEN / "chnsenticorp_dev.jsonl"), "--text-column", "评论", "--label-column", "情感"],
     "macro_f1"),
    ("classification", "afqmc_pairs.tsv", ["--text-column", "0", "--pair-column", "1", "--label-column", "2"],
     "macro_f1"),
    ("regression", "chnsenticorp_train.tsv", ["--text-column", "1", "--label-column", "0"], "pearson"),
    ("tagging", "pku_ner_train.conll", ["--eval-file", str(GEN / "pku_ner_dev.jsonl")], "f1"),
    ("qa", "squad_v2_train.json", ["--eval-file", str(GEN / "squad_v2_train.json"), "--max-seq-length", "128"],
     "best_f1"),
    ("choice", "chid_train.jsonl", [], "accuracy"),
])  # fmt: skip
def test_every_generic_kind_trains_and_evaluates(zh_tok_dir, en_tok_dir, tmp_path, capsys, task, data, extra,
                                                 main_metric):  # fmt: skip
    tok = en_tok_dir if task == "qa" else zh_tok_dir
    out = tmp_path / "m"
    args = ["finetune", "--task", task, "--data", str(GEN / data), "--model", "albert-tiny", "--tokenizer", str(tok),
            "--out", str(out), "--max-steps", "2", "--quiet", *SET, *extra]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "settings for your data: lr " in printed and "(chosen: H=32, random init)" in printed
    final = json.loads((out / "metrics.json").read_text())
    assert final["main_metric"] == main_metric and main_metric in final["metrics"]
    eval_file = next((extra[i + 1] for i, a in enumerate(extra) if a == "--eval-file"), str(GEN / data))
    assert main(["evaluate", "--model", str(out), "--data", eval_file]) == 0
    assert main_metric in json.loads(capsys.readouterr().out.splitlines()[-1])


def test_best_checkpoint_is_kept(en_tok_dir, tmp_path, monkeypatch, capsys):
    """Evaluation scores 0.2, 0.9, 0.5: the model of the second evaluation stays in --out."""
    from albertlm.deploy.inference import Predictor

    scores = iter([0.2, 0.9, 0.5])
    saved_weights = []

    def fake_evaluate(self, examples):
        return {"accuracy": 0.5, "macro_f1": next(scores)}, []

    import albertlm.training.finetune as ft

    real_save = ft.save

    def spy_save(model, *a, **kw):
        saved_weights.append(model.classifier.weight.detach().clone())
        real_save(model, *a, **kw)

    monkeypatch.setattr(Predictor, "evaluate", fake_evaluate)
    monkeypatch.setattr(ft, "save", spy_save)
    out = tmp_path / "best"
    args = ["finetune", "--task", "classification", "--data", str(GEN / "sst2_train.csv"), "--text-column", "review",
            "--label-column", "sentiment", "--model", "albert-tiny", "--tokenizer", str(en_tok_dir), "--out", str(out),
            "--max-steps", "6", "--eval-every", "2", *FAST, *SET]  # fmt: skip
    assert main(args) == 0
    assert "(kept the model of step 4)" in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["best_step"] == 4
    assert len(saved_weights) == 2  # saved at the first evaluation and at the better second, not the third
    from albertlm import AlbertForSequenceClassification

    kept = AlbertForSequenceClassification.from_pretrained(out).classifier.weight
    assert kept.equal(saved_weights[1])
    assert not list(out.glob(".*tmp*"))  # atomic saves leave no temporary files


def test_cli_errors_are_one_line(en_tok_dir, tmp_path, capsys):
    base = ["finetune", "--model", "albert-tiny", "--tokenizer", str(en_tok_dir), "--out", str(tmp_path / "o"), *SET]
    cases = [
        (["--task", "sst2", "--data", str(GEN), "--text-column", "review"], "--text-column is for your own data"),
        (["--task", "classification", "--data", str(GEN / "sst2_train.csv"), "--text-column", "body"],
         "no column 'body' for --text-column (the file has: review, sentiment)"),
        (["--task", "classification", "--data", str(GEN / "sst2_train.csv"), "--label-column", "sentiment",
          "--text-column", "review", "--eval-file", str(GEN / "chnsenticorp_dev.jsonl")],
         "no column 'review' for --text-column"),
    ]  # fmt: skip
    for extra, msg in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
