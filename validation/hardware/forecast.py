"""Forecast GPU-table rows before they run (docs/theory.md HW5).

For each row: the models' costs on the row's GPU and engine from the database
(:mod:`~validation.hardware.database`), the engine correction fitted on the shared tables
(:mod:`~validation.hardware.fit`), the method's timed run as its code runs
(:mod:`~validation.hardware.methods`) and acceptance from another log of the same pair
(:mod:`~validation.hardware.acceptance`) or from the row itself where the method's rows carry
it. A row that cannot be forecast is refused by id with the reason; the others are still
forecast. Nothing measured of the row is read (:func:`validation.hardware.rows.read` drops it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from polyspec_theory.errors import PolyspecInputError
from validation.hardware import methods
from validation.hardware.acceptance import AcceptanceLog
from validation.hardware.engines import Corrections, EngineModel, engine_model
from validation.hardware.rows import Refused, Row

__all__ = ["Forecast", "forecast_row", "forecast_rows", "prefetch_acceptance", "Interval",
           "load_interval", "INTERVAL_FILE", "EAGLE_HEAD", "dataset_of"]

INTERVAL_FILE = Path(__file__).resolve().parent / "interval.json"
# an EAGLE-3 head's draft vocabulary when the row does not give it (EAGLE-3's released heads)
EAGLE_HEAD = {"kind": "eagle3", "draft_vocab_size": 32000}


@dataclass(frozen=True)
class Interval:
    """The 95 % prediction interval's half-width in log speedup, per method, and where it was
    calibrated (:mod:`validation.hardware.leaveout`)."""

    log_half_width: dict
    calibrated_on: str
    default: float

    def half_width(self, method: str) -> float:
        return float(self.log_half_width.get(method, self.default))


def load_interval_or_none() -> Interval:
    """The committed interval, or a zero-width one where none is written yet (fitting)."""
    try:
        return load_interval()
    except PolyspecInputError:
        return Interval({}, "none", 0.0)


def load_interval(path=None) -> Interval:
    p = Path(path) if path else INTERVAL_FILE
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolyspecInputError("interval", f"{p}: no such file (python -m "
                                 "validation.hardware.leaveout --write)") from None
    return Interval(d["log_half_width"], d["calibrated_on"], float(d["default"]))


@dataclass
class Forecast:
    id: str
    speedup: float
    interval95: tuple
    ar_tok_s: float
    sd_tok_s: float
    sources: list = field(default_factory=list)
    detail: dict = field(default_factory=dict)

    def to_dict(self, detail: bool = False) -> dict:
        out = {"id": self.id, "speedup": self.speedup, "interval95": list(self.interval95),
               "ar_tok_s": self.ar_tok_s, "sd_tok_s": self.sd_tok_s,
               "sources": list(self.sources)}
        if detail:
            out["detail"] = dict(self.detail)
        return out


def dataset_of(row: Row) -> str | None:
    """The row's dataset; SSD's benchmark rows name none, and their prompts are GSM8K
    questions (the table's README), so they are GSM8K's."""
    if row.dataset:
        return row.dataset
    if row.engine.lower() == "ssd":
        return "GSM8K"
    return None


def _models(row: Row, c: Corrections) -> tuple[EngineModel, EngineModel | None]:
    t = engine_model(row.pair[0], row.gpu, row.engine, row.tp_target, c,
                     field_name="target")
    if row.method == "ar":
        return t, None
    if row.method == "eagle":
        head = dict(EAGLE_HEAD)
        if row.get("draft_vocab_size"):
            head["draft_vocab_size"] = row.get("draft_vocab_size")
        d = engine_model(row.pair[0], row.gpu, row.engine, row.tp_target, c, head=head,
                         field_name="drafter")
        return t, d
    d = engine_model(row.pair[1], row.gpu, row.engine, row.tp_drafter, c,
                     field_name="drafter")
    return t, d


def gamma_rule(c: Corrections):
    """The start-up rule on a log row's own GPU, engine and TP sizes (its gamma)."""
    def gamma_of(r: Row) -> int:
        if r.get("gamma"):
            return int(r.get("gamma"))
        t, d = _models(r, c)
        return methods.pearl_gamma(t, d)
    return gamma_of


def _alpha(row: Row, log: AcceptanceLog | None, c: Corrections):
    if log is None:
        raise PolyspecInputError("acceptance", "no acceptance for this method's rows: pass "
                                 "--acceptance-from a log of the same pair")
    est = log.alpha(row.pair[0], row.pair[1], dataset_of(row), gamma_of=gamma_rule(c),
                    exclude=row.id, batch=row.batch)
    if est is None:
        raise PolyspecInputError("acceptance", f"{log.origin} has no row of the pair "
                                 f"{row.pair[1]} -> {row.pair[0]} on {dataset_of(row)}")
    return est


def prefetch_acceptance(rows: list[Row], c: Corrections, log: AcceptanceLog | None) -> None:
    """The acceptance :func:`forecast_row` asks ``log`` for, for each of ``rows``, computed
    ahead side by side (:meth:`AcceptanceLog.prefetch`); changes no forecast."""
    if log is None:
        return
    log.prefetch([(r.pair[0], r.pair[1], dataset_of(r), r.id, r.batch) for r in rows
                  if r.method in ("pearl", "sd-sync", "ssd-async")], gamma_of=gamma_rule(c))


def forecast_row(row: Row, c: Corrections, log: AcceptanceLog | None,
                 interval: Interval) -> Forecast:
    """One row's forecast (raises :class:`PolyspecInputError` with the reason when it cannot
    be made)."""
    t, d = _models(row, c)
    b = row.batch
    src = [t.costs.provenance["source"] + f" ({t.costs.system}, {t.costs.backend} "
           f"{t.costs.version})", f"engine correction: {c.fitted_on}"]
    detail = {"target": t.costs.provenance, "engine_family": t.family}
    if d is not None:
        detail["drafter"] = d.costs.provenance
    if row.tp_target is None:
        src.append("target TP not given: 1 assumed")
    if row.method == "pearl":
        est = _alpha(row, log, c)
        g = int(row.get("gamma")) if row.get("gamma") else methods.pearl_gamma(t, d)
        cached = methods.shared_prefix_cached({**row.settings, "engine": row.engine},
                                              row.prompt_len, b)
        ar = methods.ar_run(t, b, row.prompt_len, row.get("ar_gen_len"), cached=cached)
        sd = methods.pearl_run(t, d, b, row.prompt_len, row.get("steps"), est.alpha, g,
                               cached=cached)
        src.append(f"acceptance: {log.origin} rows {', '.join(est.sources)} (alpha "
                   f"{est.alpha:.4f} at their engine's draft length)")
        detail.update(gamma=g, alpha=est.to_dict(), prefix_cached=cached)
    elif row.method in ("ar", "sd-sync", "ssd-async"):
        out = row.get("output_len")
        ar = methods.ar_run(t, b, row.prompt_len, out, prefill=False)
        if row.method == "ar":
            sd = ar
        else:
            est = _alpha(row, log, c)
            k = row.get("k")
            src.append(f"acceptance: {log.origin} rows {', '.join(est.sources)} (alpha "
                       f"{est.alpha:.4f})")
            detail.update(alpha=est.to_dict())
            if row.method == "sd-sync":
                sd = methods.sd_sync_run(t, d, b, row.prompt_len, out, est.alpha, k)
            else:
                sd = methods.ssd_async_run(t, d, b, row.prompt_len, out, est.alpha, k,
                                           row.get("fan_out"))
    elif row.method == "eagle":
        out = row.get("ar_gen_len") or row.get("output_len") or 200
        ar = methods.ar_run(t, b, row.prompt_len, out, prefill=False)
        shape = methods.EagleShape(row.get("speculative_num_steps"),
                                   row.get("speculative_eagle_topk"),
                                   row.get("speculative_num_draft_tokens"))
        sd = methods.eagle_run(t, d, b, row.prompt_len, out, row.get("accept_length"), shape)
        src.append(f"acceptance: the row's accept_length {row.get('accept_length'):g}")
        src.append(f"EAGLE-3 head: one layer of {row.pair[0]}'s shape, draft vocabulary "
                   f"{(row.get('draft_vocab_size') or EAGLE_HEAD['draft_vocab_size'])}")
    else:  # pragma: no cover - rows.parse_row admits no other method
        raise PolyspecInputError("method", f"no forecast for {row.method!r}")
    speedup = sd.tok_s / ar.tok_s
    q = 0.0 if row.method == "ar" else interval.half_width(row.method)
    src.append(f"interval: {interval.calibrated_on}")
    detail.update(ar=ar.detail, sd=sd.detail)
    return Forecast(row.id, speedup, (speedup * math.exp(-q), speedup * math.exp(q)),
                    ar.tok_s, sd.tok_s, src, detail)


def forecast_rows(rows: list[Row], c: Corrections, log: AcceptanceLog | None,
                  interval: Interval) -> tuple[list[Forecast], list[Refused]]:
    """Every row's forecast, and the rows refused with their reasons."""
    done, refused = [], []
    prefetch_acceptance(rows, c, log)
    for r in rows:
        try:
            done.append(forecast_row(r, c, log, interval))
        except PolyspecInputError as e:
            refused.append(Refused(r.id, str(e)))
    return done, refused
