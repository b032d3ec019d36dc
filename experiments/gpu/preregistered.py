"""The pre-registered forecasts of the held-out PipeSpec runs (../shared/gpu-traces/README.md):
the synchronous 70B <- 8B <- 1B at lookahead 8 and the asynchronous 70B <- 1B, 70B <- 8B and
70B <- 8B <- 1B at lookahead 0 (8B in float16 wherever it runs), each from the other runs
only, written to preregistered.json next to this script. Rerun:

    python experiments/gpu/preregistered.py /path/to/gpu-traces/pipespec-humaneval
"""

import contextlib
import io
import json
import sys
from pathlib import Path

from polyspec.cli import main

T70, T8, T1 = "Meta-Llama-3.1-70B-Instruct", "Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct"
RUNS = [  # (name, models, lookahead, mode)
    ("sync 70B <- 8B <- 1B, K = 8", [T70, T8, T1], 8, "sync"),
    ("async 70B <- 1B, K = 0", [T70, T1], 0, "async"),
    ("async 70B <- 8B, K = 0", [T70, T8], 0, "async"),
    ("async 70B <- 8B <- 1B, K = 0", [T70, T8, T1], 0, "async"),
]


def forecast(traces: Path, models, k: int, mode: str) -> dict:
    argv = ["forecast", "--traces", str(traces), "--models", ",".join(models),
            "--thresholds", str(max(k - 1, 0)), "--mode", mode, "--json"]  # θ = K - 1
    if T8 in models:
        argv += ["--dtype", f"{T8}=float16"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    if rc != 0:
        raise SystemExit(f"forecast failed ({rc}): {' '.join(argv)}")
    # the file names only: the forecast does not depend on where the traces sit
    return json.loads(out.getvalue().replace(str(traces.resolve()) + "/", "")
                      .replace(str(traces) + "/", ""))


def run(traces: Path) -> list[dict]:
    return [{"name": n, **forecast(traces, m, k, mode)} for n, m, k, mode in RUNS]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    rows = run(Path(sys.argv[1]))
    dest = Path(__file__).resolve().parents[2] / "data" / "gpu" / "preregistered.json"
    dest.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    for r in rows:
        lo, hi = r["interval95"]
        print(f"{r['name']:<32} {r['speedup']:.3f}  95 % [{lo:.3f}, {hi:.3f}]")
