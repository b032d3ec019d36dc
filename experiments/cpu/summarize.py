"""Print the tables of TRACES.md from the committed traces: one row per capture, then the
models' autoregressive decode times and their cost ratios.

    python experiments/cpu/summarize.py [TRACES_DIR]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from polyspec.research import read_traces  # noqa: E402

ORDER = ("target", "mid", "small", "ngram")


def _params(directory: Path) -> dict:
    out = {}
    for path in sorted(directory.glob("*.jsonl")):
        with path.open() as f:
            header = json.loads(f.readline())
        for m in header.get("models", []):
            out[m["name"]] = m.get("params", 0)
    return out


def tables(directory) -> str:
    d = Path(directory)
    caps = read_traces(d)
    lines = [
        "| file | levels | models (target first) | θ | T | prompts | tokens | rounds | "
        "mean A per level | AR target ms/tok | cascade ms/tok | measured speedup | overhead |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(caps, key=lambda c: (c.temperature, c.n, c.name)):
        mean_a = " / ".join(f"{float(np.mean(r.A)):.2f}" for r in c.rounds)
        lines.append(
            f"| `{c.path and Path(c.path).name or c.name}` | {c.n} | "
            f"{' ← '.join(c.models)} | {','.join(map(str, c.thresholds))} | "
            f"{c.temperature:g} | {c.n_prompts} | {c.tokens} | "
            f"{sum(r.n for r in c.rounds)} | {mean_a} | {1e3 * c.ar_time_per_token:.2f} | "
            f"{1e3 * c.time_per_token:.2f} | {c.measured_speedup:.3f} | "
            f"{100 * c.overhead_s / c.wall_s:.1f} % |")
    ar = {}
    for c in caps:
        for name, b in c.baselines.items():
            if b.ar_time_per_token is not None:
                ar.setdefault(name, []).append(b.ar_time_per_token)
    med = {k: float(np.median(v)) for k, v in ar.items()}
    params = _params(d)
    names = [n for n in ORDER if n in med] + sorted(set(med) - set(ORDER))
    lines += [
        "", "Autoregressive decode time per token (median over the traces that ran the "
        "model); cost ratio to the target and to the next larger model:", "",
        "| model | params | ms/token | ratio to target | ratio to next larger |",
        "|---|---|---|---|---|",
    ]
    for i, n in enumerate(names):
        up = "—" if i == 0 else f"{med[n] / med[names[i - 1]]:.3f}"
        lines.append(f"| {n} | {params.get(n, 0):,} | {1e3 * med[n]:.3f} | "
                     f"{med[n] / med[names[0]]:.3f} | {up} |")
    over = [100 * c.overhead_s / c.wall_s for c in caps]
    lines += ["", f"Orchestration overhead (decode time outside model forwards): median "
              f"{np.median(over):.1f} %, max {max(over):.1f} % over {len(caps)} captures."]
    return "\n".join(lines)


if __name__ == "__main__":
    print(tables(sys.argv[1] if len(sys.argv) > 1 else ROOT / "data" / "traces" / "cpu"))
