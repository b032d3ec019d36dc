"""Batched (lockstep) decoding, docs/theory.md model B0: the levels that decode ``b``
sequences at once (:mod:`.levels`), the batched cascade decoder and autoregressive baseline
(:mod:`.decoder`), batched captures (:mod:`.capture`), a batched trace as data
(:mod:`.dataset`) and the text of a batched validation (:mod:`.report`). The validation
itself is :mod:`validation.analysis.batch_validate`."""
