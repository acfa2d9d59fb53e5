"""LAMB checked against the formula of spec section 7 computed by hand in float64."""

import math

import pytest
import torch
from torch import nn

from albertlm.training.optim import (
    Lamb,
    build_optimizer,
    build_scheduler,
    original_schedule,
    parameter_groups,
    warmup_linear,
)


def reference_lamb(w, g, m, v, lr, wd, trust, b1=0.9, b2=0.999, eps=1e-6):
    """One step of the original LAMB on python floats (float64), element by element."""
    m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
    v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
    u = [mi / (math.sqrt(vi) + eps) + wd * wi for mi, vi, wi in zip(m, v, w, strict=True)]
    w_norm, u_norm = math.sqrt(sum(x * x for x in w)), math.sqrt(sum(x * x for x in u))
    r = w_norm / u_norm if trust and w_norm > 0 and u_norm > 0 else 1.0
    return [wi - lr * r * ui for wi, ui in zip(w, u, strict=True)], m, v


@pytest.mark.parametrize("trust,wd", [(True, 0.01), (False, 0.0)])
def test_lamb_two_steps_match_hand_formula(trust, wd):
    torch.manual_seed(0)
    w0 = torch.randn(7, dtype=torch.float64)
    p = nn.Parameter(w0.clone())
    opt = Lamb([{"params": [p], "weight_decay": wd, "trust_ratio": trust}], lr=0.05)
    w, m, v = w0.tolist(), [0.0] * 7, [0.0] * 7
    for _ in range(2):
        g = torch.randn(7, dtype=torch.float64)
        p.grad = g.clone()
        opt.step()
        w, m, v = reference_lamb(w, g.tolist(), m, v, 0.05, wd, trust)
        torch.testing.assert_close(p.detach(), torch.tensor(w, dtype=torch.float64), atol=1e-6, rtol=1e-6)


def test_zero_weights_use_ratio_one():
    p = nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    Lamb([p], lr=0.1, weight_decay=0.0).step()
    # m = 0.1, v = 0.001: u = 0.1 / (sqrt(0.001) + 1e-6), ratio 1 because ||w|| = 0
    torch.testing.assert_close(p.detach(), torch.full((3,), -0.1 * 0.1 / (math.sqrt(0.001) + 1e-6)))


def test_layernorm_and_bias_excluded_from_decay():
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    decay, no_decay = parameter_groups(model, 0.01)
    assert len(decay["params"]) == 1 and decay["params"][0] is model[0].weight
    assert no_decay["weight_decay"] == 0.0 and not no_decay["trust_ratio"]


def test_schedule_warmup_then_linear_to_zero():
    f = warmup_linear(10, 110)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(60) == pytest.approx(0.5) and f(110) == 0.0
    opt = build_optimizer(nn.Linear(2, 2), "adamw", lr=1.0)
    sched = build_scheduler(opt, 2, 4)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="warmup"):
        build_scheduler(opt, 5, 4)
    with pytest.raises(ValueError, match="original, linear"):
        build_scheduler(opt, 1, 4, "cosine")
    with pytest.raises(ValueError, match="lamb or adamw"):
        build_optimizer(nn.Linear(2, 2), "sgd", lr=1.0)


def test_original_schedule_decays_over_the_whole_run():
    # google-research/albert optimization.py: 0 at step 0, s/W in warmup, then 1 - s/T (not from the peak)
    f = original_schedule(3125, 125000)
    assert f(0) == 0.0 and f(1) == pytest.approx(1 / 3125) and f(3124) == pytest.approx(3124 / 3125)
    assert f(3125) == pytest.approx(0.975) and f(62500) == pytest.approx(0.5) and f(125000) == f(200000) == 0.0
    assert original_schedule(0, 50)(0) == 1.0
