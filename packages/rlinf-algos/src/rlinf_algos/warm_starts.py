"""What an embodied run starts RL from when its ``model`` section asks for a warm start:
behaviour cloning on demonstrations (``model.bc``, :mod:`rlinf_algos.bc`) or the ``vla`` model's
perception fit (``model.warm_start``, :mod:`rlinf_algos.perception`). One entry point for both
runners, in process and on workers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["initial_weights"]


def initial_weights(
    spec: Mapping[str, Any], env_cfg: Any, model_cfg: Any, seed: int, run_dir: Path | None
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state_dict, record)`` of the warm start ``model_cfg`` asks for, or ``None`` (RL starts
    from the freshly initialised policy)."""
    bc = getattr(model_cfg, "bc", None)
    if bc is not None:
        from rlinf_algos.bc import bc_warm_start

        return bc_warm_start(spec, env_cfg, bc, seed, run_dir)
    warm = getattr(model_cfg, "warm_start", None)  # a model type's option (vla's)
    if warm is not None:
        from rlinf_algos.perception import warm_start_policy

        return warm_start_policy(spec, env_cfg, warm, seed, run_dir)
    return None
