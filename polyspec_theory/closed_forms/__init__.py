"""Closed forms: dualistic (two-model) speculative decoding (D2) and the symbolic
derivations of P1 (sympy, loaded on first use).
"""
