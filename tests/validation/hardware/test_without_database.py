"""Without the optional extra (``aiconfigurator_core`` made unimportable in a fresh process)
polyspec works unchanged, and every GPU entry point refuses on one line naming the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .tables import NANOPEARL, ROOT

BLOCK = ("import sys; sys.modules['aiconfigurator_core'] = None; "
         "from polyspec.cli import main; sys.exit(main(sys.argv[1:]))")


def _run(*argv):
    return subprocess.run([sys.executable, "-c", BLOCK, *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv,field", [
    (["forecast", "--rows", NANOPEARL], "--rows"),
    (["profile", "--gpu", "H200", "--engine", "vllm", "--model", "Qwen/Qwen3-32B"], "--gpu"),
    (["plan", "--gpu", "H200", "--engine", "vllm", "--pool", "examples/gpu/qwen3-32b-pool.json"],
     "--gpu"),
])
def test_gpu_commands_refuse_naming_the_extra(argv, field):
    r = _run(*argv)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert f"error: {field}: needs the GPU cost database: pip install 'polyspec[gpu]'" \
        in r.stderr


def test_the_rest_works_unchanged():
    r = _run("predict", "configs/default.json", "--json")
    assert r.returncode == 0, r.stderr
    assert '"speedup"' in r.stdout
