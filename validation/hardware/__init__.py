"""A-priori costs for a named GPU and engine, and forecasts of runs that have not happened
(docs/theory.md Part VII-HW).

* :mod:`~validation.hardware.database` -- ``T_b(m)``, a forward over ``m`` new tokens for each
  of ``b`` sequences at KV length ``s``, built from the per-operation latencies of
  aiconfigurator-core's database (the optional extra ``polyspec[gpu]``) (HW1);
* :mod:`~validation.hardware.names` -- GPU, engine and model names as the tables write them,
  mapped to the database's;
* :mod:`~validation.hardware.engines` -- how an engine runs a forward on top of the kernels
  (CUDA-graph padding, host work per forward and per sequence, the parallel handshake) and
  the few parameters of that correction, fitted on the shared tables (HW2);
* :mod:`~validation.hardware.acceptance` -- acceptance of a model pair from another log of
  the same pair (HW3);
* :mod:`~validation.hardware.methods` -- each decoding method's timed run as its code runs:
  autoregressive, PEARL, EAGLE trees and chains, SSD sync and async (HW4);
* :mod:`~validation.hardware.rows` -- the GPU-table row format (detect, read);
* :mod:`~validation.hardware.forecast` -- forecasts of rows with their intervals (HW5) and
  the batch plan (HW6); :mod:`~validation.hardware.leaveout` -- the leave-out validation.

Nothing here needs the database at import time: without ``aiconfigurator-core`` every entry
point refuses with one line naming the extra.
"""
