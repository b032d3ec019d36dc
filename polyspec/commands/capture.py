"""``polyspec capture``: run the polybasic decoder on real models and write a trace."""

from __future__ import annotations

from polyspec_theory.errors import parse_ints

from .common import add_mode_argument, parse_models

HELP = "capture a decoding trace (rounds, AR baselines, cost curves) of a real cascade"


def add_arguments(parser) -> None:
    parser.add_argument("--models", required=True,
                        help="comma-separated models, target first: zoo names (target, mid, "
                        "draft-t, small, ngram, ngram:K), zoo .safetensors files or HF "
                        "checkpoint dirs")
    parser.add_argument("--thresholds", default=None,
                        help="comma-separated θ per adjacent pair, e.g. 8,4,2; with --mode "
                        "async one θ >= 0 (docs/theory.md AS0: wait for and check θ drafts, "
                        "PipeSpec lookahead θ + 1; 0 = lookahead 0, default)")
    add_mode_argument(parser, "sync (default): the polybasic decoder (one model at a time); "
                      "async: the two-process pipeline (target + one drafter, each in its "
                      "own process pinned to its own core, greedy; "
                      "validation/schemes/async_.py)")
    parser.add_argument("--queue", type=int, default=None,
                        help="async: the most undecided drafts the drafter runs ahead "
                        "(default: unbounded, as PipeSpec; at θ = 0 it also bounds the "
                        "drafts one verify checks)")
    parser.add_argument("--cores", default=None,
                        help="async: comma-separated cores, target first (default: the "
                        "first two this process may use)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--name", default=None, help="trace name (default: from settings)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-k", type=int, default=0, help="top-k filter (0 = off)")
    parser.add_argument("--prompts", type=int, default=None,
                        help="number of prompts (default 12; with --batch/--batches 48, a "
                        "multiple of every batch size)")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt length (tokens)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens per prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16",
                                                                "bfloat16"])
    parser.add_argument("--warmup", type=int, default=2, help="warm-up runs (not recorded)")
    parser.add_argument("--cost-contexts", default="32,96,160",
                        help="context lengths of the cost curves T(m), m=1..16")
    parser.add_argument("--cost-repeats", type=int, default=3)
    parser.add_argument("--ar-models", default=None, choices=["all", "target"],
                        help="autoregressive baselines of every model (default) or the target "
                        "only (batched captures: the target only)")
    parser.add_argument("--zoo-dir", default=None, help="zoo weights dir (default: committed)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted trace")
    parser.add_argument("--force", action="store_true", help="overwrite an existing trace")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--tree", default=None, metavar="PARENTS",
                        help="draft a token tree at the bottom pair: comma-separated parent "
                        "indices, node 0 = the last committed token (-1), e.g. -1,0,0,1,1 "
                        "(that pair's threshold is ignored; docs/theory.md Part III-D)")
    parser.add_argument("--tree-sampling", default="distinct", choices=["distinct", "iid"],
                        help="children at temperature > 0: drawn without replacement "
                        "(Sequoia, default) or iid (SpecInfer); at 0 always the top-k")
    parser.add_argument("--schedule", action="append", default=None, metavar="[PAIR@]SPEC",
                        help="adaptive draft length: hf:START:MIN:MAX (HF assisted generation, "
                        "any pair) or confidence:ETA[:MAX] (stop when the drafter's top "
                        "probability < ETA, bottom pair); PAIR = 0-based pair index "
                        "(default: the bottom pair); repeatable")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--batch", type=int, default=None, metavar="B",
                       help="decode B sequences in lockstep (docs/theory.md, B0) with "
                       "the batched autoregressive target as baseline; trace <name>_b<B>")
    group.add_argument("--batches", default=None, metavar="B1,B2,...",
                       help="a sweep of batch sizes (e.g. 1,2,4,8,16): one batched trace per "
                       "size, <name>_b<B>.jsonl")
    from validation.capture.machine import add_allow_load

    add_allow_load(parser)


def parse_schedules(specs, n_pairs):
    """``[PAIR@]SPEC`` options -> one entry per pair (``None`` if no option)."""
    from polyspec_theory.errors import PolyspecInputError

    if not specs:
        return None
    out = [None] * n_pairs
    for spec in specs:
        pair, _, body = spec.rpartition("@")
        if pair:
            try:
                i = int(pair)
            except ValueError:
                i = -1
            if not 0 <= i < n_pairs:
                raise PolyspecInputError("--schedule", f"{spec!r}: pair must be 0..{n_pairs - 1}")
        else:
            i = n_pairs - 1
        if out[i] is not None:
            raise PolyspecInputError("--schedule", f"two schedules for pair {i}")
        out[i] = body
    return out


def _spec(args, models):
    """The :class:`validation.capture.setup.CaptureSpec` of the command line."""
    from polyspec_theory.schemes import DEFAULT_MODE
    from validation.capture.setup import CaptureSpec

    batches = None
    if args.batch is not None or args.batches is not None:
        from .common import parse_batches

        batches = tuple(parse_batches(str(args.batch) if args.batch is not None
                                      else args.batches,
                                      "--batch" if args.batch is not None else "--batches"))
    return CaptureSpec(
        models, None if args.thresholds is None else parse_ints(
            args.thresholds, "thresholds", low=None, distinct=False, example="8,4,2"),
        temperature=args.temperature, top_k=args.top_k, n_prompts=args.prompts,
        prompt_len=args.prompt_len, max_new_tokens=args.tokens, seed=args.seed,
        threads=args.threads, device=args.device, dtype=args.dtype, warmup=args.warmup,
        cost_contexts=parse_ints(args.cost_contexts, "cost_contexts", low=None,
                                 distinct=False, example="32,96,160"),
        cost_repeats=args.cost_repeats, ar_models=args.ar_models, zoo_dir=args.zoo_dir,
        tree=args.tree, schedules=parse_schedules(args.schedule, len(models) - 1),
        tree_sampling=args.tree_sampling, mode=args.mode or DEFAULT_MODE, queue=args.queue,
        cores=None if args.cores is None else tuple(parse_ints(
            args.cores, "cores", low=None, distinct=False, example="0,1")),
        batches=batches)


def run(args) -> int:
    import sys

    from polyspec_theory.errors import PolyspecInputError
    from validation import schemes
    from validation.capture import capture
    from validation.capture.machine import check_load

    from ..output import check_device, check_output_dir

    check_output_dir(args.out, "--out")  # before loading models
    check_device(args.device)
    models = parse_models(args.models)
    scheme = schemes.get(_spec_scheme(args, models))
    for flag, why in scheme.CAPTURE_REFUSES.items():  # the options its captures do not take
        if getattr(args, flag[2:].replace("-", "_")) not in (None, 0):
            raise PolyspecInputError(flag, why)
    spec = scheme.check_capture(_spec(args, models))
    spec.checked()  # a bad flag is reported before the machine's load
    spec = spec._replace(load_check=check_load(args.allow_load, "a capture"))
    for path in capture(spec, out=args.out, name=args.name, resume=args.resume,
                        force=args.force, progress=not args.no_progress, argv=sys.argv[1:]):
        print(scheme.describe(path))
    return 0


def _spec_scheme(args, models) -> str:
    """The scheme the command line asks for (the theory's decision on its options)."""
    from polyspec_theory.schemes import DEFAULT_MODE, scheme_named

    return scheme_named(args.mode or DEFAULT_MODE, structured=args.tree is not None or
                        args.schedule is not None,
                        batch=args.batch if args.batch is not None else args.batches)
