"""Benchmark of the hidden-regime fit (``polyspec_theory.core.regimes.fit_regimes``), about
95 % of the time of ``plan --traces`` on our CPU captures
(``validation.analysis.pool.pool_from_captures``): this checkout side by side, in one run,
with the same module at another git revision (``--before``; default: the last revision
with the doubling scan in the E-step), on the committed captures ``data/traces/cpu`` pooled
per pair as ``pool_from_captures`` pools them (one sequence per capture and prompt).

Prints, per pair: rounds and sequences; the median time of one E-step (log-likelihood and
expected counts at the fit's first starting point, k = 3) before and after and their ratio;
the time of the whole fit (k = 2 and 3, three BFGS starts each) before and after, their
ratio, and how far apart the two fits are (the largest relative difference of the
log-likelihoods, the largest absolute difference of a fitted probability). Then the totals
over the pairs.

Run: ``.venv/bin/python benchmarks/bench_regimes.py [--before REV] [--quick]``
(``--quick``: the two smallest pairs, k = 2 only, fewer repeats; a smoke run). Timings are
``time.perf_counter`` wall times, single thread; the revisions alternate so that machine load
affects both alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from polyspec_theory.core import regimes as after  # noqa: E402
from validation.analysis.pool import pair_rounds  # noqa: E402
from validation.paths import traces_dir  # noqa: E402
from validation.traces.records import read_traces  # noqa: E402

BEFORE = "c24ca55"  # the E-step by Hillis-Steele doubling (log2 n full-size matrix steps)
MODULE = "polyspec_theory/core/regimes.py"


def load_before(rev: str, tmp: Path):
    """The regimes module as it is at git revision ``rev`` (imported under another name; its
    own imports resolve in this checkout)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{MODULE}"], check=True,
                         capture_output=True, text=True).stdout
    path = tmp / "regimes_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("regimes_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def estep_times(mods: dict, rounds, repeats: int) -> dict:
    """Median seconds of one E-step with counts, per module, alternating."""
    a, g, grp = rounds
    qbar = a.sum() / max(a.sum() + np.sum(a < g), 1)
    runs = {}
    for name, mod in mods.items():
        data = mod._RoundData.build(a, g, grp)
        model = mod._starts(3, float(qbar))[0]
        runs[name] = (mod, model, data)
    ts = {name: [] for name in mods}
    for _ in range(repeats):
        for name, (mod, model, data) in runs.items():
            ts[name].append(_timed(lambda mod=mod, m=model, d=data: mod._estep(m, d))[0])
    return {name: statistics.median(v) for name, v in ts.items()}


def fit_times(mods: dict, rounds, ks) -> tuple[dict, float, float]:
    """Seconds of the fits for every k, per module (alternating), and how far apart the two
    modules' fits are: the largest relative difference of the log-likelihoods and the
    largest absolute difference of a fitted probability (BFGS stops at a gradient of 1e-3,
    so parameters agree to the precision the optimizer settles, not to the last digit)."""
    a, g, grp = rounds
    ts = {name: 0.0 for name in mods}
    fits = {name: [] for name in mods}
    for k in ks:
        for name, mod in mods.items():
            t, f = _timed(lambda mod=mod, k=k: mod.fit_regimes(a, g, grp, k=k))
            ts[name] += t
            fits[name].append(f)
    (_, fa), (_, fb) = list(fits.items())[:2]
    ll = max(abs(x.loglik - y.loglik) / abs(y.loglik) for x, y in zip(fa, fb, strict=True))
    par = max(float(np.max(np.abs(getattr(x.model, n) - getattr(y.model, n))))
              for x, y in zip(fa, fb, strict=True) for n in ("init", "trans", "accept"))
    return ts, ll, par


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default=BEFORE, help=f"git revision (default {BEFORE})")
    ap.add_argument("--quick", action="store_true",
                    help="the two smallest pairs, k = 2, fewer repeats (a smoke run)")
    from validation.capture.machine import add_allow_load, check_load_or_exit

    add_allow_load(ap)
    args = ap.parse_args(argv)
    check_load_or_exit(args.allow_load, "a benchmark")
    pairs = pair_rounds(read_traces(traces_dir("cpu")))
    if args.quick:
        pairs = dict(sorted(pairs.items(), key=lambda kv: kv[1][0].size)[:2])
    ks, reps = ((2,), 3) if args.quick else ((2, 3), 15)
    with tempfile.TemporaryDirectory() as tmp:
        mods = {f"revision {args.before}": load_before(args.before, Path(tmp)),
                "this checkout": after}
        print(f"before: revision {args.before}; after: this checkout; fits k = "
              f"{', '.join(map(str, ks))}")
        print(f"{'pair':<22}{'rounds':>7}{'seqs':>6}{'E-step ms before':>18}{'after':>8}"
              f"{'ratio':>7}{'fit s before':>14}{'after':>8}{'ratio':>7}{'loglik rel':>12}"
              f"{'param abs':>11}")
        tot = {name: 0.0 for name in mods}
        for (v, d), rounds in pairs.items():
            es = estep_times(mods, rounds, reps)
            fs, dll, dpar = fit_times(mods, rounds, ks)
            (eb, ea), (fb, fa) = es.values(), fs.values()
            for name in mods:
                tot[name] += fs[name]
            print(f"{v + ' <- ' + d:<22}{rounds[0].size:>7}{np.unique(rounds[2]).size:>6}"
                  f"{1e3 * eb:>18.2f}{1e3 * ea:>8.2f}{eb / ea:>7.1f}"
                  f"{fb:>14.2f}{fa:>8.2f}{fb / fa:>7.1f}{dll:>12.1e}{dpar:>11.1e}", flush=True)
        tb, ta = tot.values()
        print(f"{'all pairs (fits)':<22}{'':>7}{'':>6}{'':>18}{'':>8}{'':>7}"
              f"{tb:>14.2f}{ta:>8.2f}{tb / ta:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
