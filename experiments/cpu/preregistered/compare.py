"""Pre-registered forecasts (forecasts.jsonl, committed before the captures) against the
captures taken afterwards: python experiments/cpu/preregistered/compare.py"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "data" / "traces" / "cpu" / "preregistered"
sys.path.insert(0, str(ROOT))

from polyspec.research import measured_ci95, read_traces  # noqa: E402


def main() -> int:
    caps = {c.name: c for c in read_traces(HERE.parent)}
    rows, errs = [], []
    for line in (HERE / "forecasts.jsonl").read_text().splitlines():
        f = json.loads(line)
        c = caps.get(f["name"])
        if c is None:
            rows.append(f"| {f['name']} | {f['speedup']:.3f} | — | not captured yet | | |")
            continue
        lo, hi = f["interval95"]
        mlo, mhi = measured_ci95(c)
        e = f["speedup"] / c.measured_speedup - 1
        errs.append(e)
        rows.append(f"| {f['name']} | {f['speedup']:.3f} [{lo:.3f}, {hi:.3f}] | "
                    f"{c.measured_speedup:.3f} [{mlo:.3f}, {mhi:.3f}] | {100 * e:+.1f} % | "
                    f"{'yes' if lo <= c.measured_speedup <= hi else 'no'} | "
                    f"{'yes' if mlo <= f['speedup'] <= mhi else 'no'} |")
    print("| configuration | forecast [95 % prediction interval] | measured [95 % CI] | error | "
          "measured in the interval | forecast in the measured CI |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    if errs:
        a = np.abs(errs)
        print(f"\n{len(errs)} pre-registered configurations: median |error| "
              f"{100 * np.median(a):.2f} %, max {100 * a.max():.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
