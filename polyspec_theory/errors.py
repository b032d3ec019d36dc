"""Bad-input guards shared by every public entry point.

Each ``as_*`` / ``require_*`` function returns the value in canonical form or raises
:class:`PolyspecInputError`, whose message starts with the field name, so callers (and the
CLI, which prints it on one line) can say exactly what was wrong. The checks of a command
line's options (:func:`refuse_options`, :func:`options_named`, :func:`parse_ints`) live here
too: every layer that reads a command's parsed options (the CLI, the validation wing's command
hooks) shares them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from contextlib import contextmanager

import numpy as np


class PolyspecInputError(ValueError):
    """Bad user input. ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.reason = message  # the message without the field
        super().__init__(f"{field}: {message}")


def _short(x, limit: int = 60) -> str:
    """``repr(x)`` cut to ``limit`` characters (error messages stay one readable line)."""
    r = repr(x)
    return r if len(r) <= limit else r[: limit - 4] + " ..."


def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def as_real(x, field: str, *, low=None, high=None, low_open=False, high_open=False) -> float:
    """A finite real number, optionally inside [low, high] (or open ends)."""
    if not _is_number(x):
        raise PolyspecInputError(field, f"must be a number, got {_short(x)}")
    try:
        v = float(x)
    except OverflowError:  # an integer beyond the float range
        raise PolyspecInputError(field, "must be finite, got an integer beyond 1e308") from None
    if math.isnan(v):
        raise PolyspecInputError(field, "must be a number, got NaN")
    if math.isinf(v):
        raise PolyspecInputError(field, f"must be finite, got {v}")
    def _range() -> str:
        if high is None:
            return f"> {low}" if low_open else f">= {low}"
        if low is None:
            return f"< {high}" if high_open else f"<= {high}"
        return f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    if low is not None and (v < low or (low_open and v == low)):
        raise PolyspecInputError(field, f"must be {_range()}, got {v}")
    if high is not None and (v > high or (high_open and v == high)):
        raise PolyspecInputError(field, f"must be {_range()}, got {v}")
    return v


def as_probability(x, field: str) -> float:
    """A probability in [0, 1]."""
    return as_real(x, field, low=0.0, high=1.0)


def as_nonnegative(x, field: str) -> float:
    return as_real(x, field, low=0.0)


def as_positive(x, field: str) -> float:
    return as_real(x, field, low=0.0, low_open=True)


def as_int(x, field: str, *, low=None, high=None, show=_short, error=PolyspecInputError) -> int:
    """An integer (floats with integral value are accepted), optionally bounded: the one
    integer rule (``validation.traces.schema.check_int`` is it for trace records, showing values
    as JSON and raising its ``FieldError``)."""
    if isinstance(x, bool) or not _is_number(x):
        raise error(field, f"must be an integer, got {show(x)}")
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(x) or x != int(x):
            raise error(field, f"must be an integer, got {show(x)}")
    v = int(x)
    if low is not None and v < low:
        raise error(field, f"must be >= {low}, got {v}")
    if high is not None and v > high:
        raise error(field, f"must be <= {high}, got {v}")
    return v


def as_real_array(
    x, field: str, *, low=None, high=None, min_len: int = 1, ndim: int | None = 1
) -> np.ndarray:
    """A float64 array of at least ``min_len`` finite numbers with ``ndim`` axes (``None``:
    any), optionally inside [low, high]."""
    if isinstance(x, (str, bytes, dict)) or x is None:
        raise PolyspecInputError(field, f"must be a list of numbers, got {_short(x)}")
    try:
        arr = np.asarray(x, dtype=np.float64)
    except OverflowError:
        raise PolyspecInputError(field, "contains an integer beyond 1e308") from None
    except (TypeError, ValueError):
        raise PolyspecInputError(field, "must be a list of numbers") from None
    if ndim is not None and arr.ndim != ndim:
        raise PolyspecInputError(field, f"must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.size < min_len:
        raise PolyspecInputError(field, f"must have at least {min_len} value(s), got {arr.size}")
    if np.isnan(arr).any():
        i = int(np.flatnonzero(np.isnan(arr.ravel()))[0])
        raise PolyspecInputError(field, f"contains NaN (at flat index {i})")
    if np.isinf(arr).any():
        raise PolyspecInputError(field, "contains an infinite value")
    if low is not None and (arr < low).any():
        i = int(np.flatnonzero(arr.ravel() < low)[0])
        raise PolyspecInputError(field, f"values must be >= {low}, got {arr.ravel()[i]} at {i}")
    if high is not None and (arr > high).any():
        i = int(np.flatnonzero(arr.ravel() > high)[0])
        raise PolyspecInputError(field, f"values must be <= {high}, got {arr.ravel()[i]} at {i}")
    return arr


_INT = re.compile(r"-?[0-9]+")


def _bounds(low: int | None, high: int | None) -> str:
    """`` in 1..8``, `` >= 0``, `` <= 8`` or nothing (no bound) for an error message."""
    if low is not None and high is not None:
        return f" in {low}..{high}"
    if low is not None:
        return f" >= {low}"
    return "" if high is None else f" <= {high}"


def parse_ints(text, field: str, *, low: int | None = 1, high: int | None = None,
               distinct: bool = True, example: str = "1,2,4", what: str = "integers",
               item: str = "a value") -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: the one parser of comma-separated integer lists (the
    command line's options, a tree's parents written as text). Every item is an integer
    (ASCII digits, a ``-`` sign allowed, spaces around it ignored; an empty item is refused)
    in ``low..high`` (``None``: no bound on that side); with ``distinct`` no value may
    appear twice. Errors name ``field`` and call the list's entries ``what`` (one of them
    ``item``)."""
    out = []
    for part in str(text).split(","):
        p = part.strip()
        try:
            v = int(p) if _INT.fullmatch(p) else None
        except ValueError:  # more digits than int() converts
            v = None
        if v is None or (low is not None and v < low) or (high is not None and v > high):
            raise PolyspecInputError(field, f"must be comma-separated {what}"
                                     f"{_bounds(low, high)} (e.g. {example}), got {text!r}")
        out.append(v)
    if distinct and len(set(out)) != len(out):
        raise PolyspecInputError(field, f"lists {item} twice: {text!r}")
    return out


def as_int_array(x, field: str, *, low=None, min_len: int = 1) -> np.ndarray:
    """A non-empty int64 array (integral floats accepted), optionally bounded below."""
    arr = as_real_array(x, field, low=low, min_len=min_len)
    if (arr != np.round(arr)).any():
        i = int(np.flatnonzero(arr != np.round(arr))[0])
        raise PolyspecInputError(field, f"values must be integers, got {arr[i]} at {i}")
    return arr.astype(np.int64)


def require_keys(d, field: str, required: Iterable[str], optional: Sequence[str] = ()) -> dict:
    """A mapping with exactly the required keys plus any optional ones (typos are named)."""
    if not isinstance(d, dict):
        raise PolyspecInputError(field, f"must be an object/mapping, got {type(d).__name__}")
    required = list(required)
    allowed = set(required) | set(optional)
    for k in d:
        if k not in allowed:
            import difflib

            close = difflib.get_close_matches(str(k), sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PolyspecInputError(
                f"{field}.{k}" if field else str(k),
                f"unknown field{hint}; allowed: {', '.join(sorted(allowed))}",
            )
    for k in required:
        if k not in d:
            raise PolyspecInputError(f"{field}.{k}" if field else k, "missing required field")
    return d


# --- options of a command line (the CLI and the validation wing's command hooks) ----------

def refuse_options(given, why: str) -> None:
    """Refuse the first option of ``given`` (``(option, value)`` pairs; a value that is
    neither ``None`` nor ``False`` counts as given) with ``option: why``: the one loop behind
    every "does not apply with X"."""
    for option, value in given:
        if value is not None and value is not False:
            raise PolyspecInputError(option, why)


@contextmanager
def options_named(names: dict):
    """Errors of the fields in ``names`` (``{"batch": "--batch"}``) name the option instead."""
    try:
        yield
    except PolyspecInputError as e:
        if e.field not in names:
            raise
        raise PolyspecInputError(names[e.field], e.reason) from None

