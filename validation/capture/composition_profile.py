"""The composition profile a forecast reads (:class:`CompositionProfile`, the
``<capture>.json`` files of a folder): measured by
:func:`validation.capture.composition.profile_cascade`, read here without the decoder (no
torch: ``validate`` and ``forecast`` read profiles, they do not take them)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polyspec_theory.core.costs import CostCurve
from polyspec_theory.errors import PolyspecInputError

__all__ = ["PROFILE_FORMAT", "CompositionProfile", "load_profiles"]

PROFILE_FORMAT = "polyspec-composition-profile-1"


@dataclass
class CompositionProfile:
    """Per model (target first): in-cascade forward times. ``verify[i]`` maps a block
    length ``G`` to the list of verify-forward seconds of model ``i`` for such blocks
    (``i < n - 1``); ``draft_s`` is the bottom model's mean forward time; ``ar_s`` the
    target's autoregressive time per token over the same prompts (decode only)."""

    models: list[str]
    thresholds: list[int]
    verify: list[dict]
    draft_s: float
    draft_forwards: int
    ar_s: float
    ar_tokens: int
    replay_wall_s: float
    replay_forward_s: float
    replay_tokens: int
    settings: dict = field(default_factory=dict)

    def mean_verify(self, i: int) -> dict[int, float]:
        """``{G: mean verify seconds}`` of model ``i``."""
        return {g: float(np.mean(v)) for g, v in sorted(self.verify[i].items())}

    def cost_curves(self) -> list[CostCurve]:
        """One :class:`CostCurve` per model for P1: verifiers get the table
        ``T(m) = mean verify time of a block of G = m - 1`` over the measured block lengths
        (linear between them, affine past the ends, at least 0); the bottom model its mean
        drafting forward time; the target's ``T(1)`` is its autoregressive time per token."""
        out = []
        for i in range(len(self.models)):
            if i == len(self.models) - 1:
                out.append(CostCurve.constant(self.draft_s))
                continue
            mv = self.mean_verify(i)
            gs = np.array(sorted(mv), dtype=np.float64)
            ts = np.array([mv[int(g)] for g in gs])
            m_max = int(gs.max()) + 1
            ms = np.arange(1, m_max + 1, dtype=np.float64)
            if gs.size == 1:
                table = np.full(ms.size, ts[0])
            else:
                table = np.interp(ms - 1, gs, ts)
                lo = (ts[1] - ts[0]) / (gs[1] - gs[0])
                below = ms - 1 < gs[0]
                table[below] = ts[0] + lo * (ms[below] - 1 - gs[0])
            table = np.maximum(table, 0.0)
            if i == 0:
                table[0] = self.ar_s
            out.append(CostCurve.from_table([float(x) for x in table]))
        return out

    def to_dict(self) -> dict:
        return {
            "format": PROFILE_FORMAT,
            "models": list(self.models),
            "thresholds": list(self.thresholds),
            "verify": [{str(g): [float(t) for t in v] for g, v in sorted(d.items())}
                       for d in self.verify],
            "draft_s": self.draft_s, "draft_forwards": self.draft_forwards,
            "ar_s": self.ar_s, "ar_tokens": self.ar_tokens,
            "replay_wall_s": self.replay_wall_s, "replay_forward_s": self.replay_forward_s,
            "replay_tokens": self.replay_tokens,
            "settings": self.settings,
            "cost_curves": [c.to_config() for c in self.cost_curves()],
        }

    @classmethod
    def from_dict(cls, d, field_name: str = "profile") -> CompositionProfile:
        if not isinstance(d, dict) or d.get("format") != PROFILE_FORMAT:
            raise PolyspecInputError(field_name, f"not a composition profile (expected format "
                                     f"{PROFILE_FORMAT!r})")
        try:
            verify = [{int(g): [float(t) for t in v] for g, v in x.items()}
                      for x in d["verify"]]
            for i, x in enumerate(verify):
                for g, v in x.items():
                    for j, t in enumerate(v):
                        _check_time(t, field_name, f"verify[{i}].{g}[{j}]")
            for k in ("draft_s", "ar_s", "replay_wall_s", "replay_forward_s"):
                # the replay totals are a diagnostic, 0 in a synthetic profile (no replay)
                _check_time(float(d[k]), field_name, k, zero_ok=k.startswith("replay_"))
            return cls(models=list(d["models"]), thresholds=[int(t) for t in d["thresholds"]],
                       verify=verify, draft_s=float(d["draft_s"]),
                       draft_forwards=int(d["draft_forwards"]), ar_s=float(d["ar_s"]),
                       ar_tokens=int(d["ar_tokens"]),
                       replay_wall_s=float(d["replay_wall_s"]),
                       replay_forward_s=float(d["replay_forward_s"]),
                       replay_tokens=int(d["replay_tokens"]),
                       settings=dict(d.get("settings", {})))
        except PolyspecInputError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise PolyspecInputError(field_name, f"malformed composition profile ({e})") from None

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=1)


def _check_time(t: float, field_name: str, key: str, zero_ok: bool = False) -> None:
    """A measured time of a profile: finite and > 0 (a zero or negative forward time would make
    the cost curves, and every speedup over them, silently wrong)."""
    if not (math.isfinite(t) and (t >= 0 if zero_ok else t > 0)):
        raise PolyspecInputError(field_name, f"{key}: must be a finite time "
                                 f"{'>=' if zero_ok else '>'} 0 s, got {t!r}")


def load_profiles(directory, captures) -> dict:
    """``{capture name: CompositionProfile}`` from the files ``<name>.json`` of
    ``directory`` (an absent directory gives ``{}``)."""
    d = Path(directory)
    if not d.is_dir():
        return {}
    out = {}
    for c in captures:
        f = d / f"{c.name}.json"
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise PolyspecInputError("profiles", f"{f}: not JSON ({e})") from None
            out[c.name] = CompositionProfile.from_dict(data, f"profiles: {f}")
    return out
