"""Every ``--help`` works: the bare command, ``polyspec --help`` and each subcommand's (the
first things a newcomer types), in a fresh process like a user's shell."""

import subprocess
import sys

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
