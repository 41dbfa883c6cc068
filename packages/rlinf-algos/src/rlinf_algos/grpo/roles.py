"""GRPO's own roles on embodied tasks, as bodies of the generic reward and reference workers
(:mod:`rlinf_algos.runtime.workers`): the episode scorer (group advantages from episode outcomes;
CPU only) and the frozen reference policy (its log-probabilities)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlinf_algos.channels import advantage_key, get_all, get_item, reward_key, scored_key, traj_key
from rlinf_core.errors import ChannelError

__all__ = ["EpisodeScorer", "FrozenPolicy"]


class EpisodeScorer:
    """GRPO's reward body on embodied tasks: the outcome of each episode (its return, as the env
    worker's reward function gives it) turned into group-normalised advantages. Takes every
    rollout rank's outcomes (:func:`reward_key`), groups the episodes by their group id (a group
    may span workers), and sends the advantages to the actor (:func:`advantage_key`). Needs no
    torch model and no accelerator: place it on any CPU node.

    Reads ``algorithm`` (the section as a dict: ``group_size``, ``scale_advantages``) and
    ``rollout_world`` from the host's options, and the host's ``traj`` channel.
    """

    def __init__(self, host: Any) -> None:
        algo = host.options["algorithm"]
        self.group_size = int(algo["group_size"])
        self.scale = bool(algo.get("scale_advantages", True))
        self.traj_ch, self.timeout = host.channel("traj"), host.timeout
        self.rollout_world = int(host.options["rollout_world"])

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


class FrozenPolicy:
    """GRPO's reference body: a frozen copy of the initial policy (version 0 of the weight
    broadcast, or the checkpoint's on resume). Takes each rollout rank's sequences
    (:func:`traj_key`), adds ``ref_log_probs`` ``[n, L]`` under the frozen policy (when
    ``algorithm.kl_coef > 0``), and passes them to the actor (:func:`scored_key`)."""

    def __init__(self, host: Any) -> None:
        self.kl_coef = float(host.options["algorithm"].get("kl_coef", 0.0))
        self.traj_ch, self.timeout = host.channel("traj"), host.timeout
        self.rollout_world = int(host.options["rollout_world"])
        self.model: Any = None

    def freeze(self, spec: dict[str, Any], state_dict: dict[str, Any]) -> None:
        from rlinf_algos.models import build_policy

        self.model = build_policy(spec).requires_grad_(False)
        self.model.load_state_dict(state_dict)

    def log_probs(self, gen: int | str) -> dict[str, Any]:
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
