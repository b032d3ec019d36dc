"""The n-level polybasic speculative decoder (docs/theory.md §6 block policy) and the autoregressive
reference decoder, both batch size 1, on CPU or CUDA.

Models are ordered target first: ``models[0] = M_1`` … ``models[n-1] = M_n`` (smallest).
``thresholds[i]`` is θ of the pair (``models[i]`` verifier, ``models[i+1]`` drafter).

One round of ``S_n``: ``M_n`` samples one token. One round of ``S_i`` (i < n, "accumulate"
policy): run rounds of ``S_{i+1}`` until ≥ θ_i new tokens have accumulated (the block, G_i
tokens; G = θ exactly for the last pair), then ONE forward of ``M_i`` over the G_i + 1
positions scores the block; speculative sampling accepts the first A_i tokens
(accept x with prob min(1, p_i(x)/p_{i+1}(x)); at the first rejection draw from
(p_i − p_{i+1})_+ normalized; if all G are accepted draw a bonus token from p_i), emitting
L_i = A_i + 1 tokens. Every emitted token's law under p_i is kept: it is the drafter law the
level above uses (by F1 a lossless S_{i+1} emits tokens distributed as p_{i+1}). Greedy mode
(temperature 0): accept iff the token equals argmax p_i, the correction is argmax p_i.
Temperature and top-k are applied identically to every model's logits.

Timing: ``now()`` synchronizes CUDA before reading ``time.perf_counter`` (or is the
``clock`` given to :class:`PolybasicDecoder`). Prefill (feeding
the prompt) is timed separately and excluded from decode times, for the cascade and the
autoregressive baseline alike. Time spent in the ``on_round`` callback (trace writing) is
measured and subtracted from ``wall_s``, ``draft_s`` and ``round_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.core.p1 import block_bounds
from polyspec_theory.core.runs import p1_exposures
from polyspec_theory.errors import PolyspecInputError, as_int, as_real
from validation.schemes import torch
from validation.traces.schema import STREAM_RECORD_TYPES, FieldError, RecordError, Round

name = "chain"  # the theory registry's scheme (polyspec_theory.schemes)

__all__ = ["Sampler", "PolybasicDecoder", "CascadeResult", "ARResult", "autoregressive",
           "accept_greedy", "accept_sampled", "check_decoder_args", "check_prompt", "wall_clock",
           "POLICY"]

POLICY = "accumulate"


class Sampler:
    """Turns logits into laws (temperature, top-k) and draws with a seeded generator.

    Laws and draws live in numpy float64 on the host (one small array per step costs a few
    microseconds there, against tens for the same chain of torch CPU ops); logits on CUDA are
    copied to the host once per forward, which is also the synchronization point."""

    def __init__(self, temperature: float = 0.0, top_k: int = 0, seed: int = 0):
        self.temperature = as_real(temperature, "temperature", low=0.0, high=100.0)
        self.top_k = as_int(top_k, "top_k", low=0)
        self.greedy = self.temperature == 0.0
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the random stream (numpy PCG64) from ``seed``."""
        self.rng = np.random.default_rng(as_int(seed, "seed", low=0))

    def probs(self, logits) -> np.ndarray:
        """Laws (rows sum to 1, float64 numpy) from logits (m, V)."""
        if isinstance(logits, torch.Tensor):
            logits = logits.detach().to("cpu", torch.float32).numpy()
        x = np.asarray(logits, dtype=np.float64)
        if self.temperature != 1.0:
            x = x / self.temperature
        v = x.shape[-1]
        if self.top_k and self.top_k < v:
            kth = np.partition(x, v - self.top_k, axis=-1)[..., v - self.top_k, None]
            x = np.where(x < kth, -np.inf, x)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def draw(self, p: np.ndarray) -> int:
        """One index from the (possibly unnormalized) law ``p`` by inverse CDF: the first j
        with cdf[j] ≥ v, v = (1 − u)·Σp ∈ (0, Σp], so zero-mass entries are never drawn."""
        cdf = np.cumsum(p)
        v = (1.0 - self.rng.random()) * cdf[-1]
        return min(int(np.searchsorted(cdf, v)), p.shape[0] - 1)

    def uniform(self, n: int) -> np.ndarray:
        return self.rng.random(n)


@dataclass
class CascadeResult:
    """One prompt decoded by the cascade. Times in seconds, prefill excluded."""

    tokens: list[int]
    n_generated: int
    wall_s: float
    prefill_s: float
    forward_s: list[float]
    forward_count: list[int]
    rounds: list[Round] = field(default_factory=list)

    @property
    def overhead_s(self) -> float:
        """Decode wall time not spent inside model forwards."""
        return self.wall_s - sum(self.forward_s)


@dataclass
class ARResult:
    """One prompt decoded autoregressively by one model. ``step_s[j]`` = wall time of token j
    (forward + sampling); prefill excluded."""

    tokens: list[int]
    wall_s: float
    prefill_s: float
    step_s: list[float]
    forward_s: float


def wall_clock(device):
    """The clock every decoder and capture times with: ``time.perf_counter``, on CUDA after
    synchronizing the device (so a reading follows the forwards queued before it)."""
    if torch.device(device).type == "cuda":

        def now():
            torch.cuda.synchronize()
            return time.perf_counter()

        return now
    return time.perf_counter


def accept_greedy(block, argmax) -> tuple[int, int]:
    """Greedy verification of the drafted ``block`` (G tokens) against the verifier's argmax
    tokens ``argmax`` (G + 1 positions): ``(A, correction)`` with A = the longest prefix of the
    block equal to the argmax tokens and the correction (or bonus) token ``argmax[A]``."""
    a, g = 0, len(block)
    while a < g and block[a] == argmax[a]:
        a += 1
    return a, int(argmax[a])


def accept_sampled(sampler: Sampler, block, P: np.ndarray, Q: np.ndarray) -> tuple[int, int]:
    """Speculative sampling of the drafted ``block`` (G tokens) with the verifier's laws ``P``
    (G + 1, V) and the drafter's ``Q`` (G, V): token ``x`` accepted with probability
    ``min(1, P(x)/Q(x))``; at the first rejection the correction is drawn from ``(P − Q)_+``
    normalized (``P`` if that is empty), after G acceptances the bonus from ``P[G]``. Returns
    ``(A, correction)``; the output has law ``P`` token by token (lossless)."""
    g = len(block)
    ar = np.arange(g)
    x = np.asarray(block)
    ok = sampler.uniform(g) * Q[ar, x] < P[ar, x]
    a = g if ok.all() else int(ok.argmin())
    if a < g:
        r = np.maximum(P[a] - Q[a], 0.0)
        s = float(r.sum())
        return a, sampler.draw(r / s if s > 0 else P[a])
    return a, sampler.draw(P[g])


def check_decoder_args(models, thresholds) -> tuple[list[int], int]:
    """A cascade's models (>= 2, one vocabulary) and thresholds (one per pair), checked;
    returns ``(thresholds, vocabulary size)``."""
    n = len(models)
    if n < 2:
        raise PolyspecInputError("models", f"need at least 2 models, got {n}")
    if len(thresholds) != n - 1:
        raise PolyspecInputError("thresholds", f"need {n - 1} thresholds, got "
                                 f"{len(thresholds)}")
    thresholds = [as_int(t, f"thresholds[{i}]", low=1, high=4096)
                  for i, t in enumerate(thresholds)]
    vs = {lv.vocab_size for lv in models}
    if len(vs) != 1:
        raise PolyspecInputError("models", f"models must share one vocabulary, got sizes "
                                 f"{[lv.vocab_size for lv in models]}")
    return thresholds, vs.pop()


def check_prompt(prompt, max_new_tokens, vocab: int) -> tuple[list[int], int]:
    """A prompt (>= 1 token id in ``[0, vocab)``) and a token budget (>= 1), checked;
    returns ``(prompt as ints, max_new_tokens)``."""
    prompt = [int(t) for t in prompt]
    max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
    if len(prompt) < 1:
        raise PolyspecInputError("prompt", "must hold at least one token")
    if any(not 0 <= t < vocab for t in prompt):
        raise PolyspecInputError("prompt", f"token ids must be in [0, {vocab})")
    return prompt, max_new


class PolybasicDecoder:
    """Polybasic cascade over ``models`` (target first) with ``thresholds`` (one per pair)."""

    def __init__(self, models, thresholds, *, temperature=0.0, top_k=0, seed=0,
                 on_round: Callable[[Round], None] | None = None,
                 clock: Callable[[], float] | None = None):
        self.thresholds, self.vocab = check_decoder_args(models, thresholds)
        self.models = list(models)
        self.n = len(self.models)
        self.device = models[0].device
        self.sampler = Sampler(temperature, top_k, seed)
        self.greedy = self.sampler.greedy
        self.on_round = on_round
        # seconds, read around every forward and round; ``clock`` replaces the wall clock
        # (tests: a scripted clock makes every recorded time exact)
        self._now = clock if clock is not None else wall_clock(self.device)

    def headroom(self) -> int:
        """Extra positions beyond the committed text a round may feed (Σ θ)."""
        return sum(self.thresholds)

    # ------------------------------------------------------------------ internals
    def _timed(self, i: int, fn):
        """``fn()``, a forward of model ``i``, timed and counted."""
        t0 = self._now()
        out = fn()
        t1 = self._now()
        self._fwd_s[i] += t1 - t0
        self._fwd_n[i] += 1
        self._last_fwd = t1 - t0
        return out

    def _forward(self, i: int, end: int) -> torch.Tensor:
        return self._timed(i, lambda: self.models[i].logits(self.seq, end))

    def _truncate(self, length: int, from_level: int) -> None:
        del self.seq[length:]
        for j in range(from_level, self.n):
            self.models[j].rollback(length)

    def _draft(self, i: int, lg, base: int) -> int:
        """The bottom model's token at position ``base`` from its logits ``lg`` (1, V)."""
        if self.greedy:
            return int(torch.argmax(lg[0]).item())
        p = self.sampler.probs(lg)[0]
        self._laws[i][base] = p
        return self.sampler.draw(p)

    def _verify(self, i: int, lg, base: int, g: int) -> tuple[int, int]:
        """Model ``i`` verifies the block ``seq[base:base+g]`` with its logits ``lg``
        (g + 1, V): returns (accepted count A, the correction or bonus token)."""
        block = self.seq[base : base + g]
        if self.greedy:
            return accept_greedy(block, torch.argmax(lg, dim=-1).tolist())
        P = self.sampler.probs(lg)
        if g == 0:  # nothing drafted (a confidence cut-off): one token from the verifier's law
            a, corr = 0, self.sampler.draw(P[0])
        else:
            a, corr = accept_sampled(self.sampler, block, P, self._laws[i + 1][base : base + g])
        self._laws[i][base : base + a + 1] = P[: a + 1]
        return a, corr

    def _verify_block(self, i: int, base: int, g: int) -> tuple[int, int, float]:
        """Model ``i`` verifies the block ``seq[base:base+g]`` in one forward, the text is cut
        to the accepted prefix and the correction (or bonus) token appended: returns (A,
        positions fed m, the forward's seconds)."""
        # the level's cache holds seq[:pos]; usually pos == base - 1 (m = G + 1); each level
        # at or above this one whose last round accepted its whole block appended a token
        # this cache has not seen, so 1 <= m - G <= i + 1 (catch-up positions)
        m = base + g - self.models[i].pos
        lg = self._forward(i, base + g)
        a, corr = self._verify(i, lg[-(g + 1):], base, g)
        self._truncate(base + a, i)
        self.seq.append(corr)
        return a, m, self._last_fwd

    def _round(self, i: int, base: int) -> int:
        """One round of S_i on top of ``seq[:base]``; returns L (tokens appended)."""
        if i == self.n - 1:
            tok = self._draft(i, self._forward(i, base)[-1:], base)
            self._truncate(base, i)
            self.seq.append(tok)
            return 1
        theta = self.thresholds[i]
        t0 = self._now()
        cb0 = self._cb_s
        acc = 0
        while acc < theta:
            acc += self._round(i + 1, base + acc)
        g = acc
        t1 = self._now()
        cb1 = self._cb_s
        a, m, verify_s = self._verify_block(i, base, g)
        t2 = self._now()
        rec = Round(prompt=self.prompt_index, level=i + 1, ctx=base, G=g, A=a, L=a + 1, m=m,
                    verify_s=verify_s, draft_s=t1 - t0 - (cb1 - cb0),
                    round_s=t2 - t0 - (self._cb_s - cb0))
        self._publish(rec, t2)
        return a + 1

    def _publish(self, rec: Round, t2: float) -> None:
        """Keep the round and hand it to ``on_round`` (its time is not decode time)."""
        self.rounds.append(rec)
        if self.on_round is not None:
            self.on_round(rec)
            self._cb_s += self._now() - t2

    # ------------------------------------------------------------------ public
    def generate(self, prompt: list[int], max_new_tokens: int,
                 prompt_index: int = 0) -> CascadeResult:
        """Decode ≥ ``max_new_tokens`` tokens after ``prompt`` (the last round may overshoot;
        ``n_generated`` is the exact count and ``tokens`` holds all of them). Rounds are
        recorded with ``prompt_index``."""
        prompt, max_new = check_prompt(prompt, max_new_tokens, self.vocab)
        need = len(prompt) + max_new + self.headroom()
        for lv in self.models:
            if lv.max_len is not None and need > lv.max_len:
                raise PolyspecInputError(
                    "max_new_tokens", f"prompt ({len(prompt)}) + tokens ({max_new}) + "
                    f"Σθ ({self.headroom()}) = {need} exceeds {lv.name}'s context {lv.max_len}")
        self.prompt_index = as_int(prompt_index, "prompt_index", low=0)
        self.seq = list(prompt)
        self.rounds = []
        self._cb_s = 0.0
        self._fwd_s = [0.0] * self.n
        self._fwd_n = [0] * self.n
        if not self.greedy:
            size = need + 1
            self._laws = [np.zeros((size, self.vocab)) for _ in range(self.n)]
        with torch.inference_mode():
            t0 = self._now()
            for lv in self.models:
                lv.reset()
                if len(prompt) > 1:
                    lv.logits(self.seq, len(prompt) - 1)
            t1 = self._now()
            self._fwd_s = [0.0] * self.n
            self._fwd_n = [0] * self.n
            while len(self.seq) - len(prompt) < max_new:
                self._round(0, len(self.seq))
            t2 = self._now()
        gen = self.seq[len(prompt):]
        return CascadeResult(tokens=gen, n_generated=len(gen), wall_s=t2 - t1 - self._cb_s,
                             prefill_s=t1 - t0, forward_s=list(self._fwd_s),
                             forward_count=list(self._fwd_n), rounds=self.rounds)


def autoregressive(model, prompt, max_new_tokens: int, *, temperature=0.0, top_k=0, seed=0,
                   sampler: Sampler | None = None) -> ARResult:
    """Plain decoding of ``max_new_tokens`` tokens by one model (one forward per token)."""
    prompt = [int(t) for t in prompt]
    max_new = as_int(max_new_tokens, "max_new_tokens", low=1)
    if model.max_len is not None and len(prompt) + max_new > model.max_len:
        raise PolyspecInputError("max_new_tokens", f"prompt + tokens exceeds {model.name}'s "
                                 f"context {model.max_len}")
    s = sampler or Sampler(temperature, top_k, seed)
    now = wall_clock(model.device)
    seq = list(prompt)
    steps = []
    fwd = 0.0
    with torch.inference_mode():
        t0 = now()
        model.reset()
        if len(prompt) > 1:
            model.logits(seq, len(prompt) - 1)
        t1 = now()
        for _ in range(max_new):
            a = now()
            lg = model.logits(seq, len(seq))[-1]
            b = now()
            tok = int(torch.argmax(lg).item()) if s.greedy else s.draw(s.probs(lg[None])[0])
            seq.append(tok)
            c = now()
            steps.append(c - a)
            fwd += b - a
        t2 = now()
    return ARResult(tokens=seq[len(prompt):], wall_s=t2 - t1, prefill_s=t1 - t0,
                    step_s=steps, forward_s=fwd)


# ------------------------------------------------------------------------------------------
# its traces (validation.traces.checks): the block policy in every round and prompt
# ------------------------------------------------------------------------------------------
RECORD_TYPES = STREAM_RECORD_TYPES


def check_header(header: dict, checker) -> None:
    """The block bounds of the header's thresholds under its policy (P1's blocks)."""
    checker.gmax = tuple(block_bounds(checker.thresholds, checker.policy))
    checker.structured = (False,) * (checker.n - 1)


def check_round(checker, r: dict) -> None:
    """A level-``lv`` round verifies a block of exactly θ (the last pair, or the truncate
    policy) or θ..G_max tokens (accumulate), and its forward scores G + 1 to G + lv
    positions (catch-up tokens)."""
    lv, g = r["level"], r["G"]
    th, gm = checker.thresholds[lv - 1], checker.gmax[lv - 1]
    if lv == checker.n - 1 or checker.policy == "truncate":
        if g != th:
            raise FieldError("G", f"level {lv} verifies blocks of exactly theta = {th} "
                             f"tokens (cascade.thresholds), got G = {g}")
    elif not th <= g <= gm:
        raise FieldError("G", f"level {lv} blocks have theta = {th} <= G <= {gm} tokens "
                         f"(cascade.thresholds, {checker.policy} policy), got G = {g}")
    if not g + 1 <= r["m"] <= g + lv:
        raise FieldError("m", f"a level-{lv} verify forward scores G + 1 to G + {lv} "
                         f"positions, got m = {r['m']} with G = {g}")


def rounds_pass(checker, lv, g, m):
    """:func:`check_round` on columns (levels ``lv`` in range, blocks ``g``, positions
    ``m``): where each round passes it."""
    th = np.asarray(checker.thresholds)[lv - 1]
    exact = (lv == checker.n - 1) | (checker.policy == "truncate")
    ok = np.where(exact, g == th, (th <= g) & (g <= np.asarray(checker.gmax)[lv - 1]))
    return ok & (g + 1 <= m) & (m <= g + lv)


def check_prompt_rounds(checker, s: dict, si: int, rounds) -> None:
    """The rounds of one finished prompt (file order) form the accumulate policy's blocks:
    each level-``j`` block is drafted by level-``j+1`` rounds at consecutive contexts whose
    emitted tokens sum to ``G`` and which stop as soon as θ are pending (a pair with a tree
    or a schedule drafts by its structure); one forward per verify round and θ per
    bottom-level round for the smallest model."""
    if checker.policy != "accumulate":
        return
    m, th = checker.n - 1, checker.thresholds
    pending: dict[int, list] = {lv: [] for lv in range(2, m + 1)}
    counts = [0] * m
    for i, r in rounds:
        lv, g = r["level"], r["G"]
        counts[lv - 1] += 1
        if lv < m:
            kids = pending[lv + 1]
            if not kids:
                raise RecordError(f"round.G: this level-{lv} round verifies a block of {g} "
                                  f"tokens, but no level-{lv + 1} round drafted it", i)
            tot = sum(k["L"] for _, k in kids)
            span = (f"lines {kids[0][0]}-{kids[-1][0]}" if len(kids) > 1
                    else f"line {kids[0][0]}")
            if tot != g:
                raise RecordError(f"round.G: level-{lv} block of G = {g} tokens, but the "
                                  f"level-{lv + 1} rounds that drafted it ({span}) emitted "
                                  f"{tot}", i)
            theta = r.get("theta", th[lv - 1])  # an HF schedule records its own
            if tot - kids[-1][1]["L"] >= theta and not checker.structured[lv - 1]:
                raise RecordError(f"round.G: level-{lv} block of G = {g} tokens drafted past "
                                  f"theta = {theta} ({span}): the accumulate policy verifies "
                                  "as soon as theta tokens are pending", i)
            want = r["ctx"]
            for j, k in kids:
                if k["ctx"] != want:
                    raise RecordError(f"round.ctx: level-{lv + 1} round at ctx {k['ctx']}, "
                                      f"expected {want} (it drafts the block at ctx "
                                      f"{r['ctx']} that line {i} verifies)", j)
                want += k["L"]
            kids.clear()
        if lv > 1:
            pending[lv].append((i, r))
    for lv, kids in pending.items():
        if kids:
            raise RecordError(f"round.level: level-{lv} round(s) of prompt {s['prompt']} that "
                              f"no level-{lv - 1} round verified before its summary (line "
                              f"{si})", kids[0][0])
    if not any(checker.structured):
        want = counts + [th[-1] * counts[-1]]
        if list(s["forward_count"]) != want:
            raise RecordError(f"summary.forward_count: {s['forward_count']}, but the rounds "
                              f"of prompt {s['prompt']} imply {want} forwards per model (one "
                              "per verify round; theta per bottom-level round for the "
                              "smallest model)", si)


# ------------------------------------------------------------------------------------------
# its captures (validation.capture: the single-stream driver)
# ------------------------------------------------------------------------------------------
DRIVER = "stream"  # validation.capture.single: one process, prompt after prompt
# the `polyspec capture` options its captures do not take, each with its one-line refusal
CAPTURE_REFUSES = {"--queue": "applies to --mode async", "--cores": "applies to --mode async"}
COST_M = tuple(range(1, 17))  # positions of the cost curves T(m)


def check_capture(spec):
    """Thresholds are required (one per adjacent pair)."""
    if spec.thresholds is None:
        raise PolyspecInputError("--thresholds", "required (one θ per adjacent pair)")
    return spec


def decoder(levels, spec) -> PolybasicDecoder:
    """The decoder a capture of ``spec`` runs on the loaded ``levels``."""
    return PolybasicDecoder(levels, spec.thresholds, temperature=spec.temperature,
                            top_k=spec.top_k, seed=spec.seed)


def capture_fields(spec) -> dict:
    """Header fields a capture of this scheme adds (``cascade``: merged into the cascade)."""
    return {}


def cost_positions(spec) -> tuple:
    """The positions ``m`` of the cost curves ``T(m)`` a capture times."""
    return COST_M


def describe(path) -> str:
    """The line ``polyspec capture`` prints for a finished trace."""
    from validation.traces.records import read_trace

    t = read_trace(path)
    return (f"{path}: {t.n_prompts} prompts, {t.tokens} tokens, "
            f"measured speedup {t.measured_speedup:.3f} "
            f"(AR target {t.ar_time_per_token * 1e3:.3f} ms/token, cascade "
            f"{t.time_per_token * 1e3:.3f} ms/token, overhead "
            f"{100 * t.overhead_fraction:.1f} %)")
VALIDATE = "validation.analysis.report:validate_part"  # how its captures are predicted
# its command hook (validation.schemes.command_hook): forecast on a folder of PipeSpec runs
FORECAST_FOLDER = "validation.analysis.pipespec_forecast:forecast_dir"
# R2's exposures of its rounds over positions (``polyspec fit``): P1's rounds
run_exposures = p1_exposures
