"""The env role: a seeded vector env of any registered gymnasium id, split into pipeline stages,
served to the rollout workers over direct links (the embodied flows' env side).

- **Direct links.** Env and rollout workers exchange one small message per stage step each way,
  thousands a second: too many for a hop through a channel actor and its reply (which cost more
  CPU per step than the simulator). Each pair that routing connects talks over its own
  authenticated link (:class:`rlinf_core.links.Links` from :meth:`rlinf_core.Scheduler.links`;
  the ``ray`` scheduler's are TCP connections on the node's address: the rollout worker listens,
  the env worker connects at the start of a generation): one message per frame, no intermediary. A link that breaks (its peer died, or gave up
  on the generation and closed its links) fails the waiter at once with a
  :class:`~rlinf_core.errors.ChannelError`, which ends the iteration on that worker too, so an
  abort spreads over the links to every worker of the generation.
- **Pipeline stages.** Each env worker splits its environments into ``rollout.pipeline_stages``
  stages, each its own vector env: while the rollout worker runs the policy on stage ``s``, the
  env worker steps stage ``s + 1``. One link message per stage step in each direction.
- **Routing.** With ``M`` env ranks and ``N`` rollout ranks every stage's global batch of env
  slots is routed with :func:`rlinf_core.routing.route_plan` (contiguous shards,
  stable keys), so the group sizes may differ.
- **Generations.** Links carry a generation number: after a failure the driver starts the next
  generation, so a partial batch is never mixed into a later one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from rlinf_algos import obs as obs_tree
from rlinf_algos.families import SimulatorError
from rlinf_algos.runtime.workers.base import RoleWorker, close_links
from rlinf_core.errors import ChannelError, RlinfError
from rlinf_core.links import Links
from rlinf_core.routing import route_plan

__all__ = ["EnvWorker", "shards"]


def shards(stage_slots: int, env_world: int, rollout_world: int) -> list[Any]:
    """The routing of one stage's env slots from the env ranks to the rollout ranks."""
    return route_plan(stage_slots * env_world, env_world, rollout_world)


class EnvWorker(RoleWorker):
    """A seeded vector env of any registered gymnasium id, split into pipeline stages.

    Args:
        env_cfg: the validated ``env`` section (as a dict).
        seed: the run seed; global env slot ``g`` is reset with ``seed + g``.
        stages: ``rollout.pipeline_stages``.
        rollout_world: the number of rollout workers.
        links: the run's :class:`~rlinf_core.links.Links` (it carries the run's secret) for the
            direct links to the rollout workers.
        timeout: seconds to wait for actions before reporting it.

    The env is the same for every flow (a gymnasium vector env), so this role has no body: what
    differs between flows is which of :meth:`run` (fixed steps) and :meth:`run_episodes` (whole
    episodes in groups) the flow's iteration calls.
    """

    role = "env"

    def __init__(
        self,
        env_cfg: dict[str, Any],
        seed: int,
        stages: int,
        rollout_world: int,
        links: Links,
        timeout: float = 300.0,
    ) -> None:
        super().__init__(None, timeout=timeout, seed=seed, threads=0)
        self.env_cfg, self.stages = env_cfg, stages
        self.rollout_world = rollout_world
        self.link_factory = links
        self.links: dict[int, Any] = {}
        self.links_key: Any = None

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """The user's env failing (:class:`~rlinf_algos.envs.EnvError`) names this worker first."""
        from rlinf_algos.envs import EnvError

        try:
            yield
        except EnvError as err:
            where = f"env rank {self.rank}, pid {os.getpid()}: "
            raise EnvError(where + str(err)) from None

    def setup(self) -> None:
        with self._named():
            self._setup()

    def _setup(self) -> None:
        from rlinf_algos.envs import VectorEnvStepper

        cfg = self.env_cfg
        per_rank = cfg["num_envs"] // self.world_size
        self.per_stage = per_rank // self.stages
        self.steppers = []
        for s in range(self.stages):
            first_slot = (self.rank * self.stages + s) * self.per_stage
            self.steppers.append(
                VectorEnvStepper(
                    cfg["id"],
                    self.per_stage,
                    self.seed + first_slot,
                    vectorization=cfg.get("vectorization", "sync"),
                    env_kwargs=cfg.get("kwargs") or {},
                    max_episode_steps=cfg.get("max_episode_steps"),
                    obs_mode=cfg.get("obs_mode", "state"),
                    image_size=tuple(cfg.get("image_size", (64, 64))),
                    wrappers=cfg.get("wrappers") or [],
                    family=cfg.get("family", "gymnasium"),
                    options=cfg.get("options") or {},
                    python=cfg.get("python"),
                    timeout_s=float(cfg.get("timeout_s", 60.0)),
                    on_nonfinite=cfg.get("on_nonfinite", "stop"),
                )
            )
        plan = shards(self.per_stage, self.world_size, self.rollout_world)
        self.my_shards = [sh for sh in plan if sh.src == self.rank]

    def spaces(self) -> dict[str, Any]:
        """Sizes and bounds of the observation and action spaces (for building the networks;
        :meth:`~rlinf_algos.envs.VectorEnvStepper.spaces`)."""
        return self.steppers[0].spaces()

    def reseed(self, seed: int) -> None:
        """Reset every stage with a new base seed (resume: the simulator state is not saved)."""
        with self._named():
            for s, st in enumerate(self.steppers):
                first_slot = (self.rank * self.stages + s) * self.per_stage
                st.reset(seed + first_slot)

    def _connect(self, gen: int, addrs: list[Any]) -> None:
        """Open the links of generation ``gen`` to the rollout ranks this worker's shards go to
        (kept for the following iterations of the generation)."""
        key = (gen, tuple(tuple(a) if isinstance(a, list) else a for a in addrs))
        if self.links_key == key:
            return
        close_links(self.links)
        self.links_key = None
        for dst in sorted({sh.dst for sh in self.my_shards}):
            self.links[dst] = self.link_factory.connect(
                addrs[dst],
                gen=gen,
                rank=self.rank,
                timeout=self.timeout,
                peer=f"rollout rank {dst}",
                name=f"env rank {self.rank}",
            )
        self.links_key = key

    def _send(self, s: int, msg: dict[str, Any]) -> None:
        for sh in self.my_shards:
            a, b = sh.src_offset, sh.src_offset + sh.size
            part = {k: obs_tree.take(v, slice(a, b)) for k, v in msg.items() if k != "final"}
            if "final" in msg:
                idx, rows = msg["final"]
                keep = (idx >= a) & (idx < b)
                part["final"] = (idx[keep] - a, obs_tree.take(rows, keep))
            self.links[sh.dst].send((s, part))

    def _recv(self, s: int) -> np.ndarray:
        parts = []
        for sh in self.my_shards:
            stage, item = self.links[sh.dst].recv(f"the actions of stage {s}")
            if stage != s:
                raise ChannelError(f"env rank {self.rank}: actions of stage {stage} while stage {s} was due")
            parts.append(item)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, 0)

    def _serve(self, gen: int, links: list[Any], body: Any) -> dict[str, Any]:
        """Run ``body(out)`` over the links of generation ``gen`` (``[(host, port)]`` by rollout
        rank). ``out`` collects the env steps taken and the episodes that ended (``returns``,
        ``lengths``, and ``successes`` of those whose env reports ``info["is_success"]``); it is
        returned with ``aborted`` true if a peer ended the iteration early (this worker's links
        are closed then, so the abort reaches every peer)."""
        out: dict[str, Any] = {"aborted": False, "steps": 0, "returns": [], "lengths": [], "successes": []}
        ok = False
        try:
            self._connect(gen, links)
            with self._named():
                body(out)
            ok = True
        except ChannelError as err:  # a peer died or gave up: this iteration is lost
            out.update(aborted=True, error=str(err))
        except SimulatorError as err:  # this worker's simulator failed (and was started again)
            out.update(aborted=True, error=str(err), root_cause=True)
        finally:
            if not ok:  # the peers still waiting on this worker learn it at once
                close_links(self.links)
                self.links_key = None
        return out

    def run(self, gen: int, links: list[Any], steps: int) -> dict[str, Any]:
        """Serve one iteration: send every stage's observations, then ``steps`` times per stage
        receive actions, step, and send the result (see :meth:`_serve` for what it returns)."""

        def body(out: dict[str, Any]) -> None:
            for s, st in enumerate(self.steppers):
                self._send(s, {"obs": st.obs})
            for _ in range(steps):
                for s, st in enumerate(self.steppers):
                    actions = self._recv(s)
                    step = st.step(actions)
                    out["steps"] += st.num_envs
                    msg: dict[str, Any] = {
                        "obs": step.obs,
                        "rew": step.rewards,
                        "term": step.terminated,
                        "trunc": step.truncated,
                    }
                    done = step.terminated | step.truncated
                    if done.any():
                        idx = np.flatnonzero(done)
                        msg["final"] = (idx, obs_tree.take(step.final_obs, idx))
                        out["returns"].extend(step.episode_returns)
                        out["lengths"].extend(step.episode_lengths)
                        out["successes"].extend(step.episode_successes)
                    self._send(s, msg)

        return self._serve(gen, links, body)

    def run_episodes(
        self, gen: int, links: list[Any], base_seed: int, group_size: int, max_steps: int
    ) -> dict[str, Any]:
        """Serve one GRPO iteration: reset every env so that the ``group_size`` copies of a
        group start from one state (global env slot ``g`` is in group ``g // group_size``,
        reset with seed ``base_seed + g // group_size``), then step each stage until every env
        of it has finished one episode. The first observations carry each env's group id
        (``gid``) to the rollout worker; envs whose episode ended keep stepping (their actions
        are masked out downstream) until their stage is done. Returns the episodes (one per
        env) and the env steps taken, as :meth:`run` does."""

        def body(out: dict[str, Any]) -> None:
            active = []
            for s, st in enumerate(self.steppers):
                first = (self.rank * self.stages + s) * self.per_stage
                gids = (first + np.arange(st.num_envs)) // group_size
                st.reset([int(base_seed + g) for g in gids])
                active.append(np.ones(st.num_envs, dtype=bool))
                self._send(s, {"obs": st.obs, "gid": gids})
            # A stage runs until every rollout rank it feeds says it is done (an action message of
            # None: all of that rank's envs of the stage finished their episode). Ranks decide
            # alone, so a shard that is done gets zero actions while its stage still steps for
            # the others, and no more results.
            shard_live = [[True] * len(self.my_shards) for _ in range(self.stages)]
            act_dim = self.steppers[0].act_dim
            for _ in range(max_steps + 2):
                live = [s for s in range(self.stages) if any(shard_live[s])]
                if not live:
                    return
                for s in live:
                    parts = []
                    for j, sh in enumerate(self.my_shards):
                        item = None
                        if shard_live[s][j]:
                            stage, item = self.links[sh.dst].recv(f"the actions of stage {s}")
                            if stage != s:
                                raise ChannelError(
                                    f"env rank {self.rank}: actions of stage {stage} while stage {s} was due"
                                )
                            shard_live[s][j] = item is not None
                        parts.append(item if item is not None else np.zeros((sh.size, act_dim), np.float32))
                    if not any(shard_live[s]):
                        continue
                    st = self.steppers[s]
                    step = st.step(parts[0] if len(parts) == 1 else np.concatenate(parts, 0))
                    out["steps"] += st.num_envs
                    msg = {
                        "obs": step.obs,
                        "rew": step.rewards,
                        "term": step.terminated,
                        "trunc": step.truncated,
                    }
                    for j, sh in enumerate(self.my_shards):
                        if shard_live[s][j]:
                            a, b = sh.src_offset, sh.src_offset + sh.size
                            self.links[sh.dst].send(
                                (s, {k: obs_tree.take(v, slice(a, b)) for k, v in msg.items()})
                            )
                    was = active[s]
                    for j, i in enumerate(step.episode_index):
                        if was[i]:
                            out["returns"].append(step.episode_returns[j])
                            out["lengths"].append(step.episode_lengths[j])
                    out["successes"].extend(
                        v for v, i in zip(step.episode_successes, step.success_index, strict=True) if was[i]
                    )
                    active[s] = was & ~step.done
            raise RlinfError(
                f"GRPO: some episodes of {self.env_cfg['id']!r} did not end within {max_steps} steps "
                "(GRPO scores whole episodes); set env.max_episode_steps"
            )

        return self._serve(gen, links, body)

    def teardown(self) -> None:
        close_links(getattr(self, "links", {}))
        from rlinf_algos.envs import EnvError

        for st in getattr(self, "steppers", []):
            try:
                st.close()  # an env whose call never returned is not closed (it says so)
            except EnvError as err:  # the run's results are written: one warning line, go on
                logging.getLogger("rlinf.env").warning("env rank %d, pid %d: %s", self.rank, os.getpid(), err)
