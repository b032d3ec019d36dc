"""The ``polyspec`` command. Each subcommand lives in ``polyspec/commands/<name>.py`` and
exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports (jax,
torch, matplotlib) happen inside ``run`` so ``polyspec predict`` needs only the core.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys
import warnings

from polyspec_theory.errors import PolyspecInputError

COMMANDS = (
    "demo",
    "predict",
    "simulate",
    "verify",
    "zoo",
    "capture",
    "validate",
    "plan",
    "figures",
    "fit",
    "calibrate",
    "profile",
    "forecast",
)


class CommandError(Exception):
    """A user-facing failure: printed on one line, exit status 2."""


def _available():
    for name in COMMANDS:
        mod = f"polyspec.commands.{name}"
        if importlib.util.find_spec(mod) is not None:
            yield name, importlib.import_module(mod)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; with ``only`` (the command a command line names) only
    that command's options are built (the others keep their help line): a command imports
    what its own options need, never what the others' do. ``only=""`` (a command line that
    names no command: ``polyspec``, ``polyspec --help``) builds no command's options."""
    parser = argparse.ArgumentParser(
        prog="polyspec",
        description="Theory, simulation and validation of polybasic speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in _available():
        # argparse %-formats a sub-command's help, not its description
        p = sub.add_parser(name, help=mod.HELP.replace("%", "%%"), description=mod.HELP)
        if only is None or name == only:
            mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


_NEGATIVE_LIST = re.compile(r"^-\d+(,-?\d+)+$")


def _join_negative_lists(argv):
    """``--tree -1,0,0,1`` -> ``--tree=-1,0,0,1``: argparse takes a value with a leading '-'
    for an option (it only knows single negative numbers), so a comma-separated list of
    integers that starts with one is joined to the option before it."""
    out = []
    for word in argv:
        if (out and _NEGATIVE_LIST.match(word) and out[-1].startswith("--")
                and "=" not in out[-1]):
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def _show_warning(prog):
    """Warnings polyspec raises for a user (e.g. a fitted law used past its data) as one
    ``PROG: warning: ...`` line on stderr, without a file and line of code."""
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {message}", file=sys.stderr)
    return show


def main(argv=None) -> int:
    """Run one command. Exit status: 0 success, 1 a check failed (``verify``) or an internal
    error, 2 bad input (one line on stderr naming the field, file and line), 130
    interrupted."""
    argv = _join_negative_lists(sys.argv[1:] if argv is None else argv)
    # the top-level parser has no options of its own but -h, so the first word that names a
    # command is the command argparse runs (none: only the top-level help or an error)
    parser = build_parser(next((w for w in argv if w in COMMANDS), ""))
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    prog = f"polyspec {args.command}"
    from .output import reset_reads

    reset_reads()  # the one rule for writes: no output over a file this command read
    try:
        # numpy's floating-point RuntimeWarnings (overflow, invalid value ...) never reach a
        # user: a value that makes them is refused with a one-line error (or is harmless)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.showwarning = _show_warning(prog)
            return int(args._run(args) or 0)
    except (PolyspecInputError, CommandError) as e:
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"{prog}: error: file not found: {e.filename}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as e:
        print(f"{prog}: error: invalid JSON: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (``polyspec ... | head``): stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except MemoryError:
        print(f"{prog}: error: out of memory (the input or the requested work is too large)",
              file=sys.stderr)
        return 2
    except Exception as e:  # a bug: one line, the traceback only on request
        if os.environ.get("POLYSPEC_TRACEBACK"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {_one_line(e)} (a bug in "
              "polyspec; set POLYSPEC_TRACEBACK=1 for the traceback and please report it)",
              file=sys.stderr)
        return 1


def _one_line(e) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
