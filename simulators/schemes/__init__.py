"""The simulators' registry of schemes (:mod:`polyspec_theory.schemes` names them): one Monte
Carlo per scheme, one signature::

    simulate(cascade, budget, key) -> SimResult

``budget`` (:class:`Budget`) says how much to simulate (tokens or events, chains, the event
cap); ``key`` is an int seed or a JAX PRNG key (same key, same numbers). A scheme is one module
of this package satisfying :class:`SimScheme`, found by itself
(:func:`polyspec_theory.schemes.load_registry`; :data:`REGISTERED` orders the built-ins); its
``name`` is the theory scheme's.

Built in: ``chain`` (:func:`simulators.length.simulate_lengths`), ``structured``
(:func:`simulators.structures.simulate_structured`), ``batch``
(:func:`simulators.serving.simulate_serving`), ``async``
(:func:`simulators.asynchronous.simulate_async`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from polyspec_theory.schemes import Estimate, get, load_registry, scheme_of
from simulators.runtime import MAX_CHAINS, as_chains

# The built-in schemes, in this order; every other module of the package follows in name order.
REGISTERED = ("chain", "structured", "batch", "async_")

DEFAULT_TOKENS = 1_000_000  # tokens in total (chain, structured, batch)
DEFAULT_EVENTS = 20_000  # completed actions per chain (schemes counted in events: async)
DEFAULT_CHAINS = 1024

MAX_TOKENS = 10**13
MAX_EVENTS_PER_CHAIN = 10**8
# the Monte Carlo that stands in where a scheme's exact theory gives no speedup
# (polyspec_theory.schemes.Options.estimate): chains x events, seed 0
ESTIMATE_CHAINS = 64

__all__ = ["Budget", "SimResult", "SimScheme", "REGISTERED", "registry", "get_simulator",
           "simulate", "estimate", "DEFAULT_TOKENS", "DEFAULT_EVENTS", "DEFAULT_CHAINS",
           "MAX_CHAINS", "ESTIMATE_CHAINS", "seed_of"]


@dataclass(frozen=True)
class Budget:
    """How much to simulate. ``tokens``: tokens in total over all chains (schemes sized in
    tokens: ``chain``, ``structured``, ``batch``, ``pearl``); ``events``: completed actions per
    chain (schemes sized in events: ``async``); each ``None``: its default. The one a scheme
    is not sized by, given (not ``None``), is refused naming it (:meth:`refuse_unused`), never
    ignored; ``given`` records which were. ``chains``:
    independent chains (spread over the devices; results do not depend on how);
    ``max_events``: the event cap (``None``: the scheme's default) -- a run expected to need
    more is refused before it starts, and a chain that runs past twice its share is stopped.
    ``progress(done, asked)``: called between chunks where a simulator can (``None``: not).
    ``spelling``: how the caller names the fields in errors (``{"max_events":
    "--max-events"}`` on the command line; default the field names)."""

    tokens: int | None = None
    events: int | None = None
    chains: int = DEFAULT_CHAINS
    max_events: float | None = None
    progress: Callable | None = field(default=None, compare=False, repr=False)
    spelling: tuple = field(default=(), compare=False, repr=False)
    given: frozenset = field(default=frozenset(), init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "given", frozenset(
            k for k in ("tokens", "events") if getattr(self, k) is not None))
        for k, default in (("tokens", DEFAULT_TOKENS), ("events", DEFAULT_EVENTS)):
            if getattr(self, k) is None:
                object.__setattr__(self, k, default)
        object.__setattr__(self, "tokens", as_int(self.tokens, self.name("tokens"), low=1,
                                                  high=MAX_TOKENS))
        object.__setattr__(self, "events", as_int(self.events, self.name("events"), low=50,
                                                  high=MAX_EVENTS_PER_CHAIN))
        object.__setattr__(self, "chains", as_chains(self.chains, self.name("chains")))
        if self.max_events is not None:
            object.__setattr__(self, "max_events", as_real(
                self.max_events, self.name("max_events"), low=1.0))

    def name(self, key: str) -> str:
        """The caller's name of the field ``key`` (errors name it)."""
        return dict(self.spelling).get(key, key)

    def refuse_unused(self, sim) -> None:
        """Refuse, naming it, the size (``tokens`` / ``events``) given for a scheme that is not
        sized by it (``sim.sized_by``): never silently ignored."""
        unused = "events" if sim.sized_by == "tokens" else "tokens"
        if unused in self.given:
            what = ("tokens in total" if sim.sized_by == "tokens" else
                    f"{sim.unit} per chain")
            raise PolyspecInputError(
                self.name(unused), f"scheme {sim.name!r} is sized in "
                f"{self.name(sim.sized_by)} ({what}), not {unused}: give "
                f"{self.name(sim.sized_by)} instead")

    def cap(self, default: float) -> float:
        """The event cap: ``max_events``, else the scheme's ``default``."""
        return default if self.max_events is None else self.max_events

    def refuse_work(self, work: float, what: str, cap: float, lower: str) -> None:
        """Refuse, naming ``max_events``, a run of ``work`` events (``what`` says which) above
        ``cap``; ``lower``: the fields that shrink it."""
        if not work <= cap:
            raise PolyspecInputError(
                self.name("max_events"), f"{what}, more than the limit {cap:.3g}: lower "
                f"{lower}, or raise the limit with {self.name('max_events')} {ceil_sig(work)}")


@runtime_checkable
class SimResult(Protocol):
    """What every simulator returns: the speedup (``value``, ``se``, ``low``, ``high``: a
    :class:`simulators.runtime.RatioEstimate`), the chains and seed it came from
    (``seed`` ``None`` when a PRNG key was passed), and ``to_dict()`` (JSON-ready)."""

    speedup: Any
    chains: int
    seed: int | None

    def to_dict(self) -> dict: ...


@runtime_checkable
class SimScheme(Protocol):
    """One simulator scheme (a module of this package; see :mod:`simulators.schemes.chain`).

    * ``name``: the theory scheme's name; ``source``: the module that simulates it; ``unit``:
      what one of its events is (``"verification rounds"``); ``sized_by``: the budget's field
      that sizes a run, ``"tokens"`` (in total) or ``"events"`` (per chain) -- the other one,
      given, is refused;
    * ``default_max_events``: the event cap when the budget gives none;
    * ``work(cascade, budget) -> float``: the events the run is expected to take (what the
      cap bounds; ``inf`` when unknown);
    * ``simulate(cascade, budget, key) -> SimResult``: the Monte Carlo (refusing work past
      the cap, errors naming the budget's fields);
    * ``report(cascade, result) -> dict`` / ``explain(cascade, result) -> str``: what
      ``polyspec simulate`` prints, the exact theory beside the estimates.
    """

    name: str
    source: str
    unit: str
    sized_by: str
    default_max_events: float

    def work(self, cascade, budget: Budget) -> float: ...

    def simulate(self, cascade, budget: Budget, key) -> SimResult: ...

    def report(self, cascade, result) -> dict: ...

    def explain(self, cascade, result) -> str: ...


_LOADED: dict[str, SimScheme] = {}


def registry() -> dict[str, SimScheme]:
    """``{name: simulator scheme}`` (modules load on first use)."""
    return load_registry(_LOADED, __name__, REGISTERED, SimScheme)


def get_simulator(cascade) -> SimScheme:
    """The simulator of ``cascade``'s scheme (a scheme without one is refused)."""
    name = scheme_of(cascade)
    reg = registry()
    if name not in reg:
        raise PolyspecInputError("mode", f"the simulators are not available for "
                                 f"{get(name).description} (scheme {name!r})")
    return reg[name]


def simulate(cascade, budget: Budget | None = None, key=0) -> SimResult:
    """Monte Carlo of ``cascade`` in its scheme; a size the scheme is not sized by is refused
    (:meth:`Budget.refuse_unused`)."""
    budget = Budget() if budget is None else budget
    if not isinstance(budget, Budget):
        raise PolyspecInputError("budget", "must be a simulators.schemes.Budget")
    sim = get_simulator(cascade)
    budget.refuse_unused(sim)
    return sim.simulate(cascade, budget, key)


def estimate(cascade, seed: int = 0) -> Estimate:
    """The Monte Carlo that stands in where the exact theory gives no speedup
    (:class:`polyspec_theory.schemes.Options`): :data:`ESTIMATE_CHAINS` chains of
    :data:`DEFAULT_EVENTS` events (or the tokens of a default budget), seed ``seed``."""
    sim = get_simulator(cascade)
    budget = Budget(chains=ESTIMATE_CHAINS)
    res = sim.simulate(cascade, budget, seed)
    s = res.speedup
    return Estimate(s.value, s.low, s.high,
                    f"Monte Carlo ({sim.source}, {ESTIMATE_CHAINS} chains x "
                    f"{budget.events} events, seed {seed})")


def seed_of(key) -> int | None:
    """The int seed of ``key`` (``None`` for a PRNG key): what a result records."""
    return key if isinstance(key, int) and not isinstance(key, bool) else None


def ceil_sig(x: float) -> str:
    """``x`` rounded up to two significant digits, as an option value (``3.5e+12``)."""
    if not math.isfinite(x):
        return "inf (the estimate overflows: this cascade cannot be simulated)"
    e = math.floor(math.log10(x)) - 1
    return f"{math.ceil(x / 10**e) * 10**e:.2g}"
