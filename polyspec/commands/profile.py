"""``polyspec profile MODEL...``: measure each model's forward time ``T(m)`` on this device and
write cost tables that configs (and ``polyspec calibrate``) can use (:mod:`validation.profile`)."""

from __future__ import annotations

HELP = ("Measure T(m), the time of one forward scoring m positions, for each model (zoo level, "
        "zoo .safetensors or Hugging Face checkpoint dir) on this device; print or write cost "
        "tables in config syntax.")


def add_arguments(p):
    p.add_argument("models", nargs="+",
                   help="zoo levels (target, mid, small, ngram), .safetensors files or HF "
                        "checkpoint directories")
    p.add_argument("--max-m", type=int, default=8, help="largest m measured (default 8)")
    p.add_argument("--repeats", type=int, default=5, help="timed forwards per m (default 5)")
    p.add_argument("--context", type=int, default=64,
                   help="tokens already in the KV cache (default 64)")
    p.add_argument("--warmup", type=int, default=2, help="untimed forwards per m first")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--unit", default="ms", choices=["s", "ms", "us"],
                   help="time unit of the tables (default ms)")
    p.add_argument("--zoo-dir", default=None, help="zoo weights dir (default: committed)")
    p.add_argument("--out", default=None, metavar="FILE.json", help="also write the JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    import sys

    from validation.files import atomic_write_text
    from validation.profile import profile_models

    from ._common import dump_strict_json

    def progress(spec, rec):
        if not args.json and sys.stderr.isatty():
            print(f"  {spec}: {rec['seconds']:.1f} s", file=sys.stderr)

    rep = profile_models(args.models, max_m=args.max_m, repeats=args.repeats,
                         context=args.context, warmup=args.warmup, device=args.device,
                         dtype=args.dtype, threads=args.threads, unit=args.unit,
                         zoo_dir=args.zoo_dir, progress=progress)
    text = dump_strict_json(rep)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    if args.json:
        print(text)
        return 0
    u = rep["time_unit"]
    print(f"T(m) on {rep['device']} ({rep['torch_device']}, {rep['dtype']}, "
          f"{rep['threads']} thread(s)), context {rep['context']}, median of "
          f"{rep['repeats']} per m, in {u}:")
    for m in rep["models"]:
        tab = ", ".join(f"{x:.4g}" for x in m["cost"]["table"])
        a = m["affine"]
        print(f"  {m['name']:<10} T(1..{rep['max_m']}) = [{tab}]")
        print(f"  {'':<10} affine {a['base']:.4g} + {a['per_token']:.4g} (m-1); "
              f"T(1) / first model's T(1) = {m['relative_to_first'][0]:.3g}")
    print("config syntax: {\"name\": ..., \"cost\": {\"table\": [...]}} with \"time_unit\": "
          f"\"{u}\"" + (f"; written to {args.out}" if args.out else ""))
    return 0
