"""Exact recorded fields and timings of the decoder on scripted toy models.

Each toy model (a :class:`validation.capture.models.DecoderModel`) predicts a scripted greedy token
for every prefix length, and every forward advances an injected clock by
``base + per_position * m`` seconds (``m`` positions fed). All costs are dyadic fractions, so
every recorded time is exact in float64. The expected rounds below were derived by hand from
the block policy and the key-value cache bookkeeping of docs/theory.md §6 and C6 (catch-up
positions), step by step in the comments; the ``on_round`` callback (trace writing) advances
the clock by a whole second per call and must change no recorded time.

No randomness: no false-failure rate.
"""

from __future__ import annotations

import pytest
import torch

from validation.capture.models import DecoderModel
from validation.schemes.chain import PolybasicDecoder
from validation.traces.schema import Round


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class Scripted(DecoderModel):
    """Greedy toy model: the next token after a prefix of length ``t`` is ``next_token(t)``;
    a forward feeding ``m`` positions takes ``base + per_position * m`` clock seconds."""

    kind = "scripted"

    def __init__(self, name, next_token, clock, base, per_position, vocab=2):
        self.name, self.next_token, self.clock = name, next_token, clock
        self.base, self.per_position = base, per_position
        self.params, self.vocab_size, self.max_len = 0, vocab, None
        self.device = torch.device("cpu")
        self.pos = 0
        self.fed = []  # positions fed per forward

    def logits(self, seq, end):
        rows = torch.full((end - self.pos, self.vocab_size), -10.0)
        for r, t in enumerate(range(self.pos, end)):
            rows[r, self.next_token(t + 1)] = 10.0
        m = end - self.pos
        self.fed.append(m)
        self.clock.advance(self.base + self.per_position * m)
        self.pos = end
        return rows


def _cost(model, m):
    return model.base + model.per_position * m


def _decode(models, thresholds, clock, max_new, slow_callback):
    seen = []

    def on_round(rec):
        seen.append(rec)
        if slow_callback:
            clock.advance(1.0)  # e.g. a slow trace write: must not enter any recorded time

    dec = PolybasicDecoder(models, thresholds, on_round=on_round, clock=clock)
    res = dec.generate([0], max_new, prompt_index=3)
    assert seen == res.rounds  # the callback sees every round, in order
    return res


@pytest.mark.parametrize("slow_callback", [False, True])
def test_two_models_rounds_and_times_exact(slow_callback):
    clock = Clock()
    target = Scripted("t", lambda t: 0, clock, 1.0, 0.25)
    # the drafter proposes 1 after a prefix of length 2, else 0
    draft = Scripted("d", lambda t: 1 if t == 2 else 0, clock, 0.125, 0.0625)
    res = _decode([target, draft], [3], clock, 10, slow_callback)
    d1, t4 = _cost(draft, 1), _cost(target, 4)
    want = [
        # round 1, ctx 1: drafts after prefixes 1, 2, 3 -> [0, 1, 0] (one position each);
        # the target feeds seq[0:4] (m = 4 = G + 1), accepts 1, corrects to 0; both caches
        # are rolled back to 2 (the committed prefix)
        Round(3, 1, 1, 3, 1, 2, 4, t4, 3 * d1, 3 * d1 + t4),
        # round 2, ctx 3: the drafter's cache holds 2 tokens: one position per forward; the
        # target feeds seq[2:6] (m = 4); all accepted, bonus token appended
        Round(3, 1, 3, 3, 3, 4, 4, t4, 3 * d1, 3 * d1 + t4),
        # round 3, ctx 7: the drafter first catches up on its own last draft and the bonus
        # (2 positions), then 1 and 1; the target still scores G + 1 = 4
        Round(3, 1, 7, 3, 3, 4, 4, t4, _cost(draft, 2) + 2 * d1,
              _cost(draft, 2) + 2 * d1 + t4),
    ]
    assert res.rounds == want
    assert draft.fed == [1, 1, 1, 1, 1, 1, 2, 1, 1] and target.fed == [4, 4, 4]
    assert res.tokens == [0] * 10 and res.n_generated == 10
    assert res.forward_count == [3, 9]
    assert res.forward_s == [3 * t4, 8 * d1 + _cost(draft, 2)]
    assert res.wall_s == sum(r.round_s for r in want) == 7.75
    assert res.overhead_s == 0.0
    assert res.prefill_s == 0.0  # a one-token prompt needs no prefill
    # the trace record of a round carries exactly these fields
    assert want[2].to_record() == {"type": "round", "prompt": 3, "level": 1, "ctx": 7, "G": 3,
                                   "A": 3, "L": 4, "m": 4, "verify_s": 2.0, "draft_s": 0.625,
                                   "round_s": 2.625}


@pytest.mark.parametrize("slow_callback", [False, True])
def test_three_models_catch_up_positions_and_nested_times_exact(slow_callback):
    clock = Clock()
    target = Scripted("t", lambda t: 0, clock, 1.0, 0.25)
    mid = Scripted("m", lambda t: 0, clock, 0.5, 0.125)
    small = Scripted("s", lambda t: 0, clock, 0.125, 0.0625)
    res = _decode([target, mid, small], [2, 1], clock, 6, slow_callback)
    lv2_a = Round(3, 2, 1, 1, 1, 2, 2, _cost(mid, 2), _cost(small, 1),
                  _cost(small, 1) + _cost(mid, 2))
    lv2_b = Round(3, 2, 4, 1, 1, 2, 3, _cost(mid, 3), _cost(small, 3),
                  _cost(small, 3) + _cost(mid, 3))
    want = [
        # top round 1, ctx 1: small drafts 1 token (fed seq[0:1]); mid feeds seq[0:2]
        # (m = G + 1 = 2), accepts, appends its bonus; that fills the target's block (G = 2)
        lv2_a,
        # the target feeds seq[0:3] (m = 3 = G + 1), accepts both, appends its bonus; the
        # level-2 round's time (and its callback, excluded) is this round's draft time
        Round(3, 1, 1, 2, 2, 3, 3, _cost(target, 3), lv2_a.round_s,
              lv2_a.round_s + _cost(target, 3)),
        # top round 2, ctx 4: small catches up on 3 positions (its own draft, mid's bonus,
        # the target's bonus); mid scores G + 2 = 3 positions: its own bonus and the
        # target's bonus were never fed to it (one catch-up position)
        lv2_b,
        Round(3, 1, 4, 2, 2, 3, 3, _cost(target, 3), lv2_b.round_s,
              lv2_b.round_s + _cost(target, 3)),
    ]
    assert res.rounds == want
    assert [r.m - r.G for r in res.rounds] == [1, 1, 2, 1]
    assert small.fed == [1, 3] and mid.fed == [2, 3] and target.fed == [3, 3]
    assert res.n_generated == 6 and res.tokens == [0] * 6
    assert res.forward_count == [2, 2, 2]
    assert res.forward_s == [2 * _cost(target, 3), _cost(mid, 2) + _cost(mid, 3),
                             _cost(small, 1) + _cost(small, 3)]
    assert res.wall_s == want[1].round_s + want[3].round_s == 5.625
    assert res.overhead_s == 0.0


def test_prefill_is_timed_apart_and_excluded():
    clock = Clock()
    target = Scripted("t", lambda t: 0, clock, 1.0, 0.25)
    draft = Scripted("d", lambda t: 0, clock, 0.125, 0.0625)
    res = PolybasicDecoder([target, draft], [1], clock=clock).generate([0, 0], 2)
    # prefill: each model feeds the prompt but its last token (1 position each)
    assert res.prefill_s == _cost(target, 1) + _cost(draft, 1)
    # one round at ctx 2: the drafter feeds seq[1:2]; the target seq[1:3] (m = G + 1 = 2)
    assert res.rounds == [Round(0, 1, 2, 1, 1, 2, 2, _cost(target, 2), _cost(draft, 1),
                                _cost(draft, 1) + _cost(target, 2))]
    assert res.forward_s == [_cost(target, 2), _cost(draft, 1)]
    assert res.forward_count == [1, 1]
    assert res.wall_s == _cost(draft, 1) + _cost(target, 2)
