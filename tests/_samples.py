"""The real engine outputs the engine tests read (copied from shared/engine-samples so a clone
without the shared folder tests them; tests/fixtures/engine-samples/README.md gives each
file's source)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["SAMPLES", "sample"]

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "engine-samples"


def sample(name: str) -> Path:
    """The path of engine sample ``name``; a missing one fails loudly (the real outputs are
    the ground truth of these tests, never a reason to skip)."""
    p = SAMPLES / name
    if not p.is_file():
        raise AssertionError(f"missing engine sample {p} (tests/fixtures/engine-samples)")
    return p
