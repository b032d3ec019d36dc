"""On real data: on the committed zoo traces (``data/traces/cpu``), the cascade
``polyspec plan --traces`` chooses for each sampling mode is the measured best among the
captured configurations of that mode, or within 3 % of it — judged on the measurements with
their uncertainty: every capture decodes the same 12 prompts, so the planned and the best
cascade are compared prompt by prompt (paired bootstrap of the ratio of their measured
speedups); the test fails when the data show, at one-sided level 1 %, that the planned
cascade is more than 3 % slower than the measured best.

Only committed traces are read (no capture, no GPU). Measured speedups are ratios within one
capture (its interleaved autoregressive baseline), so captures taken at different machine
loads compare. The planner's pool is built exactly as the command builds it
(:func:`validation.analysis.pool.pool_from_captures`, default ``--law best``).
"""


import numpy as np
import pytest

from polyspec_theory.planning.planner import plan
from validation.analysis.pool import pool_from_captures
from validation.paths import traces_dir
from validation.traces.records import read_traces

# the module's cost is the pool of each sampling mode (hidden-regime laws fitted on its
# captures) and its plan: each is computed once per process (``_PLANS``), and the tests of one
# mode share an xdist group (``make test`` runs ``--dist loadgroup``), so each mode's pool is
# built once per run and the two modes are built on two workers side by side
TEMPERATURES = [0.0, 1.0]  # the committed sampling modes (test_committed_modes_are_these)


def _group(t: float):
    return pytest.mark.xdist_group(f"plan_on_zoo_traces_T{t:g}")


def _by_mode():
    """``parametrize`` over the sampling modes, each in its mode's xdist group."""
    return pytest.mark.parametrize(
        "temperature", [pytest.param(t, marks=_group(t)) for t in TEMPERATURES])

ZOO_TRACES = traces_dir("cpu")
TOLERANCE = 0.03  # "the measured best among the captured ones or within 3 % of it"
LEVEL = 0.01  # one-sided false-failure rate of the paired comparison
BOOT = 4000


def _per_prompt(capture):
    """(AR target wall, AR tokens, cascade wall, cascade tokens) per prompt, by prompt id."""
    return {int(row[0]): tuple(row[1:]) for row in capture.paired_table()}


def paired_ratio(planned, best, seed=0):
    """Measured speedup of ``planned`` / that of ``best`` over their common prompts, and the
    one-sided upper ``1 - LEVEL`` bootstrap bound of that ratio (prompts resampled jointly)."""
    pa, pb = _per_prompt(planned), _per_prompt(best)
    keys = sorted(set(pa) & set(pb))
    x = np.array([pa[k] for k in keys], dtype=np.float64)
    y = np.array([pb[k] for k in keys], dtype=np.float64)

    def ratio(idx):
        sx = (x[idx, 0].sum() / x[idx, 1].sum()) / (x[idx, 2].sum() / x[idx, 3].sum())
        sy = (y[idx, 0].sum() / y[idx, 1].sum()) / (y[idx, 2].sum() / y[idx, 3].sum())
        return sx / sy

    rng = np.random.default_rng(seed)
    boots = [ratio(rng.integers(0, len(keys), len(keys))) for _ in range(BOOT)]
    return ratio(np.arange(len(keys))), float(np.quantile(boots, 1.0 - LEVEL)), len(keys)


# The zoo's original models. The distilled drafter (draft-t) and the higher-order n-grams
# came with the comparison of deeper cascades, whose measured outcome is reported in
# data/traces/cpu/TRACES.md and the README (there the planner's T = 1 pick measured 10 %
# below the best two-model cascade): this test pins the planner on the original pool.
ORIGINAL = {"target", "mid", "small", "ngram"}


_PLANS: dict = {}  # per process: "captures", and per temperature (pool, info, plan)


@pytest.fixture(scope="module")
def captures():
    if "captures" not in _PLANS:
        _PLANS["captures"] = [c for c in read_traces(ZOO_TRACES) if set(c.models) <= ORIGINAL]
    return _PLANS["captures"]


@pytest.fixture(scope="module")
def plans(captures):
    """``plans(t)``: (pool, info, plan) at temperature ``t``, the pool built as ``plan
    --traces`` builds it (composition profiles of the captures included); computed once per
    process (deterministic: the same captures, fixed starting points)."""
    from validation.capture.composition_profile import load_profiles

    def get(t: float):
        if t not in _PLANS:
            profiles = load_profiles(ZOO_TRACES / "profiles", captures)
            pool, info = pool_from_captures(captures, temperature=t, profiles=profiles)
            _PLANS[t] = (pool, info, plan(pool, top=3))
        return _PLANS[t]

    return get


def _label(chain, thresholds) -> str:
    return f"{' <- '.join(chain)} thresholds {list(thresholds)}"


@_group(TEMPERATURES[0])  # with the captures that group reads
def test_committed_modes_are_these(captures):
    """The per-mode tests below cover every sampling mode of the committed captures."""
    assert sorted({float(c.temperature) for c in captures}) == TEMPERATURES


@_by_mode()
def test_planned_cascade_is_the_measured_best_or_within_3_percent(captures, plans,
                                                                  temperature):
    assert any(float(c.temperature) == temperature for c in captures), (
        f"no committed capture at temperature {temperature}")
    _, _, res = plans(temperature)
    same_mode = [c for c in captures if float(c.temperature) == temperature]
    planned = [c for c in same_mode
               if tuple(c.models) == tuple(res.chain)
               and tuple(c.thresholds) == tuple(res.thresholds)]
    if not planned:
        pytest.fail(
            f"the planned cascade at T={temperature:g}, {_label(res.chain, res.thresholds)} "
            f"(predicted {res.speedup:.3f}x), is not among the committed captures of "
            f"{ZOO_TRACES}: capture it with the settings of capture_cpu.sh "
            f"(polyspec capture --models {','.join(res.chain)} --thresholds "
            f"{','.join(map(str, res.thresholds))} --temperature {temperature:g} --prompts 12 "
            f"--tokens 128 --prompt-len 64 --threads 1 --seed 0 --out "
            f"{ZOO_TRACES})")
    got = max(planned, key=lambda c: c.measured_speedup)
    best = max(same_mode, key=lambda c: c.measured_speedup)
    if got.measured_speedup >= (1.0 - TOLERANCE) * best.measured_speedup:
        return
    table = "; ".join(f"{c.name} {c.measured_speedup:.3f}"
                      for c in sorted(same_mode, key=lambda c: -c.measured_speedup))
    ratio, upper, n = paired_ratio(got, best)
    assert n >= 10 and ratio == pytest.approx(got.measured_speedup
                                              / best.measured_speedup, rel=1e-9)
    assert upper >= 1.0 - TOLERANCE, (
        f"T={temperature:g}: planned {_label(res.chain, res.thresholds)} measures "
        f"{got.measured_speedup:.3f}x, {100 * (1 - ratio):.1f} % below the measured best "
        f"{best.name} {best.measured_speedup:.3f}x; paired over {n} prompts the ratio's "
        f"one-sided {100 * (1 - LEVEL):g} % upper bound is {upper:.3f} < {1 - TOLERANCE:.2f} "
        f"(captured: {table})")


@_by_mode()
def test_pool_law_reproduces_the_threshold_dependence(captures, plans, temperature):
    """The law the planner uses for the top pair of the chain it picks gives the measured
    tokens per round of every two-level capture of that pair (several thresholds) within
    10 %. Greedy rounds are strongly dependent (lag-1 correlation of A/G up to 0.8 on the
    zoo): an iid law fitted to the same rounds mispredicts large thresholds by tens of per
    cent and once made the planner pick theta = 16 (24 % below the best), which is why the
    pool uses hidden-regime laws."""
    for t in (temperature,):
        pool, info, res = plans(t)
        top = (res.chain[0], res.chain[1])
        law = pool.pairs[top]
        checked = []
        for c in captures:
            if float(c.temperature) != t or tuple(c.models) != top:
                continue
            theta = c.thresholds[0]
            measured = c.tokens / c.rounds[0].n
            assert law.mean_emitted(theta) == pytest.approx(measured, rel=0.10), (
                f"T={t:g} theta={theta}: law {info['pairs']['|'.join(top)]['law']}")
            checked.append(theta)
        assert len(checked) >= 2, (t, top, checked)  # several thresholds per mode


@_by_mode()
def test_plan_cli_uses_the_same_pool_and_horizon(captures, plans, temperature):
    """The pool the test plans from is the command's: one sampling mode per pool, the
    captures' 128-token horizon for the hidden-regime laws, every captured pair present."""
    for t in (temperature,):
        _pool, info, res = plans(t)
        assert info["temperature"] == t and info["horizon"] == 128
        assert set(info["captures"]) == {c.name for c in captures
                                         if float(c.temperature) == t}
        pairs = {f"{c.models[i]}|{c.models[i + 1]}" for c in captures
                 if float(c.temperature) == t for i in range(c.n - 1)}
        assert set(info["pairs"]) == pairs
        assert res.chain[0] == "target" and res.speedup > 1.0


def test_paired_comparison_detects_a_real_shortfall_and_not_a_tie(tmp_path):
    """The paired check can fail: a copy of a capture whose cascade is 10 % slower on every
    prompt is flagged (upper bound < 0.97); the capture against itself is not."""
    import json

    src = ZOO_TRACES / "target-ngram_th2_T0.jsonl"
    lines = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        if rec["type"] == "summary":
            rec["wall_s"] *= 1.10
        if rec["type"] == "header":
            rec["cascade"]["name"] = "slower"
        lines.append(json.dumps(rec))
    (tmp_path / "slower.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / src.name).write_text(src.read_text())
    caps = read_traces(tmp_path)
    slow = next(c for c in caps if c.name == "slower")
    orig = next(c for c in caps if c.name != "slower")
    ratio, upper, n = paired_ratio(slow, orig)
    assert n == 24 and ratio == pytest.approx(1 / 1.10, rel=1e-9) and upper < 0.97
    ratio, upper, _ = paired_ratio(orig, orig)
    assert ratio == pytest.approx(1.0) and upper >= 0.97
