"""Issue 8 on real data: on the committed zoo traces (``validation/traces/cpu``), the cascade
``polyspec plan --traces`` chooses for each sampling mode is the measured best among the
captured configurations of that mode, or within 3 % of it.

Only committed traces are read (no capture, no GPU). Measured speedups are ratios within one
capture (its interleaved autoregressive baseline), so captures taken at different machine
loads compare. The planner's pool is built exactly as the command builds it
(:func:`validation.commands.plan.pool_from_captures`, default ``--law best``).
"""

from pathlib import Path

import pytest

from polyspec_theory.planner import plan
from validation.commands.plan import pool_from_captures
from validation.trace_captures import load_captures

ROOT = Path(__file__).resolve().parents[2]
ZOO_TRACES = ROOT / "validation" / "traces" / "cpu"
TOLERANCE = 0.03  # issue 8: "the measured best among the captured ones or within 3 % of it"


@pytest.fixture(scope="module")
def captures():
    caps, _ = load_captures(ZOO_TRACES)
    return caps


@pytest.fixture(scope="module")
def plans(captures):
    """Per temperature: (pool, info, plan)."""
    out = {}
    for t in sorted({float(c.temperature) for c in captures}):
        pool, info = pool_from_captures(captures, temperature=t)
        out[t] = (pool, info, plan(pool, top=3))
    return out


def _label(chain, thresholds) -> str:
    return f"{' <- '.join(chain)} thresholds {list(thresholds)}"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_planned_cascade_is_the_measured_best_or_within_3_percent(captures, plans,
                                                                  temperature):
    assert temperature in plans, f"no committed capture at temperature {temperature}"
    _, _, res = plans[temperature]
    same_mode = [c for c in captures if float(c.temperature) == temperature]
    planned = [c for c in same_mode
               if tuple(c.models) == tuple(res.chain)
               and tuple(c.thresholds) == tuple(res.thresholds)]
    if not planned:
        pytest.fail(
            f"the planned cascade at T={temperature:g}, {_label(res.chain, res.thresholds)} "
            f"(predicted {res.speedup:.3f}x), is not among the committed captures of "
            f"{ZOO_TRACES.relative_to(ROOT)}: capture it with the settings of capture_cpu.sh "
            f"(python -m validation capture --models {','.join(res.chain)} --thresholds "
            f"{','.join(map(str, res.thresholds))} --temperature {temperature:g} --prompts 12 "
            f"--tokens 128 --prompt-len 64 --threads 1 --seed 0 --out "
            f"{ZOO_TRACES.relative_to(ROOT)})")
    got = max(c.measured_speedup for c in planned)
    best = max(same_mode, key=lambda c: c.measured_speedup)
    table = "; ".join(f"{c.name} {c.measured_speedup:.3f}"
                      for c in sorted(same_mode, key=lambda c: -c.measured_speedup))
    assert got >= (1.0 - TOLERANCE) * best.measured_speedup, (
        f"T={temperature:g}: planned {_label(res.chain, res.thresholds)} measures {got:.3f}x, "
        f"{100 * (1 - got / best.measured_speedup):.1f} % below the measured best "
        f"{best.name} {best.measured_speedup:.3f}x (captured: {table})")


def test_pool_law_reproduces_the_threshold_dependence(captures, plans):
    """The pair law the planner uses for target <- ngram (the chain it picks in both modes)
    gives each captured threshold's measured tokens per round within 10 % (largest error
    on the committed set: 7.7 %, at theta = 16 greedy). Greedy rounds are strongly dependent
    (after a fully accepted round the next one is fully accepted 86-100 % of the time, after
    a rejection 23 %, at every theta): an iid law fitted to the same rounds misses theta = 16
    by +89 % and made the planner pick theta = 16, which measures 24 % below theta = 2."""
    checked = 0
    for t, (pool, info, _) in plans.items():
        law = pool.pairs[("target", "ngram")]
        for c in captures:
            if float(c.temperature) != t or tuple(c.models) != ("target", "ngram"):
                continue
            theta = c.thresholds[0]
            measured = c.tokens / c.rounds[0].n
            assert law.mean_emitted(theta) == pytest.approx(measured, rel=0.10), (
                f"T={t:g} theta={theta}: law {info['pairs']['target|ngram']['law']}")
            checked += 1
    assert checked >= 6  # thresholds 1-4 and 16 greedy, 1-3 at T=1


def test_plan_cli_uses_the_same_pool_and_horizon(captures, plans):
    """The pool the test plans from is the command's: one sampling mode per pool, the
    captures' 128-token horizon for the hidden-regime laws, every captured pair present."""
    for t, (_pool, info, res) in plans.items():
        assert info["temperature"] == t and info["horizon"] == 128
        assert set(info["captures"]) == {c.name for c in captures
                                         if float(c.temperature) == t}
        pairs = {f"{c.models[i]}|{c.models[i + 1]}" for c in captures
                 if float(c.temperature) == t for i in range(c.n - 1)}
        assert set(info["pairs"]) == pairs
        assert res.chain[0] == "target" and res.speedup > 1.0
