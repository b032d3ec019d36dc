"""Yin et al.'s Markov-chain theorems on speculative decoding (docs/theory.md Part V):
Markov pairs and sequence laws, rejection counts, optimal and batch verification.
"""
