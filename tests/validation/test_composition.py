"""Composition profiles: the replay runs the decoder's block policy with acceptance drawn
from given laws (checked against P1's exact forward counts), and its profile turns into the
cost tables a forecast uses."""

import math
import re

import numpy as np
import pytest

from polyspec_theory.core.config import Cascade, Model
from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric, Positional
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import predict
from tests.validation.tiny_zoo import tiny_family
from validation.capture.composition import ReplayDecoder, profile_cascade
from validation.capture.composition_profile import CompositionProfile

Z = 4.5  # two-sided normal quantile: false-failure rate 6.8e-6 per interval check

MODELS = tiny_family(3, vocab=16, d=8, seed=11)


def _prompts(k, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [[int(x) for x in rng.integers(0, 16, n)] for _ in range(k)]


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_replay_draws_extreme_laws_exactly(alpha):
    rep = ReplayDecoder(MODELS, [3, 2], [IIDGeometric(alpha)] * 2, seed=1)
    res = rep.generate(_prompts(1)[0], 40)
    assert res.rounds
    for r in res.rounds:
        assert r.A == (r.G if alpha == 1.0 else 0) and r.L == r.A + 1
        assert r.G >= [3, 2][r.level - 1]
    assert all(r.G == 2 for r in res.rounds if r.level == 2)


def test_replay_forward_counts_follow_p1():
    laws = (IIDGeometric(0.7), Positional([0.8, 0.5]))
    th = (3, 2)
    rep = ReplayDecoder(MODELS, list(th), list(laws), seed=3)
    tokens, fwd = [], []
    for k, p in enumerate(_prompts(30, seed=4)):
        rep.reseed(100 + k)
        res = rep.generate(p, 60)
        tokens.append(res.n_generated)
        fwd.append(res.forward_count)
    tokens, fwd = np.asarray(tokens, float), np.asarray(fwd, float)
    exact = predict(Cascade(tuple(Model(f"m{i}", CostCurve.constant(1.0)) for i in range(3)),
                            laws, th))
    for i in range(3):
        # ratio estimator over prompts (the last round of a prompt may overshoot its budget)
        est = fwd[:, i].sum() / tokens.sum()
        resid = fwd[:, i] - est * tokens
        se = math.sqrt(np.sum(resid**2) / (len(tokens) - 1) * len(tokens)) / tokens.sum()
        assert abs(est - exact.levels[i].forwards_per_token) < Z * se + 0.02 * est, i


def test_profile_and_its_cost_tables():
    prof = profile_cascade(MODELS, [3, 2], [IIDGeometric(0.6), IIDGeometric(0.5)],
                           _prompts(3, seed=9), 30, seed=2, warmup=0)
    assert prof.models == [m.name for m in MODELS] and prof.thresholds == [3, 2]
    assert set(prof.verify[1]) == {2}  # the last pair verifies exactly theta
    assert min(prof.verify[0]) >= 3 and prof.draft_forwards > 0 and prof.ar_s > 0
    curves = prof.cost_curves()
    mv = prof.mean_verify(0)
    for g, t in mv.items():  # the table holds the mean verify time of a block of G at G + 1
        assert curves[0](g + 1) == pytest.approx(t, rel=1e-12)
    assert curves[0](1) == pytest.approx(prof.ar_s, rel=1e-12)  # T_1(1): the AR time
    assert curves[2](1) == pytest.approx(prof.draft_s, rel=1e-12)
    back = CompositionProfile.from_dict(prof.to_dict())
    assert back.mean_verify(0) == pytest.approx(prof.mean_verify(0), rel=1e-12)
    with pytest.raises(PolyspecInputError, match="not a composition profile"):
        CompositionProfile.from_dict({"format": "other"})
    with pytest.raises(PolyspecInputError, match=r"laws: need one law per pair \(2\)"):
        ReplayDecoder(MODELS, [3, 2], [IIDGeometric(0.5)])


@pytest.mark.parametrize("key,value,field", [
    ("ar_s", 0.0, "ar_s"), ("draft_s", -1e-3, "draft_s"), ("draft_s", "NaN", "draft_s"),
    ("replay_wall_s", -1.0, "replay_wall_s"),
    ("verify", "Infinity", r"verify\[0\]\.\d+\[0\]"),
])
def test_profiles_with_zero_negative_or_non_finite_times_are_refused(tmp_path, capsys, key,
                                                                     value, field):
    """A composition profile read by validate / forecast holding a time <= 0 or not finite:
    one line naming the file and the field (it used to change the costs silently)."""
    import json
    import shutil
    from pathlib import Path

    from polyspec.cli import main

    d = tmp_path / "traces"
    shutil.copytree(Path(__file__).parent / "fixtures" / "traces", d)
    f = next((d / "profiles").glob("*.json"))
    text = f.read_text()
    data = json.loads(text)
    if key == "verify":
        g = next(iter(data["verify"][0]))
        data["verify"][0][g][0] = 12345.5
        text = json.dumps(data).replace("12345.5", value)
    else:
        data[key] = 424242.5
        text = json.dumps(data).replace("424242.5", str(value))
    f.write_text(text)
    assert main(["validate", str(d), "--out", str(tmp_path / "r"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and str(f) in err, err
    assert re.search(rf"{field}: must be a finite time >=? 0 s", err), err


def test_reading_profiles_and_naming_models_loads_no_torch():
    """``polyspec forecast`` / ``validate`` read profiles and name models without the decoders:
    neither the profile reader nor :func:`model_name` imports torch (a second of start-up per
    command); profiling itself still runs under torch (``test_profile_and_its_cost_tables``)."""
    import subprocess
    import sys

    code = ("import sys; import validation.capture.composition as c; "
            "from validation.capture.model_specs import model_name; "
            "import polyspec.commands.forecast, polyspec.commands.forecast_kinds; "
            "assert model_name('ngram:3') == 'ngram3'; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
