"""polyspec: theory, simulation and validation of polybasic speculative decoding."""

from .api import load_cascade

__all__ = ["load_cascade"]
