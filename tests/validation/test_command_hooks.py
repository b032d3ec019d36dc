"""The scheme modules' command hooks (issue 37, "commands are generic"): ``polyspec profile``
and ``polyspec forecast`` decide the scheme once from ``--mode`` and run what its module of
``validation/schemes/`` names (:func:`validation.schemes.command_hook`), never a scheme name of
their own.

Independent values: which built-in scheme gives which hook is pinned from what each command
did before the hooks (the async pipeline's own profile and forecast of our captures, a PipeSpec
folder forecast for the chain and the pipeline, the batch and structured forecast requests);
the refusals are the theory's one refusal (``polyspec_theory.schemes.refuse``) written out."""

from __future__ import annotations

import pytest

from polyspec.cli import main
from polyspec_theory.errors import PolyspecInputError
from validation import schemes
from validation.analysis import async_forecast, forecast_kinds, pipespec_async, pipespec_forecast
from validation.analysis.forecast_kinds import KindRequest, forecast_request
from validation.capture import async_profile
from validation.schemes import HOOKS, command_hook

from ..cli_checks import run_checked

# scheme -> {hook: the function it must resolve to}
EXPECTED = {
    "chain": {"FORECAST_FOLDER": lambda: pipespec_forecast.forecast_dir},
    "structured": {"FORECAST_KIND": lambda: forecast_kinds.structured_request},
    "batch": {"FORECAST_KIND": lambda: forecast_kinds.batch_request},
    "async": {"PROFILE": lambda: async_profile.run_profile,
              "FORECAST_CAPTURES": lambda: async_forecast.forecast_captures,
              "FORECAST_FOLDER": lambda: pipespec_async.forecast_async_dir},
    "pearl": {},
}


def test_every_scheme_gives_the_hooks_of_its_former_command_path():
    assert set(schemes.registry()) == set(EXPECTED)
    for name, hooks in EXPECTED.items():
        for hook in HOOKS:
            got = command_hook(name, hook)
            want = hooks.get(hook)
            assert (got is None) == (want is None), (name, hook)
            if want is not None:
                assert got is want(), (name, hook)


def test_a_scheme_without_the_hook_is_none_or_refused_naming_the_field():
    assert command_hook("chain", "PROFILE") is None  # the caller's default path
    with pytest.raises(PolyspecInputError) as e:
        command_hook("pearl", "FORECAST_FOLDER", "forecast on GPU runs", "--mode")
    assert e.value.field == "--mode"
    assert str(e.value) == ("--mode: forecast on GPU runs is not available for parallel "
                            "draft-verify (PEARL) (scheme 'pearl')")
    with pytest.raises(PolyspecInputError) as e:
        command_hook("chain", "FORECAST_KIND", "x", "--batch")
    assert str(e.value) == "--batch: x is not available for synchronous chain drafts " \
                           "(scheme 'chain')"
    # a scheme given hooks elsewhere is not refused for them
    assert command_hook("async", "PROFILE", "x", "--mode") is async_profile.run_profile


def test_an_unknown_scheme_or_hook_name_is_refused():
    with pytest.raises(PolyspecInputError) as e:
        command_hook("nope", "PROFILE")
    assert e.value.field == "scheme" and "'nope'" in str(e.value)
    with pytest.raises(LookupError, match="'VALIDATE' is not a command hook"):
        command_hook("chain", "VALIDATE")  # resolved by validation.analysis.traces, not here
    with pytest.raises(LookupError, match="'PROFILES' is not a command hook"):
        command_hook("async", "PROFILES")


@pytest.mark.parametrize("ref, why", [
    ("validation.capture.async_profile", "expected 'module:function'"),
    ("validation.capture.async_profile:", "expected 'module:function'"),
    (":run_profile", "expected 'module:function'"),
    (42, "expected 'module:function'"),
    ("validation.no_such_module:run", "cannot import validation.no_such_module"),
    ("polyspec.commands.profile:run", "a hook lives in polyspec_theory, simulators, "
                                      "validation (imports flow one way)"),
    ("validation.capture.async_profile:no_such_function",
     "validation.capture.async_profile has no function 'no_such_function'"),
    ("validation.capture.async_profile:ASYNC_PROFILE_FORMAT",  # a string, not a function
     "has no function 'ASYNC_PROFILE_FORMAT'"),
])
def test_a_hook_that_does_not_resolve_says_which(monkeypatch, ref, why):
    monkeypatch.setattr(schemes.get("chain"), "PROFILE", ref, raising=False)
    with pytest.raises(LookupError) as e:
        command_hook("chain", "PROFILE")
    msg = str(e.value)
    assert msg.startswith(f"validation.schemes.chain.PROFILE = {ref!r}: ") and why in msg


@pytest.fixture
def calls(monkeypatch):
    """The async hooks replaced by recorders (the command still resolves them by name)."""
    seen = []

    def recorder(what):
        def run(args):
            seen.append((what, args.mode))
            return 0
        return run

    monkeypatch.setattr(async_profile, "run_profile", recorder("profile"))
    monkeypatch.setattr(async_forecast, "forecast_captures", recorder("forecast"))
    return seen


def test_the_commands_reach_the_async_schemes_hooks(calls):
    assert main(["forecast", "--mode", "async", "--models", "target,small"]) == 0
    assert main(["profile", "--cascade", "--mode", "async", "target", "small"]) == 0
    assert main(["profile", "--mode", "async", "target", "small"]) == 0  # as before the hooks
    assert calls == [("forecast", "async"), ("profile", "async"), ("profile", "async")]


def test_a_new_scheme_gets_the_commands_by_its_hooks_alone(calls, monkeypatch, capsys):
    # without hooks pearl is refused as any scheme the commands do not serve
    rc, _, err, _ = run_checked(capsys, ["profile", "--mode", "pearl", "target", "small"])
    assert rc == 2 and err == ("polyspec profile: error: --mode: profile times sync or async "
                               "cascades, got 'pearl'\n")
    rc, _, err, _ = run_checked(capsys, ["forecast", "--mode", "pearl", "--models", "a,b"])
    assert rc == 2 and err == ("polyspec forecast: error: --mode: only applies to a folder of "
                               "GPU runs (PipeSpec), or async on captures\n")
    # given hooks in its module, the same command lines reach them (no command edited)
    pearl = schemes.get("pearl")
    monkeypatch.setattr(pearl, "PROFILE", "validation.capture.async_profile:run_profile",
                        raising=False)
    monkeypatch.setattr(pearl, "FORECAST_CAPTURES",
                        "validation.analysis.async_forecast:forecast_captures", raising=False)
    assert main(["profile", "--mode", "pearl", "target", "small"]) == 0
    assert main(["forecast", "--mode", "pearl", "--models", "a,b"]) == 0
    assert calls == [("profile", "pearl"), ("forecast", "pearl")]


def test_the_default_paths_take_no_hook(calls, capsys):
    # sync: the synchronous profile's own checks, never the async hook
    rc, _, err, _ = run_checked(capsys, ["profile", "--mode", "sync", "target", "--queue", "4"])
    assert rc == 2 and err.endswith("error: --queue: only applies with --mode async\n")
    rc, _, err, _ = run_checked(capsys, ["forecast", "--mode", "sync", "--models", "a,b"])
    assert rc == 2 and "error: --mode: only applies to a folder of GPU runs" in err
    assert calls == []


def test_a_kind_forecast_of_a_scheme_without_one_is_refused_before_reading():
    req = KindRequest(("target", "small"), (2,), 0.0, "/no/such/folder")
    with pytest.raises(PolyspecInputError) as e:
        forecast_request(req)
    assert str(e.value) == ("--batch: polyspec forecast --tree / --schedule / --batch is not "
                            "available for synchronous chain drafts (scheme 'chain')")


def test_a_pipespec_folder_forecast_takes_the_schemes_folder_hook(monkeypatch, capsys):
    from pathlib import Path

    from validation.analysis.folders import forecast_folder

    seen = []
    for mod, fn in ((pipespec_forecast, "forecast_dir"), (pipespec_async,
                                                           "forecast_async_dir")):
        monkeypatch.setattr(mod, fn, lambda d, names, k, p, fn=fn: seen.append((fn, k)) or {})
    for mode in (None, "sync", "async"):
        assert forecast_folder("d", ("s", "t"), 0, None, mode) == {}
    # θ = 0: the chain's lookahead 1, the pipeline's 0 (verify what is ready, AS0)
    assert seen == [("forecast_dir", 1), ("forecast_dir", 1), ("forecast_async_dir", 0)]
    with pytest.raises(PolyspecInputError) as e:
        forecast_folder("d", ("s", "t"), 0, None, "pearl")
    assert str(e.value) == ("--mode: forecast on GPU runs is not available for parallel "
                            "draft-verify (PEARL) (scheme 'pearl')")
    # the command on a PipeSpec folder: the same refusal on one line
    ps = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-traces" / "pipespec-humaneval"
    rc, _, err, _ = run_checked(capsys, ["forecast", "--traces", ps, "--models", "a,b",
                                         "--thresholds", "5", "--mode", "pearl"])
    assert rc == 2 and err == f"polyspec forecast: error: {e.value}\n"
