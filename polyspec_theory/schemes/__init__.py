"""The registry of schemes: which variant of speculative decoding a cascade is, decided once.

A *scheme* is one module of this package satisfying :class:`Scheme` (BlackJAX's shape: one
file per algorithm): its config rules (the ``"mode"`` it serves, when it claims a cascade of
that mode, its threshold floor, the config fields only it accepts, its checks), its exact
``predict`` and what ``polyspec predict`` prints (``report``, ``explain``). Adding a scheme
is one file here, found by itself (:func:`load_registry`); the simulators
(``simulators.schemes``) and the decoders (``validation.schemes``) keep their own registries
keyed by the same names.

The decision, :func:`decide`, is made once, when a :class:`~polyspec_theory.core.config.
Cascade` is built (``Cascade.from_config`` included), and stored as ``cascade.scheme``:
among the registered schemes whose ``mode`` is the cascade's, in registration order, the
first that ``claims`` its :class:`Features`. Every layer then looks the scheme up by name
(:func:`get`); a scheme a layer does not serve is refused there with one message
(:func:`refuse`).

Built in: ``batch`` (a chain decoded in a lockstep serving batch, B2), ``structured`` (token
trees or draft-length schedules, T5 / A4), ``chain`` (synchronous chain drafts, P1), ``async``
(the asynchronous pipeline, AS1 / AS3).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from polyspec_theory.errors import PolyspecInputError

# The order the decision tries the built-in schemes of one mode in (the first that claims a
# cascade of its mode wins); every other module of the package (a new scheme) follows, in
# name order.
REGISTERED = ("batch", "structured", "chain", "async_")

__all__ = ["Scheme", "Features", "Options", "Estimate", "REGISTERED", "registry", "get", "modes",
           "load_registry", "scheme_modules",
           "decide", "scheme_of", "scheme_named", "refuse", "in_mode", "predict",
           "threshold_floor", "DEFAULT_MODE", "synchronous", "verifies_what_is_ready"]


class Features(NamedTuple):
    """What the decision reads off a cascade (or off a command line before any cascade
    exists): its ``"mode"``, whether some pair drafts a tree or follows a schedule, and the
    serving batch it is decoded in (``None``: one sequence)."""

    mode: str = "sync"
    structured: bool = False
    batch: int | None = None


class Options(NamedTuple):
    """What a command hands a scheme's ``report`` / ``explain`` besides the cascade:
    ``estimate(cascade) -> Estimate``, the Monte Carlo to call where the exact theory gives
    no speedup (``None``: none at hand); ``batches``, the serving batch sizes to sweep (a
    cascade in a serving batch; default its own); ``max_threshold``, the largest threshold
    searched where a report gives optimal thresholds."""

    estimate: Callable | None = None
    batches: tuple[int, ...] | None = None
    max_threshold: int = 16


class Estimate(NamedTuple):
    """A Monte-Carlo value standing in where a scheme's exact theory gives no number (the
    simulators make it: ``simulators.schemes.estimate``): ``value`` with its 95 % interval
    and how it was obtained."""

    value: float
    low: float
    high: float
    method: str


@runtime_checkable
class Scheme(Protocol):
    """One scheme (a module of this package; see :mod:`polyspec_theory.schemes.chain`).

    * ``name``: the registry key, shared by every layer's registry (``"chain"``);
    * ``description``: a few words for refusals and help (``"synchronous chain drafts"``);
    * ``mode``: the config's ``"mode"`` this scheme serves (``"sync"``, ``"async"``, ...);
    * ``threshold_floor``: the least threshold a config may give (``async``: 0, verify what
      is ready; else 1);
    * ``fields``: the config keys only this scheme accepts, each with the one line a
      config of another scheme that uses it is refused with;
    * ``claims(features)``: whether this scheme runs a cascade with these :class:`Features`
      (asked only for cascades of its ``mode``, in registration order);
    * ``check(cascade)``: the scheme's own checks of a built cascade (errors name the field);
      returns the normalised values of the cascade's attributes it owns (``{}``: none);
    * ``predict(cascade)``: the exact prediction;
    * ``report(cascade, options)`` / ``explain(cascade, options)``: the object ``polyspec
      predict --json`` prints and its plain text (:class:`Options`: the command's settings,
      the Monte Carlo to call where the exact theory gives no speedup).
    """

    name: str
    description: str
    mode: str
    threshold_floor: int
    fields: dict[str, str]

    def claims(self, features: Features) -> bool: ...

    def check(self, cascade) -> dict: ...

    def predict(self, cascade) -> Any: ...

    def report(self, cascade, options: Options | None = None) -> dict: ...

    def explain(self, cascade, options: Options | None = None) -> str: ...


_LOADED: dict[str, Scheme] = {}


def scheme_modules(package: str, first=()) -> tuple[str, ...]:
    """The scheme modules of ``package``: every module of it whose name does not start with
    ``_``, those of ``first`` first (in that order), the rest in name order."""
    pkg = importlib.import_module(package)
    found = sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                   if not m.name.startswith("_"))
    return tuple(m for m in first if m in found) + tuple(m for m in found if m not in first)


def load_registry(loaded: dict, package: str, first, protocol) -> dict:
    """Fill ``loaded`` (once) with ``{module.name: module}`` for every scheme module of the
    package ``package`` (:func:`scheme_modules`: ``first`` first), each checked to satisfy
    ``protocol``: the loader of every layer's registry of schemes (this one,
    ``simulators.schemes``, the validation wing's). A new scheme is a new module: no list
    to edit."""
    if not loaded:
        for mod in scheme_modules(package, first):
            s = importlib.import_module(f"{package}.{mod}")
            if not isinstance(s, protocol):
                raise TypeError(f"{s.__name__} does not satisfy the {protocol.__name__} "
                                "protocol")
            loaded[s.name] = s
    return loaded


def registry() -> dict[str, Scheme]:
    """``{name: scheme}`` in registration order (modules load on first use)."""
    return load_registry(_LOADED, __name__, REGISTERED, Scheme)


def get(name: str, field: str = "scheme") -> Scheme:
    """The scheme registered as ``name``; an unknown name is refused, naming ``field``."""
    reg = registry()
    if name not in reg:
        raise PolyspecInputError(field, f"must be one of {tuple(reg)}, got {name!r}")
    return reg[name]


# the "mode" of a config (or a trace header) that gives none: each verify waits for its drafts
DEFAULT_MODE: str = Features._field_defaults["mode"]


def synchronous(scheme: str) -> bool:
    """Whether ``scheme`` runs in the default mode (:data:`DEFAULT_MODE`): each verify waits
    for the drafts it checks, so the rounds and cost curves of its captures are synchronous
    ones that another scheme's prediction may fit its laws and costs on. The one test of a
    scheme's mode outside this package's scheme files: callers ask it, never compare a mode
    themselves."""
    return get(scheme).mode == DEFAULT_MODE


def verifies_what_is_ready(scheme: str, threshold: int) -> bool:
    """Whether ``threshold`` is, in ``scheme``, the "verify what is ready" setting below every
    draft length (AS0: threshold 0 of a scheme whose floor is 0, the asynchronous pipeline)
    rather than a draft length."""
    return threshold == 0 and get(scheme).threshold_floor == 0


def modes() -> tuple[str, ...]:
    """Every ``"mode"`` a config may give (the modes of the registered schemes)."""
    return tuple(dict.fromkeys(s.mode for s in registry().values()))


def fields() -> dict[str, str]:
    """The scheme-owned config keys of every registered scheme."""
    return {k: v for s in registry().values() for k, v in s.fields.items()}


def threshold_floor(mode: str, field: str = "mode") -> int:
    """The least threshold any scheme of ``mode`` allows."""
    return min(s.threshold_floor for s in registry().values() if s.mode == _mode(mode, field))


def _mode(mode, field: str) -> str:
    if mode not in modes():
        raise PolyspecInputError(field, f"must be one of {modes()}, got {mode!r}")
    return mode


def decide(features: Features, field: str = "mode") -> Scheme:
    """THE decision: among the schemes of ``features.mode``, in registration order, the
    first that claims ``features``."""
    mode = _mode(features.mode, field)
    for s in registry().values():
        if s.mode == mode and s.claims(features):
            return s
    raise PolyspecInputError(field, f"no scheme of mode {mode!r} runs this cascade")


def scheme_of(cascade) -> str:
    """The scheme of ``cascade`` (decided when it was built)."""
    from_config = getattr(cascade, "scheme", None)
    if not isinstance(from_config, str):
        raise PolyspecInputError("cascade", "must be a Cascade (use Cascade.from_config)")
    return from_config


def scheme_named(mode: str = DEFAULT_MODE, *, structured: bool = False, batch=None) -> str:
    """The scheme of a run described by its options (a command line before any cascade
    exists)."""
    return decide(Features(mode, bool(structured), batch)).name


def refuse(scheme: str, what: str, field: str = "mode"):
    """The one refusal of a scheme that ``what`` (a command, a function) does not serve."""
    raise PolyspecInputError(field, f"{what} is not available for {get(scheme).description} "
                                    f"(scheme {scheme!r})")


def in_mode(cascade, mode: str | None, field: str = "mode"):
    """``cascade`` run in ``mode`` (``None``: its own). Fields the new mode's schemes do not
    accept are dropped (the queues of an asynchronous cascade run synchronously); a threshold
    below the new mode's floor is refused, naming ``field``."""
    scheme_of(cascade)
    if mode is None or mode == cascade.mode:
        return cascade
    floor = threshold_floor(mode, field)
    low = [t for t in cascade.thresholds if t < floor]
    if low:
        raise PolyspecInputError(field, f"threshold {low[0]} (verify what is ready) has no "
                                        f"meaning in mode {mode!r}; give thresholds >= {floor}")
    keep = {k for s in registry().values() if s.mode == mode for k in s.fields}
    drop = {"queues": None} if "queue" not in keep else {}
    return dataclasses.replace(cascade, mode=mode, **drop)


def predict(cascade):
    """The exact prediction of ``cascade`` in its scheme."""
    return get(scheme_of(cascade)).predict(cascade)
