"""The polybasic decoder with draft structures (docs/theory.md Part III-D): a token tree at the
bottom pair (T1–T5), Hugging Face's adaptive draft length at any pair (A1, A4) and the
confidence cut-off at the bottom pair (A2). Chains are :class:`PolybasicDecoder`'s rounds,
unchanged; this module only adds the structured rounds.

**Tree round** (bottom pair, verifier ``M_{n-1}``, drafter ``M_n``; tree = ``parents``, node
0 = the last committed token). The drafter runs one forward per depth ``d = 1..D``: forward
``d`` scores the nodes of depth ``d - 1`` that have children (forward 1: the root, with the
committed tokens its cache has not seen) with a tree attention mask over its static KV cache,
and proposes their children: at temperature 0 the node's children are the drafter's top-k
tokens in rank order (distinct, Sequoia / EAGLE); at temperature > 0 they are drawn from the
drafter's law ``Q`` either without replacement (``tree_sampling="distinct"``, Sequoia) or
iid (``"iid"``, SpecInfer). The verifier scores the root and all ``N`` nodes in ONE forward
(tree mask, positions by depth). Verification walks down from the root: at temperature 0 the
child equal to the verifier's argmax is accepted (none: the argmax is the correction); at
temperature > 0 SpecInfer's multi-step speculative sampling: the children are tried in rank
order, child ``x`` accepted with probability ``min(1, P_j(x) / Q_j(x))``, after a rejection
``P_{j+1} = (P_j - Q_j)_+ / ||.||`` and (``distinct``) ``Q_{j+1}`` = ``Q_j`` without ``x``,
renormalized; if every child is rejected the correction is drawn from the last residual; at a
leaf the bonus token is drawn from ``P``. Either rule emits every token with the verifier's
law (T2; the ``distinct`` variant by the same backward induction, since ``P_{j+1}`` does not
depend on which token was rejected). Afterwards both models keep only the accepted path's KV
entries (:meth:`validation.capture.models.DecoderModel.keep`), so rollback stays an index move.

**HF schedule** (any pair): the pair's threshold is the current length ``g``; after its round
``g <- min(g + 2, max)`` if the whole block was accepted (``A = G``), else ``max(g - 1, min)``;
the schedule restarts from ``start`` at every :meth:`generate` (each prompt).

**Confidence cut-off** (bottom pair): the drafter drafts one token per forward and stops at
the first position whose top probability is below ``eta`` (that token is not drafted; its
forward counts) or after ``cap`` tokens (``max`` of the schedule, else the pair's threshold).
``G = 0`` is allowed: the verifier then scores one position and emits one token. Top
probability = the max of the law the drafter samples from (at temperature 0: the softmax of
its logits at temperature 1).

Records: a structured pair's rounds are handed to ``on_round`` as
:class:`validation.traces.schema.StructuredRound` (the round plus its optional fields, schema
module docstring); :attr:`StructuredResult.extras` holds those fields per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polyspec_theory.errors import PolyspecInputError, parse_ints
from polyspec_theory.structures.schedule import ConfidenceSchedule, HFSchedule, schedule_from_config
from polyspec_theory.structures.trees import Tree, tree_from_config
from validation.schemes import chain, torch
from validation.schemes.chain import CascadeResult, PolybasicDecoder
from validation.traces.schema import (
    STREAM_RECORD_TYPES,
    FieldError,
    Round,
    StructuredRound,
    check_list,
    check_object,
)

name = "structured"  # the theory registry's scheme (polyspec_theory.schemes)

__all__ = ["StructuredDecoder", "StructuredResult", "TREE_SAMPLING", "parse_tree",
           "parse_schedule"]

TREE_SAMPLING = ("distinct", "iid")


@dataclass
class StructuredResult(CascadeResult):
    """:class:`CascadeResult` plus, per round, the optional fields of its pair's structure
    (``None`` for a plain chain pair)."""

    extras: list = field(default_factory=list)


def parse_tree(spec, field: str = "tree") -> Tree:
    """A :class:`Tree` from a ``Tree``, ``{"parents": [...]}``, a parents list or the text
    ``"-1,0,0,1"``."""
    if isinstance(spec, str):
        spec = parse_ints(spec, f"{field}.parents", low=None, distinct=False, example="-1,0,0,1",
                          what="parent indices")
    if isinstance(spec, (list, tuple, np.ndarray)):
        return Tree(list(spec), field)
    return tree_from_config(spec, field)


def parse_schedule(spec, field: str = "schedule"):
    """A schedule from a config object, a schedule, or the text ``hf:START:MIN:MAX`` /
    ``confidence:ETA[:MAX]``."""
    if isinstance(spec, str):
        parts = spec.split(":")
        cfg = None
        try:
            if parts[0] == "hf" and len(parts) == 4:
                cfg = {"kind": "hf", "start": int(parts[1]), "min": int(parts[2]),
                       "max": int(parts[3])}
            elif parts[0] == "confidence" and len(parts) in (2, 3):
                cfg = {"kind": "confidence", "eta": float(parts[1])}
                if len(parts) == 3:
                    cfg["max"] = int(parts[2])
        except ValueError:
            cfg = None
        if cfg is None:
            raise PolyspecInputError(field, f"expected hf:START:MIN:MAX or "
                                     f"confidence:ETA[:MAX], got {spec!r}")
        spec = cfg
    return schedule_from_config(spec, field)


class StructuredDecoder(PolybasicDecoder):
    """:class:`PolybasicDecoder` with a ``tree`` at the bottom pair and/or ``schedules``
    (one entry per pair: ``None``, an HF schedule anywhere, a confidence cut-off at the
    bottom pair), module docstring. A pair with a tree or an HF schedule ignores its
    threshold; a cut-off without ``max`` uses it as its cap."""

    def __init__(self, models, thresholds, *, tree=None, schedules=None,
                 tree_sampling: str = "distinct", temperature=0.0, top_k=0, seed=0):
        super().__init__(models, thresholds, temperature=temperature, top_k=top_k, seed=seed)
        m = self.n - 1
        self.base_thresholds = tuple(self.thresholds)
        self.tree = None if tree is None else parse_tree(tree)
        if schedules is None:
            scheds = [None] * m
        else:
            if isinstance(schedules, (str, dict)) or not isinstance(schedules, (list, tuple)):
                raise PolyspecInputError("schedules", f"must be a list with one entry per "
                                         f"adjacent pair ({m}), null for none")
            if len(schedules) != m:
                raise PolyspecInputError("schedules", f"need one entry per adjacent pair "
                                         f"({m}), got {len(schedules)}")
            scheds = [None if s is None else parse_schedule(s, f"schedules[{i}]")
                      for i, s in enumerate(schedules)]
        for i, s in enumerate(scheds):
            if isinstance(s, ConfidenceSchedule) and i != m - 1:
                raise PolyspecInputError(
                    f"schedules[{i}]", "a confidence cut-off needs the drafter's own top "
                    f"probability: only the bottom pair (schedules[{m - 1}]) may have one")
        if self.tree is not None and scheds[m - 1] is not None:
            raise PolyspecInputError(f"schedules[{m - 1}]", "this pair drafts a tree: a tree "
                                     "has no draft length to adapt (use null)")
        self.schedules = tuple(scheds)
        if tree_sampling not in TREE_SAMPLING:
            raise PolyspecInputError("tree_sampling", f"must be one of {TREE_SAMPLING}, got "
                                     f"{tree_sampling!r}")
        self.tree_sampling = tree_sampling
        if self.tree is not None:
            for lv in self.models[m - 1:]:
                if not getattr(lv, "supports_tree", False):
                    raise PolyspecInputError(
                        "models", f"{lv.name} ({lv.kind}) cannot draft or verify a token tree "
                        "(no tree attention mask): use zoo GPTs or the n-gram")
            if self.tree.max_children > self.vocab:
                raise PolyspecInputError("tree.parents", f"a node has {self.tree.max_children}"
                                         f" children, more than the vocabulary ({self.vocab})")
            self._prepare_tree(self.tree)

    # ------------------------------------------------------------------ set-up
    def _prepare_tree(self, t: Tree) -> None:
        self._anc = [[] for _ in t.parents]  # drafted ancestors of each node (root excluded)
        for v in range(1, len(t.parents)):
            p = t.parents[v]
            self._anc[v] = ([*self._anc[p], p] if p != 0 else [])
        self._by_depth = [[] for _ in range(t.max_depth + 1)]
        for v, d in enumerate(t.depth):
            self._by_depth[d].append(v)

    def kind(self, i: int) -> str:
        """``"tree"``, ``"hf"``, ``"confidence"`` or ``"chain"`` for pair ``i``."""
        if self.tree is not None and i == self.n - 2:
            return "tree"
        s = self.schedules[i]
        return "chain" if s is None else s.kind

    def cap(self, i: int) -> int:
        """The confidence cut-off's cap at pair ``i``."""
        return self.schedules[i].cap(self.base_thresholds[i])

    def headroom(self) -> int:
        """Extra positions (and cache slots) beyond the committed text a round may use."""
        total = 0
        for i in range(self.n - 1):
            k = self.kind(i)
            s = self.schedules[i]
            total += (self.tree.n_nodes + 1 if k == "tree" else s.max if k == "hf"
                      else self.cap(i) if k == "confidence" else self.base_thresholds[i])
        return total

    def to_config(self) -> dict:
        """The ``trees`` / ``schedules`` lists of the cascade config (``None`` if plain)."""
        m = self.n - 1
        trees = None if self.tree is None else [None] * (m - 1) + [self.tree.to_config()]
        scheds = (None if all(s is None for s in self.schedules)
                  else [None if s is None else s.to_config() for s in self.schedules])
        return {"trees": trees, "schedules": scheds}

    # ------------------------------------------------------------------ rounds
    def _round(self, i: int, base: int) -> int:
        if i == self.n - 1:
            return super()._round(i, base)
        k = self.kind(i)
        if k == "tree":
            return self._tree_round(i, base)
        if k == "confidence":
            return self._confidence_round(i, base)
        if k == "hf":
            g = self._hf[i]
            self.thresholds[i] = g
            self._extra[i] = {"theta": g}
            out = super()._round(i, base)
            rec = self.rounds[-1]
            self._hf[i] = self.schedules[i].next_length(g, rec.A == rec.G)
            return out
        return super()._round(i, base)

    def _publish(self, rec: Round, t2: float) -> None:
        extra = self._extra.pop(rec.level - 1, None)
        self.rounds.append(rec)
        self.extras.append(extra)
        if self.on_round is not None:
            self.on_round(rec if extra is None else StructuredRound(rec, extra))
            self._cb_s += self._now() - t2

    def _top_probability(self, lg) -> tuple[float, np.ndarray | None]:
        """(top probability, the law drafted from; ``None`` when greedy) of logits (1, V)."""
        if self.greedy:
            x = lg[0].detach().to("cpu", torch.float64).numpy()
            return float(1.0 / np.exp(x - x.max()).sum()), None
        p = self.sampler.probs(lg)[0]
        return float(p.max()), p

    def _confidence_round(self, i: int, base: int) -> int:
        d = i + 1
        eta = self.schedules[i].eta
        cap = self.cap(i)
        t0 = self._now()
        confs, stop = [], None
        g = 0
        while g < cap:
            lg = self._forward(d, base + g)[-1:]
            c, p = self._top_probability(lg)
            if c < eta:
                stop = c
                break
            if p is None:
                tok = int(torch.argmax(lg[0]).item())
            else:
                self._laws[d][base + g] = p
                tok = self.sampler.draw(p)
            self.seq.append(tok)
            confs.append(c)
            g += 1
        t1 = self._now()
        a, m, verify_s = self._verify_block(i, base, g)
        t2 = self._now()
        rec = Round(prompt=self.prompt_index, level=i + 1, ctx=base, G=g, A=a, L=a + 1, m=m,
                    verify_s=verify_s, draft_s=t1 - t0, round_s=t2 - t0)
        self._extra[i] = {"theta": cap, "conf": confs, "conf_stop": stop}
        self._publish(rec, t2)
        return a + 1

    def _children(self, row, kids: tuple) -> tuple[list, np.ndarray | None]:
        """Tokens of the children ``kids`` of a node from the drafter's row (logits (V,)):
        top-k at temperature 0, else drawn (distinct or iid); ``None`` = not drawn (a law
        without enough distinct tokens). Returns (tokens, the law Q or ``None``)."""
        k = len(kids)
        if self.greedy:
            x = row.detach().to("cpu", torch.float32).numpy()
            if self.tree_sampling == "iid":
                return [int(np.argmax(x))] * k, None
            return [int(t) for t in np.argsort(-x, kind="stable")[:k]], None
        q = self.sampler.probs(row[None])[0]
        if self.tree_sampling == "iid":
            return [self.sampler.draw(q) for _ in range(k)], q
        rest = q.copy()
        toks = []
        for _ in range(k):
            if not rest.sum() > 0.0:
                toks.append(None)
                continue
            x = self.sampler.draw(rest)
            toks.append(x)
            rest[x] = 0.0
        return toks, q

    def _tree_round(self, i: int, base: int) -> int:
        t = self.tree
        d_i = i + 1
        ver, dra = self.models[i], self.models[d_i]
        t0 = self._now()
        tok = [None] * (t.n_nodes + 1)
        tok[0] = self.seq[base - 1]
        law_q: dict[int, np.ndarray] = {}
        dslot: dict[int, int] = {}
        draft_m, draft_s = [], []
        for d in range(1, t.max_depth + 1):
            feed = [u for u in self._by_depth[d - 1] if tok[u] is not None and t.children[u]]
            if not feed:
                break
            if d == 1:
                lg = self._timed(d_i, lambda: dra.tree_forward(self.seq, base, [], []))
                rows = lg[-1:]
            else:
                s0 = dra.spec
                toks = [tok[u] for u in feed]
                anc = [[dslot[a] for a in self._anc[u]] for u in feed]
                lg = self._timed(d_i, lambda toks=toks, anc=anc: dra.tree_forward(
                    self.seq, base, toks, anc))
                for j, u in enumerate(feed):
                    dslot[u] = s0 + j
                rows = lg[-len(feed):]
            draft_m.append(int(lg.shape[0]))
            draft_s.append(self._last_fwd)
            for u, row in zip(feed, rows, strict=True):
                kids = t.children[u]
                xs, q = self._children(row, kids)
                if q is not None:
                    law_q[u] = q
                for v, x in zip(kids, xs, strict=True):
                    tok[v] = x
        t1 = self._now()
        nodes = [v for v in range(1, t.n_nodes + 1) if tok[v] is not None]
        vslot = {v: j for j, v in enumerate(nodes)}
        anc = [[vslot[a] for a in self._anc[v]] for v in nodes]
        pos0 = ver.pos
        lg = self._timed(i, lambda: ver.tree_forward(self.seq, base, [tok[v] for v in nodes],
                                                     anc))
        verify_s = self._last_fwd
        c = lg.shape[0] - len(nodes)
        row_of = {0: c - 1, **{v: c + j for j, v in enumerate(nodes)}}
        path, ranks, visits = [], [], []
        u = 0
        if self.greedy:
            am = torch.argmax(lg, dim=-1).tolist()
        else:
            P = self.sampler.probs(lg)
        while True:
            kids = [k for k in t.children[u] if tok[k] is not None]
            if self.greedy:
                target = am[row_of[u]]
                hit = next((k for k in kids if tok[k] == target), None)
                if kids:
                    visits.append([len(kids), 0 if hit is None else t.rank[hit]])
                if hit is None:
                    corr = target
                    break
            else:
                p = P[row_of[u]]
                self._laws[i][base + len(path)] = p
                if not kids:
                    corr = self.sampler.draw(p)
                    break
                hit, pj = self._try_children(p, law_q[u], [tok[k] for k in kids])
                visits.append([len(kids), 0 if hit is None else t.rank[kids[hit]]])
                if hit is None:
                    corr = self.sampler.draw(pj)
                    break
                hit = kids[hit]
            path.append(hit)
            ranks.append(t.rank[hit])
            u = hit
        a = len(path)
        ver.keep(base, [vslot[v] for v in path])
        dra.keep(base, [dslot[v] for v in path if v in dslot])
        self.seq.extend([tok[v] for v in path] + [corr])
        t2 = self._now()
        rec = Round(prompt=self.prompt_index, level=i + 1, ctx=base, G=len(nodes), A=a, L=a + 1,
                    m=base - pos0 + len(nodes), verify_s=verify_s, draft_s=t1 - t0,
                    round_s=t2 - t0)
        self._extra[i] = {"nodes": len(nodes), "depth": max(t.depth[v] for v in nodes),
                          "ranks": ranks, "visits": visits, "draft_m": draft_m,
                          "draft_fwd_s": draft_s}
        self._publish(rec, t2)
        return a + 1

    def _try_children(self, p: np.ndarray, q: np.ndarray, xs: list) -> tuple:
        """SpecInfer's multi-step speculative sampling over the children tokens ``xs`` (rank
        order) at a node with verifier law ``p`` and drafter law ``q``: returns (index of the
        accepted child or ``None``, the residual law to draw the correction from)."""
        pj = p
        qj = q
        for j, x in enumerate(xs):
            if self.sampler.uniform(1)[0] * qj[x] < pj[x]:
                return j, pj
            r = np.maximum(pj - qj, 0.0)
            s = float(r.sum())
            if s > 0.0:
                pj = r / s
            if self.tree_sampling == "distinct":
                qj = qj.copy()
                qj[x] = 0.0
                z = float(qj.sum())
                if z > 0.0:
                    qj = qj / z
        return None, pj

    # ------------------------------------------------------------------ public
    def generate(self, prompt, max_new_tokens: int, prompt_index: int = 0) -> StructuredResult:
        """As :meth:`PolybasicDecoder.generate`; HF schedules restart from ``start``."""
        self.thresholds = list(self.base_thresholds)
        self._hf = {i: s.start for i, s in enumerate(self.schedules)
                    if isinstance(s, HFSchedule)}
        self._extra: dict[int, dict] = {}
        self.extras = []
        res = super().generate(prompt, max_new_tokens, prompt_index)
        out = StructuredResult(**vars(res), extras=list(self.extras))
        self.thresholds = list(self.base_thresholds)
        return out


# ------------------------------------------------------------------------------------------
# its traces (validation.traces.checks): the header's trees and schedules, blocks that follow
# them (their rounds' optional fields: validation.traces.schema.check_round_extras)
# ------------------------------------------------------------------------------------------
RECORD_TYPES = STREAM_RECORD_TYPES


def check_header(header: dict, checker) -> None:
    """``cascade.trees`` / ``cascade.schedules``: one entry per pair (``null`` = a chain),
    each an object in the config format (docs/theory.md Part III-D)."""
    chain.check_header(header, checker)
    c = header["cascade"]
    structured = [False] * (checker.n - 1)
    for key in ("trees", "schedules"):
        v = c.get(key)
        if v is None:
            continue
        check_list(v, f"cascade.{key}", length=checker.n - 1)
        for j, x in enumerate(v):
            if x is not None:
                check_object(x, f"cascade.{key}[{j}]")
                structured[j] = True
    checker.structured = tuple(structured)


def check_round(checker, r: dict) -> None:
    """A pair with a tree or a schedule at it or below: the block follows the structure, the
    verify forward scores at least G + 1 positions; other pairs as a chain's."""
    lv, g = r["level"], r["G"]
    if checker.structured[lv - 1] or any(checker.structured[lv:]):
        if r["m"] < g + 1:
            raise FieldError("m", f"a verify forward scores at least G + 1 = {g + 1} "
                             f"positions, got m = {r['m']}")
        return
    chain.check_round(checker, r)


def rounds_pass(checker, lv, g, m):
    """:func:`check_round` on columns (levels ``lv`` in range, blocks ``g``, positions
    ``m``): where each round passes it."""
    st = checker.structured
    free = np.asarray([st[j] or any(st[j + 1:]) for j in range(len(st))])[lv - 1]
    return np.where(free, m >= g + 1, chain.rounds_pass(checker, lv, g, m))


check_prompt_rounds = chain.check_prompt_rounds  # the accumulate blocks of the chain pairs


# ------------------------------------------------------------------------------------------
# its captures (validation.capture: the single-stream driver, as the chain's)
# ------------------------------------------------------------------------------------------
DRIVER = chain.DRIVER
CAPTURE_REFUSES = chain.CAPTURE_REFUSES
check_capture = chain.check_capture
describe = chain.describe


def decoder(levels, spec) -> StructuredDecoder:
    """The decoder a capture of ``spec`` (a checked spec: tree and schedules parsed) runs."""
    return StructuredDecoder(levels, spec.thresholds, tree=spec.tree, schedules=spec.schedules,
                             tree_sampling=spec.tree_sampling, temperature=spec.temperature,
                             top_k=spec.top_k, seed=spec.seed)


def capture_fields(spec) -> dict:
    """The cascade's ``trees`` / ``schedules`` in the config format (one entry per pair,
    ``null`` = a chain), ``tree_sampling`` with a tree, ``schedule_restart`` with an HF
    schedule (schema: :mod:`validation.traces.schema`)."""
    m_pairs = len(spec.models) - 1
    tree, schedules = spec.tree, spec.schedules
    out = {"cascade": {
        "trees": None if tree is None else [None] * (m_pairs - 1) + [tree.to_config()],
        "schedules": (None if schedules is None else
                      [None if sc is None else sc.to_config() for sc in schedules])}}
    if tree is not None:
        out["tree_sampling"] = spec.tree_sampling
    if schedules is not None and any(sc is not None and sc.kind == "hf" for sc in schedules):
        out["schedule_restart"] = "prompt"
    return out


def cost_positions(spec) -> tuple:
    """A tree's verifier scores N + 1 positions: time ``T(m)`` up to there when it exceeds
    the chain's 16."""
    if spec.tree is None or spec.tree.n_nodes + 1 <= max(chain.COST_M):
        return chain.COST_M
    return tuple(range(1, spec.tree.n_nodes + 2))
VALIDATE = "validation.analysis.report:validate_part"  # how its captures are predicted
# its command hook (validation.schemes.command_hook): forecast --tree / --schedule
FORECAST_KIND = "validation.analysis.forecast_kinds:structured_request"
