"""Policy specs several algorithms share (see :func:`rlinf_algos.models.build_policy`)."""

from __future__ import annotations

from typing import Any

from rlinf_algos.models import encoder_options

__all__ = ["gaussian_policy_spec"]


def gaussian_policy_spec(model_cfg: Any, spaces: Any, normalize_obs: bool) -> dict[str, Any]:
    """The Gaussian actor-critic of PPO and GRPO (64x64 tanh unless the ``model`` section says;
    a model type with encoders, ``vla``, picks its own default sizes); for an action space other
    than a flat ``Box`` (``spaces["action_space"]``), the ``ActorCritic`` over it, the space's
    spec recorded as ``action_space``."""
    plain = model_cfg.type == "mlp"
    action_space = spaces.get("action_space") or {"kind": "box"}
    extra = {} if action_space["kind"] == "box" else {"action_space": action_space}
    return {
        "type": model_cfg.type,
        "cls": "GaussianActorCritic" if not extra else "ActorCritic",
        **extra,
        "obs_dim": spaces["obs_dim"],
        "obs_space": spaces.get("obs_space"),
        "act_dim": spaces["act_dim"],
        "hidden": model_cfg.hidden_sizes or ([64, 64] if plain else None),
        "activation": model_cfg.activation or ("tanh" if plain else None),
        "log_std_init": model_cfg.log_std_init,
        "normalize_obs": normalize_obs,
        "ortho_init": model_cfg.ortho_init,
        **encoder_options(model_cfg),
    }
