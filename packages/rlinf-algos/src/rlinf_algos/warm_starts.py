"""What an embodied run starts RL from when its ``model`` section asks for a warm start:
behaviour cloning on demonstrations (``model.bc``, :mod:`rlinf_algos.bc`) or the ``vla`` model's
perception fit (``model.warm_start``, :mod:`rlinf_algos.perception`). One entry point for both
runners, in process and on workers; and what RL then does with the observation statistics the
warm start fitted (:func:`obs_stats_frozen`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["initial_weights", "obs_stats_frozen"]


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


def obs_stats_frozen(model_cfg: Any) -> bool:
    """Whether RL keeps the observation statistics of the warm start as they are (``model.bc.obs_norm:
    frozen``, the default of a behaviour-cloning warm start) instead of folding in every batch.

    The cloned weights are a function of the *normalised* state; a learner that moves the statistics
    changes every input of the clone under it. On MetaWorld MT10 PPO's rollouts moved two features
    constant in the demonstrations by 833 and 6 demo standard deviations, which alone took the
    clone's reach-v3 from 0.5 to 0.2 (``benchmarks/results/metaworld_mt10_obs_norm_drift.json``).
    ``model_cfg`` is the ``model`` section, as a config object or as its ``model_dump()``."""
    bc = model_cfg.get("bc") if isinstance(model_cfg, Mapping) else getattr(model_cfg, "bc", None)
    if bc is None:
        return False
    mode = bc.get("obs_norm", "frozen") if isinstance(bc, Mapping) else getattr(bc, "obs_norm", "frozen")
    return mode == "frozen"
