"""Saved policies: load ``policy.pt`` and evaluate it in the env it was trained on (``rlinf eval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlinf_algos.envs import VectorEnvStepper
from rlinf_algos.models import build_policy
from rlinf_core.errors import RlinfError

__all__ = ["evaluate_policy", "load_policy"]


def load_policy(path: Path) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild the policy saved as ``policy.pt`` by :func:`train`: ``(module, record)``; the
    module's ``predict(raw_obs, deterministic)`` maps ``[B, D]`` observations to actions."""
    path = Path(path)
    if not path.is_file():
        raise RlinfError(
            f"no saved policy at {path} (a finished or interrupted run writes RUN_DIR/policy.pt)"
        )
    redo = "train again, or evaluate another run's policy.pt"
    try:
        record = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # a truncated zip, a zero-byte file, another format
        raise RlinfError(
            f"{path} cannot be loaded ({_why(err)}): the file is damaged or not a policy; {redo}"
        ) from None
    if not isinstance(record, dict) or not isinstance(record.get("spec"), dict) or "state_dict" not in record:
        raise RlinfError(
            f"{path} is not a policy saved by `rlinf train` (no spec and state_dict in it); {redo}"
        )
    try:
        module = build_policy(dict(record["spec"]))
        module.load_state_dict(record["state_dict"])
    except RlinfError as err:
        raise RlinfError(f"{path}: {err}") from None
    except Exception as err:  # weights that do not fit the spec
        raise RlinfError(f"{path}: its weights do not fit its network ({_why(err)}); {redo}") from None
    module.eval()
    return module, record


def _why(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


def evaluate_policy(
    path: Path, episodes: int = 10, seed: int = 10_000, num_envs: int = 1, deterministic: bool = True
) -> dict[str, Any]:
    """Run the saved policy for ``episodes`` whole episodes in the env it was trained on (its
    id, ``env.kwargs`` and ``env.max_episode_steps``); returns ``mean``, ``std`` and the list of
    ``returns`` (raw environment rewards), and ``success_rate`` (the fraction of episodes whose
    last step had ``info["is_success"]``; ``None`` if the env does not report it)."""
    if episodes < 1:
        raise ValueError("evaluate_policy: episodes must be at least 1")
    module, record = load_policy(path)
    stepper = VectorEnvStepper(
        record["env_id"],
        min(num_envs, episodes),
        seed,
        env_kwargs=record.get("env_kwargs"),
        max_episode_steps=record.get("max_episode_steps"),
    )
    returns: list[float] = []
    successes: list[float] = []
    try:
        with torch.no_grad():
            while len(returns) < episodes:
                actions = module.predict(torch.from_numpy(stepper.obs), deterministic)  # type: ignore[operator]
                step = stepper.step(actions.numpy())
                returns.extend(step.episode_returns)
                successes.extend(step.episode_successes)
    finally:
        stepper.close()
    returns = returns[:episodes]
    successes = successes[:episodes]
    return {
        "episodes": episodes,
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "returns": returns,
        "success_rate": float(np.mean(successes)) if len(successes) == episodes else None,
    }
