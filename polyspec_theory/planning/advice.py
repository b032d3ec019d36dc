"""One wording for every recommendation the commands print (``predict`` on an async config,
``plan``, ``plan --traces``): a mode or cascade is recommended only when its uncertainty says
so, by the decision rule of ``plan --traces`` (``confident`` when the choice is the best with
probability >= 0.9, else ``too close to call``); an interval decides when no probability is
known (the choice's 95 % interval must lie above the rival), an exact comparison decides
alone."""

from __future__ import annotations

CONFIDENT = 0.9  # = validation.analysis.plan_uncertainty.CONFIDENT (tests pin the two equal)


def decide(choice: str, rival: str, *, probability_best=None, speedup=None, interval=None,
           rival_speedup=None, rival_interval=None) -> dict:
    """``{"decision", "text"}`` for running ``choice`` instead of ``rival``.

    ``probability_best``: the probability that ``choice`` is the best (``plan --traces``);
    else the 95 % intervals (``interval`` of ``choice``, ``rival_interval``; a missing one is
    the exact ``speedup`` / ``rival_speedup``): confident when ``choice``'s lies wholly above
    the rival's; with neither interval the comparison is exact."""
    if probability_best is not None:
        confident = probability_best >= CONFIDENT
        why = f"best with probability {probability_best:.2f}; confident needs {CONFIDENT:.2f}"
    elif interval is not None or rival_interval is not None:
        lo = interval[0] if interval is not None else speedup
        hi = rival_interval[1] if rival_interval is not None else rival_speedup
        confident = lo > hi
        def show(name, v, iv):
            return (f"{name} {v:.4f}x" if iv is None else
                    f"{name} {v:.4f}x [{iv[0]:.4f}, {iv[1]:.4f}]")
        why = (f"{show(choice, speedup, interval)} "
               f"{'lies above' if confident else 'overlaps'} "
               f"{show(rival, rival_speedup, rival_interval)} (95 %)")
    else:
        confident, why = True, "exact"
    if confident:
        return {"decision": "confident", "text": f"run {choice} (confident: {why})"}
    return {"decision": "too close to call",
            "text": f"too close to call: {choice} is ahead of {rival} on the point estimate, "
                    f"but {why}; measure both before choosing"}
