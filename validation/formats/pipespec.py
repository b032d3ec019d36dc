"""Reader for PipeSpec benchmark files (``benchmark_results/<dataset>/*.json`` of the PipeSpec
multi-model decoder, ``decoding.py``: ``GreedyDecoder``, ``ChainSpeculativeDecoder``,
``AsyncChainSpeculativeDecoder``).

File layout: ``{"metadata": {strategy, model_configs: [{path, devices, dtype, quantize}],
lookahead, dataset, num_samples}, "results": [{sample_index, strategy, metrics, ...}]}``.
Everything is read from ``metadata`` and ``results``, never from the file name.

What the fields mean (read from the decoder, not guessed):

* ``PipeSpecRun.models`` -- one :class:`ModelSpec` per model, SMALLEST FIRST as the decoder
  orders its chain (``models[-1]`` is the target); ``name`` is the last part of the model path,
  ``dtype`` the torch dtype name (``float16``/``float32``/...), ``quantize`` ``None`` or e.g.
  ``"4bit"`` (bitsandbytes; compute dtype = ``dtype``), ``devices`` the device list.
* ``PipeSpecRun.strategy`` -- ``"greedy"`` (autoregressive baseline, one model), ``"chain"``
  (synchronous cascade) or ``"async-chain"`` (every model in its own process, pipelined).
* ``PipeSpecRun.lookahead`` -- the decoder's ``draft_lookahead`` K. Synchronous chain: before
  each verify call of model i+1, model i drafts until it is K-1 tokens ahead of model i+1's
  output, so a verify call feeds K tokens (the last verified token + K-1 drafts) and accepts 1..K
  tokens (bonus/correction included); after a fully accepted round the drafter is one token
  behind and drafts K steps (the first re-predicts the bonus position). Async chain: model i+1
  verifies whenever model i is at least K-1 tokens ahead (K = 0 or 1: as soon as it has any).
* ``PipeSample.model_times[j]`` -- host wall-clock seconds, one entry per logged call of model j
  (smallest first). Synchronous chain: j = 0 (smallest): one entry per single-token draft step;
  a middle model: one entry per round spanning its verify call AND the draft steps that follow
  it; the target: one entry per verify call including the rollback of every drafter's cache.
  Prefill (the first step of every model) and the per-round EOS check are in no entry: they are
  ``total_time - sum(all entries)``. Async chain: per-process times of parallel processes
  (their sum exceeds ``total_time``).
* ``PipeSample.accepted[j]`` -- verifier level j (model j+1 verifying model j's draft): one
  integer per verify call, the tokens it appended (accepted drafts + the bonus/correction token,
  so >= 1).
* ``PipeSample.token_times`` -- greedy baseline only: wall time of each decode step (the
  prefill step excluded), seconds.
* ``PipeSample.total_time`` (s, prefill included), ``PipeSample.tokens_generated`` (output
  tokens, the first token from prefill included; trailing tokens after EOS dropped).

Bad input raises :class:`polyspec_theory.errors.PolyspecInputError` naming file, record and
field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from polyspec_theory import MAX_VERIFY_TOKENS  # decoding.build_verify_inputs (AS0)
from polyspec_theory.core.counts import AcceptanceCounts
from polyspec_theory.core.runs import RunLaw, fit_run_law, pipespec_exposures, run_law_report
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import verifies_what_is_ready
from validation.formats import Evidence, Format, PairEvidence, Source

STRATEGIES = ("greedy", "chain", "async-chain")
# plausible times, as for the CPU traces (validation.traces.schema.MAX_TIME_S): a timed call or a
# prompt takes more than a microsecond and less than a day
MIN_TIME_S = 1e-6
MAX_TIME_S = 86400.0
MAX_FILE_BYTES = 2**30  # a benchmark file (the shared ones are a few MB); bounds the read
MIN_AT_RISK = 10  # ages with fewer rounds at risk use the tail hazard (R2)


@dataclass(frozen=True)
class ModelSpec:
    """One model of a run: ``name`` = last part of ``path``."""

    name: str
    path: str
    dtype: str
    quantize: str | None
    devices: tuple[str, ...]

    @property
    def precision(self) -> str:
        """``dtype``, or ``"4bit"``-style quantisation when the weights are quantised."""
        return self.quantize if self.quantize else self.dtype


@dataclass(frozen=True)
class PipeSample:
    """One prompt of a run (field meanings in the module docstring)."""

    index: int
    total_time: float
    tokens_generated: int
    model_times: tuple[np.ndarray, ...] = ()
    accepted: tuple[np.ndarray, ...] = ()
    token_times: np.ndarray | None = None


@dataclass(frozen=True)
class PipeSpecRun:
    """One PipeSpec benchmark file."""

    path: str
    strategy: str
    models: tuple[ModelSpec, ...]
    lookahead: int
    dataset: str
    samples: tuple[PipeSample, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """Model names, smallest first."""
        return tuple(m.name for m in self.models)

    @property
    def target(self) -> ModelSpec:
        return self.models[-1]

    @property
    def is_baseline(self) -> bool:
        return self.strategy == "greedy"

    @property
    def scheme(self) -> str | None:
        """The theory's scheme of the run's decoder (``None``: the greedy baseline)."""
        return SCHEMES[self.strategy]

    @property
    def label(self) -> str:
        """``strategy:small->...->target@K`` with precisions, e.g. for reports."""
        chain = "->".join(f"{m.name}[{m.precision}]" for m in self.models)
        return f"{self.strategy}:{chain}@{self.lookahead}"

    def by_index(self) -> dict[int, PipeSample]:
        return {s.index: s for s in self.samples}


def _err(path, where: str, msg: str) -> PolyspecInputError:
    return PolyspecInputError(f"{path}: {where}" if where else str(path), msg)


def looks_like_pipespec(obj) -> bool:
    """True for a parsed JSON object with PipeSpec's ``metadata.model_configs`` + ``results``."""
    return (isinstance(obj, dict) and isinstance(obj.get("metadata"), dict)
            and "model_configs" in obj["metadata"] and "results" in obj)


def load_json_file(path):
    """Parse a JSON file; a truncated/malformed file names its line and column."""
    from validation.files import read_regular_bytes

    raw = read_regular_bytes(path, MAX_FILE_BYTES, str(path), "PipeSpec benchmark file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _err(path, "", "not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _err(path, f"line {e.lineno}", f"malformed JSON (truncated?): {e.msg} at column "
                   f"{e.colno}") from None
    except (RecursionError, ValueError) as e:  # nested too deeply; a > 4300-digit integer
        raise _err(path, "", f"not readable JSON ({type(e).__name__})") from None


def _num(x, path, where, *, low=None, integer=False):
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 2**53:
        raise _err(path, where, f"{x:.3g} is not a plausible value")
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x):
        raise _err(path, where, f"must be a finite number, got {x!r}"[:120])
    if integer and x != int(x):
        raise _err(path, where, f"must be an integer, got {x!r}")
    if low is not None and x < low:
        raise _err(path, where, f"must be >= {low}, got {x!r}")
    return int(x) if integer else float(x)


def _time(x, path, where) -> float:
    """A plausible measured time in seconds (:data:`MIN_TIME_S` .. :data:`MAX_TIME_S`)."""
    v = _num(x, path, where)
    if not MIN_TIME_S <= v <= MAX_TIME_S:
        raise _err(path, where, f"{v!r} s is not a plausible measured time (a timed call "
                   f"takes {MIN_TIME_S:g} s to {MAX_TIME_S:g} s)")
    return v


def _array(x, path, where, *, low, integer=False, high=None, min_len=0, time=False):
    if not isinstance(x, list):
        raise _err(path, where, f"must be a list, got {type(x).__name__}")
    if len(x) < min_len:
        raise _err(path, where, f"must hold at least {min_len} entries, got {len(x)}")
    for i, v in enumerate(x):
        if time:
            _time(v, path, f"{where}[{i}]")
            continue
        _num(v, path, f"{where}[{i}]", low=low, integer=integer)
        if high is not None and v > high:
            raise _err(path, f"{where}[{i}]", f"must be <= {high}, got {v!r}")
    return np.asarray(x, dtype=np.int64 if integer else np.float64)


def _model(cfg, path, where) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise _err(path, where, "must be an object")
    p = cfg.get("path")
    if not isinstance(p, str) or not p.strip("/"):
        raise _err(path, f"{where}.path", f"must be a model path, got {p!r}")
    dtype = cfg.get("dtype")
    if not isinstance(dtype, str) or not dtype:
        raise _err(path, f"{where}.dtype", f"must be a dtype name, got {dtype!r}")
    q = cfg.get("quantize")
    if q is not None and not isinstance(q, str):
        raise _err(path, f"{where}.quantize", f"must be null or a string, got {q!r}")
    dev = cfg.get("devices", [])
    if dev is not None and not isinstance(dev, (str, list)):
        raise _err(path, f"{where}.devices", f"must be a device or a list of devices, got "
                   f"{dev!r}"[:120])
    devices = (dev,) if isinstance(dev, str) else tuple(str(d) for d in dev or [])
    return ModelSpec(name=p.rstrip("/").split("/")[-1], path=p, dtype=dtype.replace("torch.", ""),
                     quantize=q or None, devices=devices)


def _sample(rec, i, path, strategy, n_models, lookahead) -> PipeSample:
    where = f"results[{i}]"
    if not isinstance(rec, dict):
        raise _err(path, where, "must be an object")
    idx = _num(rec.get("sample_index"), path, f"{where}.sample_index", low=0, integer=True)
    if rec.get("strategy", strategy) != strategy:
        raise _err(path, f"{where}.strategy",
                   f"{rec.get('strategy')!r} differs from metadata.strategy {strategy!r}")
    m = rec.get("metrics")
    if not isinstance(m, dict):
        raise _err(path, f"{where}.metrics", "missing or not an object")
    w = f"{where}.metrics"
    for k in ("total_time", "tokens_generated"):
        if k not in m:
            raise _err(path, f"{w}.{k}", "missing required field")
    total = _time(m["total_time"], path, f"{w}.total_time")
    tokens = _num(m["tokens_generated"], path, f"{w}.tokens_generated", low=1, integer=True)
    if strategy == "greedy":
        if "token_times" not in m:
            raise _err(path, f"{w}.token_times", "missing required field")
        tt = _array(m["token_times"], path, f"{w}.token_times", low=0, time=True)
        if len(tt) + 1 != tokens:
            raise _err(path, f"{w}.token_times", f"{len(tt)} decode steps do not fit "
                       f"tokens_generated = {tokens} (expected {tokens - 1}: prefill gives one)")
        if tt.sum() > total * (1 + 1e-6):
            raise _err(path, f"{w}.token_times", f"sum {tt.sum():.6g} s exceeds total_time "
                       f"{total:.6g} s")
        return PipeSample(idx, total, tokens, token_times=tt)
    for k in ("model_times", "accepted_tokens"):
        if not isinstance(m.get(k), list):
            raise _err(path, f"{w}.{k}", "missing or not a list")
    if len(m["model_times"]) != n_models:
        raise _err(path, f"{w}.model_times", f"{len(m['model_times'])} lists for {n_models} "
                   "models in metadata.model_configs")
    if len(m["accepted_tokens"]) != n_models - 1:
        raise _err(path, f"{w}.accepted_tokens", f"{len(m['accepted_tokens'])} lists for "
                   f"{n_models - 1} verifier levels")
    times = tuple(_array(t, path, f"{w}.model_times[{j}]", low=0, time=True)
                  for j, t in enumerate(m["model_times"]))
    acc = tuple(_array(a, path, f"{w}.accepted_tokens[{j}]", low=1, integer=True,
                       high=MAX_VERIFY_TOKENS, min_len=1)
                for j, a in enumerate(m["accepted_tokens"]))
    if len(times[0]) < len(acc[0]):  # every verify call checks at least one draft step
        raise _err(path, f"{w}.model_times[0]", f"{len(times[0])} draft steps logged for "
                   f"{len(acc[0])} verify calls (the drafter's steps are missing)")
    if strategy == "async-chain":
        _check_async(path, w, acc, tokens, lookahead)
    if strategy == "chain":
        k = max(lookahead, 1)
        if n_models == 2 and acc[0].max() > k:
            j = int(np.argmax(acc[0]))
            raise _err(path, f"{w}.accepted_tokens[0][{j}]", f"{acc[0][j]} tokens from one "
                       f"verify call exceed lookahead {k}")
        # the target's verify calls append sum(acc) tokens after the prefill token; EOS
        # truncation then drops fewer than one call's worth
        excess = 1 + int(acc[-1].sum()) - tokens
        if excess < 0 or excess >= max(int(acc[-1].max()), 1):
            raise _err(path, f"{w}.accepted_tokens[{n_models - 2}]", f"1 + sum = "
                       f"{1 + int(acc[-1].sum())} does not add up to tokens_generated = "
                       f"{tokens} (EOS may drop fewer than the last call's tokens)")
        for j in range(1, n_models):
            if len(times[j]) != len(acc[j - 1]):
                raise _err(path, f"{w}.model_times[{j}]", f"{len(times[j])} entries for "
                           f"{len(acc[j - 1])} verify calls of accepted_tokens[{j - 1}]")
        if sum(float(t.sum()) for t in times) > total * (1 + 1e-6):
            raise _err(path, f"{w}.model_times", "sum of the timed calls exceeds total_time "
                       "(a synchronous chain runs one call at a time)")
    return PipeSample(idx, total, tokens, model_times=times, accepted=acc)


def _check_async(path, w, acc, tokens, lookahead) -> None:
    """An async chain's verify calls: at lookahead K >= 1 one call appends at most K tokens
    (it verifies the K-1 drafts the drafter is ahead by, plus the bonus); the target's calls
    append 1 + sum(acc) tokens up to EOS truncation (fewer than one call's worth) and at most
    one lookahead short of ``tokens_generated`` (the pipeline's last tokens)."""
    for j, a in enumerate(acc):
        if lookahead >= 1 and a.max() > lookahead:
            i = int(np.argmax(a))
            raise _err(path, f"{w}.accepted_tokens[{j}][{i}]", f"{a[i]} tokens from one "
                       f"verify call exceed lookahead {lookahead}")
    last = acc[-1]
    room = max(lookahead, int(last.max()), 1)
    d = tokens - (1 + int(last.sum()))
    if not -room < d <= room:
        raise _err(path, f"{w}.accepted_tokens[{len(acc) - 1}]", f"1 + sum = "
                   f"{1 + int(last.sum())} does not fit tokens_generated = {tokens} (an "
                   f"async chain's may differ by at most {room}, one verify call)")


def parse_pipespec(obj, path="<pipespec>") -> PipeSpecRun:
    """A parsed PipeSpec JSON object -> :class:`PipeSpecRun` (checks every field)."""
    if not looks_like_pipespec(obj):
        raise _err(path, "", "not a PipeSpec benchmark file (needs metadata.model_configs and "
                   "results)")
    meta = obj["metadata"]
    strategy = meta.get("strategy")
    if strategy not in STRATEGIES:
        raise _err(path, "metadata.strategy", f"{strategy!r} is not one of "
                   f"{', '.join(STRATEGIES)}")
    cfgs = meta["model_configs"]
    if not isinstance(cfgs, list) or not cfgs:
        raise _err(path, "metadata.model_configs", "must be a non-empty list")
    models = tuple(_model(c, path, f"metadata.model_configs[{i}]") for i, c in enumerate(cfgs))
    if strategy == "greedy" and len(models) != 1:
        raise _err(path, "metadata.model_configs", f"greedy runs one model, got {len(models)}")
    if strategy != "greedy" and len(models) < 2:
        raise _err(path, "metadata.model_configs", f"a {strategy} needs >= 2 models")
    lookahead = _num(meta.get("lookahead", 0), path, "metadata.lookahead", low=0, integer=True)
    if lookahead > MAX_VERIFY_TOKENS:
        raise _err(path, "metadata.lookahead", f"{lookahead} is more than a verify call can "
                   f"take ({MAX_VERIFY_TOKENS} tokens)")
    res = obj["results"]
    if not isinstance(res, list) or not res:
        raise _err(path, "results", "must be a non-empty list")
    samples = tuple(_sample(r, i, path, strategy, len(models), lookahead)
                    for i, r in enumerate(res))
    seen: set[int] = set()
    for i, s in enumerate(samples):
        if s.index in seen:
            raise _err(path, f"results[{i}].sample_index", f"duplicate sample_index {s.index}")
        seen.add(s.index)
    return PipeSpecRun(path=str(path), strategy=strategy, models=models, lookahead=lookahead,
                       dataset=str(meta.get("dataset", "")), samples=samples)


def read_pipespec(path) -> PipeSpecRun:
    """Read and check one PipeSpec benchmark JSON file."""
    return parse_pipespec(load_json_file(path), path)


def read_pipespec_dir(directory) -> list[PipeSpecRun]:
    """Every PipeSpec file in ``directory``, sorted by name. A folder of runs holds runs only:
    any other ``.json`` file (a run wrapped in a list, a note, an output written there) is
    refused, naming it -- never dropped while the rest is used."""
    if not os.path.isdir(directory):
        raise PolyspecInputError(str(directory), "not a directory")
    runs = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        p = os.path.join(directory, name)
        obj = load_json_file(p)
        if looks_like_pipespec(obj):
            runs.append(parse_pipespec(obj, p))
        elif isinstance(obj, list) and any(looks_like_pipespec(x) for x in obj):
            raise PolyspecInputError(p, "a list holding PipeSpec run(s): a run file is one "
                                     "object {metadata, results} (unwrap it)")
        else:
            raise PolyspecInputError(p, "not a PipeSpec run (needs metadata.model_configs and "
                                     "results): a folder of runs holds run files only; move "
                                     "it out")
    if not runs:
        raise PolyspecInputError(str(directory), "no PipeSpec benchmark JSON file in it")
    check_folder(runs, directory)
    return runs


def check_folder(runs, directory) -> None:
    """One folder is one benchmark: a single dataset, no run twice (a duplicate would turn
    leave-one-out into in-sample) and one greedy baseline per model (the forecasts pick the
    baseline by model)."""
    datasets = sorted({r.dataset for r in runs})
    if len(datasets) > 1:
        raise PolyspecInputError(f"{directory}: metadata.dataset", f"the runs come from "
                                 f"{len(datasets)} datasets ({', '.join(map(repr, datasets))}); "
                                 "keep one benchmark per folder")
    seen: dict = {}
    for r in runs:
        key = (r.strategy, tuple((m.name, m.precision) for m in r.models), r.lookahead)
        if r.is_baseline:
            key = ("greedy", r.target.name)
        if key in seen:
            what = (f"two greedy baselines of {r.target.name}" if r.is_baseline
                    else f"the same run {r.label}")
            raise PolyspecInputError(f"{r.path}", f"{what} as {seen[key]}: keep one (a "
                                     "duplicate is counted twice or conflicts)")
        seen[key] = r.path


def matched(baseline: PipeSpecRun, run: PipeSpecRun) -> list[tuple[PipeSample, PipeSample]]:
    """(baseline, run) sample pairs on the prompts both hold (``sample_index``)."""
    b = baseline.by_index()
    return [(b[s.index], s) for s in run.samples if s.index in b]


def measured_speedup(baseline: PipeSpecRun, run: PipeSpecRun) -> float:
    """(Σ baseline time / Σ baseline tokens) / (Σ run time / Σ run tokens) over common prompts."""
    pairs = matched(baseline, run)
    if not pairs:
        raise PolyspecInputError(run.path, f"no sample_index in common with baseline "
                                 f"{baseline.path}")
    bt = sum(b.total_time for b, _ in pairs) / sum(b.tokens_generated for b, _ in pairs)
    rt = sum(r.total_time for _, r in pairs) / sum(r.tokens_generated for _, r in pairs)
    return bt / rt


# ------------------------------------------------------------------------------------------
# what a run reveals of its pairs' agreement (docs/theory.md R1-R2)
# ------------------------------------------------------------------------------------------
def round_exposures(run: PipeSpecRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entry age, agreements, censored) of every verify call of a two-model synchronous run
    (R2's input; PipeSpec's round, :func:`polyspec_theory.core.runs.pipespec_exposures`).

    A round after a rejection (or the first) checks K-1 drafts from age 0. After a fully
    accepted round the drafter first re-predicts the bonus position, so the next round's
    checks continue the same run of agreements: entry age = previous entry + previous checks
    (K-1 after a fresh round, K after a continuing one) and ``accepted`` counts the bonus
    position as one more agreement; a continuing round that accepts 1 token is counted as a
    disagreement at its entry age (the decoder does not say whether the bonus or the first
    draft failed). Censored when the round accepted all it could (K tokens)."""
    if run.strategy != "chain" or len(run.models) != 2:
        raise PolyspecInputError(run.path, "acceptance laws are fitted on two-model "
                                 "synchronous chain runs")
    if run.lookahead < 2:
        raise PolyspecInputError(run.path, f"lookahead {run.lookahead} drafts nothing")
    return pipespec_exposures([s.accepted[0] for s in run.samples], run.lookahead)


def fit_age_hazard(observations) -> RunLaw:
    """The run law (Kaplan-Meier hazard by age) of ``[(entry, agreements, censored), ...]``
    (left-truncated at the entry age, right-censored after the last agreement when
    ``censored``): R2, :func:`polyspec_theory.core.runs.fit_run_law`."""
    entry = np.concatenate([np.asarray(o[0], dtype=np.int64) for o in observations])
    agree = np.concatenate([np.asarray(o[1], dtype=np.int64) for o in observations])
    cens = np.concatenate([np.asarray(o[2], dtype=bool) for o in observations])
    if entry.size == 0:
        raise PolyspecInputError("acceptance", "no rounds to fit the acceptance law on")
    return fit_run_law(entry, agree, cens, min_at_risk=MIN_AT_RISK)


def revealed_positions(run: PipeSpecRun) -> dict[int, dict[int, bool]]:
    """Per prompt (``sample_index``): the output positions whose drafter/verifier agreement a
    two-model synchronous run reveals (R1: agreement is a function of the position). Output
    position p's agreement: the drafter's argmax after the verifier's first p tokens equals the
    verifier's token p. A round from verifier length L (fresh: the drafter was reset) checks
    positions L..L+K-2: accepting a < K tokens reveals agreement at L..L+a-2 and a disagreement
    at L+a-1; a = K reveals agreement at L..L+K-2 and the next round (continuing) first
    re-checks the bonus position L+K-1. A continuing round that accepts a >= 2 reveals
    agreement at its bonus position, then as a fresh round; one that accepts 1 is ambiguous
    (the bonus disagreed and the verify fed 1 token, or the bonus agreed and the first draft
    did not): its timed call says which -- a 1-token verify is in the fast cluster, below the
    midpoint of the run's fastest such call and its mean rejecting K-token call (no timing
    to tell by: nothing revealed)."""
    if run.strategy != "chain" or len(run.models) != 2:
        raise PolyspecInputError(run.path, "positions are read from two-model synchronous "
                                 "chain runs")
    k = max(run.lookahead, 1)
    thr = None
    amb, rej = [], []
    for s in run.samples:
        a, t = s.accepted[0], s.model_times[1] if len(s.model_times) > 1 else None
        if t is None or len(t) != len(a):
            continue
        after = np.zeros(len(a), dtype=bool)
        after[1:] = a[:-1] >= k
        amb.append(t[after & (a == 1)])
        rej.append(t[~(after & (a == 1)) & (a < k)])
    if amb and rej:
        amb_all, rej_all = np.concatenate(amb), np.concatenate(rej)
        if amb_all.size and rej_all.size:
            thr = (amb_all.min() + rej_all.mean()) / 2
    out = {}
    for s in run.samples:
        d: dict[int, bool] = {}
        ln, cont = 1, False
        times = s.model_times[1] if len(s.model_times) > 1 else None
        for j, a in enumerate(s.accepted[0]):
            a = int(a)
            if k == 1:  # no drafts: nothing is checked
                ln += a
                continue
            if cont:
                if a == 1:
                    if thr is not None and times is not None and j < len(times):
                        if times[j] < thr:
                            d[ln - 1] = False  # 1-token verify: the bonus disagreed
                        else:
                            d[ln - 1], d[ln] = True, False
                    ln, cont = ln + 1, False
                    continue
                d[ln - 1] = True
            for p in range(ln, ln + min(a, k - 1) - (0 if a >= k else 1)):
                d[p] = True
            if a < k:
                d[ln + a - 1] = False
            cont = a >= k
            ln += a
        out[s.index] = d
    return out


def merge_positions(maps) -> dict[int, bool]:
    """Union of revealed positions of several runs of one prompt; a position they disagree on
    (the texts differ there) is left out."""
    seen: dict[int, bool] = {}
    bad: set[int] = set()
    for m in maps:
        for p, v in m.items():
            if p in seen and seen[p] != v:
                bad.add(p)
            seen.setdefault(p, v)
    return {p: v for p, v in seen.items() if p not in bad}


# ------------------------------------------------------------------------------------------
# the format: detection, Evidence, fit report
# ------------------------------------------------------------------------------------------
def _pair_report(run, j) -> dict:
    acc = np.concatenate([s.accepted[j] for s in run.samples])
    k = run.lookahead
    drafted = None
    if run.strategy == "chain" and j == 0:  # the smallest model logs one entry per draft step
        drafted = sum(len(s.model_times[0]) for s in run.samples) / acc.size
    rep = {"verifier": run.models[j + 1].name, "drafter": run.models[j].name,
           "rounds": int(acc.size), "accepted": int((acc - 1).sum()),
           "mean_accepted": float((acc - 1).mean()), "drafted_per_round": drafted,
           "mean_acceptance_length": float(acc.mean()), "cap": k - 1 if k >= 2 else None,
           "histogram": np.bincount(acc - 1, minlength=max(k, 1)).tolist()}
    if run.strategy == "chain" and len(run.models) == 2 and k >= 2:
        rep.update(run_law_report(*round_exposures(run), "pipespec"))
    return rep


def fit_report(ev: Evidence) -> dict:
    """Per pair: rounds, accepted drafts, the histogram and (two-model synchronous runs) the
    run law by age fitted on the rounds' exposures (R2): what ``polyspec fit`` prints."""
    run = ev.data
    if run.is_baseline:
        raise PolyspecInputError(run.path, "a greedy (autoregressive) baseline: nothing to "
                                 "fit; pass a chain or async-chain file")
    pairs = [_pair_report(run, j) for j in range(len(run.models) - 1)]
    warnings = []
    if run.strategy == "async-chain":
        warnings.append("asynchronous pipeline: a verify call takes whatever the drafter has "
                        "produced, so the draft length varies by call")
    top = {k: v for k, v in pairs[-1].items() if k not in ("verifier", "drafter")}
    return {"format": f"pipespec-{run.strategy}", "format_description":
            "PipeSpec benchmark JSON (model_times, accepted_tokens per verify call)",
            "source": run.label, "models": list(run.names),
            "precisions": [m.precision for m in run.models], "lookahead": run.lookahead,
            **top, "pairs": pairs, "warnings": warnings}


def is_pipespec_file(src: Source) -> bool:
    """A ``.json`` file with PipeSpec's ``metadata.model_configs`` and ``results`` (never
    raises: anything unreadable is not one)."""
    if src.path is None or src.suffix != ".json" or src.head is None:
        return False
    if '"metadata"' in src.head and '"model_configs"' in src.head:
        return True
    try:
        return looks_like_pipespec(load_json_file(src.path))
    except PolyspecInputError:
        return False


def lookahead_of(theta: int, scheme: str) -> int:
    """PipeSpec's lookahead ``K`` of a draft length ``θ`` (``--thresholds``): ``θ + 1`` (a
    verify call feeds the K - 1 drafts and the bonus position); ``θ = 0`` where it means
    "verify what is ready" (:func:`polyspec_theory.schemes.verifies_what_is_ready`: the
    asynchronous pipeline) is lookahead 0 (AS0:
    :func:`polyspec_theory.pipelines.asynchronous.lookahead_threshold` is the inverse)."""
    if isinstance(theta, bool) or not isinstance(theta, int) or not (
            0 <= theta < MAX_VERIFY_TOKENS):
        raise PolyspecInputError("--thresholds", f"must be an integer in 0..{MAX_VERIFY_TOKENS - 1}"
                                 f", got {theta!r}")
    return 0 if verifies_what_is_ready(scheme, theta) else theta + 1


# a PipeSpec strategy -> the theory registry's scheme (docs/theory.md AS0 for the pipeline)
SCHEMES = {"chain": "chain", "async-chain": "async", "greedy": None}


def evidence(run: PipeSpecRun) -> Evidence:
    """A run as :class:`Evidence`: per pair (top first) the tokens each verify call appended
    per prompt, their counts (drafts accepted, capped at K - 1 where the lookahead caps a
    round), and the exposures of a two-model synchronous run (:func:`round_exposures`)."""
    pairs = []
    k = run.lookahead
    for j in reversed(range(len(run.models) - 1)):
        rounds = tuple(s.accepted[j] for s in run.samples)
        acc = np.concatenate(rounds) - 1
        cap = k - 1 if run.strategy == "chain" and k >= 2 and len(run.models) == 2 else None
        counts = (AcceptanceCounts.from_samples(acc, cap, source=run.path)
                  if cap is not None else None)
        exp = (round_exposures(run) if cap is not None else None)
        pairs.append(PairEvidence(verifier=run.models[j + 1].name, drafter=run.models[j].name,
                                  counts=counts, cap=cap, rounds=rounds, exposures=exp))
    timing = {"total_time_s": float(sum(s.total_time for s in run.samples)),
              "tokens": int(sum(s.tokens_generated for s in run.samples))}
    return Evidence(path=run.path, format="pipespec", description=DESCRIPTION, data=run,
                    pairs=tuple(pairs), models=tuple(reversed(run.names)),
                    scheme=SCHEMES[run.strategy], timing=timing)


def _read(src: Source) -> Evidence:
    return evidence(read_pipespec(src.path))


def _read_dir(directory) -> list[Evidence]:
    return [evidence(r) for r in read_pipespec_dir(directory)]


DESCRIPTION = "PipeSpec benchmark JSON (model_times, accepted_tokens per verify call)"
FORMATS = (Format("pipespec", DESCRIPTION, is_pipespec_file, _read, order=10,
                  report=fit_report, read_dir=_read_dir),)
