"""Figure 13 — the decision before renting a GPU (docs/theory.md HW6): the forecast speedup of
each way to decode against the serving batch size on a named GPU and engine, with the 95 %
band of the best speculative candidate and the batch from which speculation stops paying
marked (point and interval). Data: :func:`validation.hardware.plan.plan_gpu` (the dictionary
``polyspec plan --gpu ... --json`` prints); by default the example pool
``examples/gpu/qwen3-32b-pool.json`` on an H200 under vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import style

NAME = "fig13_gpu_plan"
TITLE = "Speedup against the batch size on a named GPU, before it runs (HW6)"
SOURCES = ("validation.hardware.plan",)

POOL = Path(__file__).resolve().parents[1] / "examples" / "gpu" / "qwen3-32b-pool.json"


def compute(quick: bool = False, pool=None, gpu: str = "H200", engine: str = "vllm") -> dict:
    """The plan of ``pool`` (default: the example pool) with the committed engine correction
    and interval; ``quick`` keeps three batch sizes."""
    from .registry import FigureUnavailable

    try:
        from validation.hardware.database import require_database

        require_database()
    except Exception as e:  # the optional extra is absent
        raise FigureUnavailable(f"figure 13 needs the GPU cost database ({e})") from None
    from validation.hardware.fit import load_corrections
    from validation.hardware.forecast import gamma_rule, load_interval
    from validation.hardware.plan import plan_gpu, read_pool

    p = Path(pool) if pool else POOL
    c = load_corrections()
    gp = read_pool(json.loads(p.read_text(encoding="utf-8")), p.parent, gamma_of=gamma_rule(c),
                   origin=p.name)
    if quick:
        gp.batches = gp.batches[:: max(1, len(gp.batches) // 3)][:3]
    return plan_gpu(gp, gpu, engine, c, load_interval())


def _plot(data: dict):
    fig, ax = style.figure(1, 1, height=2.5)
    b = data["batches"]
    spec = [c for c in data["candidates"] if c["kind"] != "none"]
    for j, c in enumerate(spec):
        ax.plot(b, c["speedup"], marker=style.MARKERS[j % len(style.MARKERS)],
                linestyle=style.LINESTYLES[j % len(style.LINESTYLES)], color=style.color(j),
                label=c["name"])
    if spec:
        lo = [max(c["interval95"][i][0] for c in spec) for i in range(len(b))]
        hi = [max(c["interval95"][i][1] for c in spec) for i in range(len(b))]
        ax.fill_between(b, lo, hi, color="0.6", alpha=0.2, lw=0, label="best, 95 %")
    ax.axhline(1.0, color="k", lw=0.8, label="no speculation")
    sp = data.get("stops_paying") or {}
    lo_b, hi_b = (sp.get("interval95") or [None, None])
    if lo_b is not None:
        ax.axvspan(lo_b, hi_b if hi_b is not None else b[-1], color=style.color(1),
                   alpha=0.12, lw=0)
    if sp.get("batch") is not None:
        ax.axvline(sp["batch"], color=style.color(1), lw=1.0, ls="--",
                   label=f"stops paying, b ~ {sp['batch']:.0f}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(b)
    ax.set_xticklabels([str(x) for x in b])
    ax.set_xlabel(f"batch size ({data['gpu']}, {data['engine']})")
    ax.set_ylabel("speedup over the target's decode")
    ax.legend(fontsize=5, loc="upper right")
    return fig


def draw(data: dict, out_dir) -> list[Path]:
    return style.save(_plot(data), out_dir, NAME)


def draw_file(data: dict, path) -> Path:
    """The figure written to one file (its extension picks the format)."""
    import matplotlib.pyplot as plt

    fig = _plot(data)
    try:
        fig.savefig(path, metadata={"Software": None} if str(path).endswith(".png") else None)
    finally:
        plt.close(fig)
    return Path(path)


def main(argv=None) -> int:  # pragma: no cover - script entry
    return style.script_main(TITLE, compute, draw, argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
