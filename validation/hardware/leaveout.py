"""Leave-out validation of the row forecasts on the shared tables, and the interval it
calibrates (docs/validation.md, "GPU forecasts before the run").

* **Leave one batch size out**: for each batch size, the engine correction is refitted on the
  other batch sizes' rows and the left-out rows are forecast.
* **Leave one model family out** (Llama, Qwen2.5, Qwen3 targets): refitted on the other two
  families, the left-out family forecast.

In both, a row's acceptance comes from the other rows of its pair and dataset (other batch
sizes: another log of the same pair), never from the row. Errors are of the speedup,
``predicted / measured - 1``; a forecast "stops paying" when it is below 1. Coverage is
honest: each left-out group is judged by the interval calibrated on the other groups.

A transfer check: the SSD H100 rows (another GPU, TP 4, another engine's timing), forecast
with the full H200 fit and acceptance from the H200 table; where a row has no measured
speedup (SSD's async batch sweep) its decode throughput is compared. The autoregressive and
synchronous rows are out of sample; the asynchronous ones are in sample for the three
speculation parameters fitted on them (:func:`validation.hardware.fit.fit_async`).

The 95 % interval (:class:`validation.hardware.forecast.Interval`): per left-out group (a
batch size, a model family) the split-conformal order statistic of its
``|log(predicted / measured)|`` speedup errors (``ceil(0.95 (n + 1))``-th smallest), and the
widest of these, so that every group, the hardest included, would have been covered at 95 %:
a forecast of a row of a new GPU, a new group, is given the width the hardest group needed.
Methods checked on fewer than 19 rows get the larger of that and 1.5 times their largest
error; methods never checked (EAGLE) the widest width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from validation.hardware import fit
from validation.hardware.acceptance import AcceptanceLog
from validation.hardware.forecast import (
    INTERVAL_FILE,
    Interval,
    forecast_row,
    prefetch_acceptance,
)
from validation.hardware.rows import Row, read_measured

__all__ = ["family", "Result", "leave_one_batch_out", "leave_one_family_out",
           "transfer_check", "calibrate", "summary", "run_all", "report_lines", "main"]

NO_INTERVAL = Interval({}, "none (point forecasts for the leave-out)", 0.0)


def family(row: Row) -> str:
    """The target's model family: Llama, Qwen2.5 or Qwen3."""
    t = str(row.pair[0]).split("/")[-1].lower()
    for name in ("qwen3", "qwen2.5", "llama"):
        if name in t:
            return {"qwen3": "Qwen3", "qwen2.5": "Qwen2.5", "llama": "Llama"}[name]
    return t


@dataclass
class Result:
    """One left-out row: predicted vs measured."""

    id: str
    fold: str
    method: str
    predicted: float
    measured: float
    kind: str = "speedup"
    detail: dict = field(default_factory=dict)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def log_error(self) -> float:
        return math.log(self.predicted / self.measured)


def _forecast(rows: list[Row], c, log: AcceptanceLog, fold: str) -> list[Result]:
    prefetch_acceptance(rows, c, log)
    out = []
    for r in rows:
        f = forecast_row(r, c, log, NO_INTERVAL)
        out.append(Result(r.id, fold, r.method, f.speedup, r.measured["speedup"],
                          detail={"gamma": f.detail.get("gamma"), "batch": r.batch}))
    return out


def leave_one_batch_out(rows: list[Row], log: AcceptanceLog) -> list[Result]:
    out = []
    for b in sorted({r.batch for r in rows}):
        train = [r for r in rows if r.batch != b]
        c = fit.fit(train)
        out += _forecast([r for r in rows if r.batch == b], c, log, f"batch {b}")
    return out


def leave_one_family_out(rows: list[Row], log: AcceptanceLog) -> list[Result]:
    out = []
    for fam in sorted({family(r) for r in rows}):
        train = [r for r in rows if family(r) != fam]
        c = fit.fit(train)
        out += _forecast([r for r in rows if family(r) == fam], c, log, f"family {fam}")
    return out


def transfer_check(c, log: AcceptanceLog, path=None) -> list[Result]:
    """The SSD H100 rows with the full fit (a GPU, TP size and engine no fit saw)."""
    rows, _ = read_measured(path or fit.TABLES / "ssd_h100.json", "table")
    prefetch_acceptance(rows, c, log)
    out = []
    for r in rows:
        f = forecast_row(r, c, log, NO_INTERVAL)
        if r.measured.get("speedup"):
            out.append(Result(r.id, "transfer H100", r.method, f.speedup,
                              r.measured["speedup"]))
        elif r.measured.get("decode_tok_s"):
            out.append(Result(r.id, "transfer H100", r.method, f.sd_tok_s,
                              r.measured["decode_tok_s"], kind="decode_tok_s"))
    return out


def _quantile(abs_log: list) -> float:
    n = len(abs_log)
    k = math.ceil(0.95 * (n + 1))
    if k > n:
        return float("inf")
    return float(sorted(abs_log)[k - 1])


def calibrate(results: list[Result]) -> Interval:
    """The interval's half-widths (module docstring) from leave-out and transfer results."""
    sp = [r for r in results if r.kind == "speedup"]
    widths = {}
    for m in sorted({r.method for r in sp}):
        mine = [r for r in sp if r.method == m]
        groups = {}
        for r in mine:
            groups.setdefault(r.fold, []).append(abs(r.log_error))
        qs = [_quantile(v) for v in groups.values() if len(v) >= 19]
        if qs:  # every left-out group would have been covered at 95 %
            widths[m] = max(qs)
    base = max(widths.values()) if widths else 0.0
    for m in sorted({r.method for r in sp} - set(widths)):
        widths[m] = max(base, 1.5 * max(abs(r.log_error) for r in sp if r.method == m))
    folds = sorted({r.fold for r in sp})
    return Interval(widths, f"split-conformal 95 % per leave-out group, the widest group "
                    f"({len(sp)} speedup errors: {', '.join(folds)})",
                    default=max(widths.values()))


def _honest_coverage(results: list[Result], rs: list[Result]) -> float:
    """Coverage of ``rs`` where each left-out group is judged by the interval calibrated on
    the other groups only (leave one group out, :func:`calibrate`)."""
    inside = []
    for fold in sorted({r.fold for r in rs}):
        iv = calibrate([r for r in results if r.fold != fold])
        inside += [abs(r.log_error) <= iv.half_width(r.method) for r in rs if r.fold == fold]
    return float(np.mean(inside))


def _fold_key(fold: str):
    kind, _, name = fold.partition(" ")
    return (kind, int(name) if name.isdigit() else 0, name)


def _stats(rs: list[Result]) -> dict:
    e = np.abs([r.error for r in rs])
    return {"rows": len(rs), "median_abs_error": float(np.median(e)),
            "max_abs_error": float(np.max(e)),
            "false_stops_paying": sum(1 for r in rs if r.predicted < 1 <= r.measured)}


def summary(results: list[Result]) -> dict:
    """Per kind of leave-out and per left-out group: median/max |error| of the speedup, the
    coverage of the 95 % interval calibrated without the group, false 'stops paying'."""
    out = {}
    sp = [r for r in results if r.kind == "speedup"]
    for fold_kind in ("batch", "family", "transfer"):
        rs = [r for r in sp if r.fold.startswith(fold_kind)]
        if not rs:
            continue
        d = _stats(rs)
        d["coverage"] = _honest_coverage(sp, rs)
        d["groups"] = {f: _stats([r for r in rs if r.fold == f])
                       for f in sorted({r.fold for r in rs}, key=_fold_key)}
        out[fold_kind] = d
    return out


def report_lines(summ: dict, interval: Interval) -> list[str]:
    """The summary as docs/validation.md prints it."""
    out = []
    for k, d in summ.items():
        out.append(f"leave-out by {k}: {d['rows']} rows, median |error| "
                   f"{100 * d['median_abs_error']:.1f} %, max {100 * d['max_abs_error']:.1f} %, "
                   f"coverage {100 * d['coverage']:.0f} %, false 'stops paying' "
                   f"{d['false_stops_paying']}")
        for g, s in d["groups"].items():
            out.append(f"  {g:16} {s['rows']:3} rows: median |error| "
                       f"{100 * s['median_abs_error']:.1f} %, max "
                       f"{100 * s['max_abs_error']:.1f} %")
    out.append("interval half-width (log): " + ", ".join(
        f"{m} {w:.3f}" for m, w in interval.log_half_width.items()))
    return out


def run_all(table=None) -> tuple[list[Result], Interval, dict]:
    rows = fit.load_rows(table)
    log = AcceptanceLog(rows, str(Path(table or fit.default_table()).name))
    res = leave_one_batch_out(rows, log) + leave_one_family_out(rows, log)
    ssd, _ = read_measured(fit.ssd_table(), "table")
    full = fit.fit_async(fit.fit(rows), ssd, log)
    res += transfer_check(full, log)
    interval = calibrate(res)
    return res, interval, summary(res)


def main(argv=None) -> int:  # pragma: no cover - prints (and with --write stores) the numbers
    import argparse

    from validation.files import dump_json

    ap = argparse.ArgumentParser(description="leave-out validation of the GPU forecasts")
    ap.add_argument("--write", action="store_true", help=f"write {INTERVAL_FILE.name}")
    ap.add_argument("--rows", action="store_true", help="print every left-out row")
    a = ap.parse_args(argv)
    res, interval, summ = run_all()
    if a.rows:
        for r in res:
            print(f"{r.fold:16} {r.id:80} {r.kind:12} {r.predicted:9.3f} {r.measured:9.3f} "
                  f"{100 * r.error:+6.1f} %")
    print("\n".join(report_lines(summ, interval)))
    if a.write:
        INTERVAL_FILE.write_text(dump_json({
            "log_half_width": interval.log_half_width, "default": interval.default,
            "calibrated_on": interval.calibrated_on,
            "command": "python -m validation.hardware.leaveout --write"}) + "\n",
            encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
