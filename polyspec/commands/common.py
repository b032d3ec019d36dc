"""Argument helpers shared by the subcommands: one rule, one place."""

from __future__ import annotations

from contextlib import contextmanager


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


def refuse_options(given, why: str) -> None:
    """Refuse the first option of ``given`` (``(option, value)`` pairs; a value that is
    neither ``None`` nor ``False`` counts as given) with ``option: why``: the one loop behind
    every "does not apply with X"."""
    from polyspec_theory.errors import PolyspecInputError

    for option, value in given:
        if value is not None and value is not False:
            raise PolyspecInputError(option, why)


@contextmanager
def options_named(names: dict):
    """Errors of the fields in ``names`` (``{"batch": "--batch"}``) name the option instead."""
    from polyspec_theory.errors import PolyspecInputError

    try:
        yield
    except PolyspecInputError as e:
        if e.field not in names:
            raise
        raise PolyspecInputError(names[e.field], e.reason) from None


def parse_ints(text, field: str, *, low: int = 1, high: int | None = None,
               example: str = "1,2,4") -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: distinct integers in ``low..high`` (errors name
    ``field``). The one parser of comma-separated integer lists on the command line."""
    from polyspec_theory.errors import PolyspecInputError

    out = []
    for part in str(text).split(","):
        p = part.strip()
        if not p.isdigit() or int(p) < low or (high is not None and int(p) > high):
            rng = f"{low}..{high}" if high is not None else f">= {low}"
            raise PolyspecInputError(field, f"must be comma-separated integers in {rng} (e.g. "
                                     f"{example}), got {text!r}")
        out.append(int(p))
    if len(set(out)) != len(out):
        raise PolyspecInputError(field, f"lists a value twice: {text!r}")
    return out


def parse_batches(text, field: str = "--batch") -> list[int]:
    """``"1,2,4,8,16"`` -> ``[1, 2, 4, 8, 16]`` (errors name the option)."""
    from polyspec_theory.core.costs import MAX_BATCH_SIZE
    from polyspec_theory.errors import PolyspecInputError

    try:
        return parse_ints(text, field, high=MAX_BATCH_SIZE, example="1,2,4,8,16")
    except PolyspecInputError as e:
        if "twice" in e.reason:
            raise PolyspecInputError(field, f"lists a batch size twice: {text!r}") from None
        raise PolyspecInputError(field, f"must be comma-separated batch sizes in "
                                 f"1..{MAX_BATCH_SIZE} (e.g. 1,2,4,8,16), got {text!r}") from None
