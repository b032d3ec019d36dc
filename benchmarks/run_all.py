"""Run every benchmark in this folder, one after the other (``make bench``)."""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
failed = []
for script in sorted(here.glob("bench_*.py")):
    print(f"\n=== {script.name} ===", flush=True)
    if subprocess.run([sys.executable, str(script)], cwd=here.parent).returncode != 0:
        failed.append(script.name)
if failed:
    print(f"\nfailed: {', '.join(failed)}")
sys.exit(1 if failed else 0)
