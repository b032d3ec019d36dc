"""Every file the validation layer reads, one module per format, each read into one
:class:`Evidence`.

A format is a module of this package that defines ``FORMATS``: a tuple of :class:`Format`
``(name, description, detect, read)``. ``detect(source)`` says from the content whether a
file is of the format (:class:`Source` gives the views it needs, each computed once);
``read(source, **options)`` checks every field and returns the :class:`Evidence`:
acceptance per adjacent pair (counts over ``(accepted, cap)`` cells, or the rounds of each
prompt over output positions) plus what the file times, and the format's own parsed record
(``data``) for the analyses that use all of it. Adding a format is one file here: the
package finds it (:func:`registry`).

Detection (:func:`detect`, :func:`open`): the formats are tried in ``order``; a format of a
``group`` whose markers can share one file (the engines' log lines) is refused when another
of its group matches too (interleaved logs cannot be told apart by run); nothing matching
is a one-line error. ``format=`` overrides detection.

=========================  ====================================================================
``pipespec``               PipeSpec benchmark JSON (:mod:`.pipespec`)
``specbench``              Spec-Bench answer JSONL (:mod:`.specbench`)
``polyspec-trace``         our own traces (:mod:`.polyspec_trace`, schema :mod:`validation.traces`)
``vllm-v0-log``            vLLM V0 ``Speculative metrics:`` lines; cumulative counters;
                           "accepted tokens" counts accepted drafts at ANY position, so the
                           prefix is ``emitted - rounds``; rounds = draft tokens / k
``vllm-v1-log``            vLLM V1 ``SpecDecoding metrics:`` lines (per-interval counters,
                           both wordings); rounds = Drafted / gamma (gamma = number of
                           per-position rates, or ``--gamma``)
``vllm-offline-example``   the V1 ``examples/offline_inference/spec_decode.py`` printout
                           (per-position rates printed with 2 decimals)
``prometheus-text``        vLLM counters in the Prometheus text exposition format
``prometheus-ui``          the same counters pasted from the Prometheus UI (``series | value``)
``vllm-json``              ``SpecDecodingStats`` fields or ``LLM.get_metrics()`` records
``vllm-per-request``       per-request ``speculative_decoding`` metrics with
                           ``acceptance_histogram``
``sglang-log``             SGLang ``Decode batch. ... accept len: x, accept rate: y`` lines
``sglang-meta``            per-request ``meta_info``, all three key schemas
``llamacpp-speculative``   ``llama-speculative`` statistics (n_draft, n_predict, ...)
``llamacpp-server``        llama-server draft statistics (``#gen drafts``, ...)
``trtllm-bench``           ``trtllm-bench`` decoding statistics (per-request averages)
``vllm-sweep``             a table of mean acceptance length and time per output token per
                           number of speculative tokens K: calibration data, no round counts
=========================  ====================================================================

Engine outputs (:mod:`.engine_common`): one snapshot per log interval / request / run, each
with its verification ``rounds``, ``accepted`` draft tokens (the accepted *prefix*, bonus
token excluded), the draft length ``cap`` when every round drafted it, and the exact (or,
from rounded rates, reconstructed) acceptance histogram where the engine reports one. The
engines' "mean acceptance length" convention is ``1 + accepted / rounds`` (bonus token
included); every figure the engine printed is recomputed and compared at its printed
precision. Counters over time: per-interval snapshots are summed; cumulative ones are
differenced (a decrease is a restart: a new segment). Missing data raise
:class:`PolyspecInputError` naming what is missing, on one line.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import json
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.errors import PolyspecInputError

__all__ = ["Format", "Evidence", "PairEvidence", "Source", "registry", "detect", "detect_dir",
           "open", "parse", "names", "fit_report"]

HEAD_CHARS = 4096  # what detection reads of a file before deciding to parse it whole


@dataclass(frozen=True)
class PairEvidence:
    """Acceptance of one adjacent pair. ``counts``: accepted drafts per round (bonus token
    excluded) with each round's cap, where the file gives them; ``rounds``: per prompt, the
    tokens each verify call appended in order (bonus included), where the file logs rounds
    one by one (rounds over output positions: docs/theory.md R1-R2); ``exposures``: the
    ``(entry age, agreements, censored)`` of every round where the decoder's round policy
    reveals them (R2's fit input)."""

    verifier: str | None
    drafter: str | None
    counts: AcceptanceCounts | None = None
    cap: int | None = None
    rounds: tuple = ()
    exposures: tuple | None = None


@dataclass(frozen=True)
class Evidence:
    """What one file holds, whatever its format: ``pairs`` (top pair first: the target
    verifying), ``models`` (target first, where the file names them), ``scheme`` (the theory
    registry's name of the decoding scheme that produced it, where the file says),
    ``timing`` (the file's own timings summarised), ``warnings``, and ``data``: the format's
    parsed record (an :class:`~.engine_common.EngineOutput`, a
    :class:`~.pipespec.PipeSpecRun`, a :class:`~.specbench.AnswerFile`, a
    :class:`~validation.traces.dataset.Capture`, ...)."""

    path: str
    format: str
    description: str
    data: object
    pairs: tuple[PairEvidence, ...] = ()
    models: tuple[str, ...] = ()
    scheme: str | None = None
    timing: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Format:
    """One input format: ``detect(source) -> bool``, ``read(source, **options) ->
    Evidence``. ``order``: detection order (lower first); ``group``: formats whose markers
    can sit in one file (a file matching two of a group is refused); ``folder``: a folder of
    such files is one data set (``read_dir(directory) -> list[Evidence]`` checks it as a
    whole); ``report(evidence, **options) -> dict``: the ``polyspec fit`` report, ``None``
    when the format holds nothing to fit (``no_report``: the refusal, ``(field, why)``)."""

    name: str
    description: str
    detect: Callable
    read: Callable
    order: int = 50
    group: str | None = None
    report: Callable | None = None
    no_report: tuple[str, str] | None = None
    read_dir: Callable | None = None


class Source:
    """A file (``path``) or a text (``text``) to detect and read; each view is computed
    once. ``head``: the file's first characters, ``None`` when it cannot be read (detection
    never raises on it); ``body``: the whole text without a ``#`` source header above a
    ``---`` line (the shared samples' convention; read bounded, one-line errors naming the
    file); ``source``: that header; ``json``: ``body`` parsed as JSON (or JSON lines),
    ``None`` when it is not JSON."""

    def __init__(self, path=None, text: str | None = None):
        if (path is None) == (text is None):
            raise ValueError("Source needs a path or a text")
        self.path = None if path is None else Path(path)
        self._text = text

    @property
    def name(self) -> str:
        return str(self.path) if self.path is not None else "<text>"

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower() if self.path is not None else ""

    def is_file(self) -> bool:
        return self.path is not None and self.path.is_file()

    @cached_property
    def head(self) -> str | None:
        if self.path is None:
            return self._text[:HEAD_CHARS]
        if not self.is_file():
            return None
        try:
            with builtins.open(self.path, encoding="utf-8") as fh:
                return fh.read(HEAD_CHARS)
        except (OSError, UnicodeDecodeError):
            return None

    @cached_property
    def _body(self) -> tuple[str, str]:
        from validation.formats.engine_common import read_engine_text

        if self.path is None:
            if not isinstance(self._text, str) or not self._text.strip():
                raise PolyspecInputError("file", "is empty")
            return self._text, ""
        text, source = read_engine_text(self.path)
        if not text.strip():
            raise PolyspecInputError("file", f"is empty: {self.path}")
        return text, source

    @property
    def body(self) -> str:
        return self._body[0]

    @property
    def source(self) -> str:
        return self._body[1]

    @cached_property
    def json(self):
        from validation.formats.engine_common import json_or_none

        return json_or_none(self.body)


@cache
def registry() -> dict[str, Format]:
    """Every format of this package's modules, by name, in detection order."""
    found = []
    for mod in pkgutil.iter_modules(__path__):
        m = importlib.import_module(f"validation.formats.{mod.name}")
        found.extend(getattr(m, "FORMATS", ()))
    found.sort(key=lambda f: (f.order, f.name))
    out = {f.name: f for f in found}
    if len(out) != len(found):
        raise RuntimeError("two formats share a name")
    return out


def names() -> list[str]:
    return list(registry())


def _format(name) -> Format:
    fmts = registry()
    if name not in fmts:
        raise PolyspecInputError("--format", f"unknown format {name!r}; one of: "
                                 f"{', '.join(fmts)}")
    return fmts[name]


def detect(source) -> Format:
    """The format of ``source`` (a :class:`Source`, a path); a one-line error naming what
    was looked for when none matches."""
    src = source if isinstance(source, Source) else Source(source)
    fmts = list(registry().values())
    for f in fmts:
        if not f.detect(src):
            continue
        if f.group is not None:
            hits = [g.name for g in fmts if g.group == f.group and g.detect(src)]
            if len(hits) > 1:
                raise PolyspecInputError(
                    "format", f"lines of several engine formats in one file ({', '.join(hits)})"
                    ": interleaved logs cannot be told apart by run; split the file, or pass "
                    "--format to read one format's lines only")
        return f
    if src.json is not None:
        raise PolyspecInputError(
            "format", "JSON without speculative-decoding fields (looked for "
            "speculative_decoding, spec_verify_ct, num_drafts); pass --format")
    raise PolyspecInputError(
        "format", "not a recognised engine output (no vLLM, SGLang, llama.cpp or TensorRT-LLM "
        f"speculative-decoding statistics found); pass --format, one of: {', '.join(names())}")


def _read(fmt: Format, src: Source, options: dict) -> Evidence:
    given = {k: v for k, v in options.items() if v is not None}
    params = inspect.signature(fmt.read).parameters
    for k in given:
        if k not in params:
            raise PolyspecInputError(f"--{k.replace('_', '-')}", f"does not apply to a "
                                     f"{fmt.description} file")
    return fmt.read(src, **given)


def open(path, format: str | None = None, **options) -> Evidence:  # noqa: A001
    """Read the file at ``path`` into its :class:`Evidence` (``format`` overrides
    detection; ``options`` go to the format's reader, e.g. ``gamma`` for an engine log
    that does not state its draft length)."""
    src = Source(path)
    fmt = detect(src) if format is None else _format(format)
    return _read(fmt, src, options)


def parse(text: str, format: str | None = None, **options) -> Evidence:
    """:func:`open` for a text in memory (a pasted log)."""
    if not isinstance(text, str) or not text.strip():
        raise PolyspecInputError("file", "is empty")
    src = Source(text=text)
    fmt = detect(src) if format is None else _format(format)
    return _read(fmt, src, options)


def detect_dir(directory) -> Format | None:
    """The format of a folder that is one data set (every file of it of one format that
    reads folders: PipeSpec runs, Spec-Bench answers); ``None`` otherwise (our own trace
    folders are read by :func:`validation.traces.records.read_traces`)."""
    if not os.path.isdir(directory):
        return None
    kinds = set()
    for n in sorted(os.listdir(directory)):
        src = Source(os.path.join(directory, n))
        if not src.is_file():
            continue
        for f in registry().values():
            if f.read_dir is not None and f.detect(src):
                kinds.add(f.name)
                break
    return registry()[kinds.pop()] if len(kinds) == 1 else None


def json_head(src: Source) -> dict | None:
    """The first line of a file parsed as a JSON object (``None`` if it is not one): what a
    JSON-lines format detects on."""
    if src.head is None:
        return None
    first = src.head.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _split(fn, fmt: Format, options: dict) -> dict:
    """The options ``fn`` takes (those given); one that no step of ``fmt`` takes is refused."""
    return {k: v for k, v in options.items()
            if v is not None and k in inspect.signature(fn).parameters}


def fit_report(path, format: str | None = None, **options) -> dict:  # noqa: A002
    """The ``polyspec fit`` report of the file at ``path``: its format's ``report`` on its
    :class:`Evidence`. ``options`` go to the reader (``gamma``) and the report (``eta``,
    ``snapshot``); one that neither takes is refused, naming it; a format with nothing to fit
    is refused before it is read."""
    src = Source(path)
    fmt = detect(src) if format is None else _format(format)
    if fmt.report is None:
        raise PolyspecInputError(*(fmt.no_report or ("file", f"a {fmt.description}: nothing "
                                                     "to fit")))
    read_opts, rep_opts = _split(fmt.read, fmt, options), _split(fmt.report, fmt, options)
    for k, v in options.items():
        if v is not None and k not in read_opts and k not in rep_opts:
            raise PolyspecInputError(f"--{k.replace('_', '-')}", f"does not apply to a "
                                     f"{fmt.description} file")
    return fmt.report(fmt.read(src, **read_opts), **rep_opts)
