"""Shared paths: the committed copies of the shared GPU tables (data/gpu-tables/README.md)."""

from pathlib import Path

TABLES = Path(__file__).resolve().parents[3] / "data" / "gpu-tables"
NANOPEARL = TABLES / "nanopearl_h200.json"
SSD = TABLES / "ssd_h100.json"
ROOT = TABLES.parents[1]
