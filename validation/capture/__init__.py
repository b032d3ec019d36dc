"""Captures: a scheme's decoder run on real models, every round, baseline and cost curve
written to a trace (:mod:`validation.traces`). :func:`capture` runs the driver the scheme
names (``DRIVER`` of its module in :mod:`validation.schemes`: one of these, or the scheme's
own function with :func:`capture`'s signature, as ``pearl``'s):

* ``stream`` (:mod:`.single`): one process, prompt after prompt (chains, trees, schedules);
* ``pipeline`` (:mod:`.async_`): one process per level, each on its own core;
* ``batch`` (:mod:`.batch`): lockstep batches, one trace per batch size.

:mod:`.setup` holds what every capture shares (:class:`~.setup.CaptureSpec`, prompts, the
header, resuming), :mod:`.models` / :mod:`.batch_models` the loaded models, :mod:`.machine`
the machine's state and the load refusal, :mod:`.profile` / :mod:`.composition` the cost
profiles (alone and inside a cascade).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from validation import schemes

__all__ = ["capture", "DRIVERS"]

# a scheme's DRIVER -> the function that runs its captures (module:function)
DRIVERS = {"stream": "single:capture", "pipeline": "async_:capture_async",
           "batch": "batch:capture_batches"}


def capture(spec, *, out, name=None, resume=False, force=False, progress=True,
            argv=None) -> list[Path]:
    """Run the captures ``spec`` describes with its scheme's driver; the trace paths (one, or
    one per batch size)."""
    driver = schemes.get(spec.scheme).DRIVER
    if callable(driver):  # a scheme that brings its own capture loop
        run = driver
    else:
        mod, fn = DRIVERS[driver].split(":")
        run = getattr(importlib.import_module(f"validation.capture.{mod}"), fn)
    got = run(spec, out=out, name=name, resume=resume, force=force, progress=progress,
              argv=argv)
    return list(got) if isinstance(got, list) else [got]
