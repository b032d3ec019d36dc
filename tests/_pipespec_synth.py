"""Synthetic PipeSpec folders written from the decoder's rules as docs/theory.md states them
(R1, PipeSpec's synchronous round; the file layout of the shared README), independently of
``validation``: the tests that use them know every cost and every agreement exactly, so a
forecast made from the files can be held against a computation by hand.

Agreement is a function of the output position (greedy decoding, R1): ``d[p]`` says whether
the drafter's argmax after the verifier's first ``p`` tokens equals the verifier's token
``p``. One round of the synchronous chain at lookahead ``K``, with ``L`` tokens already out:

* fresh (the first round, or after a rejection or a 1-token verify): the drafter drafts
  ``K - 1`` steps, the verifier scores ``K`` positions (a call of ``K`` tokens) and emits
  ``j + 1`` tokens, ``j`` the leading agreements among positions ``L .. L + K - 2``; all
  agree: ``K`` tokens (the last, the bonus at ``L + K - 1``, unchecked) and the next round
  continues;
* continuing (after a fully accepted round): the drafter is one token behind and drafts
  ``K`` steps, the first re-predicting the bonus position ``L - 1``; if it disagrees the
  verifier is fed 1 token (a 1-token call) and emits 1 token (position ``L``, unchecked);
  otherwise it scores ``K`` positions as a fresh round does.

A rejecting ``K``-token call costs ``T(K) + reject``; a fully accepting one ``T(K)``; a
1-token call ``T(1)``. Every round adds ``per_round`` outside the logged calls, every prompt
``overhead`` (prefill...). The output stops once ``n_tok`` tokens are out (the first comes
from the prefill)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Round:
    steps: int  # drafter steps (each one entry of model_times[0])
    m: int  # tokens fed to the verify call (K, or 1)
    tokens: int  # tokens the call appended (accepted_tokens)
    rejected: bool  # a K-token call that rejected a draft


def play(d, k: int, n_tok: int) -> tuple[list[Round], set[int]]:
    """The rounds of one prompt at lookahead ``k >= 2`` and the positions whose agreement they
    looked at."""
    rounds, seen = [], set()
    out, cont = 1, False
    while out < n_tok:
        start, steps = out, k - 1
        if cont:
            steps = k
            seen.add(out - 1)
            if not d[out - 1]:  # the bonus position re-predicted wrongly: a 1-token verify
                rounds.append(Round(steps, 1, 1, False))
                out, cont = out + 1, False
                continue
        j = 0
        while j < k - 1:
            seen.add(start + j)
            if not d[start + j]:
                break
            j += 1
        if j < k - 1:
            rounds.append(Round(steps, k, j + 1, True))
            out, cont = out + j + 1, False
        else:
            rounds.append(Round(steps, k, k, False))
            out, cont = out + k, True
    return rounds, seen


@dataclass(frozen=True)
class Costs:
    draft: float
    t1: float
    a: float  # T(m) = a + b m for m >= 2
    b: float
    reject: float = 0.0
    per_round: float = 0.0
    overhead: float = 0.0

    def verify(self, m: int) -> float:
        return self.t1 if m == 1 else self.a + self.b * m


def prompt_time(rounds, c: Costs) -> float:
    """Seconds of one prompt: every call, the per-round and the per-prompt overhead."""
    return c.overhead + sum(r.steps * c.draft + c.verify(r.m) + c.reject * r.rejected
                            + c.per_round for r in rounds)


def _model(name, dtype="float16"):
    return {"path": f"org/{name}", "devices": ["cuda:0"], "dtype": dtype}


def chain_file(folder: Path, names, k: int, prompts, c: Costs, dataset="synthetic"):
    """A two-model synchronous run (``names`` = drafter, verifier) of ``prompts`` =
    ``[(sample_index, d, n_tok), ...]``; returns ``{sample_index: (rounds, seen)}``."""
    results, played = [], {}
    for idx, d, n_tok in prompts:
        rounds, seen = play(d, k, n_tok)
        played[idx] = (rounds, seen)
        draft = [c.draft] * sum(r.steps for r in rounds)
        verify = [c.verify(r.m) + c.reject * r.rejected for r in rounds]
        total = sum(draft) + sum(verify) + c.overhead + c.per_round * len(rounds)
        results.append({"sample_index": idx, "strategy": "chain", "metrics": {
            "model_times": [draft, verify], "accepted_tokens": [[r.tokens for r in rounds]],
            "total_time": total, "tokens_generated": n_tok}})
    meta = {"strategy": "chain", "model_configs": [_model(n) for n in names], "lookahead": k,
            "dataset": dataset, "num_samples": len(prompts)}
    path = folder / f"chain_{'-'.join(names)}_{k}.json"
    path.write_text(json.dumps({"metadata": meta, "results": results}))
    return played


def greedy_file(folder: Path, name: str, prompts, step: float, prefill: float,
                dataset="synthetic"):
    """The autoregressive baseline of ``name``: ``prompts`` = ``[(sample_index, n_tok)]``."""
    results = [{"sample_index": idx, "strategy": "greedy", "metrics": {
        "token_times": [step] * (n - 1), "total_time": prefill + step * (n - 1),
        "tokens_generated": n}} for idx, n in prompts]
    meta = {"strategy": "greedy", "model_configs": [_model(name)], "lookahead": 0,
            "dataset": dataset, "num_samples": len(prompts)}
    (folder / f"greedy_{name}.json").write_text(json.dumps({"metadata": meta,
                                                            "results": results}))


def runs_of_agreement(rng, n: int, mean_run: float) -> list[bool]:
    """A position sequence: runs of agreement of geometric length (mean ``mean_run``), each
    ended by one disagreement."""
    p = 1.0 / (1.0 + mean_run)
    return [bool(x) for x in (rng.random(n) >= p)]
