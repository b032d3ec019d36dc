"""The core of the theory: acceptance-length laws (counts, laws, hidden regimes), cost
curves, the configuration of a cascade, the P1 kernel and ``predict`` (docs/theory.md
Part I and §6).
"""
