"""``polyspec profile MODEL...``: measure each model's forward time ``T(m)`` on this device and
write cost tables that configs (and ``polyspec calibrate``) can use
(:mod:`validation.capture.profile`).
With ``--cascade`` the models are profiled together, inside the calling pattern of the cascade
they form (:mod:`validation.capture.composition`): the in-cascade costs a forecast needs. A
``--mode`` whose scheme gives its own profile (its module's ``PROFILE``,
:func:`validation.schemes.command_hook`; the async pipeline's contention profile) runs that."""

from __future__ import annotations

from .common import write_and_print_json

HELP = ("Measure T(m), the time of one forward scoring m positions, for each model (zoo level, "
        "zoo .safetensors or Hugging Face checkpoint dir) on this device; print or write cost "
        "tables in config syntax.")


def add_arguments(p):
    p.add_argument("models", nargs="*",
                   help="zoo levels (target, mid, draft-t, small, ngram, ngram:K), "
                        ".safetensors files or HF checkpoint directories (or --gpu with "
                        "--model)")
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
    c = p.add_argument_group("composition profile (--cascade)")
    c.add_argument("--cascade", action="store_true",
                   help="profile the models as one cascade (target first), replaying its "
                        "calling pattern with acceptance drawn from laws fitted on --traces")
    c.add_argument("--thresholds", default=None, help="comma-separated θ per adjacent pair "
                   "(--mode async: one θ >= 0, as capture --mode async)")
    from .common import add_mode_argument

    add_mode_argument(c, "sync (default): replay the cascade in one process; async: time the "
                         "async pipeline's two processes (target + one drafter, each pinned to "
                         "its own core) alone and together: solo costs and contention factors "
                         "(docs/theory.md AS1c)")
    c.add_argument("--queue", type=int, default=None,
                   help="--mode async: the drafter's queue bound (as capture --mode async)")
    c.add_argument("--cores", default=None,
                   help="--mode async: comma-separated cores, target first (default: the "
                        "first two this process may use)")
    c.add_argument("--traces", default=None, metavar="DIR",
                   help="captures whose rounds give each pair's acceptance law (pooled iid)")
    c.add_argument("--exclude", default=None, metavar="NAME",
                   help="leave this capture's rounds out of the laws (the one to predict)")
    c.add_argument("--temperature", type=float, default=0.0,
                   help="sampling setting whose acceptance the replay draws (default 0)")
    c.add_argument("--prompts", type=int, default=6, help="prompts replayed (default 6)")
    c.add_argument("--prompt-len", type=int, default=64, help="prompt length (default 64)")
    c.add_argument("--tokens", type=int, default=128, help="tokens per prompt (default 128)")
    c.add_argument("--seed", type=int, default=1,
                   help="prompt and acceptance seed (default 1: not the captures' prompts)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch", default=None, metavar="1,B2,...",
                   help="batch sizes (1 among them): T(b, m) of batched forwards, written as "
                        "batch_table costs (docs/theory.md B0; polyspec validate "
                        "--batch-profile reads them)")
    from validation.capture.machine import add_allow_load

    add_allow_load(p)
    from .gpu import add_profile_arguments

    add_profile_arguments(p)


def _run_cascade(args) -> int:
    import sys

    import torch

    from polyspec_theory.core.laws import IIDGeometric
    from polyspec_theory.errors import PolyspecInputError, as_int, as_real
    from validation.analysis.forecast import pair_rounds
    from validation.capture.composition import profile_cascade
    from validation.capture.machine import check_load, machine_state
    from validation.capture.model_specs import model_paths
    from validation.capture.models import load_model
    from validation.capture.setup import make_prompts
    from validation.traces.records import read_traces

    from ..output import check_output

    if args.out:  # before loading anything: never over the traces or the weights read
        check_output(args.out, "--out", inputs=[args.traces, *model_paths(args.models)])


    if args.thresholds is None or args.traces is None:
        raise PolyspecInputError("--cascade", "needs --thresholds and --traces")
    import os

    if not os.path.isdir(args.traces):  # named as the option the user typed
        raise PolyspecInputError("--traces", f"{args.traces}: no such folder of captures")
    try:
        th = [int(x) for x in args.thresholds.split(",") if x.strip()]
    except ValueError:
        raise PolyspecInputError("--thresholds", f"expected comma-separated integers, got "
                                 f"{args.thresholds!r}") from None
    if len(th) != len(args.models) - 1:
        raise PolyspecInputError("--thresholds", f"need {len(args.models) - 1} (one per "
                                 f"adjacent pair), got {len(th)}")
    temp = as_real(args.temperature, "--temperature", low=0.0)
    n_prompts = as_int(args.prompts, "--prompts", low=1, high=1000)
    tokens = as_int(args.tokens, "--tokens", low=1, high=100_000)
    if args.threads is not None:
        torch.set_num_threads(as_int(args.threads, "--threads", low=1, high=1024))
    else:
        torch.set_num_threads(1)
    loaded = [load_model(m, zoo_dir=args.zoo_dir) for m in args.models]
    caps = [c for c in read_traces(args.traces) if c.name != args.exclude]
    laws = []
    for i in range(len(args.models) - 1):
        key = (loaded[i].name, loaded[i + 1].name, temp, 0)
        d = pair_rounds(caps, key)
        if d is None:
            raise PolyspecInputError("--traces", f"no capture has the pair {key[0]} <- {key[1]} "
                                     f"at temperature {temp:g}")
        laws.append(IIDGeometric.fit(d).law)
    prompts, _ = make_prompts(n_prompts, args.prompt_len, args.seed)
    load_check = check_load(args.allow_load, "a profile")  # every input checked first
    machine = machine_state()
    prof = profile_cascade(loaded, th, laws, prompts, tokens, seed=args.seed)
    prof.settings.update({"traces": str(args.traces), "excluded": args.exclude,
                          "temperature": temp, "load_check": load_check,
                          "machine": machine, "machine_end": machine_state()})
    if write_and_print_json(prof.to_dict(), args):
        return 0
    print(f"composition profile of {' <- '.join(prof.models)} θ={th} "
          f"({n_prompts} prompts x {tokens} tokens, {prof.settings['elapsed_s']:.1f} s):",
          file=sys.stdout)
    print(f"  target autoregressive: {1e3 * prof.ar_s:.4f} ms/token")
    for i, name in enumerate(prof.models[:-1]):
        mv = prof.mean_verify(i)
        print(f"  {name:<10} verify ms by block G: "
              + ", ".join(f"{g}: {1e3 * t:.4f}" for g, t in mv.items()))
    print(f"  {prof.models[-1]:<10} drafting forward: {1e3 * prof.draft_s:.4f} ms "
          f"({prof.draft_forwards} forwards)")
    if args.out:
        print(f"written to {args.out}")
    return 0


def run(args) -> int:
    import sys

    from polyspec_theory.errors import refuse_options

    from .gpu import GPU_PROFILE_OPTIONS, run_profile

    if args.gpu is not None:
        return run_profile(args)
    from polyspec_theory.errors import PolyspecInputError
    from polyspec_theory.schemes import DEFAULT_MODE, scheme_named, synchronous
    from validation.schemes import command_hook

    refuse_options(GPU_PROFILE_OPTIONS(args), "only applies with --gpu")
    if not args.models:
        raise PolyspecInputError("models", "give the models to time here, or --gpu NAME "
                                 "--model ID to price them from the cost database")
    scheme = scheme_named(args.mode or DEFAULT_MODE)  # the scheme's own profile, if it has one
    own = command_hook(scheme, "PROFILE")
    if own is not None:
        return own(args)
    refuse_options((("--queue", args.queue), ("--cores", args.cores)),
                   "only applies with --mode async")
    if not synchronous(scheme):
        raise PolyspecInputError("--mode", f"profile times sync or async cascades, got "
                                 f"{args.mode!r}")
    if args.cascade:
        return _run_cascade(args)

    from validation.capture.machine import check_load, machine_state
    from validation.capture.model_specs import model_paths
    from validation.capture.profile import ProfileSpec, profile_models

    from ..output import check_output

    if args.out:  # before loading anything: never over the weights read
        check_output(args.out, "--out", inputs=model_paths(args.models))
    load_check = check_load(args.allow_load, "a profile")
    machine = machine_state()

    def progress(spec, rec):
        if not args.json and sys.stderr.isatty():
            print(f"  {spec}: {rec['seconds']:.1f} s", file=sys.stderr)

    batches = None
    if args.batch is not None:
        from .common import parse_batches

        batches = parse_batches(args.batch, "--batch")
    rep = profile_models(args.models, ProfileSpec(
        max_m=args.max_m, repeats=args.repeats, context=args.context, warmup=args.warmup,
        device=args.device, dtype=args.dtype, threads=args.threads, unit=args.unit,
        zoo_dir=args.zoo_dir, batches=batches), progress=progress)
    rep.update({"load_check": load_check, "machine": machine, "machine_end": machine_state()})
    if write_and_print_json(rep, args):
        return 0
    if batches is not None:
        u = rep["time_unit"]
        print(f"T(b, m) on {rep['device']} ({rep['torch_device']}, {rep['dtype']}, "
              f"{rep['threads']} thread(s)), context {rep['context']}, median of "
              f"{rep['repeats']} per (b, m), in {u}:")
        for m in rep["models"]:
            for b, row in m["cost"]["batch_table"].items():
                tab = ", ".join(f"{x:.4g}" for x in row)
                print(f"  {m['name']:<10} b = {b:>3}: T(b, 1..{rep['max_m']}) = [{tab}]")
        print("config syntax: {\"name\": ..., \"cost\": {\"batch_table\": {...}}} with "
              f"\"time_unit\": \"{u}\"" + (f"; written to {args.out}" if args.out else ""))
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
