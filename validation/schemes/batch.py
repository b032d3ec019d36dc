"""The n-level polybasic decoder over a lockstep batch of ``b`` sequences (docs/theory.md,
model B0) and the batched autoregressive baseline, on the levels of
:mod:`validation.capture.batch_models`.

Models are ordered target first (``levels[0] = M_1`` … ``levels[n-1] = M_n``);
``thresholds[i]`` is θ of the pair (``levels[i]`` verifier, ``levels[i+1]`` drafter).

**The lockstep block policy (B0, "accumulate").** Every forward of ``M_i`` is ONE batched
forward over all ``b`` slots, padded to the longest slot. One batched round of ``S_n``: one
forward of ``M_n``, one token drafted for every sequence. One batched round of ``S_i``
(``i < n``):

1. run batched rounds of ``S_{i+1}`` until *every* sequence has accumulated ``>= θ_i`` new
   tokens (its block, ``G_ij`` tokens); a sequence whose block is already full **waits**: it
   runs the lower rounds like every other slot (the same program on fresh randomness, so its
   blocks below still count in the padded widths there), and whatever it produces in them is
   discarded (its text is cut back to its block, the lower caches rolled back — an index
   move);
2. ONE forward of ``M_i`` verifies every block, scoring ``max_j (G_ij + 1)`` positions per
   slot (plus catch-up positions, below);
3. sequence ``j`` accepts ``A_ij`` tokens by speculative sampling against its own drafts
   (ragged acceptance): accept ``x`` with probability ``min(1, p_i(x)/p_{i+1}(x))``, at the
   first rejection draw from ``(p_i − p_{i+1})_+`` normalized, if all are accepted draw a
   bonus token from ``p_i``; greedy (temperature 0): accept iff the token is ``argmax p_i``,
   the correction is ``argmax p_i``. It emits ``L_ij = A_ij + 1`` tokens; its caches at
   levels ``>= i`` are rolled back to its accepted prefix, on its own.

Each sequence keeps its own KV positions (a cache row, position ids and an attention mask per
sequence), so rollback stays an index move per sequence. The per-sequence decisions are those
of :class:`validation.schemes.chain.PolybasicDecoder` (lossless per sequence: in greedy mode every
sequence's tokens are the target's greedy tokens on its prompt). Catch-up positions: a cache
may lack tokens appended by the levels above (a correction or bonus token), which its next
forward feeds too, so a slot scores ``G + 1 .. G + level`` positions (a draft 1 or more); the
recorded ``m0`` is what B0 charges (``max G + 1``, or 1), ``m`` what was run.

**Stopping.** A decode runs top-level batched rounds until the first sequence has
``max_new_tokens`` tokens (``until="first"``, the default and the capture protocol: every
sequence is decoding in every round, the steady state B0 describes, with no tail where some
sequences are done; all sequences run the same number of top-level rounds) or until every
sequence has them (``until="all"``); ``stop = "tokens"`` then, or ``"context"`` if the next
round could run past a context first. These are stopping times of the iid top-level rounds,
so tokens / time over decodes estimates B2's throughput without bias in the Wald sense.

**Timing.** ``clock()`` (default: ``time.perf_counter``, synchronizing CUDA first) around
every forward; prefill is timed separately and excluded from ``wall_s``. Records are returned
with the result (nothing is written inside the timed loop).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from polyspec_theory.errors import PolyspecInputError, as_int
from validation.schemes import torch
from validation.schemes.chain import (
    POLICY,
    Sampler,
    accept_greedy,
    accept_sampled,
    check_decoder_args,
    wall_clock,
)
from validation.traces.schema import BatchRound, RecordError, SeqRound

name = "batch"  # the theory registry's scheme (polyspec_theory.schemes)

__all__ = ["BatchCascadeDecoder", "BatchCascadeResult", "BatchARResult", "ForwardTiming",
           "batch_autoregressive", "round_extent", "BATCH_POLICY", "POLICY", "UNTIL"]

BATCH_POLICY = {"policy": "lockstep", "waiting": "discard", "kv": "per-sequence",
                "stop": "first: the end of the first top-level round after which a sequence "
                        "has max_new_tokens"}
UNTIL = ("first", "all")


class ForwardTiming(NamedTuple):
    """One batched forward: ``model`` (index, target 0), ``m`` padded positions per slot,
    ``m0`` the positions B0 charges, ``ctx`` the longest cached prefix, ``wall_s``."""

    model: int
    m: int
    m0: int
    ctx: int
    wall_s: float


def forwards_record(forwards, decode: int, run: str, batch: int) -> dict:
    """The columnar ``bforwards`` record of a run's forwards."""
    return {"type": "bforwards", "decode": int(decode), "run": run, "batch": int(batch),
            "model": [int(f.model) for f in forwards], "m": [int(f.m) for f in forwards],
            "m0": [int(f.m0) for f in forwards], "ctx": [int(f.ctx) for f in forwards],
            "wall_s": [round(float(f.wall_s), 7) for f in forwards]}


@dataclass
class BatchCascadeResult:
    """One decode of ``b`` prompts by the cascade. Times in seconds, prefill excluded."""

    tokens: list[list[int]]
    n_generated: list[int]
    wall_s: float
    prefill_s: float
    forward_s: list[float]
    forward_count: list[int]
    forwards: list[ForwardTiming] = field(default_factory=list)
    seq_rounds: list[SeqRound] = field(default_factory=list)
    batch_rounds: list[BatchRound] = field(default_factory=list)
    top_rounds: int = 0
    stop: str = "tokens"

    @property
    def batch(self) -> int:
        return len(self.tokens)

    @property
    def overhead_s(self) -> float:
        """Decode wall time outside model forwards."""
        return self.wall_s - sum(self.forward_s)


@dataclass
class BatchARResult:
    """``b`` prompts decoded autoregressively by one model in lockstep (one batched forward
    per step). ``step_s[k]`` = wall time of step ``k`` (forward + sampling)."""

    tokens: list[list[int]]
    wall_s: float
    prefill_s: float
    step_s: list[float]
    forward_s: float
    forwards: list[ForwardTiming] = field(default_factory=list)


def round_extent(thresholds) -> int:
    """Most positions one top-level batched round can add past a sequence's length (its
    waiting slots included): ``e_n = 1``; ``e_i = g_i + e_{i+1}`` with ``g_i = θ_i − 1 +
    l_{i+1}`` the largest block and ``l_i = g_i + 1`` the most tokens emitted."""
    ext, lmax = 1, 1
    for t in reversed(list(thresholds)):
        g = int(t) - 1 + lmax
        ext = g + ext
        lmax = g + 1
    return ext


def _check_prompts(prompts, vocab: int) -> list[list[int]]:
    if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__iter__"):
        raise PolyspecInputError("prompts", "must be a list of prompts (token lists)")
    out = []
    for j, p in enumerate(prompts):
        toks = [int(t) for t in p]
        if not toks:
            raise PolyspecInputError(f"prompts[{j}]", "must hold at least one token")
        if any(not 0 <= t < vocab for t in toks):
            raise PolyspecInputError(f"prompts[{j}]", f"token ids must be in [0, {vocab})")
        out.append(toks)
    if not out:
        raise PolyspecInputError("prompts", "need at least one prompt")
    return out


def _limit(levels, plen_max: int, max_new: int, ext: int) -> int:
    lens = [lv.max_len for lv in levels if lv.max_len is not None]
    return min(lens) if lens else plen_max + 2 * max_new + 2 * ext


def _prefill(levels, seqs, slack: int) -> None:
    ends = np.asarray([len(s) - 1 for s in seqs], dtype=np.int64)
    for lv in levels:
        lv.reset(len(seqs), slack)
        if ends.max() > 0:
            lv.logits(seqs, ends)


class BatchCascadeDecoder:
    """Polybasic cascade over ``levels`` (target first; :class:`BatchLevel` or loaded zoo /
    n-gram levels) with ``thresholds`` (one per pair), decoding a batch in lockstep."""

    def __init__(self, levels, thresholds, *, temperature=0.0, top_k=0, seed=0,
                 clock: Callable[[], float] | None = None):
        from validation.capture.batch_models import batch_level

        self.levels: list = [batch_level(lv) for lv in levels]
        self.thresholds, self.vocab = check_decoder_args(self.levels, thresholds)
        self.n = len(self.levels)
        self.device = self.levels[0].device
        self.sampler = Sampler(temperature, top_k, seed)
        self.greedy = self.sampler.greedy
        self.clock = clock or wall_clock(self.device)
        self.extent = round_extent(self.thresholds)

    # ------------------------------------------------------------------ internals
    def _forward(self, i: int, ends, m0: int):
        lv = self.levels[i]
        ctx = int(lv.pos.max())
        t0 = self.clock()
        lg, mj = lv.logits(self.seqs, ends)
        t1 = self.clock()
        m = int(lg.shape[1])
        self._fwd_s[i] += t1 - t0
        self._fwd_n[i] += 1
        self.forwards.append(ForwardTiming(i, m, int(m0), ctx, t1 - t0))
        self._last = t1 - t0
        return lg, mj

    def _cut(self, j: int, length: int, from_level: int, keep: int | None = None) -> None:
        """Sequence ``j`` back to ``length`` tokens; caches of levels >= from_level keep at
        most ``keep`` (default ``length``) of them."""
        del self.seqs[j][length:]
        keep = length if keep is None else keep
        for k in range(from_level, self.n):
            self.levels[k].rollback(j, keep)

    def _draft(self, i: int, base: np.ndarray) -> np.ndarray:
        lg, mj = self._forward(i, base, 1)
        b = self.b
        if self.greedy:
            am = torch.argmax(lg, dim=-1).cpu().numpy()
            for j in range(b):
                self.seqs[j].append(int(am[j, mj[j] - 1]))
        else:
            probs = self.sampler.probs(lg)
            for j in range(b):
                p = probs[j, mj[j] - 1]
                self._laws[i][j, base[j]] = p
                self.seqs[j].append(self.sampler.draw(p))
        return np.ones(b, dtype=np.int64)

    def _verify(self, i: int, lg, mj, base, g) -> tuple[np.ndarray, list[int]]:
        b = self.b
        a_out = np.zeros(b, dtype=np.int64)
        corr = []
        am = torch.argmax(lg, dim=-1).cpu().numpy() if self.greedy else None
        probs = None if self.greedy else self.sampler.probs(lg)
        for j in range(b):
            gj, r0, bj = int(g[j]), int(mj[j] - g[j] - 1), int(base[j])
            block = self.seqs[j][bj : bj + gj]
            if self.greedy:
                a, c = accept_greedy(block, am[j, r0 : r0 + gj + 1])
            else:
                P = probs[j, r0 : r0 + gj + 1]
                a, c = accept_sampled(self.sampler, block, P, self._laws[i + 1][j, bj : bj + gj])
                self._laws[i][j, bj : bj + a + 1] = P[: a + 1]
            a_out[j] = a
            corr.append(int(c))
        return a_out, corr

    def _round(self, i: int, base: np.ndarray, dead: np.ndarray) -> np.ndarray:
        """One batched round of S_i on top of ``seqs[j][:base[j]]``; returns L per sequence.
        ``dead[j]``: sequence ``j`` is waiting at a level above (this round is padding for
        it; its output will be discarded)."""
        if i == self.n - 1:
            return self._draft(i, base)
        theta = self.thresholds[i]
        b = self.b
        t0 = self.clock()
        acc = np.zeros(b, dtype=np.int64)
        waited = np.zeros(b, dtype=np.int64)
        k = 0
        while (acc < theta).any():
            full = acc >= theta
            emitted = self._round(i + 1, base + acc, dead | full)
            k += 1
            for j in np.flatnonzero(full):
                # discard the waiting slot's round; its lower caches keep all but the last
                # kept token (a verifier needs the law that token's forward gives, so the
                # next round feeds it again, as after any round)
                end = int(base[j] + acc[j])
                self._cut(int(j), end, i + 1, end - 1)
            acc = np.where(full, acc, acc + emitted)
            waited += full
        g = acc
        t1 = self.clock()
        gmax = int(g.max())
        lg, mj = self._forward(i, base + g, gmax + 1)
        verify_s = self._last
        m_pad = int(lg.shape[1])
        a, corr = self._verify(i, lg, mj, base, g)
        for j in range(b):
            self._cut(j, int(base[j] + a[j]), i)
            self.seqs[j].append(corr[j])
        t2 = self.clock()
        r = self._round_no[i]
        self._round_no[i] += 1
        for j in range(b):
            self.seq_rounds.append(SeqRound(
                decode=self.decode, level=i + 1, round=r, seq=j, prompt=self.prompt_ids[j],
                ctx=int(base[j]), G=int(g[j]), A=int(a[j]), L=int(a[j]) + 1, m=int(mj[j]),
                waited=int(waited[j]), discarded=int(dead[j])))
        self.batch_rounds.append(BatchRound(
            decode=self.decode, level=i + 1, round=r, K=k, max_G=gmax, m=m_pad,
            waiting=int(waited.sum()), verify_s=verify_s, draft_s=t1 - t0, round_s=t2 - t0))
        return a + 1

    # ------------------------------------------------------------------ public
    def generate(self, prompts, max_new_tokens: int, *, decode_index: int = 0,
                 prompt_ids=None, until: str = "first") -> BatchCascadeResult:
        """Decode the batch ``prompts`` (one sequence per prompt) until the first sequence
        (``until="first"``) or every sequence (``until="all"``) has ``>= max_new_tokens``
        tokens (module docstring; ``n_generated`` is exact per sequence and ``tokens`` holds
        all of them). Records carry ``decode_index`` and ``prompt_ids`` (default
        ``decode_index * b + j``)."""
        if until not in UNTIL:
            raise PolyspecInputError("until", f"must be 'first' or 'all', got {until!r}")
        seqs = _check_prompts(prompts, self.vocab)
        b = len(seqs)
        max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
        self.decode = as_int(decode_index, "decode_index", low=0)
        if prompt_ids is None:
            prompt_ids = [self.decode * b + j for j in range(b)]
        if len(prompt_ids) != b:
            raise PolyspecInputError("prompt_ids", f"need one id per prompt ({b})")
        self.prompt_ids = [as_int(p, f"prompt_ids[{j}]", low=0) for j, p in
                           enumerate(prompt_ids)]
        plens = np.asarray([len(s) for s in seqs], dtype=np.int64)
        limit = _limit(self.levels, int(plens.max()), max_new, self.extent)
        need = int(plens.max()) + max_new + self.extent
        if need > limit:
            raise PolyspecInputError(
                "max_new_tokens", f"longest prompt ({int(plens.max())}) + tokens ({max_new}) "
                f"+ the most one round can add ({self.extent}) = {need} exceeds the context "
                f"{limit}")
        self.b = b
        self.seqs = seqs
        self.forwards, self.seq_rounds, self.batch_rounds = [], [], []
        self._round_no = [0] * self.n
        if not self.greedy:
            size = limit + self.extent + 1
            self._laws = [np.zeros((b, size, self.vocab)) for _ in range(self.n)]
        slack = self.extent + self.n + 1
        with torch.inference_mode():
            t0 = self.clock()
            _prefill(self.levels, self.seqs, slack)
            t1 = self.clock()
            self._fwd_s = [0.0] * self.n
            self._fwd_n = [0] * self.n
            top, stop = 0, "tokens"
            while True:
                lens = np.asarray([len(s) for s in self.seqs], dtype=np.int64)
                done = lens - plens >= max_new
                if done.all() or (until == "first" and done.any()):
                    break
                if int(lens.max()) + self.extent > limit:
                    stop = "context"
                    break
                self._round(0, lens, np.zeros(b, dtype=bool))
                top += 1
            t2 = self.clock()
        gen = [s[p:] for s, p in zip(self.seqs, plens, strict=True)]
        return BatchCascadeResult(
            tokens=gen, n_generated=[len(x) for x in gen], wall_s=t2 - t1, prefill_s=t1 - t0,
            forward_s=list(self._fwd_s), forward_count=list(self._fwd_n),
            forwards=self.forwards, seq_rounds=self.seq_rounds,
            batch_rounds=self.batch_rounds, top_rounds=top, stop=stop)


def batch_autoregressive(level, prompts, max_new_tokens: int, *, temperature=0.0, top_k=0,
                         seed=0, sampler: Sampler | None = None,
                         clock: Callable[[], float] | None = None) -> BatchARResult:
    """``max_new_tokens`` tokens for each prompt, decoded together by one model: one batched
    forward per step over all slots (the autoregressive baseline at the same batch size)."""
    from validation.capture.batch_models import batch_level

    lv = batch_level(level)
    seqs = _check_prompts(prompts, lv.vocab_size)
    max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
    plens = [len(s) for s in seqs]
    if lv.max_len is not None and max(plens) + max_new > lv.max_len:
        raise PolyspecInputError("max_new_tokens", f"longest prompt + tokens exceeds "
                                 f"{lv.name}'s context {lv.max_len}")
    s = sampler or Sampler(temperature, top_k, seed)
    now = clock or wall_clock(lv.device)
    b = len(seqs)
    steps, forwards = [], []
    fwd = 0.0
    with torch.inference_mode():
        t0 = now()
        _prefill([lv], seqs, 2)
        t1 = now()
        for _ in range(max_new):
            ends = np.asarray([len(x) for x in seqs], dtype=np.int64)
            ctx = int(lv.pos.max())
            a = now()
            lg, mj = lv.logits(seqs, ends)
            c = now()
            if s.greedy:
                am = torch.argmax(lg, dim=-1).cpu().numpy()
                for j in range(b):
                    seqs[j].append(int(am[j, mj[j] - 1]))
            else:
                probs = s.probs(lg)
                for j in range(b):
                    seqs[j].append(s.draw(probs[j, mj[j] - 1]))
            d = now()
            steps.append(d - a)
            fwd += c - a
            forwards.append(ForwardTiming(0, int(lg.shape[1]), 1, ctx, c - a))
        t2 = now()
    return BatchARResult(tokens=[x[p:] for x, p in zip(seqs, plens, strict=True)],
                         wall_s=t2 - t1, prefill_s=t1 - t0, step_s=steps, forward_s=fwd,
                         forwards=forwards)


# ------------------------------------------------------------------------------------------
# its traces (validation.traces.checks; the fields: validation.traces.schema, batched traces)
# ------------------------------------------------------------------------------------------
RECORDS = {
    "bround": SeqRound._fields,
    "bbatch": BatchRound._fields,
    "bforwards": ("decode", "run", "batch", "model", "m", "m0", "ctx", "wall_s"),
    "bsummary": ("decode", "prompts", "batch", "n_generated", "wall_s", "forward_s",
                 "forward_count"),
    "bar": ("decode", "prompts", "model", "batch", "n_steps", "wall_s", "forward_s",
            "step_s"),
    "bcost": ("model", "batch", "ctx", "m", "times_s", "median_s"),
}
RECORD_TYPES = tuple(RECORDS)
TRACE_KIND = "batched"


def check_header(header: dict, checker) -> None:
    """Nothing beyond the common header here: ``batch.size`` is checked with each record."""


def check_record(checker, rec: dict) -> None:
    msg = check_batch_record(rec, checker.header)
    if msg:
        raise RecordError(msg)


def check_trace(checker, kept) -> None:
    """No batched cost cell recorded twice."""
    seen: dict = {}
    for i, r in kept:
        if r["type"] == "bcost":
            key = (r["model"], r["batch"], r.get("phase"), r["ctx"], r["m"])
            if key in seen:
                raise RecordError(f"bcost: cell (model {r['model']!r}, batch {r['batch']}, "
                                  f"phase {r.get('phase')!r}, ctx {r['ctx']}, m {r['m']}) "
                                  f"recorded twice (the first is line {seen[key]})", i)
            seen[key] = i


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_BROUND_INTS = ("level", "seq", "G", "A", "L", "m", "waited", "discarded")


def _ints_in(xs: list, low: int, high: int | None = None) -> bool:
    """Every entry of ``xs`` an integer (not a bool) with ``low <= x`` (``< high``)."""
    if list(map(type, xs)).count(int) == len(xs):  # JSON integers: their extremes decide
        return not xs or (min(xs) >= low and (high is None or max(xs) < high))
    return all(_is_int(x) and low <= x and (high is None or x < high) for x in xs)


def check_batch_record(rec: dict, header: dict) -> str | None:
    """What is wrong with a batched record (``None`` if nothing): value ranges and lengths
    the reader checks before anything is built from it."""
    t = rec["type"]
    n = len(header["cascade"]["models"])
    b = header["batch"].get("size")
    if not _is_int(b) or b < 1:
        return f"header batch.size must be an integer >= 1, got {b!r}"
    if t == "bround":
        if set(map(type, map(rec.__getitem__, _BROUND_INTS))) != {int} and not all(
                _is_int(rec[k]) for k in _BROUND_INTS):  # (JSON integers decided by type)
            return "bround fields level, seq, G, A, L, m, waited, discarded must be integers"
        if rec["level"] not in range(1, n):
            return f"level {rec['level']} out of range 1..{n - 1}"
        if rec["seq"] not in range(b):
            return f"seq {rec['seq']} out of range 0..{b - 1}"
        if not 0 <= rec["A"] <= rec["G"] or rec["L"] != rec["A"] + 1 or rec["G"] < 1:
            return (f"inconsistent round (G={rec['G']}, A={rec['A']}, L={rec['L']}): need "
                    "1 <= G, 0 <= A <= G and L = A + 1")
        if rec["waited"] < 0 or rec["m"] < rec["G"] + 1:
            return f"inconsistent round: waited={rec['waited']}, m={rec['m']} (G={rec['G']})"
    elif t == "bbatch":
        if rec["level"] not in range(1, n):
            return f"level {rec['level']} out of range 1..{n - 1}"
        if not (_is_int(rec["K"]) and rec["K"] >= 1 and _is_int(rec["max_G"])
                and rec["m"] >= rec["max_G"] + 1 and rec["waiting"] >= 0):
            return (f"inconsistent batched round (K={rec['K']}, max_G={rec['max_G']}, "
                    f"m={rec['m']}, waiting={rec['waiting']})")
    elif t == "bforwards":
        k = len(rec["wall_s"])
        for key in ("model", "m", "m0", "ctx"):
            if not isinstance(rec[key], list) or len(rec[key]) != k:
                return f"bforwards {key} must be a list with one entry per forward ({k})"
        if rec["run"] not in ("cascade", "ar"):
            return f"bforwards run must be 'cascade' or 'ar', got {rec['run']!r}"
        if not _ints_in(rec["model"], 0, n):
            return f"bforwards model indices must be in 0..{n - 1}"
        if not _ints_in(rec["m"] + rec["m0"], 1):
            return "bforwards m and m0 must be integers >= 1"
        if rec["batch"] != b:
            return f"bforwards batch {rec['batch']} != header batch.size {b}"
    elif t == "bsummary":
        if not isinstance(rec["n_generated"], list) or len(rec["n_generated"]) != b:
            return f"bsummary n_generated needs {b} entries (one per sequence)"
        if len(rec["forward_s"]) != n or len(rec["forward_count"]) != n:
            return f"bsummary forward_s / forward_count need {n} entries"
    elif t == "bar":
        if len(rec["step_s"]) != rec["n_steps"]:
            return f"bar step_s needs n_steps = {rec['n_steps']} entries"
    elif t == "bcost":
        if not _is_int(rec["batch"]) or rec["batch"] < 1 or not rec["times_s"]:
            return "bcost batch must be an integer >= 1 with at least one time"
    return None


# ------------------------------------------------------------------------------------------
# its captures (validation.capture.batch: one trace per batch size)
# ------------------------------------------------------------------------------------------
DRIVER = "batch"
CAPTURE_REFUSES = {"--queue": "applies to --mode async", "--cores": "applies to --mode async"}


def check_capture(spec):
    """Thresholds are required (one per adjacent pair)."""
    if spec.thresholds is None:
        raise PolyspecInputError("--thresholds", "required (one θ per adjacent pair)")
    return spec


def describe(path) -> str:
    """The line ``polyspec capture`` prints for a finished trace."""
    from validation.traces.batch import read_batch_trace

    t = read_batch_trace(path)
    lossless = {None: "", True: ", greedy lossless", False: ", NOT LOSSLESS"}
    return (f"{path}: b = {t.batch}, {t.n_decodes} decodes, {t.tokens} tokens, measured "
            f"speedup {t.measured_speedup:.3f} (AR {t.ar_tokens_per_second:.1f} tokens/s, "
            f"cascade {t.tokens_per_second:.1f} tokens/s{lossless[t.greedy_lossless]})")
VALIDATE = "validation.analysis.batch_validate:validate_part"  # how its captures are predicted
# its command hook (validation.schemes.command_hook): forecast --batch B
FORECAST_KIND = "validation.analysis.forecast_kinds:batch_request"
