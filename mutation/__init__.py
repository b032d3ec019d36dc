"""The mutation check (``make mutation``): ``mutants.toml`` and its runner ``run.py``."""
