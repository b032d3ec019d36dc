"""Text and Markdown of a batched validation (:mod:`validation.analysis.batch_validate`):
what ``polyspec validate`` prints and writes for batched traces."""

from __future__ import annotations

import math
from pathlib import Path

from validation.files import atomic_write_text, dump_json

__all__ = ["batch_text", "write_batch_report"]


def _f(x, fmt="{:.3f}") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else fmt.format(x)


def _pct(x) -> str:
    return _f(None if x is None else 100 * x, "{:+.1f}%")


def batch_lines(result) -> list[str]:
    """Per capture: measured and predicted speedup (predictive / in-sample); per cascade: the
    crossover; the summary."""
    lines = []
    w = max(len(c.name) for c in result.configs)
    lines.append(f"{'batched capture':<{w}}   b  measured (se)    predictive   error   "
                 "in-sample   error  tokens/s meas/pred")
    for c in result.configs:
        m = c.measured
        p, ins = c.variants["predictive"], c.variants["in_sample"]
        lines.append(
            f"{c.name:<{w}} {c.batch:3d}  {m['speedup']:6.3f} ({_f(m['speedup_se'])})  "
            f"{_f(p.speedup):>10} {_pct(p.error):>7}  {_f(ins.speedup):>9} "
            f"{_pct(ins.error):>7}  {_f(m['tokens_per_second'], '{:.1f}')}/"
            f"{_f(p.tokens_per_second, '{:.1f}')}")
    for c in result.configs:
        if c.variants["predictive"].unavailable:
            lines.append(f"note: {c.name}: no predictive variant: "
                         f"{c.variants['predictive'].unavailable}")
        if c.measured["greedy_lossless"] is False:
            lines.append(f"WARNING: {c.name}: a sequence's greedy output differs from the "
                         "target's autoregressive output")
    for x in result.crossovers:
        lines.append(f"{x.label}: measured speedup at b = {list(x.batches)}: "
                     + ", ".join(f"{s:.3f}" for s in x.measured_speedup)
                     + f"; measured crossover {x.measured_crossover or '> ' + str(x.batches[-1])}")
        for v, d in x.predicted.items():
            if "unavailable" in d:
                lines.append(f"  {v}: {d['unavailable']}")
                continue
            lines.append(f"  {v}: predicted crossover {d['crossover'] or 'none'} "
                         f"(grid step {d['grid_step']} vs measured {d['measured_grid_step']}: "
                         f"{'within' if d['within_one_step'] else 'NOT within'} one step; "
                         f"laws: {d['laws']})")
    s = result.summary()
    for v in ("predictive", "predictive_microbenchmark", "in_sample", "in_sample_b0"):
        e = s[v]
        if e["n"]:
            label = f"{v} (diagnostic)" if v.startswith("in_sample") else v
            lines.append(f"{label + ':':<28} median |error| "
                         f"{_f(100 * e['median_abs_error'], '{:.1f}%')}, max "
                         f"{_f(100 * e['max_abs_error'], '{:.1f}%')} over {e['n']} capture(s); "
                         f"crossovers within one step {e['crossovers_within_one_step']}")
    return lines


def batch_text(result) -> str:
    return "\n".join(batch_lines(result))


def write_batch_report(result, out_dir, title="Batched validation") -> dict:
    """``batch.md`` (the text above with the structure tables) and ``batch.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = [f"# {title}", "", "Model: docs/theory.md (B0 lockstep batch, B2 exact). "
          "`predictive`: nothing of the predicted capture (laws from other captures, costs "
          "from a batched profile or other captures' cost samples at the same b, "
          "orchestration from other captures at the same b); `in_sample`: diagnostic fits "
          "on the capture itself (with its catch-up positions); `in_sample_b0`: the same "
          "without them.", "", "```", *batch_lines(result), "```", "",
          "## Structure (measured vs B2 with the capture's own laws)", ""]
    for c in result.configs:
        md.append(f"**{c.name}** (b = {c.batch})")
        md.append("")
        md.append("| level | verifier | E[K] = E[max N] | pred | E[max G] | pred | idle share "
                  "| pred | E[L] | pred |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in c.structure:
            p = r["predicted"]
            md.append(f"| {r['level']} | {r['verifier']} | {r['mean_K']:.3f} | "
                      f"{_f(p['mean_K'])} | {r['mean_max_G']:.3f} | {_f(p['mean_max_G'])} | "
                      f"{r['idle_share']:.3f} | {_f(p['idle_share'])} | {r['mean_L']:.3f} | "
                      f"{_f(p['mean_L'])} |")
        md.append("")
    mdp = out / "batch.md"
    jp = out / "batch.json"
    atomic_write_text(mdp, "\n".join(md) + "\n")
    atomic_write_text(jp, dump_json(result.to_json()) + "\n")
    return {"markdown": str(mdp), "json": str(jp)}
