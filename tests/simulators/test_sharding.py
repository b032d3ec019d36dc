"""The same simulation spread over 2 (forced CPU host) devices gives exactly the results of
one device for the same seed. XLA_FLAGS must be set before jax is imported, so the check
runs in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json
    import jax
    import numpy as np
    from polyspec_theory.core.config import Cascade
    from simulators.length import LengthModel, simulate_lengths
    from simulators.token import TokenModel, make_lms, simulate_tokens

    assert jax.device_count() == 2, jax.devices()
    cas = Cascade.from_config({
        "models": [{"name": "t", "cost": {"base": 1.0, "per_token": 0.02}},
                   {"name": "m", "cost": 0.2}, {"name": "d", "cost": 0.02}],
        "acceptance": [{"beta": [4, 1.5]}, {"alpha": 0.7}], "thresholds": [5, 2]})
    model = LengthModel.from_cascade(cas)
    out = {}
    for chains in (64, 63):  # 63: padded to 64 on 2 devices
        one = simulate_lengths(model, 20_000, seed=3, chains=chains, chunk_len=64,
                               devices=jax.devices()[:1])
        two = simulate_lengths(model, 20_000, seed=3, chains=chains, chunk_len=64)
        out[f"length{chains}"] = [one.to_dict(), two.to_dict(),
                                  one.chain_time.tolist(), two.chain_time.tolist()]
    tm = TokenModel.build(make_lms(3, vocab=4, seed=2), [4, 2])
    one = simulate_tokens(tm, 4_000, seed=9, chains=32, chunk_len=32, devices=jax.devices()[:1])
    two = simulate_tokens(tm, 4_000, seed=9, chains=32, chunk_len=32)
    out["token"] = [one.to_dict(), two.to_dict(), one.ngram_counts.tolist(),
                    two.ngram_counts.tolist()]
    print(json.dumps(out))
""")


def test_two_devices_identical_to_one():
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=2").strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, (one, two, *arrays) in out.items():
        assert one == two, key
        assert arrays[0] == arrays[1], key
    assert out["length64"][0]["tokens"] > 0


def test_cli_simulate_same_numbers_on_one_and_two_cpu_devices(capsys, monkeypatch):
    """``polyspec simulate --cpu-devices K`` shards chains over K CPU devices
    (``use_cpu_cores``); the JSON report is identical for K = 1 and K = 2. K = 2 needs a
    fresh process (the device count is fixed when JAX starts); K = 1 runs in this process
    when it already has exactly one CPU device (a test worker's), else in a fresh one too."""
    from pathlib import Path

    import jax

    from polyspec.cli import main

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    argv = ["simulate", "configs/default.json", "--tokens", "20000", "--chains", "63",
            "--json", "--cpu-devices"]
    outs = []
    for k in (1, 2):
        if k == 1 and jax.default_backend() == "cpu" and jax.device_count() == 1:
            monkeypatch.chdir(root)
            capsys.readouterr()
            rc = main([*argv, "1"])
            text = capsys.readouterr().out
            assert rc == 0
            assert jax.device_count() == 1
            outs.append(json.loads(text))
            continue
        code = ("import jax, sys; from polyspec.cli import main; "
                f"rc = main({[*argv, str(k)]!r}); "
                "print('DEVICES', jax.device_count()); sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=root,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text, dev = proc.stdout.rsplit("DEVICES", 1)
        assert int(dev) == k
        outs.append(json.loads(text))
    assert outs[0] == outs[1]
    assert outs[0]["chains"] == 63
