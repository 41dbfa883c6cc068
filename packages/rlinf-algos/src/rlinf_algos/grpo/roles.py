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

    Scores with the registered estimator ``algorithm.adv_estimator`` (and leaves out the groups
    outside ``algorithm.success_band``, sending a ``keep`` mask beside the advantages).
    Reads ``algorithm`` (the section as a dict) and
    ``rollout_world`` from the host's options, and the host's ``traj`` channel.
    """

    def __init__(self, host: Any) -> None:
        algo = host.options["algorithm"]
        self.group_size = int(algo["group_size"])
        self.algo = algo  # the section as a dict (validated into GRPOConfig when scoring)
        self.cfg: Any = None
        self.traj_ch, self.timeout = host.channel("traj"), host.timeout
        self.rollout_world = int(host.options["rollout_world"])

    def score(self, gen: int | str) -> dict[str, Any]:
        """Score generation ``gen``'s episodes; returns statistics, or ``aborted``."""
        import torch

        from rlinf_algos import objectives
        from rlinf_algos.grpo.config import GRPOConfig
        from rlinf_algos.grpo.functional import score_episodes

        if self.cfg is None:
            self.cfg = GRPOConfig.model_validate(self.algo)
            self.estimator = objectives.estimator(self.cfg.adv_estimator)

        try:
            items = get_all(
                self.traj_ch, [reward_key(gen, r) for r in range(self.rollout_world)], self.timeout
            )
            if items is None:
                return {"aborted": True}
            returns = torch.from_numpy(np.concatenate([it["returns"] for it in items])).float()
            gids = torch.from_numpy(np.concatenate([it["gid"] for it in items])).long()
            lengths = torch.from_numpy(np.concatenate([it["lengths"] for it in items])).float()
            adv_t, keep_t = score_episodes(self.estimator, self.cfg, returns, gids, lengths)
            adv, keep = adv_t.numpy(), keep_t.numpy()
            sizes = np.cumsum([len(it["returns"]) for it in items])[:-1]
            self.traj_ch.put(
                {
                    "advantages": np.split(adv, sizes),
                    "keep": np.split(keep, sizes),
                    "returns": returns.numpy(),
                },
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
        self.host = host
        self.kl_coef = float(host.options["algorithm"].get("kl_coef", 0.0))
        self.traj_ch, self.timeout = host.channel("traj"), host.timeout
        self.rollout_world = int(host.options["rollout_world"])
        self.model: Any = None

    def freeze(self, spec: dict[str, Any], state_dict: dict[str, Any]) -> None:
        """Build the frozen policy on this process's device (its placement's GPU, or the CPU)."""
        from rlinf_algos.embodied.roles import placed_device
        from rlinf_algos.models import build_policy

        self.model = build_policy(spec).requires_grad_(False).to(placed_device(self.host))
        self.model.load_state_dict(state_dict)

    def log_probs(self, gen: int | str) -> dict[str, Any]:
        """Pass generation ``gen``'s sequences on with reference log-probabilities."""
        import torch

        from rlinf_algos.models.mlp import on_module

        t0 = time.perf_counter()
        try:
            for r in range(self.rollout_world):
                item = get_item(self.traj_ch, traj_key(gen, r), self.timeout)
                if item is None:
                    return {"aborted": True}
                if self.kl_coef > 0:
                    with torch.no_grad():
                        obs = on_module(self.model, torch.from_numpy(item["obs"]))
                        actions = on_module(self.model, torch.from_numpy(item["actions"]))
                        item["ref_log_probs"] = self.model.evaluate(obs, actions)[0].cpu().numpy()
                self.traj_ch.put(item, scored_key(gen, r), timeout=self.timeout)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        return {"aborted": False, "reference_s": time.perf_counter() - t0}

    def state(self) -> dict[str, Any]:
        from rlinf_algos.embodied.roles import cpu_state_dict

        return cpu_state_dict(self.model)

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
