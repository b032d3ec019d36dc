"""Run every benchmark in this folder, one after the other (``make bench``).

Refuses to start on a busy machine (``--allow-load`` to run anyway; docs/measuring.md). The
check is made once, here; each benchmark is then started with ``--allow-load``, since the
load a later one would see is the previous benchmark's own (the 1-minute load average decays
over minutes), not other work."""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent))
from validation.capture.machine import check_load_or_exit  # noqa: E402

check_load_or_exit("--allow-load" in sys.argv[1:], "a benchmark")
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name} ===", flush=True)
    if subprocess.run([sys.executable, str(script), "--allow-load"],
                      cwd=here.parent).returncode != 0:
        failed.append(script.name)
if failed:
    print(f"\nfailed: {', '.join(failed)}")
sys.exit(1 if failed else 0)
