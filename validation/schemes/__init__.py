"""The decoders of the schemes, one module per scheme, keyed by the theory registry's names
(:mod:`polyspec_theory.schemes`): each holds the scheme's decoder, what its captures write and
how their traces are checked, and how a capture of it is predicted. A scheme is a module of
this package satisfying :class:`TraceScheme`, found by itself (loaded by
:func:`polyspec_theory.schemes.load_registry`, as every layer's registry; :data:`REGISTERED`
orders the built-ins, every other module follows in name order).

What a scheme module gives (``chain.py`` is the model; a name a scheme does not need may be
left out where marked):

* ``name``: the theory scheme's name (``"chain"``);
* its captures (:mod:`validation.capture`): ``DRIVER`` -- the loop that runs them
  (``"stream"``: one process, prompt after prompt; ``"pipeline"``: one process per level;
  ``"batch"``: lockstep batches; :data:`validation.capture.DRIVERS`); ``CAPTURE_REFUSES`` --
  the ``polyspec capture`` options it does not take, each with its one-line refusal;
  ``check_capture(spec) -> spec`` -- its own checks and defaults of a
  :class:`~validation.capture.setup.CaptureSpec`; ``describe(path) -> str`` -- the line
  ``polyspec capture`` prints for a finished trace; for the ``stream`` driver also
  ``decoder(levels, spec)`` (an object with ``generate(prompt, max_new_tokens,
  prompt_index=...)`` returning the rounds, tokens and times of
  :class:`~validation.schemes.chain.CascadeResult`, ``sampler`` and ``on_round``),
  ``capture_fields(spec) -> dict`` (header fields it adds; ``"cascade"``: merged into the
  cascade) and ``cost_positions(spec)`` (the ``m`` of its cost curves);
* its traces (:mod:`validation.traces.checks`): ``RECORD_TYPES`` (the record types its traces
  hold besides ``resume`` / ``end``), ``RECORDS`` (its own record types with their required
  fields; optional), ``check_header(header, checker)``, ``check_round(checker, record)``,
  ``check_record(checker, record)`` (its own records; with ``RECORDS``) and either
  ``check_prompt_rounds(checker, summary, line, rounds)`` (the rounds of a finished prompt)
  or ``check_trace(checker, kept)``; they raise
  :class:`~validation.traces.schema.FieldError` / :class:`~validation.traces.schema.RecordError`;
  optional ``rounds_pass(checker, levels, G, m)``: ``check_round`` on columns (a boolean
  array, true where it passes; the reader then skips the record-by-record check there,
  :meth:`validation.traces.checks.RecordChecker.rounds_pass`);
* how its captures are predicted: ``VALIDATE`` (``"module:function"`` of the analysis that
  predicts and compares them, :mod:`validation.analysis.traces`; optional: without it
  ``polyspec validate`` says it does not predict this scheme's captures); a scheme whose
  traces are not prompt by prompt also gives ``read_capture(path, allow_truncated=...)``
  (an object with ``name``, ``scheme`` and ``notes``: what its ``VALIDATE`` reads; the
  single-stream reader then skips its traces, :func:`validation.traces.records.own_reader`);
* ``run_exposures(prompts)`` (optional): R2's exposures of its rounds over positions, from
  one list of ``(drafts checked, drafts accepted)`` per prompt and pair
  (:func:`polyspec_theory.core.runs.p1_exposures` for the chain): a scheme that gives it has
  its captures' run laws fitted by ``polyspec fit`` (:mod:`validation.formats.polyspec_trace`).
* its command hooks (optional, each ``"module:function"`` of the validation wing, found by
  :func:`command_hook`; :data:`HOOKS`): ``PROFILE(args) -> int`` -- what ``polyspec profile
  --mode <its mode>`` runs (without it: the synchronous profiles; a scheme that is not
  synchronous is refused); ``FORECAST_CAPTURES(args) -> int`` -- what ``polyspec forecast
  --mode <its mode>`` runs on our own captures (without it ``--mode`` is refused there);
  ``FORECAST_FOLDER(directory, names, lookahead, precisions) -> dict`` -- the forecast of a
  folder of PipeSpec runs with its decoder (``forecast --mode``;
  :func:`validation.analysis.folders.forecast_folder`); ``FORECAST_KIND(request) -> (forecast,
  errors, kind)`` -- ``forecast --tree / --schedule / --batch`` of a
  :class:`~validation.analysis.forecast_kinds.KindRequest` it decides
  (:func:`validation.analysis.forecast_kinds.forecast_request`). ``args`` is the command's
  parsed options; the command decides the scheme once (the theory's decision on ``--mode``)
  and names no scheme.

The two-process decoders (``async_``, ``pearl``) share their process plumbing
(:mod:`validation.schemes._two_process`, not a scheme: its name starts with ``_``).

The scheme of a trace is decided once, by the theory's decision on the header's cascade
(:func:`scheme_of_trace`); of a capture, by the theory's decision on its spec
(:attr:`validation.capture.setup.CaptureSpec.scheme`); never again here. The decoders import
``torch`` on first use (:data:`torch`): checking a trace with its scheme's module never loads
it.
"""

from __future__ import annotations

import importlib
from typing import Protocol, runtime_checkable

from polyspec_theory.schemes import DEFAULT_MODE, load_registry, refuse, scheme_named, synchronous
from polyspec_theory.schemes import get as theory_scheme
from validation.traces.schema import is_batch_header

__all__ = ["REGISTERED", "TraceScheme", "registry", "get", "scheme_of_trace",
           "features_of_header", "captures_of", "synchronous_captures", "torch", "HOOKS",
           "command_hook", "resolve_hook"]

# the built-in schemes, in this order; every other module of the package follows
REGISTERED = ("chain", "structured", "batch", "async_")


@runtime_checkable
class TraceScheme(Protocol):
    """What every scheme module gives (the module docstring lists the optional rest)."""

    name: str
    DRIVER: str
    CAPTURE_REFUSES: dict
    RECORD_TYPES: tuple

    def check_capture(self, spec): ...

    def describe(self, path) -> str: ...

    def check_header(self, header: dict, checker) -> None: ...

_LOADED: dict = {}


class _Lazy:
    """A module imported on first use: the decoders' ``torch`` (reading a trace, which checks
    it with its scheme's module, never loads it)."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


torch = _Lazy("torch")


def registry() -> dict:
    """``{name: module}`` of the registered scheme modules (loaded on first use)."""
    return load_registry(_LOADED, __name__, REGISTERED, TraceScheme)


def get(name: str):
    """The module of scheme ``name``; a scheme without one is refused."""
    from polyspec_theory.errors import PolyspecInputError

    reg = registry()
    if name not in reg:
        raise PolyspecInputError("scheme", f"no decoder for scheme {name!r} (decoders: "
                                 f"{', '.join(reg)})")
    return reg[name]


# the command hooks a scheme module may give (the module docstring says what each runs)
HOOKS = ("PROFILE", "FORECAST_CAPTURES", "FORECAST_FOLDER", "FORECAST_KIND")


def command_hook(scheme: str, hook: str, what: str | None = None, field: str = "mode"):
    """The function scheme ``scheme``'s module names as its ``hook`` (one of :data:`HOOKS`,
    ``"module:function"``), imported. A scheme that gives none (or has no module here):
    ``None`` when ``what`` is ``None`` (the caller's default path), else the one refusal of a
    scheme ``what`` does not serve (:func:`polyspec_theory.schemes.refuse`, naming
    ``field``). An unknown scheme is refused; an unknown hook name, or a hook that does not
    resolve to a function of :data:`HOOK_LAYERS`, is a scheme module's bug:
    :class:`LookupError` saying which."""
    if hook not in HOOKS:
        raise LookupError(f"{hook!r} is not a command hook (hooks: {', '.join(HOOKS)})")
    theory_scheme(scheme)
    mod = registry().get(scheme)
    ref = getattr(mod, hook, None)
    if ref is None:
        if what is None:
            return None
        refuse(scheme, what, field)
    return resolve_hook(ref, f"{mod.__name__}.{hook}")


# where a hook may live: this layer and the ones below it (imports flow one way)
HOOK_LAYERS = ("polyspec_theory", "simulators", "validation")


def resolve_hook(ref, where: str):
    """The function ``"module:function"`` names (``where``: whose hook, for the error): the
    one resolver of every scheme module's hooks (``VALIDATE`` included)."""
    path, _, name = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not path or not name:
        raise LookupError(f"{where} = {ref!r}: expected 'module:function'")
    if path.split(".")[0] not in HOOK_LAYERS:
        raise LookupError(f"{where} = {ref!r}: a hook lives in {', '.join(HOOK_LAYERS)} "
                          "(imports flow one way)")
    try:
        module = importlib.import_module(path)
    except ImportError as e:
        raise LookupError(f"{where} = {ref!r}: cannot import {path} ({e})") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        raise LookupError(f"{where} = {ref!r}: {path} has no function {name!r}")
    return fn


def features_of_header(header: dict) -> dict:
    """What the theory's decision reads off a trace header: its mode, whether some pair has a
    tree or a schedule, its serving batch."""
    c = header.get("cascade") or {}
    structured = False
    for key in ("trees", "schedules"):
        v = c.get(key)  # a malformed entry is the structured scheme's to refuse
        structured |= v is not None and (not isinstance(v, list)
                                         or any(x is not None for x in v))
    batch = header["batch"].get("size") if is_batch_header(header) else None
    return {"mode": header.get("mode", DEFAULT_MODE), "structured": structured, "batch": batch}


def scheme_of_trace(header: dict) -> str:
    """The scheme that wrote a trace: the theory's decision on its header."""
    f = features_of_header(header)
    return scheme_named(f["mode"], structured=f["structured"], batch=f["batch"])


def captures_of(captures, scheme: str) -> list:
    """The captures of ``captures`` that ``scheme`` wrote (each one's ``scheme``: for our
    traces the theory's decision on the header; a PipeSpec run's from its strategy), in
    order; an unknown scheme is refused. A module that serves one scheme picks its captures
    with this and its scheme module's ``name``, never by a mode."""
    theory_scheme(scheme)
    return [c for c in captures if c.scheme == scheme]


def synchronous_captures(captures) -> list:
    """The captures of ``captures`` whose scheme is synchronous
    (:func:`polyspec_theory.schemes.synchronous`: each verify waited for its drafts), in
    order: the ones whose rounds and cost curves other schemes' predictions fit on."""
    return [c for c in captures if synchronous(c.scheme)]
