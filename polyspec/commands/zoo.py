"""``polyspec zoo``: rebuild the model zoo (``train``) or describe it (``info``)."""

from __future__ import annotations

HELP = ("train the model zoo (n-gram + GPTs on the stdlib sources, drafters distilled from "
        "the next larger model) or show its description")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION")
    t = sub.add_parser("train", help="train the zoo; prints validation bits/byte per model")
    t.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    t.add_argument("--out", required=True, help="output directory for the weights")
    t.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    t.add_argument("--resume", action="store_true", help="continue from <out>/ckpt/")
    t.add_argument("--steps-scale", type=float, default=1.0,
                   help="multiply every model's step count (e.g. 0.01 for a smoke test)")
    t.add_argument("--eval-scale", type=float, default=1.0,
                   help="multiply the evaluation sizes: validation windows (bits/byte) and a "
                   "distilled model's acceptance windows, prompts and continuation length "
                   "(e.g. 0.05 for a smoke test)")
    t.add_argument("--only", default=None,
                   help="comma-separated model names to train (a distilled drafter needs its "
                   "teacher, and its initialisation if any, published in --out)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    i = sub.add_parser("info", help="list the zoo's models: params, val bits/byte, cost")
    i.add_argument("--dir", default=None, help="weights directory (default: committed zoo)")
    i.add_argument("--eval", action="store_true", help="recompute validation bits/byte")
    i.add_argument("--json", action="store_true", help="print JSON")


def run(args) -> int:
    from polyspec.cli import CommandError

    action = getattr(args, "zoo_command", None)
    if action == "train":
        return _train(args)
    if action == "info":
        return _info(args)
    raise CommandError("choose an action: train or info")


def _train(args) -> int:
    import dataclasses

    from polyspec_theory.errors import as_int, as_real
    from validation.zoo.train import DEFAULT_SPECS, TrainRun, train_zoo

    seed = as_int(args.seed, "seed", low=0)
    threads = as_int(args.threads, "threads", low=1, high=256)
    scale = as_real(args.steps_scale, "steps_scale", low=1e-6, high=100.0)
    escale = as_real(args.eval_scale, "eval_scale", low=1e-6, high=100.0)
    specs = DEFAULT_SPECS
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        known = {s.name for s in specs}
        bad = [w for w in wanted if w not in known]
        if bad:
            from polyspec_theory.errors import PolyspecInputError

            raise PolyspecInputError("only", f"unknown model(s) {bad}; known: {sorted(known)}")
        specs = tuple(s for s in specs if s.name in wanted)
    if scale != 1.0:
        specs = tuple(
            dataclasses.replace(s, steps=max(1, round(s.steps * scale)),
                                warmup=min(s.warmup, max(1, round(s.steps * scale))))
            for s in specs
        )
    if escale != 1.0:
        def sized(n):
            return max(1, round(n * escale))

        specs = tuple(
            dataclasses.replace(s, val_windows=sized(s.val_windows),
                                eval_windows=sized(s.eval_windows),
                                eval_prompts=sized(s.eval_prompts),
                                eval_new_tokens=sized(s.eval_new_tokens))
            for s in specs
        )
    from polyspec.cli import CommandError

    try:
        records = train_zoo(seed, args.out, specs, TrainRun(
            resume=args.resume, threads=threads, progress=not args.no_progress))
    except FileNotFoundError as e:  # a teacher, initialisation or base not trained yet
        if e.strerror and e.filename:
            raise CommandError(f"{e.strerror} ({e.filename} is missing)") from None
        raise
    print(f"{'model':<12} {'params':>10} {'val bits/byte':>14}  acceptance by the teacher "
          "(greedy on its greedy text / 1-TV on held-out text), before -> after")
    if not args.only:  # the whole zoo: its n-gram level too (built from the corpus)
        from validation.zoo.ngram import NGramModel

        ng = NGramModel.default()
        print(f"{'ngram':<12} {'-':>10} {ng.eval_bpb():>14.4f}")
    for r in records:
        line = f"{r['name']:<12} {r['params']:>10} {r['val_bits_per_byte']:>14.4f}"
        if "acceptance" in r:
            b, a = r["acceptance"]["before"], r["acceptance"]["after"]
            line += (f"  {r['teacher']}: greedy {b['teacher_greedy']['greedy']:.3f} -> "
                     f"{a['teacher_greedy']['greedy']:.3f}, 1-TV "
                     f"{b['heldout']['one_minus_tv']:.3f} -> {a['heldout']['one_minus_tv']:.3f}")
        print(line)
    return 0


def _info(args) -> int:
    from validation.zoo import zoo_info

    from ..output import dump_json

    info = zoo_info(args.dir, evaluate=args.eval)
    if args.json:
        print(dump_json(info))
        return 0
    print(f"zoo: {info['dir']}  corpus {info['corpus_digest']}")
    print(f"{'model':<8} {'params':>10} {'val bits/byte':>14} {'layers':>7} {'d_model':>8}")
    for m in info["models"]:
        print(f"{m['name']:<8} {m['params']:>10} {m['val_bits_per_byte']:>14.4f} "
              f"{m.get('n_layer', '-'):>7} {m.get('d_model', '-'):>8}")
    return 0
