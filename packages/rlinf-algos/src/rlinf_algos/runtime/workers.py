"""The generic workers of the distributed runtime: :class:`EnvWorker`, :class:`RolloutWorker` and
:class:`ActorWorker` (DESIGN.md section 5). They never name an algorithm: the rollout worker
runs its recipe's ``collect`` over its env links, the actor worker its recipe's learner. They
talk only through channels, direct links between env and rollout workers, and the versioned
weight broadcast; where each runs is the ``cluster`` section's business, so the same code runs
collocated, disaggregated or hybrid.

Data flow of one PPO iteration (``T`` = ``algorithm.rollout_steps`` vector steps)::

    EnvWorker e, stage s  --obs/reward/done-->  RolloutWorker r   (direct link e<->r, generation gen)
    RolloutWorker r       --actions-->          EnvWorker e        (the same link)
    RolloutWorker r       --trajectory-->       ActorWorker        (channel key g<gen>/t/<r>)
    ActorWorker rank 0    --weights (versioned)--> every RolloutWorker

- **Direct links.** Env and rollout workers exchange one small message per stage step each way,
  thousands a second: too many for a hop through a channel actor and its reply (which cost more
  CPU per step than the simulator). Each pair that routing connects talks over its own
  authenticated TCP connection (:class:`~rlinf_scheduler.link.Link`; the rollout worker listens on its node's address,
  the env worker connects at the start of a generation): one pickled frame per message, no
  intermediary. A link that breaks (its peer died, or gave up on the generation and closed its
  links) fails the waiter at once with a :class:`~rlinf_core.errors.ChannelError`, which ends the
  iteration on that worker too, so an abort spreads over the links to every worker of the
  generation. Trajectories to the learner still go through a channel (few, large, buffered).

- **Pipeline stages.** Each env worker splits its environments into ``rollout.pipeline_stages``
  stages, each its own vector env: while the rollout worker runs the
  policy on stage ``s``, the env worker steps stage ``s + 1``. One link message per stage step in
  each direction (never one per env).
- **Routing.** With ``M`` env ranks and ``N`` rollout ranks every stage's global batch of env
  slots is routed with :func:`rlinf_scheduler.routing.route_plan` (contiguous shards, stable
  keys), so the group sizes may differ.
- **Generations.** Links and keys carry a generation number. When a worker dies the driver
  aborts the iteration (the dead worker's links break; an :data:`ABORT` item on every trajectory
  key of the generation, so the learner does not wait on it), restarts the worker, and starts
  the next generation: a partial batch is never mixed into a later one.
- **Observation statistics** are weights (see :mod:`rlinf_algos.stats`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import numpy as np

from rlinf_algos import obs as obs_tree
from rlinf_algos.recipe import Recipe
from rlinf_core.errors import ChannelError, ChannelTimeout, RlinfError
from rlinf_core.worker import Worker
from rlinf_scheduler.link import Link

log = logging.getLogger(__name__)

__all__ = ["EnvWorker", "ProcessMixin", "RolloutWorker", "set_threads"]


class ProcessMixin:
    """What every worker of the runtime answers about its process."""

    def pid(self) -> int:
        """This worker's process id (the driver keeps it in ``DistributedRun.pids``; fault tests
        and ``benchmarks/chaos.py`` kill the process by it)."""
        return os.getpid()


def _close_links(links: dict[int, Link]) -> None:
    for link in links.values():
        link.close()
    links.clear()


def _node_address() -> str:
    """The address this node's Ray uses (an overlay's address when Ray is bound to one)."""
    try:
        from rlinf_scheduler.channel import node_address

        return node_address()
    except Exception:  # outside Ray (tests of a worker on its own)
        return "127.0.0.1"


def _shards(stage_slots: int, env_world: int, rollout_world: int) -> list[Any]:
    from rlinf_scheduler.routing import route_plan

    return route_plan(stage_slots * env_world, env_world, rollout_world)


def set_threads(n: int) -> None:
    """``n`` intra-op torch threads and one inter-op thread in this worker process."""
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass


# -- env ---------------------------------------------------------------------------------------


class EnvWorker(ProcessMixin, Worker):
    """A seeded vector env of any registered gymnasium id, split into pipeline stages.

    Args:
        env_cfg: the validated ``env`` section (as a dict).
        seed: the run seed; global env slot ``g`` is reset with ``seed + g``.
        stages: ``rollout.pipeline_stages``.
        rollout_world: the number of rollout workers.
        link_token: the run's secret for the direct links to the rollout workers.
        timeout: seconds to wait for actions before reporting it.
    """

    def __init__(
        self,
        env_cfg: dict[str, Any],
        seed: int,
        stages: int,
        rollout_world: int,
        link_token: str,
        timeout: float = 300.0,
    ) -> None:
        self.env_cfg, self.seed, self.stages = env_cfg, seed, stages
        self.rollout_world = rollout_world
        self.link_token, self.timeout = link_token, timeout
        self.links: dict[int, Link] = {}
        self.links_key: Any = None

    def setup(self) -> None:
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
                )
            )
        shards = _shards(self.per_stage, self.world_size, self.rollout_world)
        self.my_shards = [sh for sh in shards if sh.src == self.rank]

    def spaces(self) -> dict[str, Any]:
        """Sizes and bounds of the observation and action spaces (for building the networks;
        :meth:`~rlinf_algos.envs.VectorEnvStepper.spaces`)."""
        return self.steppers[0].spaces()

    def reseed(self, seed: int) -> None:
        """Reset every stage with a new base seed (resume: the simulator state is not saved)."""
        for s, st in enumerate(self.steppers):
            first_slot = (self.rank * self.stages + s) * self.per_stage
            st.reset(seed + first_slot)

    def _connect(self, gen: int, addrs: list[Any]) -> None:
        """Open the links of generation ``gen`` to the rollout ranks this worker's shards go to
        (kept for the following iterations of the generation)."""
        key = (gen, tuple(tuple(a) for a in addrs))
        if self.links_key == key:
            return
        _close_links(self.links)
        self.links_key = None
        for dst in sorted({sh.dst for sh in self.my_shards}):
            host, port = addrs[dst]
            peer = f"rollout rank {dst} at {host}:{port}"
            try:
                sock = socket.create_connection((host, port), timeout=self.timeout)
            except OSError as err:
                raise ChannelError(f"env rank {self.rank} could not connect to {peer}: {err}") from None
            link = Link(sock, self.timeout, peer)
            self.links[dst] = link
            link.send_hello(self.link_token, gen, self.rank)
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
            body(out)
            ok = True
        except ChannelError as err:  # a peer died or gave up: this iteration is lost
            out.update(aborted=True, error=str(err))
        finally:
            if not ok:  # the peers still waiting on this worker learn it at once
                _close_links(self.links)
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
        _close_links(getattr(self, "links", {}))
        for st in getattr(self, "steppers", []):
            st.close()


# -- rollout ---------------------------------------------------------------------------------------


class RolloutWorker(ProcessMixin, Worker):
    """Policy inference with a versioned copy of the weights. :meth:`configure` builds the
    policy once the env's sizes are known; :meth:`collect` runs the recipe's collection over this
    worker's env links (:meth:`recv` / :meth:`send` per pipeline stage).

    Args:
        recipe: the algorithm's :class:`~rlinf_algos.recipe.Recipe`.
        env_world: the number of env workers; ``per_stage``: envs per stage of each.
        stages: ``rollout.pipeline_stages``.
        traj_ch: the trajectory channel; ``weights``: the weight broadcast's name.
        seed: base seed of the sampling noise (``seed + rank``).
        link_token: the run's secret env workers present on the direct links.
        timeout: seconds to wait on a link, a channel or for weights.
    """

    def __init__(
        self,
        recipe: Recipe,
        env_world: int,
        per_stage: int,
        stages: int,
        traj_ch: Any,
        weights: str,
        seed: int,
        link_token: str,
        timeout: float = 300.0,
    ) -> None:
        self.recipe = recipe
        self.env_world, self.per_stage, self.stages = env_world, per_stage, stages
        self.traj_ch = traj_ch
        self.weights_name, self.seed, self.timeout = weights, seed, timeout
        self.link_token = link_token
        self.model: Any = None
        self.links: dict[int, Link] = {}
        self.links_gen: int | None = None
        self._report: str | None = None

    def setup(self) -> None:
        import torch

        import rlinf_algos.models.mlp  # noqa: F401 - the heavy imports, while the envs start

        set_threads(1)
        torch.manual_seed(self.seed + 7919 * self.rank)
        self.generator = torch.Generator().manual_seed(self.seed + 7919 * self.rank)
        self.np_rng = np.random.default_rng(self.seed + 7919 * self.rank)
        shards = _shards(self.per_stage, self.env_world, self.world_size)
        self.my_shards = [sh for sh in shards if sh.dst == self.rank]
        self.slots = sum(sh.size for sh in self.my_shards)  # env slots of each stage
        self.listener = socket.create_server((_node_address(), 0), backlog=max(16, self.env_world))

    def teardown(self) -> None:
        _close_links(getattr(self, "links", {}))
        listener = getattr(self, "listener", None)
        if listener is not None:
            listener.close()

    def link_address(self) -> tuple[str, int]:
        """Where env workers connect to this worker's direct links."""
        host, port = self.listener.getsockname()[:2]
        return host, port

    def _accept(self, gen: int) -> None:
        """Take the links of generation ``gen`` from every env rank this worker's shards come
        from (connections of other generations or without the run's token are closed)."""
        if self.links_gen == gen:
            return
        _close_links(self.links)
        self.links_gen = None
        need = {sh.src for sh in self.my_shards}
        deadline = time.monotonic() + self.timeout
        while need - self.links.keys():
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(need - self.links.keys())
                raise ChannelTimeout(
                    f"rollout rank {self.rank} waited {self.timeout:.0f} s for env rank(s) {missing} to connect"
                )
            self.listener.settimeout(left)
            try:
                sock, addr = self.listener.accept()
            except TimeoutError:
                continue
            link = Link(sock, min(self.timeout, 5.0), f"env worker at {addr[0]}:{addr[1]}")
            hello = link.recv_hello(self.link_token)
            if hello is None or hello[0] != gen or hello[1] not in need:
                link.close()  # a stranger's connection, or another generation's
                continue
            env_rank = hello[1]
            link.sock.settimeout(self.timeout)
            link.timeout, link.peer = self.timeout, f"env rank {env_rank}"
            self.links[env_rank] = link
        self.links_gen = gen

    def configure(
        self, spec: dict[str, Any], weights: str | None = None, connect_timeout: float | None = None
    ) -> int:
        """Build the policy from ``spec`` (the env's sizes are known once an env worker runs)
        and pull the newest weights (a restarted worker catches up here). ``weights``: the
        broadcast to follow from now on (a restarted learner publishes under a new name, from the
        version of its checkpoint). ``connect_timeout``: how long to wait for the broadcast to
        exist (default ``timeout``; the driver passes less when it exists already, so that one
        whose learner died since fails soon). Returns the version."""
        from rlinf_algos.models import build_policy
        from rlinf_scheduler.weights import WeightBroadcast

        if weights is not None:
            self.weights_name = weights
        self.spec = spec
        self.model = build_policy(spec)
        self.model.eval()
        self.wb = WeightBroadcast.connect(
            self.weights_name,
            timeout=self.timeout if connect_timeout is None else connect_timeout,
            default_timeout=self.timeout,
        )
        self.version = -1
        self.sync(0)
        return self.version

    def sync(self, min_version: int) -> None:
        """Load the newest weights, waiting for version ``min_version`` at least."""
        if self.version < min_version:
            version, sd = self.wb.fetch(min_version=min_version, timeout=self.timeout)
        else:
            got = self.wb.fetch_if_newer(self.version)
            if got is None:
                return
            version, sd = got
        self.model.load_state_dict(sd)
        self.version = version

    def rng_state(self) -> dict[str, Any]:
        import torch

        return {
            "generator": self.generator.get_state(),
            "torch": torch.get_rng_state(),
            "numpy": self.np_rng.bit_generator.state,
        }

    def set_rng_state(self, state: dict[str, Any]) -> None:
        import torch

        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch"])
        self.np_rng.bit_generator.state = state["numpy"]

    def policy_weights(self) -> dict[str, Any]:
        """The weights this worker acts with and their version: the newest the learner published
        that this worker fetched (what ``policy.safetensors`` holds when the learner is gone)."""
        return {"version": self.version, "state_dict": self.model.state_dict()}

    def recv(self, s: int) -> dict[str, Any]:
        """The env message of stage ``s`` (``obs``, and after a step ``rew``, ``term``, ``trunc``
        and ``final``: the final observations of episodes that ended), over this worker's
        slots of the stage in order."""
        parts = []
        for sh in self.my_shards:
            stage, item = self.links[sh.src].recv(f"the observations of stage {s}")
            if stage != s:
                raise ChannelError(
                    f"rollout rank {self.rank}: observations of stage {stage} while {s} was due"
                )
            parts.append(item)
        if self._report is not None:  # the driver waits for this to inject faults mid-iteration
            self.traj_ch.put(True, self._report, timeout=self.timeout)
            self._report = None
        if len(parts) == 1:
            return parts[0]
        out: dict[str, Any] = {}
        for k in parts[0]:
            if k == "final":
                continue
            out[k] = obs_tree.concat([p[k] for p in parts], 0)
        finals = [
            (p["final"][0] + off, p["final"][1])
            for p, off in zip(parts, self._offsets(), strict=True)
            if "final" in p
        ]
        if finals:
            out["final"] = (np.concatenate([f[0] for f in finals]), obs_tree.concat([f[1] for f in finals]))
        return out

    def _offsets(self) -> list[int]:
        return [sh.dst_offset for sh in self.my_shards]

    def send(self, s: int, actions: np.ndarray) -> None:
        """The actions ``[slots, A]`` of stage ``s`` to the env workers they belong to."""
        for sh in self.my_shards:
            a = sh.dst_offset
            self.links[sh.src].send((s, actions[a : a + sh.size]))

    def collect(
        self, gen: int, steps: int, min_version: int, report: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """One iteration of ``steps`` vector steps per stage (at most, for whole episodes) with
        weights of version ``min_version`` or newer; the recipe sends the data on. Returns timing
        and the weight version used, or ``aborted``. ``report``: a channel key rank 0 puts
        ``True`` on once the iteration's first env message has arrived (the driver's
        ``on_collecting`` callback waits for it)."""
        t0 = time.perf_counter()
        self._report = report if self.rank == 0 else None
        out: dict[str, Any] = {"aborted": True}
        try:
            self._accept(gen)
            self.sync(min_version)
            out = self.recipe.collect(self, gen, steps, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        finally:
            if out.get("aborted"):  # the env workers still waiting on this one learn it at once
                _close_links(self.links)
                self.links_gen = None
        out["rollout_s"] = time.perf_counter() - t0
        return out
