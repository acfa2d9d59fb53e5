"""Parity with the ORIGINAL google-research/albert code, from fixtures it produced (no TensorFlow here).

``tests/fixtures/original/generate.py`` ran the original ``tokenization.py``, ``create_pretraining_data.py``
and ``optimization.py`` under TensorFlow on held-out corpus lines, with the small tokenizers beside it
(trained by ``albertlm tokenizer train``, so they follow ``albertlm_compat = "original"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.data import InstanceConfig, SpecialIds, mask_tokens
from albertlm.tokenizer import load_tokenizer
from albertlm.training.optim import build_scheduler, original_schedule

FIX = Path(__file__).resolve().parent / "fixtures" / "original"


def _load(name: str) -> dict:
    return json.loads((FIX / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def toks():
    return {"en": load_tokenizer(FIX / "en"), "zh": load_tokenizer(FIX / "zh")}


# --- tokenization ----------------------------------------------------------------------------------


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_tokenization_matches_the_original(toks, lang):
    rows = _load("tokenization.json")[lang]
    tok = toks[lang]
    assert tok.compat == "original" and len(rows) >= 300
    ours = tok.encode_batch([r["text"] for r in rows])
    bad = [r["text"] for r, o in zip(rows, ours, strict=True) if o != r["ids"]]
    assert not bad, f"{len(bad)} of {len(rows)} lines differ from the original, e.g. {bad[0]!r}"
    if lang == "en":  # the fixture holds the lines where transformers' behaviour differs
        hf = tok.with_compat("transformers").encode_batch([r["text"] for r in rows])
        assert sum(h != r["ids"] for r, h in zip(rows, hf, strict=True)) > 50


def test_digit_comma_keeps_the_underline_the_original_never_strips(toks):
    rows = _load("tokenization.json")["en"]
    tok = toks["en"]
    seen = 0
    for r in rows:
        pieces = tok.convert_ids_to_tokens(r["ids"])
        for i in range(1, len(pieces)):
            # the re-encoded digits start with "▁" although the piece before them is a number too
            if pieces[i] == "," and pieces[i - 1][-1].isdigit() and pieces[i - 1].startswith("▁"):
                seen += i >= 2 and pieces[i - 2][-1].isdigit()
    assert seen > 0


# --- masking ---------------------------------------------------------------------------------------


class ReplayRng:
    """Stands in for the numpy Generator of ``mask_tokens`` and returns the draws the original made:
    its candidate order, the uniform number behind each visited candidate's n, and the 80/10/10 outcome
    of each masked position."""

    def __init__(self, case: dict, mask_id: int) -> None:
        self.case, self.mask_id, self.calls = case, mask_id, 0

    def permutation(self, n: int) -> np.ndarray:
        assert n == len(self.case["order"]), f"{n} words here, {len(self.case['order'])} in the original"
        return np.asarray(self.case["order"])

    def random(self, size: int) -> np.ndarray:
        self.calls += 1
        if self.calls == 1:
            u = np.zeros(size)
            u[: len(self.case["uniforms"])] = self.case["uniforms"]
            return u
        pos, ids, out = (np.asarray(self.case[k]) for k in ("positions", "ids", "output"))
        assert size == len(pos), f"{size} positions masked here, {len(pos)} in the original"
        return np.where(out[pos] == self.mask_id, 0.4, np.where(out[pos] == ids[pos], 0.85, 0.95))

    def integers(self, high: int, size: int) -> np.ndarray:
        return np.asarray(self.case["output"])[self.case["positions"]]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_masking_matches_the_original_under_its_draws(toks, lang):
    tok = toks[lang]
    cases = _load("masking.json")[lang]["cases"]
    ws = tok.word_start_mask()
    ids_ = SpecialIds(tok.cls_id, tok.sep_id, tok.mask_id, tok.vocab_size)
    for k, case in enumerate(cases):
        tokens = np.asarray(case["ids"], dtype=np.int64)
        special = (tokens == tok.cls_id) | (tokens == tok.sep_id)
        cfg = InstanceConfig(
            max_predictions_per_seq=case["max_predictions_per_seq"], masked_lm_prob=case["masked_lm_prob"]
        )
        log: list[tuple[int, int, int]] = []
        out, positions, labels = mask_tokens(tokens, ws[tokens], special, cfg, ids_, ReplayRng(case, tok.mask_id), log)
        assert [drawn for _, drawn, _ in log] == case["ngrams"], f"case {k}: other n-gram sizes than the original"
        assert positions.tolist() == case["positions"], f"case {k}: {tok.convert_ids_to_tokens(tokens)}"
        assert out.tolist() == case["output"] and labels.tolist() == tokens[positions].tolist()
    # the fixture holds the cases that matter: B opening inside a word, n-grams at the sequence end
    starts_b = [ws[c["ids"][c["ids"].index(tok.sep_id) + 1]] for c in cases]
    assert not all(starts_b)


def _z_ok(a: np.ndarray, b: np.ndarray, n_a: int, n_b: int, z: float = 5.0) -> np.ndarray:
    """Two proportions agree within z standard errors (a variance floor of 1/n for rare events)."""
    pa, pb = a / n_a, b / n_b
    p = (a + b) / (n_a + n_b)
    se = np.sqrt(np.maximum(p * (1 - p), 1.0 / (n_a + n_b)) * (1 / n_a + 1 / n_b))
    return np.abs(pa - pb) <= z * se


def test_masking_statistics_match_the_original(toks):
    """Without aligned draws: how often each position, each adjacent pair of positions, and each length
    of masked run occur, over thousands of draws of the original and of ours."""
    tok = toks["en"]
    ws = tok.word_start_mask()
    ids_ = SpecialIds(tok.cls_id, tok.sep_id, tok.mask_id, tok.vocab_size)
    for st in _load("masking.json")["en"]["stats"]:
        cfg = InstanceConfig(masked_lm_prob=st["masked_lm_prob"])
        tokens = np.asarray(st["ids"], dtype=np.int64)
        special = (tokens == tok.cls_id) | (tokens == tok.sep_id)
        n, draws = len(tokens), 2000
        single, pair, runs = np.zeros(n), np.zeros(n - 1), np.zeros(32)
        for d in range(draws):
            _, pos, _ = mask_tokens(tokens, ws[tokens], special, cfg, ids_, np.random.default_rng([22, d]))
            m = np.zeros(n, bool)
            m[pos] = True
            single += m
            pair += m[:-1] & m[1:]
            edges = np.flatnonzero(np.diff(np.concatenate(([0], m.astype(int), [0]))))
            np.add.at(runs, np.minimum(edges[1::2] - edges[::2], 31), 1)
        assert _z_ok(single, np.asarray(st["single"]), draws, st["draws"]).all()
        assert _z_ok(pair, np.asarray(st["pair"]), draws, st["draws"]).all()
        ref_runs = np.asarray(st["runs"])
        assert _z_ok(runs, ref_runs, int(runs.sum()), int(ref_runs.sum())).all()


# --- schedule --------------------------------------------------------------------------------------


def test_schedule_matches_the_original():
    for run in _load("schedule.json")["runs"]:
        f = original_schedule(run["warmup"], run["total"])
        ours = np.array([f(s) for s in run["steps"]])
        # the original computes in float32: 1 - s/T loses ~1e-7 absolute near the end of the run
        np.testing.assert_allclose(ours, np.asarray(run["lr"]) / run["init_lr"], rtol=0, atol=3e-7)
    # through the optimizer: the lr of update s (0-based) is the original's at global_step s
    run = _load("schedule.json")["runs"][1]
    opt = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=run["init_lr"])
    sched = build_scheduler(opt, run["warmup"], run["total"], "original")
    seen = []
    for _ in range(run["total"]):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    np.testing.assert_allclose(seen, run["lr"][: run["total"]], rtol=0, atol=3e-7)
