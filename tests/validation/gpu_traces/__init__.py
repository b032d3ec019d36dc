"""Tests of the GPU-trace readers and forecasts (validation.formats.pipespec, specbench;
validation.analysis.pipespec_forecast, pipespec_async, specbench) on the trimmed PipeSpec /
Spec-Bench copies in tests/fixtures/gpu-traces (source named in its README)."""

import os

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "gpu-traces",
                   "pipespec-humaneval")
# the PipeSpec cascade's models: small, middle, big (target)
S, M, B = "Llama-3.2-1B-Instruct", "Llama-3.1-8B-Instruct", "Meta-Llama-3.1-70B-Instruct"
