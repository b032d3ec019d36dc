"""Every ``--help`` works: the bare command, ``polyspec --help`` and each subcommand's (the
first things a newcomer types), in a fresh process like a user's shell."""

import subprocess
import sys
from pathlib import Path

import pytest

from polyspec.cli import COMMANDS, build_parser


def _run(*argv):
    return subprocess.run([sys.executable, "-m", "polyspec", *argv], capture_output=True,
                          text=True, timeout=120)


def test_top_level_help_lists_every_command():
    r = _run("--help")
    assert r.returncode == 0 and r.stderr == ""
    for name in COMMANDS:
        assert f"    {name}" in r.stdout


def test_bare_command_prints_usage_without_a_traceback():
    r = _run()
    assert r.returncode == 2 and "usage: polyspec" in r.stdout and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [[c] for c in COMMANDS] + [["zoo", "train"], ["zoo", "info"]],
                         ids=lambda a: " ".join(a))
def test_every_subcommand_help(argv, capsys):
    parser = build_parser()
    with pytest.raises(SystemExit) as e:
        parser.parse_args([*argv, "--help"])
    out = capsys.readouterr()
    assert e.value.code == 0 and out.err == ""
    assert out.out.startswith(f"usage: polyspec {' '.join(argv)}")


HEAVY = ("jax", "torch", "scipy", "matplotlib")
_IMPORTS = """
import contextlib, io, sys
from polyspec.cli import main
for argv in (["--help"], []):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
print(sorted(m for m in HEAVY if m in sys.modules))
from polyspec.api import load_cascade
import polyspec_theory.planning.modes, polyspec_theory.planning.planner
import validation.analysis.plan_uncertainty, validation.hardware.fit
import validation.hardware.forecast, validation.hardware.plan
from polyspec_theory.core.costs import fit_cost_curve
assert fit_cost_curve([1, 1, 2, 2, 3, 3], [1.0, 1.1, 2.0, 2.2, 3.1, 2.9]).lack_of_fit_p < 1
print(sorted(m for m in (*HEAVY, "scipy.stats", "scipy.optimize") if m in sys.modules))
from polyspec_theory.planning.calibration import t_quantile
assert t_quantile(5) > t_quantile(0) > 1.9
print(sorted(m for m in ("jax", "torch", "matplotlib", "scipy.stats") if m in sys.modules))
from simulators.schemes import get_simulator
get_simulator(load_cascade("configs/default.json"))
print(sorted(m for m in ("torch", "matplotlib", "scipy.stats") if m in sys.modules))
"""


def test_commands_import_only_what_they_use():
    """In a fresh process: ``polyspec --help`` and bare ``polyspec`` import none of jax,
    torch, scipy, matplotlib (no command's options are built); what ``plan POOL`` runs,
    the modules of ``forecast --rows`` / ``plan --gpu`` (pricing a PEARL run loads
    scipy.stats where it runs) and a cost fit's lack-of-fit test import no scipy.stats,
    scipy.optimize, jax or matplotlib; ``calibrate`` (its fit and quantile) and
    ``simulate``'s simulator import no scipy.stats (each of these a second of start-up)."""
    r = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_IMPORTS}"],
                       capture_output=True, text=True, timeout=300,
                       cwd=str(Path(__file__).resolve().parents[2]))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["[]", "['scipy']", "[]", "[]"], r.stdout
