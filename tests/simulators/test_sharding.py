"""The same simulation spread over 2 CPU host devices gives exactly the results of one device
for the same seed. The device count is fixed when JAX starts its backends, so the checks run
in one fresh process with 2 CPU devices (``polyspec simulate --cpu-devices 2`` first, which
sets the count, then the simulators on 1 and 2 devices side by side), shared by this module's
two tests (one xdist group: the process runs once per test run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("sharding")

ROOT = Path(__file__).resolve().parents[2]
# three levels (the device count does not depend on the depth: smaller than the default
# config's four, so that its compiled chunks are cheaper and the CLI's 2-device run is the
# very run of the padded case below: one compilation for both)
CONFIG = {"models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                     {"name": "m", "cost": 0.2}, {"name": "d", "cost": 0.02}],
          "acceptance": [{"beta": [4, 1.5]}, {"alpha": 0.7}], "thresholds": [5, 2]}


def _simulate(config: Path, devices: int) -> list[str]:
    return ["simulate", str(config), "--tokens", "20000", "--chains", "63", "--json",
            "--cpu-devices", str(devices)]


SCRIPT = textwrap.dedent("""
    import contextlib
    import io
    import json
    import sys
    import jax
    from polyspec.cli import main

    cli = io.StringIO()
    with contextlib.redirect_stdout(cli):  # sets the CPU device count: first
        rc = main(sys.argv[1:])
    assert rc == 0, rc
    from pathlib import Path
    from polyspec_theory.core.config import Cascade
    from simulators.length import LengthModel, simulate_lengths
    from simulators.token import TokenModel, make_lms, simulate_tokens

    assert jax.device_count() == 2, jax.devices()
    cas = Cascade.from_config(json.loads(Path(sys.argv[2]).read_text()))  # the CLI's config
    model = LengthModel.from_cascade(cas)
    out = {}
    # 64 chains, 64 events per chunk: several chunks, no padding
    one = simulate_lengths(model, 20_000, seed=3, chains=64, chunk_len=64,
                           devices=jax.devices()[:1])
    two = simulate_lengths(model, 20_000, seed=3, chains=64, chunk_len=64)
    out["length64"] = [one.to_dict(), two.to_dict(), one.chain_time.tolist(),
                       two.chain_time.tolist()]
    # 63 chains: padded to 64 on 2 devices; the CLI's run shape (its compiled chunk reused)
    one = simulate_lengths(cas, 20_000, seed=3, chains=63, devices=jax.devices()[:1])
    two = simulate_lengths(cas, 20_000, seed=3, chains=63)
    out["length63"] = [one.to_dict(), two.to_dict(), one.chain_time.tolist(),
                       two.chain_time.tolist()]
    tm = TokenModel.build(make_lms(3, vocab=4, seed=2), [4, 2])
    one = simulate_tokens(tm, 4_000, seed=9, chains=32, chunk_len=32, devices=jax.devices()[:1])
    two = simulate_tokens(tm, 4_000, seed=9, chains=32, chunk_len=32)
    out["token"] = [one.to_dict(), two.to_dict(), one.ngram_counts.tolist(),
                    two.ngram_counts.tolist()]
    print(json.dumps({"cli": json.loads(cli.getvalue()), "devices": jax.device_count(),
                      "sims": out}))
""")


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sharding") / "three.json"
    path.write_text(json.dumps(CONFIG))
    return path


@pytest.fixture(scope="module")
def two_devices(config) -> dict:
    """One fresh process with 2 CPU devices (``--cpu-devices 2``; ``XLA_FLAGS`` removed, so
    that it sets the count): ``cli`` its ``polyspec simulate`` JSON report, ``devices`` its
    device count, ``sims`` the simulators' results on 1 and 2 devices."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *_simulate(config, 2)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_two_devices_identical_to_one(two_devices):
    out = two_devices["sims"]
    for key, (one, two, *arrays) in out.items():
        assert one == two, key
        assert arrays[0] == arrays[1], key
    assert out["length64"][0]["tokens"] > 0


def test_cli_simulate_same_numbers_on_one_and_two_cpu_devices(capsys, monkeypatch, config,
                                                             two_devices):
    """``polyspec simulate --cpu-devices K`` shards chains over K CPU devices
    (``use_cpu_cores``); the JSON report is identical for K = 1 and K = 2. K = 2 needs a
    fresh process (the device count is fixed when JAX starts: the module's 2-device process);
    K = 1 runs in this process when it already has exactly one CPU device (a test worker's),
    else in a fresh one too."""
    import jax

    from polyspec.cli import main

    assert two_devices["devices"] == 2
    if jax.default_backend() == "cpu" and jax.device_count() == 1:
        monkeypatch.chdir(ROOT)
        capsys.readouterr()
        rc = main(_simulate(config, 1))
        text = capsys.readouterr().out
        assert rc == 0
        assert jax.device_count() == 1
    else:
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        env["JAX_PLATFORMS"] = "cpu"
        code = ("import jax, sys; from polyspec.cli import main; "
                f"rc = main({_simulate(config, 1)!r}); "
                "print('DEVICES', jax.device_count()); sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text, dev = proc.stdout.rsplit("DEVICES", 1)
        assert int(dev) == 1
    one = json.loads(text)
    assert one == two_devices["cli"]
    assert one["chains"] == 63
