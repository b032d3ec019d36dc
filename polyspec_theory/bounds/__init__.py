"""Results around P1: tail bounds of the block fill (P2, P3), the paper's Lemma 3.1
approximation (P4), stability and heterogeneity (P6, P7).
"""
