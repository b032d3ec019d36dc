"""Sweep tables (calibration data): mean acceptance length and time per output token per
number of speculative tokens K, as ``polyspec calibrate`` runs."""

from __future__ import annotations

import math
import re

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.formats import Evidence, Format
from validation.formats.engine import not_json
from validation.formats.engine_common import SweepTable, half_unit, read_engine_text


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def load_sweep(path) -> SweepTable:
    """A sweep table like ``vllm_eagle_sweep_issue20780.txt``: a table ``K | method... ``
    of mean acceptance lengths (AL) and a table ``BS b | vanilla | method... `` of time per
    output token (TPOT, ms) with rows ``K=k``."""
    text, source = read_engine_text(path)
    return parse_sweep(text, source)


_UNITS = {"ms": "ms", "msec": "ms", "millisecond": "ms", "milliseconds": "ms", "s": "s",
          "sec": "s", "second": "s", "seconds": "s", "us": "us", "µs": "us", "usec": "us"}


def _time_unit(rows) -> str:
    """The unit of the TPOT table from its header cell (``TPOT ms``, ``TPOT (s)``...): one of
    ms, s, us; a throughput or a missing / unknown unit is an error (never a guess)."""
    for lineno, cells in rows:
        for c in cells:
            m = re.search(r"TPOT\s*[\(\[]?\s*([^\s\)\]|]*)", c, re.I)
            if not m:
                continue
            unit = m.group(1).strip().lower()
            if "/" in unit or "tok" in unit:
                raise PolyspecInputError("TPOT", f"line {lineno}: {c.strip()!r} is a throughput, "
                                         "not a time per output token: convert it to TPOT")
            if unit not in _UNITS:
                raise PolyspecInputError("TPOT", f"line {lineno}: the time unit of "
                                         f"{c.strip()!r} is {'missing' if not unit else repr(unit)}"
                                         f"; write one of {', '.join(sorted(set(_UNITS)))}")
            return _UNITS[unit]
    raise PolyspecInputError("TPOT", "no 'TPOT <unit>' header above the table of times per "
                             "token: the time unit is unknown")


def _cell(cells, j: int, lineno: int, what: str, low: float = 0.0) -> str:
    """Cell ``j`` of a row as text, checked: present, a finite number > ``low``."""
    if j >= len(cells):
        raise PolyspecInputError(what, f"line {lineno}: the row has {len(cells)} cells, "
                                 f"column {j + 1} is missing")
    c = cells[j].strip()
    try:
        v = float(c)
    except ValueError:
        raise PolyspecInputError(what, f"line {lineno}, column {j + 1}: {c!r} is not a "
                                 "number") from None
    if not (math.isfinite(v) and v > low):
        raise PolyspecInputError(what, f"line {lineno}, column {j + 1}: {c!r} must be a finite "
                                 f"number > {low:g}")
    return c


def parse_sweep(text: str, source: str = "") -> SweepTable:
    tables, cur = [], None
    for lineno, raw in enumerate(text.splitlines(), 1):
        if "|" not in raw:
            cur = None
            continue
        cells = [c.strip() for c in raw.split("|")]
        if all(set(c) <= {"-", ""} for c in cells):
            continue
        if cur is None:
            cur = []
            tables.append(cur)
        cur.append((lineno, cells))
    al_tab = tpot_tab = None
    for t in tables:
        hdr = next((r for r in t if r[1] and r[1][0].upper() == "K"), None)
        if hdr is not None:
            al_tab = (hdr, [r for r in t if r[1] and re.fullmatch(r"\d+", r[1][0])])
        hdr2 = next((r for r in t if r[1] and re.match(r"BS\s*\d+", r[1][0])), None)
        if hdr2 is not None:
            tpot_tab = (hdr2, [r for r in t if r[1] and re.match(r"K\s*=\s*\d+", r[1][0])],
                        [r for r in t if r[1] and r[1][0].lower().startswith("best k")], t)
    if al_tab is None:
        raise PolyspecInputError("AL", "no table with a 'K' column of mean acceptance lengths")
    if tpot_tab is None:
        raise PolyspecInputError("TPOT", "no table 'BS b | vanilla | ...' of times per token "
                                 "with rows K=k")
    (_, hdr), rows = al_tab
    methods, al_dec = {}, []
    for j, name in enumerate(hdr[1:], 1):
        if not name or "gain" in name.lower():
            continue
        col = {}
        for lineno, r in rows:
            k = int(r[0])
            if not 1 <= k <= 256:
                raise PolyspecInputError("K", f"line {lineno}: K = {k} is not in 1..256")
            if k in col:
                raise PolyspecInputError("K", f"line {lineno}: K = {k} appears twice in the "
                                         "acceptance-length table")
            if j < len(r) and r[j] and r[j].upper() not in ("N/A", "NA", "-"):
                cell = _cell(r, j, lineno, "AL", low=1.0 - 1e-12)
                col[k] = float(cell)
                al_dec.append(half_unit(cell))
        methods[name] = {"al": col}
    (hlineno, hdr2), rows2, best_rows, tab2 = tpot_tab
    unit = _time_unit(tab2)
    bs = int(re.match(r"BS\s*(\d+)", hdr2[0]).group(1))
    vanilla, tp_dec = {}, []
    colmap = {}
    for j, name in enumerate(hdr2[1:], 1):
        if name.lower() == "vanilla":
            colmap["vanilla"] = j
        else:
            for m in methods:
                if _norm(m) == _norm(name):
                    colmap[m] = j
    if "vanilla" not in colmap:
        raise PolyspecInputError("vanilla", "no autoregressive (vanilla) TPOT column")
    for m in methods:
        if m not in colmap:
            raise PolyspecInputError("TPOT", f"no TPOT column for method {m!r}")
        methods[m]["tpot"] = {}
    for lineno, r in rows2:
        k = int(re.match(r"K\s*=\s*(\d+)", r[0]).group(1))
        if k in vanilla:
            raise PolyspecInputError("K", f"line {lineno}: K={k} appears twice in the TPOT "
                                     "table")
        vanilla[k] = float(_cell(r, colmap["vanilla"], lineno, "TPOT"))
        for m in methods:
            cell = _cell(r, colmap[m], lineno, "TPOT")
            methods[m]["tpot"][k] = float(cell)
            tp_dec.append(half_unit(cell))
    best = {}
    for _, r in best_rows:
        for m in methods:
            j = colmap[m]
            if j < len(r) and r[j].strip().isdigit():
                best[m] = int(r[j])
    if not al_dec or not tp_dec:
        raise PolyspecInputError("AL", "no K with both a mean acceptance length and a TPOT")
    # resolution: the step of the printed values (the median over the column: a spreadsheet
    # drops trailing zeros, so "2.1" in a column of 2-decimal values is 2.10)
    return SweepTable(methods, vanilla, bs, unit, 2 * float(np.median(al_dec)),
                      2 * float(np.median(tp_dec)), best, source)


def sweep_runs(table: SweepTable, method: str, fit_on=None) -> dict:
    """A ``polyspec calibrate`` runs mapping for one method of a sweep: two models (target and
    drafter), per-round overhead of the target and the drafter's cost per forward unknown, the
    target's ``T_1(1)`` = the autoregressive TPOT; one run per K with acceptance ``{"tau":
    AL(K)}``; runs not in ``fit_on`` (Ks) are held out (predicted, then compared)."""
    if not isinstance(table, SweepTable):
        raise PolyspecInputError("table", "must be a SweepTable (load_sweep)")
    if not isinstance(method, str):
        raise PolyspecInputError("--method", f"must be a method name, got {method!r}")
    names = {_norm(m): m for m in table.methods}
    key = names.get(_norm(method))
    if key is None:
        raise PolyspecInputError("--method", f"unknown method {method!r}; the table has "
                                 f"{', '.join(table.methods)}")
    data = table.methods[key]
    ks = sorted(set(data["al"]) & set(data["tpot"]))
    if fit_on is not None:
        fit_on = [as_int(k, "--fit-on", low=1) for k in fit_on]
        for k in fit_on:
            if k not in ks:
                raise PolyspecInputError("--fit-on", f"K = {k} is not in the table ({ks})")
    van = {table.vanilla[k] for k in ks}
    if len(van) != 1:
        raise PolyspecInputError("vanilla", f"the autoregressive TPOT differs between rows "
                                 f"({sorted(van)})")
    runs = []
    for k in ks:
        run = {"name": f"K={k}", "thresholds": [k], "acceptance": [{"tau": data["al"][k]}],
               "time_per_token": data["tpot"][k]}
        if fit_on is not None and k not in fit_on:
            run["holdout"] = True
        runs.append(run)
    return {
        "name": f"{key} (batch size {table.batch_size})",
        "description": table.source,
        "time_unit": table.time_unit,
        "models": [{"name": "target", "cost": {"base": van.pop()}, "overhead": "fit"},
                   {"name": "drafter", "cost": "fit"}],
        "runs": runs,
        "resolution": {"time_per_token": table.tpot_resolution, "tau": table.al_resolution},
        "engine_best": table.engine_best.get(key),
    }


def _is_sweep(src) -> bool:
    return (not_json(src) and re.search(r"TPOT", src.body) is not None
            and re.search(r"^\s*K\s*\|", src.body, re.M) is not None)


def _read(src) -> Evidence:
    table = parse_sweep(src.body, src.source)
    return Evidence(path=src.name, format="vllm-sweep", description=_DESCRIPTION, data=table,
                    timing={"time_unit": table.time_unit})


_DESCRIPTION = "table of mean acceptance length and TPOT per K (calibration data)"
FORMATS = (
    Format("vllm-sweep", _DESCRIPTION, _is_sweep, _read, order=63,
           no_report=("rounds", "this is a sweep table (mean acceptance length and time per "
                      "token per K, no round counts): calibration data; use `polyspec "
                      "calibrate FILE --method M`")),
)
