"""Readers, cost model and forecasts for real GPU speculative-decoding traces: PipeSpec
multi-model cascades (:mod:`.pipespec`) and Spec-Bench answer files (:mod:`.specbench`)."""
