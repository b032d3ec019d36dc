"""One place decides the scheme (polyspec_theory/schemes/, when a Cascade is built): the
public API serves every scheme (chain, structured, batch, async), the CLI prints the same
numbers, and a scheme a layer cannot serve is refused with one line naming the field.

Independent values: a two-level cascade with constant costs T_1 = 1, T_2 = c and i.i.d.
acceptance alpha has the closed form speedup = (1 - alpha^(theta+1)) / ((1 - alpha)
(theta c + 1)) (E[L] over the round's cost); a path-shaped tree of k drafts is the chain
theta = k; the async example's 2.9632 is the value `polyspec predict` printed when the issue
was filed (issue 30)."""

from __future__ import annotations

import json
import re

import pytest

import polyspec
import polyspec_theory
from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from polyspec_theory.schemes import in_mode, scheme_of

CHAIN, STRUCTURED, BATCH, ASYNC = "chain", "structured", "batch", "async"

ALPHA, C = 0.8, 0.05
BASE = {"models": [{"name": "target", "cost": 1.0}, {"name": "draft", "cost": C}],
        "acceptance": [{"alpha": ALPHA}], "thresholds": [4]}
ASYNC_CFG = {**BASE, "mode": "async"}  # the issue's example


def closed_form(theta: int) -> float:
    return (1 - ALPHA ** (theta + 1)) / ((1 - ALPHA) * (theta * C + 1))


def _cli_json(capsys, tmp_path, cfg, *argv):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(cfg))
    rc = main([argv[0], str(p), *argv[1:], "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_scheme_of_names_each_scheme():
    tree = {**BASE, "acceptance": [{"sibling": [[0.6, 0.2], [0.5]]}],
            "trees": [{"parents": [-1, 0, 0, 1]}]}
    assert scheme_of(polyspec.load_cascade(BASE)) == CHAIN
    assert scheme_of(polyspec.load_cascade(BASE).with_batch(4)) == BATCH
    assert polyspec.load_cascade({**BASE, "batch": 4}).scheme == BATCH
    assert scheme_of(polyspec.load_cascade(tree)) == STRUCTURED
    assert scheme_of(polyspec.load_cascade(ASYNC_CFG)) == ASYNC


def test_chain_and_batch_of_one_are_the_closed_form():
    assert polyspec.predict(BASE).speedup == pytest.approx(closed_form(4), rel=1e-12)
    assert polyspec.predict(BASE, batch=1).speedup == pytest.approx(closed_form(4), rel=1e-12)


def test_structured_path_tree_is_the_chain():
    path = {**BASE, "trees": [{"parents": [-1, 0, 1, 2]}]}  # three drafts in a row
    assert scheme_of(polyspec.load_cascade(path)) == STRUCTURED
    assert polyspec.predict(path).speedup == pytest.approx(closed_form(3), rel=1e-12)


def test_async_example_of_the_issue(capsys, tmp_path):
    api = polyspec.predict(ASYNC_CFG).speedup
    # the issue saw 2.9632 from `polyspec predict` under the old AS0 window (a verify checked at
    # most θ drafts); AS0 now follows the decoder (wait θ, check every ready draft up to the
    # verify cap: docs/theory.md AS0), and the CLI and the API print the same 3.2648
    assert round(api, 4) == 3.2648
    assert api != pytest.approx(closed_form(4), rel=1e-3)  # not the synchronous answer
    assert _cli_json(capsys, tmp_path, ASYNC_CFG, "predict")["speedup"] == api
    theory = polyspec_theory.predict(polyspec.load_cascade(ASYNC_CFG))
    assert theory.speedup == api and theory.exact


def test_async_threshold_zero_is_served(capsys, tmp_path):
    cfg = {**ASYNC_CFG, "thresholds": [0]}
    api = polyspec.predict(cfg)
    cli = _cli_json(capsys, tmp_path, cfg, "predict")
    assert api.speedup == cli["speedup"]
    lo, hi = api.bounds
    assert lo <= api.speedup <= hi


def test_simulate_serves_async():
    from simulators.asynchronous import simulate_async

    res = polyspec.simulate(ASYNC_CFG, seed=3, chains=8, events=2000)
    ref = simulate_async(polyspec.load_cascade(ASYNC_CFG), 2000, 3, chains=8)
    assert res.to_dict() == ref.to_dict() and res.to_dict()["mode"] == "async"
    lo, hi = polyspec.predict(ASYNC_CFG).bounds  # AS3's exact bound pair
    assert lo <= res.speedup.value <= hi


def test_async_in_a_serving_batch_is_refused_once(capsys, tmp_path):
    with pytest.raises(PolyspecInputError) as e:
        polyspec.simulate(ASYNC_CFG, batch=2)
    assert e.value.field == "batch" and "not available" in str(e.value)
    with pytest.raises(PolyspecInputError) as e:
        polyspec.predict(ASYNC_CFG, batch=2)
    assert e.value.field == "batch"
    p = tmp_path / "a.json"
    p.write_text(json.dumps(ASYNC_CFG))
    for cmd in ("predict", "simulate"):
        assert main([cmd, str(p), "--batch", "2"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--batch" in err and "scheme 'async'" in err


def test_in_mode():
    cas = polyspec.load_cascade(ASYNC_CFG)
    sync = in_mode(cas, "sync")
    assert sync.mode == "sync" and sync.queues is None
    queued = in_mode(polyspec.load_cascade({**ASYNC_CFG, "queue": [6]}), "sync")
    assert queued.queues is None and queued.scheme == CHAIN  # the async-only field goes
    assert in_mode(sync, "async").mode == "async" and in_mode(cas, None) is cas
    with pytest.raises(PolyspecInputError, match="no meaning in mode 'sync'") as e:
        in_mode(polyspec.load_cascade({**ASYNC_CFG, "thresholds": [0]}), "sync", "--mode")
    assert e.value.field == "--mode"


def test_scheme_named_from_options():
    from polyspec_theory.schemes import scheme_named

    assert scheme_named("async", structured=True, batch=4) == ASYNC
    assert scheme_named("sync", structured=True, batch=4) == BATCH
    assert scheme_named("sync", structured=True) == STRUCTURED
    assert scheme_named() == CHAIN


@pytest.mark.parametrize("extra, field", [
    (["--thresholds", "2", "--queue", "2"], "--queue"),  # chain
    (["--thresholds", "2", "--batch", "2", "--cores", "0,1"], "--cores"),  # batch
    (["--batch", "2"], "--thresholds"),  # batch, no thresholds
    (["--mode", "async", "--batch", "2"], "--batch"),  # async
])
def test_capture_refuses_per_scheme_before_loading_models(capsys, tmp_path, extra, field):
    rc = main(["capture", "--models", "target,ngram", "--out", str(tmp_path), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and field in err
    assert list(tmp_path.iterdir()) == []


def test_the_threshold_floor_is_the_schemes_on_every_cascade_built():
    import dataclasses

    sync = polyspec.load_cascade(BASE)
    with pytest.raises(PolyspecInputError) as e:
        dataclasses.replace(sync, thresholds=(0,))  # built directly, not from a config
    assert e.value.field == "thresholds[0]"
    a = dataclasses.replace(polyspec.load_cascade(ASYNC_CFG), thresholds=(0,))
    assert a.thresholds == (0,) and a.scheme == ASYNC


def test_every_scheme_module_is_registered_without_a_list():
    """A new scheme is a module in each layer's ``schemes/`` package, found by itself: every
    module file of the three packages (``_``-prefixed helpers aside) is in its registry under
    the name the module gives, ``pearl`` (added as a new scheme) is in none of the built-in
    orderings, and no command module names the scheme (a ``"pearl"`` string; GPU-table
    method names such as nano-PEARL are the tables' words)."""
    import importlib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for pkg in ("polyspec_theory.schemes", "simulators.schemes", "validation.schemes"):
        mod = importlib.import_module(pkg)
        files = {p.stem for p in (root / pkg.replace(".", "/")).glob("*.py")
                 if not p.stem.startswith("_")}
        reg = mod.registry()
        assert {m.__name__.rsplit(".", 1)[1] for m in reg.values()} == files, pkg
        assert "pearl" in reg and "pearl" not in mod.REGISTERED
        assert list(reg)[-1] == "pearl"  # a new module follows the built-ins
    for p in (root / "polyspec" / "commands").glob("*.py"):
        assert not re.search(r"[\"']pearl[\"']", p.read_text()), p.name
