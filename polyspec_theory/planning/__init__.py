"""Choosing a cascade: P1 on threshold grids, the pool planner, model insertion (P5),
cost calibration and cross-level coupling (E5, O2).
"""
