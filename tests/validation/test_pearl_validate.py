"""``polyspec validate`` on parallel draft-verify (PEARL) captures: each decode predicted by
PL3 with the law and the step costs of the OTHER decodes (nothing of a decode in its own
prediction). Traces are written here by an independent PL0 generator (Bernoulli(alpha)
checks, fixed step times c(0) / c(k >= 1)), so every number is known by construction:
the prediction is recomputed by hand from the generator's own counts; on a long capture the
prediction meets the measurement within 4.5 standard errors (fixed seed); a capture with one
decode and nothing else of its pair is shown unpredicted; the single-stream reader refuses a
PEARL trace in one line naming the scheme's reader."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import t as student

from polyspec.cli import main
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.schemes.pearl import pearl_horizon
from validation.schemes.pearl import trace_header

Z = 4.5


def _decode(rng, alpha, g, b, steps, c0, c1, run):
    """One decode's records by PL0's rules, and its (accepted, rejected) checks."""
    post = [0] * b
    recs, ver_tot, acc_n, rej_n = [], [0] * b, 0, 0
    for s in range(steps):
        acc, ver = [], []
        for j in range(b):
            checks = g if post[j] else 1
            n = 0
            while n < checks and rng.random() < alpha:
                n += 1
            acc.append(n)
            ver.append(checks if n == checks else n + 1)
            acc_n += n
            rej_n += int(n < checks)
        m = g if any(post) else 1
        cost = c1 if any(post) else c0
        recs.append({"type": "pstep", "run": run, "step": s, "post": list(post),
                     "accepted": acc, "verified": ver, "m": m, "target_s": cost / 2,
                     "wait_s": 0.0, "step_s": cost, "draft_s": cost / 3})
        post = [int(a == (g if p else 1)) for a, p in zip(acc, post, strict=True)]
        ver_tot = [x + y for x, y in zip(ver_tot, ver, strict=True)]
    recs.append({"type": "prun", "run": run, "prompts": list(range(run * b, run * b + b)),
                 "n_generated": ver_tot, "pending": [g - 1 if p else 0 for p in post],
                 "wall_s": sum(r["step_s"] for r in recs), "prefill_s": 0.001})
    return recs, acc_n, rej_n


def _model(name):
    return SimpleNamespace(name=name, describe=lambda: {"name": name})


def _write(path, name, decodes, g, b, steps):
    head = trace_header([_model("t"), _model("d")], g, b, steps, name=name,
                        n_prompts=len(decodes) * b)
    lines = [head] + [r for d in decodes for r in d] + [{"type": "end",
                                                         "n_prompts": len(decodes) * b}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _validate(folder, capsys):
    assert main(["validate", str(folder), "--json", "--no-plots"]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_decode_is_predicted_from_the_other_decode(tmp_path, capsys):
    """Two decodes at alpha 0.9 and 0.4: decode 0 is predicted with decode 1's alpha and
    step costs and vice versa; the capture's predicted time per token is the sum of the
    decodes' predicted time over the sum of their predicted tokens, recomputed here."""
    g, b, steps, c0, c1 = 3, 2, 20, 0.010, 0.016
    rng = np.random.default_rng(5)
    d0 = _decode(rng, 0.9, g, b, steps, c0, c1, 0)
    d1 = _decode(rng, 0.4, g, b, steps, c0, c1, 1)
    _write(tmp_path / "p.jsonl", "p", [d0[0], d1[0]], g, b, steps)
    (row,) = _validate(tmp_path, capsys)["pearl"]
    time = tokens = 0.0
    for other in (d1, d0):
        alpha = other[1] / (other[1] + other[2])
        h = pearl_horizon(IIDGeometric(alpha), g, [c0] + [c1] * b, steps)
        tokens += h.verified / steps
        time += h.time / steps
    assert row["predicted"]["time_per_token"] == pytest.approx(time / tokens, rel=1e-12)
    assert row["predicted"]["tokens_per_step"] == pytest.approx(tokens / 2, rel=1e-12)
    pst = [r for r in d0[0] + d1[0] if r["type"] == "pstep"]
    meas = sum(r["step_s"] for r in pst) * b / sum(sum(r["verified"]) for r in pst)
    assert row["measured"]["time_per_token"] == pytest.approx(meas, rel=1e-12)
    assert row["error"] == pytest.approx(time / tokens / meas - 1, rel=1e-9)
    assert row["decodes"] == 2 and row["name"] == "p"


def test_a_long_capture_is_predicted_within_its_error(tmp_path, capsys):
    """alpha 0.7, gamma 3, batch 2, 40 decodes of 30 steps: the prediction meets the
    measured time per token within 4.5 standard errors (of the decodes' spread), and the
    text report states the headline."""
    g, b, steps = 3, 2, 30
    rng = np.random.default_rng(11)
    decodes = [_decode(rng, 0.7, g, b, steps, 0.010, 0.016, k)[0] for k in range(40)]
    _write(tmp_path / "long.jsonl", "long", decodes, g, b, steps)
    (row,) = _validate(tmp_path, capsys)["pearl"]
    lo, hi = row["measured"]["time_per_token_ci95"]
    se = (hi - lo) / 2 / student.ppf(0.975, 39)
    pred, meas = row["predicted"]["time_per_token"], row["measured"]["time_per_token"]
    assert abs(pred - meas) <= Z * se
    assert se > 0 and abs(row["in_sample"]["error"]) < 0.05
    assert main(["validate", str(tmp_path), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "1 parallel draft-verify capture(s)" in out and "pearl headline" in out


def test_one_decode_alone_is_not_predicted(tmp_path, capsys):
    """A capture of one decode with no other capture of its models: no prediction (the
    in-sample diagnostic only), said in the headline line."""
    rng = np.random.default_rng(3)
    _write(tmp_path / "one.jsonl", "one", [_decode(rng, 0.6, 2, 1, 10, 0.01, 0.02, 0)[0]],
           2, 1, 10)
    (row,) = _validate(tmp_path, capsys)["pearl"]
    assert row["predicted"] is None and row["error"] is None and row["inside_ci"] is None
    assert main(["validate", str(tmp_path), "--no-plots"]) == 0
    assert "pearl: no headline prediction" in capsys.readouterr().out


def test_the_single_stream_reader_refuses_a_pearl_trace(tmp_path):
    from validation.traces.records import own_reader, read_trace, read_traces
    from validation.traces.schema import TraceError

    rng = np.random.default_rng(4)
    path = tmp_path / "p.jsonl"
    _write(path, "p", [_decode(rng, 0.6, 2, 1, 5, 0.01, 0.02, 0)[0]], 2, 1, 5)
    assert own_reader(path).name == "pearl"
    with pytest.raises(TraceError, match=r"scheme 'pearl'.*read_capture"):
        read_trace(path)
    with pytest.raises(TraceError, match="read by their scheme's own reader"):
        read_traces(tmp_path)
