"""The timing discipline (docs/measuring.md, :mod:`validation.capture.machine`): the machine's
state in
every capture's header and end record, the one refusal on a busy machine (one line, exit 2)
for ``polyspec capture`` (every mode), ``polyspec profile`` and the benchmarks, and
``--allow-load`` recorded. The load reader is replaced by a fake (no test depends on the real
load of the machine running the suite)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import validation.capture.machine as machine
from polyspec.cli import main
from validation.traces.records import TraceError, read_records, read_trace
from validation.zoo.model import GPT, GPTConfig
from validation.zoo.weights import save_model

ROOT = Path(__file__).resolve().parents[2]
OLD_TRACE = ROOT / "data/traces/cpu/target-small_th2_T0.jsonl"


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("zoo")
    for i, (name, layers, width) in enumerate([("target", 1, 16), ("small", 1, 8)]):
        torch.manual_seed(i)
        m = GPT(GPTConfig(layers, 2, width))
        save_model(m, d / f"{name}.safetensors", {"name": name, "params": m.num_params()})
    return d


@pytest.fixture
def load(monkeypatch):
    """``load.set(l1, l5, l15)`` fakes the machine's load averages; the default threshold
    (the suite's conftest lifts it through the environment)."""
    monkeypatch.delenv(machine.MAX_LOAD_ENV, raising=False)

    class Fake:
        value = (0.0, 0.0, 0.0)

        def set(self, *v):
            self.value = v

    fake = Fake()
    monkeypatch.setattr(machine, "load_average", lambda: fake.value)
    return fake


def _capture_args(zoo_dir, out, *extra):
    return ["capture", "--models", "target,small", "--thresholds", "2", "--out", str(out),
            "--zoo-dir", str(zoo_dir), "--prompts", "2", "--prompt-len", "8", "--tokens", "6",
            "--warmup", "0", "--cost-contexts", "8", "--cost-repeats", "1", "--no-progress",
            *extra]


def _one_line_refusal(capsys, load_1min):
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "error: --allow-load:" in err and f"{load_1min:.2f} > 0.5" in err
    assert "POLYSPEC_MAX_LOAD" in err and "docs/measuring.md" in err


# --- the reader and the refusal ------------------------------------------------------------
def test_check_load_threshold_and_record(load, monkeypatch):
    load.set(0.5, 3.0, 3.0)  # at the threshold: not above it, starts
    assert machine.check_load(False) == {"max_load": 0.5, "allow_load": False,
                                         "load_1min": 0.5}
    load.set(0.51, 0.0, 0.0)
    with pytest.raises(machine.PolyspecInputError, match="--allow-load: .*0.51 > 0.5"):
        machine.check_load(False, "a profile")
    assert machine.check_load(True) == {"max_load": 0.5, "allow_load": True,
                                        "load_1min": 0.51}
    monkeypatch.setenv(machine.MAX_LOAD_ENV, "2")
    assert machine.check_load(False)["max_load"] == 2.0
    load.set(2.5, 0.0, 0.0)
    with pytest.raises(machine.PolyspecInputError, match="2.50 > 2"):
        machine.check_load(False)
    for bad in ("x", "-1", "inf", "nan"):
        monkeypatch.setenv(machine.MAX_LOAD_ENV, bad)
        with pytest.raises(machine.PolyspecInputError, match="POLYSPEC_MAX_LOAD: must be"):
            machine.check_load(True)
    monkeypatch.delenv(machine.MAX_LOAD_ENV)
    load.value = None  # no load average on this platform: nothing to check, starts
    assert machine.check_load(False) == {"max_load": 0.5, "allow_load": False,
                                         "load_1min": None}
    st = machine.machine_state()
    assert st["load_average"] is None and "getloadavg" in st["load_reason"]


def test_machine_state_reads_the_real_load():
    st = machine.machine_state()
    la = machine.load_average()
    assert la is None or (len(la) == 3 and all(x >= 0 for x in la))
    if la is not None:
        assert len(st["load_average"]) == 3 and "load_reason" not in st
    cpu = st["cpu_mhz"]
    assert (cpu["mhz"] is None) == ("reason" in cpu)


def test_cpu_frequency_sources(tmp_path):
    cpu = tmp_path / "sys/devices/system/cpu"
    for k, khz in ((10, "1000000"), (2, "1800000"), (0, "2400000")):
        (cpu / f"cpu{k}/cpufreq").mkdir(parents=True)
        (cpu / f"cpu{k}/cpufreq/scaling_cur_freq").write_text(khz + "\n")
    # CPU order, not the file names' (cpu10 sorts before cpu2 as text)
    assert machine.cpu_frequency(tmp_path) == {"mhz": [2400.0, 1800.0, 1000.0],
                                               "source": "cpufreq"}
    other = tmp_path / "vm"
    (other / "proc").mkdir(parents=True)
    (other / "proc/cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2596.122\n"
                                        "processor\t: 1\ncpu MHz\t\t: 2595.5\n")
    assert machine.cpu_frequency(other) == {"mhz": [2596.1, 2595.5],
                                            "source": "/proc/cpuinfo"}
    (other / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: virtual\n")
    r = machine.cpu_frequency(other)
    assert r["mhz"] is None and "cpu MHz" in r["reason"]
    r = machine.cpu_frequency(tmp_path / "nothing")
    assert r["mhz"] is None and "is readable" in r["reason"]


# --- polyspec capture, every mode ------------------------------------------------------------
def test_capture_refuses_on_a_busy_machine(zoo_dir, tmp_path, capsys, load):
    load.set(3.0, 2.0, 1.0)
    for extra in ([], ["--batch", "1"], ["--batches", "1,2"]):
        assert main(_capture_args(zoo_dir, tmp_path, *extra)) == 2
        _one_line_refusal(capsys, 3.0)
    assert main(["capture", "--mode", "async", "--models", "target,small", "--thresholds",
                 "2", "--out", str(tmp_path), "--zoo-dir", str(zoo_dir)]) == 2
    _one_line_refusal(capsys, 3.0)
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing timed
    # a bad flag is reported first, not the load
    assert main(_capture_args(zoo_dir, tmp_path, "--temperature", "-1")) == 2
    assert "error: temperature" in capsys.readouterr().err


def test_allow_load_is_recorded(zoo_dir, tmp_path, capsys, load):
    load.set(3.0, 2.0, 1.0)
    assert main(_capture_args(zoo_dir, tmp_path, "--allow-load")) == 0, capsys.readouterr()
    path = tmp_path / "target-small_th2_T0.jsonl"
    raw = read_records(path)
    h = raw.header
    assert h["load_check"] == {"max_load": 0.5, "allow_load": True, "load_1min": 3.0}
    assert h["machine"]["load_average"] == [3.0, 2.0, 1.0]
    assert "mhz" in h["machine"]["cpu_mhz"]
    end = raw.of_type("end")[0]
    assert end["machine"]["load_average"] == [3.0, 2.0, 1.0]
    t = read_trace(path)
    assert t.load_check["allow_load"] is True and t.machine["load_average"][0] == 3.0


def test_idle_capture_records_the_check(zoo_dir, tmp_path, capsys, load):
    load.set(0.05, 0.1, 0.2)
    assert main(_capture_args(zoo_dir, tmp_path, "--batch", "2")) == 0, capsys.readouterr()
    raw = read_records(tmp_path / "target-small_th2_T0_b2.jsonl")
    assert raw.header["load_check"] == {"max_load": 0.5, "allow_load": False,
                                        "load_1min": 0.05}
    assert raw.header["machine"]["load_average"] == [0.05, 0.1, 0.2]
    assert raw.of_type("end")[0]["machine"]["load_average"] == [0.05, 0.1, 0.2]


# --- polyspec profile and the benchmarks -----------------------------------------------------
def test_profile_refuses_and_records(zoo_dir, tmp_path, capsys, load):
    load.set(1.5, 1.0, 1.0)
    base = ["profile", "small", "--max-m", "1", "--repeats", "1", "--warmup", "0",
            "--zoo-dir", str(zoo_dir), "--json"]
    assert main(base) == 2
    _one_line_refusal(capsys, 1.5)
    assert main(base + ["--allow-load"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["load_check"] == {"max_load": 0.5, "allow_load": True, "load_1min": 1.5}
    assert rep["machine"]["load_average"] == rep["machine_end"]["load_average"] == [1.5, 1, 1]


def test_benchmarks_refuse(load, capsys):
    load.set(0.9, 0.0, 0.0)
    spec = importlib.util.spec_from_file_location("bench_predict",
                                                  ROOT / "benchmarks/bench_predict.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as e:
        mod.main([])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-load: the 1-minute load average is 0.90" in err
    with pytest.raises(SystemExit):
        machine.check_load_or_exit(False, "a benchmark")
    capsys.readouterr()
    assert machine.check_load_or_exit(True, "a benchmark")["allow_load"] is True


# --- the readers ---------------------------------------------------------------------------
def test_old_traces_read_and_bad_fields_are_named(tmp_path):
    old = read_trace(OLD_TRACE)  # committed before the fields existed
    assert "machine" not in old.header and old.machine is None and old.load_check is None
    lines = OLD_TRACE.read_text().splitlines()
    for key, value, msg in [
        ("machine", {"load_average": [0.1, "x", 0.1]}, "machine.load_average\\[1\\]"),
        ("machine", {"load_average": [0.1, 0.2]}, "machine.load_average: must have 3"),
        ("machine", {"cpu_mhz": {"mhz": [-1.0]}}, "machine.cpu_mhz.mhz\\[0\\]"),
        ("load_check", {"max_load": 0.5, "allow_load": "yes", "load_1min": 1.0},
         "load_check.allow_load"),
        ("load_check", [1], "load_check: must be an object"),
    ]:
        h = json.loads(lines[0])
        h[key] = value
        p = tmp_path / "t.jsonl"
        p.write_text("\n".join([json.dumps(h), *lines[1:]]) + "\n")
        with pytest.raises(TraceError, match=f"line 1: header.{msg}"):
            read_records(p)
    end = json.loads(lines[-1])
    assert end["type"] == "end"
    end["machine"] = {"load_average": None, "cpu_mhz": {"mhz": None, "reason": "vm"}}
    p.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    read_records(p)  # null load and frequency: accepted
    end["machine"] = {"load_average": [1, 2, -3]}
    p.write_text("\n".join([*lines[:-1], json.dumps(end)]) + "\n")
    with pytest.raises(TraceError, match="machine.load_average\\[2\\]"):
        read_records(p)
