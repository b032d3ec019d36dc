"""JAX Monte-Carlo simulators of speculative decoding: pure functions of a PRNG key.

``simulators.length``: length-level cascade simulator (acceptance laws, block policy, costs),
the independent check of P1. ``simulators.token``: token-level simulator with synthetic Markov
language models and real speculative sampling (F1, F2, Yin). ``simulators.verify``: the
Monte-Carlo check registry behind ``polyspec verify``.
"""
