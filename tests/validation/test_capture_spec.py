"""The capture spec and the trace opening shared by single-stream and batched captures
(:mod:`validation.capture.setup`): each field checked and named, the defaults of each kind,
and a trace opened fresh, resumed where its records stop (prompts or decodes), refused when
its settings differ, left alone when complete. No models are loaded (synthetic and fake-clock
traces); no randomness beyond fixed seeds."""

from __future__ import annotations

import json
import math

import pytest

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.core.laws import IIDGeometric
from polyspec_theory.errors import PolyspecInputError
from validation.capture.batch import FINGERPRINT as BATCH_FINGERPRINT
from validation.capture.setup import CaptureSpec, default_name, open_trace
from validation.capture.single import FINGERPRINT
from validation.traces.records import read_records
from validation.traces.synthetic import SyntheticSpec, simulate_capture, write_trace

from .batch_fakes import write_fake_traces

SPEC = CaptureSpec(["target", "small"], [3])


def test_checked_fills_the_defaults_of_each_kind():
    single, batched = SPEC.checked(), SPEC.checked(batched=True)
    assert (single.n_prompts, single.warmup, single.ar_models) == (12, 2, "all")
    assert (batched.n_prompts, batched.warmup, batched.ar_models) == (48, 1, "target")
    given = SPEC._replace(n_prompts=6, warmup=0, ar_models="target")
    for b in (False, True):
        c = given.checked(batched=b)
        assert (c.n_prompts, c.warmup, c.ar_models) == (6, 0, "target")
    # lists (a header compares equal to the one read back from JSON), checked types
    assert single.models == ["target", "small"] and single.thresholds == [3]
    assert single.checked() == single
    assert single.name() == default_name(["target", "small"], [3], 0.0) == "target-small_th3_T0"


def test_checked_parses_structures():
    spec = CaptureSpec(["t", "m", "d"], [3, 2], tree="-1,0,0,1", schedules=["hf:2:1:6", None],
                       tree_sampling="iid").checked()
    assert spec.structured and spec.tree.parents == (-1, 0, 0, 1)
    assert spec.schedules[0].kind == "hf" and spec.schedules[1] is None
    assert spec.name().startswith("t-m-d_th3-2_T0_tree3n2d") and spec.name().endswith(
        "iid_p0hf2-1-6")
    plain = CaptureSpec(["t", "d"], [2], schedules=[None]).checked()
    assert plain.schedules is None and not plain.structured


@pytest.mark.parametrize("change, batched, field", [
    (dict(models=["target"], thresholds=[]), False, "models"),
    (dict(thresholds=[3, 2]), False, "thresholds"),
    (dict(thresholds=[0]), False, "thresholds[0]"),
    (dict(temperature=math.nan), False, "temperature"),
    (dict(temperature=-0.5), False, "temperature"),
    (dict(top_k=-1), False, "top_k"),
    (dict(max_new_tokens=0), False, "max_new_tokens"),
    (dict(threads=0), False, "threads"),
    (dict(cost_repeats=0), False, "cost_repeats"),
    (dict(dtype="int8"), False, "dtype"),
    (dict(n_prompts=0), True, "n_prompts"),
    (dict(prompt_len=0), False, "prompt_len"),
    (dict(seed=-1), False, "seed"),
    (dict(warmup=-1), False, "warmup"),
    (dict(ar_models="some"), False, "ar_models"),
    (dict(ar_models="all"), True, "ar_models"),
    (dict(tree="-1,0"), True, "tree"),
    (dict(schedules=["hf:2:1:6"]), True, "schedules"),
    (dict(schedules=["hf:2:1:6", None]), False, "schedules"),
    (dict(schedules=["sometimes"]), False, "schedules[0]"),
    (dict(tree_sampling="all"), False, "tree_sampling"),
])
def test_checked_rejects_each_bad_field_by_name(change, batched, field):
    with pytest.raises(PolyspecInputError) as e:
        SPEC._replace(**change).checked(batched=batched)
    assert str(e.value).startswith(f"{field}:"), str(e.value)


def _cut_after(path, kind: str, k: int) -> list[bytes]:
    """Keep ``path``'s lines up to its ``k``-th ``kind`` record plus half of the next line."""
    lines = path.read_bytes().split(b"\n")[:-1]
    types = [json.loads(x)["type"] for x in lines]
    at = [i for i, t in enumerate(types) if t == kind][k - 1]
    kept = [x + b"\n" for x in lines[: at + 1]]
    path.write_bytes(b"".join(kept) + lines[at + 1][:10])
    return kept


def test_open_trace_resumes_a_single_stream_trace_after_its_last_summary(tmp_path):
    cap, recs = simulate_capture(SyntheticSpec(
        "s", ["t", "d"], [CostCurve.affine(1e-3, 1e-4), CostCurve.constant(1e-4)],
        [IIDGeometric(0.6)], [3], tokens_per_prompt=10, prompts=3, baseline_contexts=(32,),
        baseline_max_m=2, baseline_reps=1, ar_tokens=3, seed=4))
    path = write_trace(tmp_path / "s.jsonl", cap, recs)
    header = read_records(path).header
    # complete: nothing to do, the file is left as it is
    body = path.read_bytes()
    assert open_trace(path, header, resume=True, fingerprint=FINGERPRINT) == (None, 0, set())
    assert path.read_bytes() == body
    kept = _cut_after(path, "summary", 2)
    cells = {(r["model"], r.get("phase"), r["ctx"], r["m"]) for r in
             (json.loads(x) for x in kept) if r["type"] == "cost"}
    assert cells  # the start-phase curves were kept
    other = dict(header, temperature=0.5)
    with pytest.raises(PolyspecInputError, match=r"^resume: .*different settings \(temperature\)"):
        open_trace(path, other, resume=True, fingerprint=FINGERPRINT)
    writer, start, done = open_trace(path, header, resume=True, fingerprint=FINGERPRINT)
    writer.close()
    assert (start, done) == (2, cells)
    raw = path.read_bytes()
    assert raw.startswith(b"".join(kept))
    last = json.loads(raw.split(b"\n")[-2])
    assert last["type"] == "resume" and last["next_prompt"] == 2 and "next_decode" not in last
    # without resume the file starts afresh: only the header
    writer, start, done = open_trace(path, header, resume=False, fingerprint=FINGERPRINT)
    writer.close()
    assert (start, done) == (0, set()) and len(path.read_bytes().split(b"\n")) == 2


def test_open_trace_resumes_a_batched_trace_at_its_next_decode(tmp_path):
    b = 2
    (path,) = write_fake_traces(tmp_path, cascades=((2, (3,)),), batches=(b,),
                                prompts_per_batch=lambda b: 3 * b, tokens=8)
    header = read_records(path).header
    kept = _cut_after(path, "bsummary", 1)
    cells = {(r["model"], r.get("phase"), r["ctx"], r["m"]) for r in
             (json.loads(x) for x in kept) if r["type"] == "bcost"}
    assert cells
    with pytest.raises(PolyspecInputError, match=r"^resume: .*\(batch\)"):
        open_trace(path, dict(header, batch=dict(header["batch"], size=4)), resume=True,
                   fingerprint=BATCH_FINGERPRINT, batch=4)
    writer, start, done = open_trace(path, header, resume=True, fingerprint=BATCH_FINGERPRINT,
                                     batch=b)
    writer.close()
    assert (start, done) == (1, cells)
    last = json.loads(path.read_bytes().split(b"\n")[-2])
    assert (last["type"], last["next_prompt"], last["next_decode"]) == ("resume", b, 1)
    recs = read_records(path, allow_truncated=True)
    assert [r["decode"] for r in recs.of_type("bsummary")] == [0]
