"""``polyspec validate`` on a folder of our own traces: every capture predicted and compared
by the analysis of its scheme (``VALIDATE`` of the scheme's module in
:mod:`validation.schemes`; schemes naming the same analysis are validated together), the
parts put together in one report.

A scheme's analysis is a function ``(captures, ctx) -> Part | None``: ``captures`` are the
folder's captures of the schemes that name it (possibly none: it returns ``None``, after
refusing an option that only applies to them), ``ctx`` the :class:`Context` (the folder, the
:class:`ValidateOptions`, every capture by scheme, the notes so far).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from polyspec_theory.errors import PolyspecInputError
from validation import schemes

__all__ = ["ValidateOptions", "Context", "Part", "validate_traces", "combined_json",
           "combined_text"]


class ValidateOptions(NamedTuple):
    """What ``polyspec validate`` asks of the analyses (its options)."""

    families: tuple
    out: Path
    laws: str = "config"  # "config": each capture's own rounds; "pooled": per pair
    insertions: bool = True
    confidence: str = "delta"
    n_boot: int = 200
    profiles: str | None = None  # composition profiles (default FOLDER/profiles)
    batch_profile: str | None = None  # batched cost tables (default FOLDER/profile.json)
    laws_from: str | None = None  # single-stream traces as extra acceptance data
    allow_truncated: bool = False
    plots: bool = True
    aa: str | None = None  # A/A captures (default FOLDER/aa)
    include_loaded: bool = False  # keep captures made under load in the headline
    progress: object = None  # progress(total) -> callback(done, total), or None


class Part(NamedTuple):
    """One analysis' share of the report: ``key`` (where its JSON sits in the combined
    object; ``None``: it is the object), ``json``, ``alone`` (the JSON when it is the only
    part), ``text``, ``notes`` (on stderr when it is alone or the main part), ``order`` (in
    the report), ``joined`` (its text after another part's; default ``text``)."""

    key: str | None
    json: object
    alone: object
    text: str
    notes: tuple = ()
    order: int = 0
    joined: str | None = None


class Context(NamedTuple):
    """What every analysis sees: the folder, the options, its captures by scheme, its
    single-stream captures (``stream``) and the notes so far (an analysis may add some)."""

    folder: Path
    options: ValidateOptions
    by_scheme: dict
    stream: list
    notes: list

    def laws_from(self) -> list:
        """The ``--laws-from`` single-stream captures (none without it)."""
        from validation.traces.records import read_traces

        lf = self.options.laws_from
        return read_traces(Path(lf)) if lf else []

    def noise_floor(self):
        """The A/A noise floor (:func:`validation.analysis.plan_uncertainty.noise_floor`) of
        ``aa`` or FOLDER/aa; ``None`` when there is none."""
        from validation.analysis.plan_uncertainty import noise_floor
        from validation.traces.records import read_traces

        aa = Path(self.options.aa) if self.options.aa else self.folder / "aa"
        if not aa.is_dir() or not any(aa.glob("*.jsonl")):
            if self.options.aa:
                raise PolyspecInputError("--aa", f"not a directory: {aa}")
            return None
        return noise_floor(read_traces(aa))


def _captures(folder: Path, options: ValidateOptions) -> tuple[dict, list]:
    """The folder's captures by scheme (single-stream, batched, and those of schemes that
    read their own traces: ``read_capture`` of the scheme's module) and its single-stream
    ones."""
    from validation.traces.batch import read_batch_traces
    from validation.traces.records import is_batched_file, own_reader, read_traces

    if not folder.is_dir():
        read_traces(folder)  # the one-line error of a folder that is not one
    files = sorted(folder.glob("*.jsonl"))
    own = [(f, own_reader(f)) for f in files if not is_batched_file(f)]
    own = [(f, mod) for f, mod in own if mod is not None]
    single = [f for f in files if not is_batched_file(f) and f not in dict(own)]
    batched = list(read_batch_traces(folder, allow_truncated=options.allow_truncated))
    stream = []
    if single or not (batched or own):  # read_traces says what is wrong with no trace
        stream = read_traces(folder, allow_truncated=options.allow_truncated)
    out: dict = {}
    for f, mod in own:
        c = mod.read_capture(f, allow_truncated=options.allow_truncated)
        out.setdefault(c.scheme, []).append(c)
    for c in batched + stream:
        out.setdefault(c.scheme, []).append(c)
    return out, stream


def _analyses() -> dict:
    """``{"module:function": [scheme names]}`` of the registered schemes' ``VALIDATE``."""
    out: dict = {}
    for name, mod in schemes.registry().items():
        if getattr(mod, "VALIDATE", None):
            out.setdefault(mod.VALIDATE, []).append(name)
    return out


def validate_traces(folder, options: ValidateOptions) -> list[Part]:
    """Every analysis on the folder's captures of its schemes, in ``order``; a scheme no
    analysis predicts is refused."""
    folder = Path(folder)
    by_scheme, stream = _captures(folder, options)
    analyses = _analyses()
    served = {s for names in analyses.values() for s in names}
    for s in by_scheme:
        if s not in served:
            raise PolyspecInputError("traces", f"{folder}: {len(by_scheme[s])} capture(s) of "
                                     f"scheme {s!r}, which polyspec validate does not predict")
    # the notes of the single-stream captures (the batched ones' go in their report)
    ctx = Context(folder, options, by_scheme, stream, [n for c in stream for n in c.notes])
    parts = []
    for ref, names in sorted(analyses.items(), key=lambda kv: _first_order(kv[0])):
        got = schemes.resolve_hook(ref, f"VALIDATE of {', '.join(names)}")(
            [c for s in names for c in by_scheme.get(s, [])], ctx)
        if got is not None:
            parts.append(got)
    if not parts:
        raise PolyspecInputError("traces", f"{folder}: nothing to predict"
                                 + "".join(f"; {n}" for n in ctx.notes))
    return sorted(parts, key=lambda p: p.order)


# the order the analyses run in: batched first (its options are refused before the rest),
# then the asynchronous captures (they add notes), then the single-stream ones
_RUN_ORDER = ("batch_validate", "async_validate", "report")


def _first_order(ref: str) -> int:
    mod = ref.split(":")[0].rsplit(".", 1)[-1]
    return _RUN_ORDER.index(mod) if mod in _RUN_ORDER else len(_RUN_ORDER)


def combined_json(parts: list[Part]):
    """The ``polyspec validate --json`` object: the main part's with the others under their
    keys, or the one part's alone."""
    if len(parts) == 1:
        return parts[0].alone
    main = next((p for p in parts if p.key is None), None)
    obj = dict(main.json) if main is not None else {}
    for p in parts:
        if p.key is not None:
            obj[p.key] = p.json
    return obj


def combined_text(parts: list[Part]) -> tuple[str, list[str]]:
    """(stdout, notes for stderr) of ``polyspec validate``."""
    if not parts:
        return "", []
    text = [parts[0].text] + [p.joined or p.text for p in parts[1:]]
    return "\n".join(text), list(parts[0].notes)
