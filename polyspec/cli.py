"""The ``polyspec`` command. Each subcommand lives in ``polyspec/commands/<name>.py`` and
exposes ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``; heavy imports (jax,
torch, matplotlib) happen inside ``run`` so ``polyspec predict`` needs only the core.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys

from polyspec_theory._input import PolyspecInputError

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polyspec",
        description="Theory, simulation and validation of polybasic speculative decoding.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in _available():
        text = mod.HELP.replace("%", "%%")  # argparse formats help strings with %
        p = sub.add_parser(name, help=text, description=text)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (PolyspecInputError, CommandError) as e:
        print(f"polyspec {args.command}: error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"polyspec {args.command}: error: file not found: {e.filename}", file=sys.stderr)
        return 2
    except json.JSONDecodeError as e:
        print(f"polyspec {args.command}: error: invalid JSON: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"polyspec {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
