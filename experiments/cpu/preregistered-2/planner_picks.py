"""The planner's top two configurations never captured, at one temperature:
    python experiments/cpu/preregistered-2/planner_picks.py POOL.json TEMPERATURE
POOL.json: ``polyspec plan --traces data/traces/cpu --temperature T --write-pool POOL.json``.
Every chain of the pool's models (target first, up to 3 drafters) with thresholds 1..8 per
pair (1..16 for two models) is scored by P1 on the pool (the planner's objective); the two
best whose capture name is not in data/traces/cpu (nor its preregistered rounds) are printed
as configs.txt lines."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = ROOT / "data" / "traces" / "cpu" / "preregistered-2"
sys.path.insert(0, str(ROOT))

from polyspec.research import Pool, predict  # noqa: E402


def name_of(chain, th, temp) -> str:
    return f"{'-'.join(chain)}_th{'-'.join(map(str, th))}_T{temp:g}"


def main() -> int:
    pool = Pool.from_config(json.loads(Path(sys.argv[1]).read_text()))
    temp = float(sys.argv[2])
    taken = {p.stem for p in HERE.parent.glob("*.jsonl")}
    for f in (HERE.parent / "preregistered" / "forecasts.jsonl", HERE / "configs.txt"):
        if f.is_file():
            taken |= {json.loads(x)["name"] for x in f.read_text().splitlines()
                      if x.startswith("{")}
    target, drafters = pool.names[0], pool.names[1:]
    scored = []
    for k in (1, 2, 3):
        for ds in itertools.permutations(drafters, k):
            chain = (target, *ds)
            if any((a, b) not in pool.pairs for a, b in zip(chain[:-1], chain[1:], strict=True)):
                continue
            hi = 16 if k == 1 else 8
            for th in itertools.product(range(1, hi + 1), repeat=k):
                s = predict(pool.cascade(chain, th)).speedup
                scored.append((s, chain, th))
    scored.sort(key=lambda x: -x[0])
    out = [x for x in scored if name_of(x[1], x[2], temp) not in taken][:2]
    for s, chain, th in out:
        spec = ",".join(m.replace("ngram", "ngram:") if m[5:].isdigit() else m for m in chain)
        print(f"chain {name_of(chain, th, temp)} {spec} "
              f"{','.join(map(str, th))} {temp:g}  # planner P1 {s:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
