"""Compare two freeze snapshots (``experiments/freeze/snap.sh``): per command, ``equal`` or
``differs`` with what differs (stdout, exit status, stderr) and how: for JSON output the
changed, added and removed fields (numbers with their absolute and relative difference; list
entries keyed by their ``id``/``name`` where they have one), for text with the same words the
numeric differences, otherwise a short unified diff.

    python experiments/freeze/compare.py BASE MAIN [--table] [--context N] [--max-lines N]

``--table`` prints one Markdown row per command instead (name, status, parts, summary).
Exit status 0 (a report, not a check)."""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
from pathlib import Path

NUM = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def parse(path: Path) -> dict:
    """A snapshot file -> ``cmd``, ``stdout``, ``exit``, ``stderr``."""
    text = path.read_text(encoding="utf-8", errors="replace")
    cmd, _, rest = text.partition("\n")
    out, _, rest = rest.rpartition("--- exit ")
    code, _, err = rest.partition("\n")
    err = err.removeprefix("--- stderr\n")
    return {"cmd": cmd, "stdout": out, "exit": code.strip(), "stderr": err}


def as_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


KEYS = (("id",), ("id", "statement"), ("name",), ("key",), ("config",))


def _list_keys(items) -> list[str]:
    """Keys of a list's entries: the first of KEYS that every entry has and that is unique
    (``verify --json`` repeats an id over its rows, id + statement is unique), else the
    index."""
    for ks in KEYS:
        if all(isinstance(x, dict) and all(isinstance(x.get(k), str | int) for k in ks)
               for x in items):
            keys = ["[" + " ".join(f"{k}={x[k]}" for k in ks) + "]" for x in items]
            if len(set(keys)) == len(keys):
                return keys
    return [f"[{i}]" for i in range(len(items))]


def flatten(obj, prefix="") -> dict:
    """Leaf values by path; list entries keyed by their id/name where every entry has one."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        keys = _list_keys(obj)
        if not obj:
            out[prefix] = []
        for k, v in zip(keys, obj, strict=True):
            out.update(flatten(v, prefix + k))
    else:
        out[prefix] = obj
    return out


def _isnum(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def rel(a: float, b: float) -> float:
    if a == b:
        return 0.0
    d = max(abs(a), abs(b))
    return math.inf if d == 0 or not math.isfinite(d) else abs(a - b) / d


def json_diff(a, b, max_lines: int) -> list[str]:
    fa, fb = flatten(a), flatten(b)
    removed = [k for k in fa if k not in fb]
    added = [k for k in fb if k not in fa]
    changed = [k for k in fa if k in fb and fa[k] != fb[k]
               and not (_isnum(fa[k]) and _isnum(fb[k]) and fa[k] == fb[k])]
    lines = []
    nums = [k for k in changed if _isnum(fa[k]) and _isnum(fb[k])]
    if nums:
        worst = max(nums, key=lambda k: rel(fa[k], fb[k]))
        lines.append(f"{len(nums)} numeric field(s) differ, max relative difference "
                     f"{rel(fa[worst], fb[worst]):.3g} at {worst}")
    for k in changed[:max_lines]:
        va, vb = fa[k], fb[k]
        if _isnum(va) and _isnum(vb):
            lines.append(f"  ~ {k}: {va!r} -> {vb!r} (diff {vb - va:+.6g}, rel "
                         f"{rel(va, vb):.3g})")
        else:
            lines.append(f"  ~ {k}: {_short(va)} -> {_short(vb)}")
    if len(changed) > max_lines:
        lines.append(f"  ... {len(changed) - max_lines} more changed")
    for sign, keys in (("-", removed), ("+", added)):
        if keys:
            lines.append(f"  {sign} {len(keys)} field(s) {'removed' if sign == '-' else 'added'}"
                         f": " + ", ".join(keys[:max_lines])
                         + (" ..." if len(keys) > max_lines else ""))
    return lines


def _short(v, n=100) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def text_diff(a: str, b: str, context: int, max_lines: int) -> list[str]:
    """Same words and only numbers differ: the numeric differences; else a unified diff."""
    la, lb = a.splitlines(), b.splitlines()
    if len(la) == len(lb) and all(NUM.sub("#", x) == NUM.sub("#", y)
                                  for x, y in zip(la, lb, strict=True)):
        diffs = []
        for i, (x, y) in enumerate(zip(la, lb, strict=True)):
            for u, v in zip(NUM.findall(x), NUM.findall(y), strict=True):
                if u != v:
                    diffs.append((i + 1, u, v, rel(float(u), float(v))))
        worst = max(d[3] for d in diffs)
        lines = [f"numbers only: {len(diffs)} number(s) differ, max relative difference "
                 f"{worst:.3g}"]
        lines += [f"  line {i}: {u} -> {v} (rel {r:.3g})" for i, u, v, r in diffs[:max_lines]]
        if len(diffs) > max_lines:
            lines.append(f"  ... {len(diffs) - max_lines} more")
        return lines
    ud = list(difflib.unified_diff(la, lb, "base", "main", n=context, lineterm=""))
    return ud[:max_lines] + ([f"... ({len(ud) - max_lines} more diff lines)"]
                             if len(ud) > max_lines else [])


def compare(a: dict | None, b: dict | None, context: int, max_lines: int):
    """-> (status, parts that differ, detail lines)."""
    if a is None or b is None:
        return "missing", ["base" if a is None else "main"], []
    parts = [p for p in ("stdout", "exit", "stderr") if a[p] != b[p]]
    if not parts:
        return "equal", [], []
    lines = []
    if a["cmd"] != b["cmd"]:
        lines.append(f"command spelled: {a['cmd']}  ->  {b['cmd']}")
    if "exit" in parts:
        lines.append(f"exit {a['exit']} -> {b['exit']}")
    if "stdout" in parts:
        ja, jb = as_json(a["stdout"]), as_json(b["stdout"])
        if ja is not None and jb is not None:
            lines += ["stdout (JSON):"] + json_diff(ja, jb, max_lines)
        else:
            lines += ["stdout:"] + text_diff(a["stdout"], b["stdout"], context, max_lines)
    if "stderr" in parts:
        lines += ["stderr:"] + text_diff(a["stderr"], b["stderr"], context, max_lines)
    return "differs", parts, lines


def summary(lines: list[str]) -> str:
    """The first informative detail line: the exit change, a numeric summary, a changed field,
    or the first changed line of a unified diff (not its headers or context)."""
    for x in lines:
        if x.endswith(":") or x.startswith(("command spelled", "---", "+++", "@@")):
            continue
        if x.startswith(" ") and not x.startswith(("  ~", "  +", "  -", "  line", "  ...")):
            continue  # unified-diff context
        return x.strip()
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", type=Path)
    ap.add_argument("main", type=Path)
    ap.add_argument("--table", action="store_true", help="one Markdown row per command")
    ap.add_argument("--context", type=int, default=1, help="unified-diff context lines")
    ap.add_argument("--max-lines", type=int, default=30, help="detail lines per command")
    args = ap.parse_args(argv)
    for d in (args.base, args.main):
        if not d.is_dir():
            ap.error(f"{d}: not a directory")
    names = sorted({p.stem for d in (args.base, args.main) for p in d.glob("*.txt")
                    if not p.stem.startswith("_")})
    counts: dict[str, int] = {}
    if args.table:
        print("| command | result | differs in | first difference |")
        print("|---|---|---|---|")
    for name in names:
        pa, pb = args.base / f"{name}.txt", args.main / f"{name}.txt"
        a = parse(pa) if pa.exists() else None
        b = parse(pb) if pb.exists() else None
        status, parts, lines = compare(a, b, args.context, args.max_lines)
        counts[status] = counts.get(status, 0) + 1
        if args.table:
            first = summary(lines)
            first = first.replace("|", "\\|")[:110]
            print(f"| `{name}` | {status} | {', '.join(parts)} | {first} |")
            continue
        print(f"{name}: {status}" + (f" ({', '.join(parts)})" if parts else ""))
        for x in lines:
            print(f"    {x}")
    print(("\n" if not args.table else "\n") + ", ".join(f"{k}: {v}" for k, v in
                                                        sorted(counts.items()))
          + f" (of {len(names)} commands)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
