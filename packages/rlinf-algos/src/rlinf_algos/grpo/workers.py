"""GRPO's own components on embodied tasks: the reward worker (group advantages from episode
outcomes; CPU only) and the reference worker (the frozen initial policy's log-probabilities)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlinf_algos.channels import advantage_key, get_all, get_item, reward_key, scored_key, traj_key
from rlinf_algos.runtime.workers import set_threads
from rlinf_core.errors import ChannelError
from rlinf_core.worker import Worker

__all__ = ["ReferenceWorker", "RewardWorker"]


class RewardWorker(Worker):
    """GRPO's reward component on embodied tasks: the outcome of each episode (its return, as
    the env worker's reward function gives it) turned into group-normalised advantages. Takes
    every rollout rank's outcomes (:func:`reward_key`), groups the episodes by their group id
    (a group may span workers), and sends the advantages to the actor (:func:`advantage_key`).
    Needs no torch model and no accelerator: place it on any CPU node.

    Args:
        algo_cfg: the validated ``algorithm`` section (dict): ``group_size``,
            ``scale_advantages``.
        traj_ch: the run's channel; ``rollout_world``: the number of rollout workers.
    """

    def __init__(
        self, algo_cfg: dict[str, Any], traj_ch: Any, rollout_world: int, timeout: float = 300.0
    ) -> None:
        self.group_size = int(algo_cfg["group_size"])
        self.scale = bool(algo_cfg.get("scale_advantages", True))
        self.traj_ch, self.rollout_world, self.timeout = traj_ch, rollout_world, timeout

    def score(self, gen: int | str) -> dict[str, Any]:
        """Score generation ``gen``'s episodes; returns statistics, or ``aborted``."""
        import torch

        from rlinf_algos.grpo.functional import group_advantages_by_id

        try:
            items = get_all(
                self.traj_ch, [reward_key(gen, r) for r in range(self.rollout_world)], self.timeout
            )
            if items is None:
                return {"aborted": True}
            returns = torch.from_numpy(np.concatenate([it["returns"] for it in items])).float()
            gids = torch.from_numpy(np.concatenate([it["gid"] for it in items])).long()
            adv = group_advantages_by_id(returns, gids, self.group_size, scale=self.scale).numpy()
            sizes = np.cumsum([len(it["returns"]) for it in items])[:-1]
            self.traj_ch.put(
                {"advantages": np.split(adv, sizes), "returns": returns.numpy()},
                advantage_key(gen),
                timeout=self.timeout,
            )
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        order = torch.argsort(gids, stable=True)
        g = returns[order].view(-1, self.group_size)
        return {
            "aborted": False,
            "group_return_mean": float(returns.mean()),
            "group_return_std": float(g.std(dim=1).mean()),  # the spread GRPO learns from
        }


class ReferenceWorker(Worker):
    """GRPO's reference component: a frozen copy of the initial policy (version 0 of the weight
    broadcast, or the checkpoint's on resume). Takes each rollout rank's sequences
    (:func:`traj_key`), adds ``ref_log_probs`` ``[n, L]`` under the frozen policy (when
    ``algorithm.kl_coef > 0``), and passes them to the actor (:func:`scored_key`).

    Args:
        algo_cfg: the ``algorithm`` section (dict); ``traj_ch``, ``weights``: the run's channel
            and weight broadcast; ``rollout_world``: the number of rollout workers.
    """

    def __init__(
        self, algo_cfg: dict[str, Any], traj_ch: Any, weights: str, rollout_world: int, timeout: float = 300.0
    ) -> None:
        self.kl_coef = float(algo_cfg.get("kl_coef", 0.0))
        self.traj_ch, self.weights_name = traj_ch, weights
        self.rollout_world, self.timeout = rollout_world, timeout

    def setup(self) -> None:
        set_threads(1)

    def configure(self, spec: dict[str, Any]) -> int:
        """Build the policy and freeze version 0 of the weights; returns the version held."""
        from rlinf_algos.models import build_policy
        from rlinf_scheduler.weights import WeightBroadcast

        self.model = build_policy(spec).requires_grad_(False)
        wb = WeightBroadcast.connect(self.weights_name, timeout=self.timeout, default_timeout=self.timeout)
        version, sd = wb.fetch(min_version=0, timeout=self.timeout)
        self.model.load_state_dict(sd)
        return int(version)

    def compute(self, gen: int | str) -> dict[str, Any]:
        """Pass generation ``gen``'s sequences on with reference log-probabilities."""
        import torch

        t0 = time.perf_counter()
        try:
            for r in range(self.rollout_world):
                item = get_item(self.traj_ch, traj_key(gen, r), self.timeout)
                if item is None:
                    return {"aborted": True}
                if self.kl_coef > 0:
                    with torch.no_grad():
                        obs, actions = torch.from_numpy(item["obs"]), torch.from_numpy(item["actions"])
                        item["ref_log_probs"] = self.model.evaluate(obs, actions)[0].numpy()
                self.traj_ch.put(item, scored_key(gen, r), timeout=self.timeout)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        return {"aborted": False, "reference_s": time.perf_counter() - t0}

    def state(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
