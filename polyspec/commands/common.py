"""Argument helpers shared by the subcommands: one rule, one place."""

from __future__ import annotations


def add_cpu_devices_argument(p) -> None:
    """``--cpu-devices K`` (for :func:`simulators.runtime.use_cpu_cores`)."""
    p.add_argument("--cpu-devices", type=int, default=None,
                   help="CPU devices to shard chains over (default: one per core; results "
                        "do not depend on it)")


class SchemeModes:
    """The ``--mode`` choices: the modes of the registered schemes
    (:func:`polyspec_theory.schemes.modes`), read when argparse first asks."""

    def _modes(self):
        from polyspec_theory.schemes import modes

        return modes()

    def __contains__(self, x) -> bool:
        return x in self._modes()

    def __iter__(self):
        return iter(self._modes())


def add_mode_argument(p, help_text: str) -> None:
    """``--mode`` with the registry's modes as its choices."""
    p.add_argument("--mode", choices=SchemeModes(), default=None, metavar="MODE",
                   help=help_text)


def write_and_print_json(obj, args) -> bool:
    """``obj`` as JSON: written to ``args.out`` when given, printed when ``args.json``;
    whether it was printed (the command is then done)."""
    from ..output import dump_json, write_output

    text = dump_json(obj)
    if args.out:
        write_output(args.out, text + "\n", "--out")
    if args.json:
        print(text)
    return bool(args.json)


def require_options(given, why: str = "required") -> None:
    """Refuse the first option of ``given`` (``(option, value)`` pairs) whose value is
    ``None`` or empty with ``option: why``: the one loop behind every "required"."""
    from polyspec_theory.errors import PolyspecInputError

    for option, value in given:
        if value is None or value == [] or value == "":
            raise PolyspecInputError(option, why)


def parse_batches(text, field: str = "--batch") -> list[int]:
    """``"1,2,4,8,16"`` -> ``[1, 2, 4, 8, 16]``: distinct batch sizes in 1..MAX_BATCH_SIZE
    (errors name the option)."""
    from polyspec_theory.core.costs import MAX_BATCH_SIZE
    from polyspec_theory.errors import parse_ints

    return parse_ints(text, field, high=MAX_BATCH_SIZE, example="1,2,4,8,16",
                      what="batch sizes", item="a batch size")


# --- the draft length: one name on the command line -----------------------------------------
# ``--thresholds``: per adjacent pair, the drafts a verifier waits for (θ); the search bound of
# an optimum is ``--max-threshold``. Other spellings are refused with the conversion (an
# engine's own word appears only in the help of the option that reads its output).
def _from_lookahead(k) -> int:
    from polyspec_theory import lookahead_threshold  # AS0's rule, the one place

    return lookahead_threshold(k)


RETIRED_DRAFT_LENGTH = {
    "--gamma": ("θ = γ (the drafts per round)", lambda v: v),
    "--lookahead": ("θ = K - 1 (PipeSpec's lookahead K counts the bonus position)",
                    _from_lookahead),
}


def add_thresholds_argument(p, help_text: str, retired=tuple(RETIRED_DRAFT_LENGTH)) -> None:
    """``--thresholds θ1,θ2,...`` (one per adjacent pair) and the retired spellings of the
    draft length (``--gamma``, ``--lookahead``), hidden, refused by :func:`thresholds_of`."""
    import argparse

    p.add_argument("--thresholds", metavar="θ1,θ2,...", default=None, help=help_text)
    for opt in retired:
        p.add_argument(opt, dest=f"retired_{opt[2:]}", type=int, default=None,
                       help=argparse.SUPPRESS)


def refuse_retired_draft_length(args) -> None:
    """A retired spelling of the draft length is refused, naming ``--thresholds`` and the
    conversion (``--gamma 5``: ``--thresholds 5``; ``--lookahead 8``: ``--thresholds 7``)."""
    from polyspec_theory.errors import PolyspecInputError

    for opt, (rule, convert) in RETIRED_DRAFT_LENGTH.items():
        v = getattr(args, f"retired_{opt[2:]}", None)
        if v is not None:
            raise PolyspecInputError(opt, f"the draft length is --thresholds: {rule}, so give "
                                     f"--thresholds {convert(v)}")


def thresholds_of(args, field: str = "--thresholds", *, low: int = 1) -> list[int] | None:
    """The ``--thresholds`` list (``None`` when not given), after refusing the retired
    spellings (:func:`refuse_retired_draft_length`)."""
    from polyspec_theory.core.config import MAX_THRESHOLD
    from polyspec_theory.errors import parse_ints

    refuse_retired_draft_length(args)
    if args.thresholds is None:
        return None
    # a list may repeat a threshold (8,4,4): only the range is a rule
    return parse_ints(args.thresholds, field, low=low, high=MAX_THRESHOLD, example="4,2",
                      distinct=False)


def refuse_k_values(values, field: str) -> None:
    """``K=7`` (an engine's or PipeSpec's lookahead) where a draft length is asked for is
    refused with the conversion."""
    from polyspec_theory.errors import PolyspecInputError

    for x in values:
        t = str(x).strip()
        if t.upper().startswith("K="):
            raise PolyspecInputError(field, f"{t!r}: give draft lengths as plain numbers "
                                     f"(the sweep's own values, e.g. {t[2:]})")


def parse_models(text, field: str = "--models") -> list[str]:
    """``"target,mid,small"`` -> the model names, target first (empty entries dropped; none
    at all refused). The one parser of a model list on the command line."""
    from polyspec_theory.errors import PolyspecInputError

    names = [m.strip() for m in str(text).split(",") if m.strip()]
    if not names:
        raise PolyspecInputError(field, f"must name the models, target first (e.g. "
                                 f"target,draft), got {text!r}")
    return names
