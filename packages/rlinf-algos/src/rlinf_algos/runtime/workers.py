"""The workers of the distributed runner: :class:`EnvWorker`, :class:`RolloutWorker` and
:class:`ActorWorker` (DESIGN.md section 5). They talk only through channels, direct links
between env and rollout workers, and the versioned weight broadcast; where each runs is the ``cluster`` section's business, so the same code runs
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
- **Observation statistics** are weights: rollout workers normalise with the statistics of the
  version they hold, send the normalised observations and the raw batch moments, and the learner
  folds the moments in (:func:`merge_moments`) before publishing the next version.
"""

from __future__ import annotations

import hashlib
import socket
import time
from typing import Any

import numpy as np

from rlinf_core.errors import ChannelError, ChannelTimeout, RlinfError
from rlinf_core.worker import Worker
from rlinf_scheduler.link import Link

__all__ = [
    "ABORT",
    "ActorWorker",
    "EnvWorker",
    "ReferenceWorker",
    "RewardWorker",
    "RolloutWorker",
    "advantage_key",
    "grpo_keys",
    "merge_moments",
    "reward_key",
    "scored_key",
    "traj_key",
]

ABORT = "__rlinf_abort__"
"""The item the driver puts on a generation's keys to end an iteration early."""


def _close_links(links: dict[int, Link]) -> None:
    for link in links.values():
        link.close()
    links.clear()


def _node_address() -> str:
    """The address this node's Ray uses (an overlay's address when Ray is bound to one)."""
    try:
        from rlinf_scheduler.channel import _node_address as addr

        return addr()
    except Exception:  # outside Ray (tests of a worker on its own)
        return "127.0.0.1"


def traj_key(gen: int | str, rollout_rank: int) -> str:
    """Trajectories of rollout rank ``r``: to the actor (PPO, SAC) or the reference (GRPO)."""
    return f"g{gen}/t/{rollout_rank}"


def reward_key(gen: int | str, rollout_rank: int) -> str:
    """GRPO: episode outcomes of rollout rank ``r`` to the reward worker."""
    return f"g{gen}/r/{rollout_rank}"


def scored_key(gen: int | str, rollout_rank: int) -> str:
    """GRPO: the sequences of rollout rank ``r`` with reference log-probabilities, to the actor."""
    return f"g{gen}/a/{rollout_rank}"


def advantage_key(gen: int | str) -> str:
    """GRPO: the group advantages of a generation's episodes, from the reward worker to the actor."""
    return f"g{gen}/adv"


def grpo_keys(gen: int | str, rollout_world: int) -> list[str]:
    """Every key a GRPO consumer may wait on for one batch (the driver aborts them all); GRPO's
    keys are per iteration, ``gen`` is ``"<generation>.<iteration>"``."""
    per_rank = [f(gen, r) for r in range(rollout_world) for f in (traj_key, reward_key, scored_key)]
    return [*per_rank, advantage_key(gen)]


def _shards(stage_slots: int, env_world: int, rollout_world: int) -> list[Any]:
    from rlinf_scheduler.routing import route_plan

    return route_plan(stage_slots * env_world, env_world, rollout_world)


def merge_moments(norm: Any, mean: np.ndarray, var: np.ndarray, count: float) -> None:
    """Fold batch moments (``mean``/``var`` ``[D]`` float64 over ``count`` rows) into a
    :class:`~rlinf_algos.models.RunningNorm` (Chan et al.'s parallel update, as
    ``RunningNorm.update`` does for a batch)."""
    import torch

    if count <= 0 or not hasattr(norm, "update"):
        return
    with torch.no_grad():
        b_mean = torch.as_tensor(mean, dtype=torch.float64)
        b_var = torch.as_tensor(var, dtype=torch.float64)
        delta = b_mean - norm.mean
        total = norm.count + count
        norm.mean += delta * (count / total)
        m2 = norm.var * norm.count + b_var * count + delta.pow(2) * norm.count * count / total
        norm.var.copy_(m2 / total)
        norm.count.copy_(total)


class _Moments:
    """Running sum / sum of squares of raw observations (float64) of one batch."""

    def __init__(self, dim: int) -> None:
        self.s = np.zeros(dim)
        self.ss = np.zeros(dim)
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        x64 = x.astype(np.float64, copy=False)
        self.s += x64.sum(0)
        self.ss += np.square(x64).sum(0)
        self.n += x.shape[0]

    def result(self) -> dict[str, Any]:
        if self.n == 0:
            return {"mean": self.s, "var": self.ss, "count": 0}
        mean = self.s / self.n
        return {"mean": mean, "var": np.maximum(self.ss / self.n - mean**2, 0.0), "count": self.n}


def _set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set in this process
        pass


# -- env ---------------------------------------------------------------------------------------


class EnvWorker(Worker):
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
                )
            )
        shards = _shards(self.per_stage, self.world_size, self.rollout_world)
        self.my_shards = [sh for sh in shards if sh.src == self.rank]

    def spaces(self) -> dict[str, Any]:
        """Sizes and bounds of the observation and action spaces (for building the networks)."""
        st = self.steppers[0]
        return {
            "obs_dim": st.obs_dim,
            "act_dim": st.act_dim,
            "action_low": st.action_low.tolist(),
            "action_high": st.action_high.tolist(),
            # the episode time limit (env.max_episode_steps, else the id's own; None if it has none)
            "max_episode_steps": st.max_episode_steps
            or getattr(getattr(st.envs, "spec", None), "max_episode_steps", None),
        }

    def reseed(self, seed: int) -> None:
        """Reset every stage with a new base seed (resume: the simulator state is not saved)."""
        for s, st in enumerate(self.steppers):
            first_slot = (self.rank * self.stages + s) * self.per_stage
            obs, _ = st.envs.reset(seed=seed + first_slot)
            st.obs = obs.astype(np.float32, copy=False)

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
            part = {k: v[a:b] for k, v in msg.items() if k != "final"}
            if "final" in msg:
                idx, rows = msg["final"]
                keep = (idx >= a) & (idx < b)
                part["final"] = (idx[keep] - a, rows[keep])
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

    def run(self, gen: int, steps: int, links: list[Any]) -> dict[str, Any]:
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
                        msg["final"] = (idx, step.final_obs[idx])
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
                obs, _ = st.envs.reset(seed=[int(base_seed + g) for g in gids])
                st.obs = obs.astype(np.float32, copy=False)
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
                            self.links[sh.dst].send((s, {k: v[a:b] for k, v in msg.items()}))
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


# -- rollout -----------------------------------------------------------------------------------


class RolloutWorker(Worker):
    """Policy inference with a versioned copy of the weights. :meth:`configure` builds the
    policy once the env's sizes are known.

    Args:
        algo: ``"ppo"`` or ``"sac"``.
        env_world: the number of env workers; ``per_stage``: envs per stage of each.
        stages: ``rollout.pipeline_stages``.
        traj_ch: the trajectory channel; ``weights``: the weight broadcast's name.
        seed: base seed of the sampling noise (``seed + rank``).
        link_token: the run's secret env workers present on the direct links.
        timeout: seconds to wait on a link, a channel or for weights.
    """

    def __init__(
        self,
        algo: str,
        env_world: int,
        per_stage: int,
        stages: int,
        traj_ch: Any,
        weights: str,
        seed: int,
        link_token: str,
        timeout: float = 300.0,
    ) -> None:
        self.algo = algo
        self.env_world, self.per_stage, self.stages = env_world, per_stage, stages
        self.traj_ch = traj_ch
        self.weights_name, self.seed, self.timeout = weights, seed, timeout
        self.link_token = link_token
        self.model: Any = None
        self.links: dict[int, Link] = {}
        self.links_gen: int | None = None

    def setup(self) -> None:
        import torch

        import rlinf_algos.local_runner  # noqa: F401 - the heavy imports, while the envs start

        _set_threads(1)
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

    def configure(self, spec: dict[str, Any]) -> int:
        """Build the policy from ``spec`` (the env's sizes are known once an env worker runs)
        and pull the newest weights (a restarted worker catches up here). Returns the version."""
        from rlinf_algos.local_runner import build_policy
        from rlinf_scheduler.weights import WeightBroadcast

        self.spec = spec
        self.model = build_policy(spec)
        self.model.eval()
        self.wb = WeightBroadcast.connect(
            self.weights_name, timeout=self.timeout, default_timeout=self.timeout
        )
        self.version = -1
        self._sync(0)
        return self.version

    def _sync(self, min_version: int) -> None:
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

    def _recv(self, gen: int, s: int) -> dict[str, Any] | None:
        parts = []
        for sh in self.my_shards:
            stage, item = self.links[sh.src].recv(f"the observations of stage {s}")
            if stage != s:
                raise ChannelError(
                    f"rollout rank {self.rank}: observations of stage {stage} while {s} was due"
                )
            parts.append(item)
        if len(parts) == 1:
            return parts[0]
        out: dict[str, Any] = {}
        for k in parts[0]:
            if k == "final":
                continue
            out[k] = np.concatenate([p[k] for p in parts], 0)
        finals = [
            (p["final"][0] + off, p["final"][1])
            for p, off in zip(parts, self._offsets(), strict=True)
            if "final" in p
        ]
        if finals:
            out["final"] = (np.concatenate([f[0] for f in finals]), np.concatenate([f[1] for f in finals]))
        return out

    def _offsets(self) -> list[int]:
        return [sh.dst_offset for sh in self.my_shards]

    def _send(self, gen: int, s: int, actions: np.ndarray) -> None:
        for sh in self.my_shards:
            a = sh.dst_offset
            self.links[sh.src].send((s, actions[a : a + sh.size]))

    def collect(self, gen: int, steps: int, min_version: int, **kw: Any) -> dict[str, Any]:
        """One iteration of ``steps`` vector steps per stage; the trajectory (PPO) or the
        transitions (SAC, in chunks) go to the actor. Returns timing and the weight version used,
        or ``aborted``."""
        t0 = time.perf_counter()
        out: dict[str, Any] = {"aborted": True}
        try:
            self._accept(gen)
            self._sync(min_version)
            if self.algo == "ppo":
                out = self._collect_ppo(gen, steps, **kw)
            elif self.algo == "grpo":
                out = self._collect_grpo(gen, steps, **kw)
            else:
                out = self._collect_sac(gen, steps, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        finally:
            if out.get("aborted"):  # the env workers still waiting on this one learn it at once
                _close_links(self.links)
                self.links_gen = None
        out["rollout_s"] = time.perf_counter() - t0
        return out

    def _collect_ppo(self, gen: int, T: int, send: bool = True) -> dict[str, Any]:
        import torch

        from rlinf_algos.models import gaussian_log_prob, seq_forward

        model, S, n = self.model, self.stages, self.slots
        D, A = self.spec["obs_dim"], self.spec["act_dim"]
        obs_buf = np.empty((S, T, n, D), np.float32)
        act_buf = np.empty((S, T, n, A), np.float32)
        logp_buf = np.empty((S, T, n), np.float32)
        rew_buf = np.empty((S, T, n), np.float32)
        term_buf = np.zeros((S, T, n), bool)
        trunc_buf = np.zeros((S, T, n), bool)
        final_t: list[np.ndarray] = []  # (stage, t, slot) of truncated steps, and their obs
        final_obs: list[np.ndarray] = []
        moments = _Moments(D)
        current: list[np.ndarray] = [None] * S  # type: ignore[list-item]
        norm = model.obs_norm

        def absorb(s: int, t: int, msg: dict[str, Any]) -> None:
            rew_buf[s, t] = msg["rew"]
            term_buf[s, t] = msg["term"]
            trunc_buf[s, t] = msg["trunc"]
            if "final" in msg:
                idx, rows = msg["final"]
                tr = msg["trunc"][idx]
                if tr.any():
                    sel = idx[tr]
                    final_t.append(np.stack([np.full_like(sel, s), np.full_like(sel, t), sel], 1))
                    with torch.no_grad():
                        final_obs.append(norm(torch.from_numpy(np.ascontiguousarray(rows[tr]))).numpy())

        for s in range(S):
            msg = self._recv(gen, s)
            if msg is None:
                return {"aborted": True}
            current[s] = msg["obs"]
        # The per-step path is kept short (the env worker waits on it): observation statistics
        # are fixed for the iteration, so normalising is three in-place ops into the buffer; the
        # raw-observation moments and the log-probabilities are computed once at the end.
        raw_buf = np.empty((S, T, n, D), np.float32)
        mean_buf = torch.empty(S, T, n, A)
        obs_t, act_t = torch.from_numpy(obs_buf), torch.from_numpy(act_buf)
        if hasattr(norm, "mean"):
            n_mean = norm.mean.to(torch.float32)
            n_inv = torch.rsqrt(norm.var + norm.eps).to(torch.float32)
            n_clip = float(norm.clip)
        log_std = model.actor_log_std.detach()
        std = log_std.exp()
        actor = model.actor_mean
        with torch.no_grad():
            for t in range(T):
                for s in range(S):
                    if t > 0:
                        msg = self._recv(gen, s)
                        if msg is None:
                            return {"aborted": True}
                        absorb(s, t - 1, msg)
                        current[s] = msg["obs"]
                    raw = current[s]
                    raw_buf[s, t] = raw
                    obs = obs_t[s, t]
                    if hasattr(norm, "mean"):  # RunningNorm.forward, into the buffer
                        torch.sub(torch.from_numpy(raw), n_mean, out=obs)
                        obs.mul_(n_inv).clamp_(-n_clip, n_clip)
                    else:
                        obs.copy_(norm(torch.from_numpy(raw)))
                    mean = seq_forward(actor, obs)
                    noise = torch.randn(mean.shape, generator=self.generator)
                    torch.add(mean, noise * std, out=act_t[s, t])
                    self._send(gen, s, act_buf[s, t])
                    mean_buf[s, t] = mean
            last = np.empty((S, n, D), np.float32)
            for s in range(S):
                msg = self._recv(gen, s)
                if msg is None:
                    return {"aborted": True}
                absorb(s, T - 1, msg)
                last[s] = norm(torch.from_numpy(msg["obs"])).numpy()
            logp_buf[:] = gaussian_log_prob(act_t, mean_buf, log_std.expand_as(mean_buf)).numpy()
        moments.add(raw_buf.reshape(-1, D))

        # [S, T, n, ...] -> [T, S*n, ...]: stage-major slot order, stable across iterations
        def flat(x: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.moveaxis(x, 0, 1).reshape(T, S * n, *x.shape[3:]))

        if final_t:
            ft = np.concatenate(final_t)
            fidx = np.stack([ft[:, 1], ft[:, 0] * n + ft[:, 2]], 1)  # (t, slot)
            fobs = np.concatenate(final_obs)
        else:
            fidx = np.zeros((0, 2), np.int64)
            fobs = np.zeros((0, D), np.float32)
        traj = {
            "obs": flat(obs_buf),
            "actions": flat(act_buf),
            "log_probs": flat(logp_buf),
            "rewards": flat(rew_buf),
            "terminated": flat(term_buf),
            "truncated": flat(trunc_buf),
            "last_obs": last.reshape(S * n, D),
            "final_idx": fidx,
            "final_obs": fobs,
            "moments": moments.result(),
            "version": self.version,
        }
        if send:
            self.traj_ch.put(traj, traj_key(gen, self.rank), timeout=self.timeout)
        return {"aborted": False, "version": self.version, "steps": T * S * n}

    def _collect_grpo(self, gen: int, max_steps: int, batch: str = "", send: bool = True) -> dict[str, Any]:
        """One GRPO iteration: act on every stage until each of its envs has finished one episode
        (the env worker's :meth:`EnvWorker.run_episodes`), recording each env's episode as a
        masked sequence. Two messages go out: the sequences (``obs`` normalised ``[n, L, D]``,
        ``actions`` ``[n, L, A]``, ``log_probs`` and ``mask`` ``[n, L]``, the raw-observation
        ``moments``) to the reference worker on :func:`traj_key`, and the outcomes (``returns``
        ``[n]``, ``gid`` ``[n]``, ``lengths``) to the reward worker on :func:`reward_key`, rows
        in the same (stage-major) slot order. ``batch`` names the iteration's keys (the driver's
        ``"<generation>.<iteration>"``)."""
        import torch

        from rlinf_algos.models import gaussian_log_prob, seq_forward

        model, S, n = self.model, self.stages, self.slots
        D = self.spec["obs_dim"]
        norm, actor = model.obs_norm, model.actor_mean
        log_std = model.actor_log_std.detach()
        std = log_std.exp()
        moments = _Moments(D)
        current: list[np.ndarray] = [None] * S  # type: ignore[list-item]
        gid: list[np.ndarray] = [None] * S  # type: ignore[list-item]
        active = [np.ones(n, dtype=bool) for _ in range(S)]
        pending = [False] * S
        returns = np.zeros((S, n))
        lengths = np.zeros((S, n), np.int64)
        rec: list[dict[str, list[Any]]] = [{"obs": [], "act": [], "mean": [], "mask": []} for _ in range(S)]
        for s in range(S):
            msg = self._recv(gen, s)
            current[s], gid[s] = msg["obs"], msg["gid"]
        with torch.no_grad():
            for _ in range(max_steps + 1):
                live = [s for s in range(S) if active[s].any()]
                if not live:
                    break
                for s in live:
                    if pending[s]:
                        msg = self._recv(gen, s)
                        returns[s] += np.where(active[s], msg["rew"], 0.0)
                        lengths[s] += active[s]
                        active[s] = active[s] & ~(msg["term"] | msg["trunc"])
                        current[s], pending[s] = msg["obs"], False
                        if not active[s].any():  # this stage is done here: tell its env workers
                            for sh in self.my_shards:
                                self.links[sh.src].send((s, None))
                            continue
                    raw = current[s]
                    moments.add(raw[active[s]])
                    obs = norm(torch.from_numpy(raw))
                    mean = seq_forward(actor, obs)
                    action = mean + torch.randn(mean.shape, generator=self.generator) * std
                    self._send(gen, s, action.numpy())
                    r = rec[s]
                    r["obs"].append(obs)
                    r["act"].append(action)
                    r["mean"].append(mean)
                    r["mask"].append(torch.from_numpy(active[s].copy()))
                    pending[s] = True
        L = max(len(r["obs"]) for r in rec)

        def stacked(key: str, s: int) -> torch.Tensor:  # [n, L, ...], zero past the stage's end
            x = torch.stack(rec[s][key], 1)
            pad = L - x.shape[1]
            if pad:
                x = torch.cat([x, x.new_zeros(x.shape[0], pad, *x.shape[2:])], 1)
            return x

        obs_t = torch.cat([stacked("obs", s) for s in range(S)])
        act_t = torch.cat([stacked("act", s) for s in range(S)])
        mean_t = torch.cat([stacked("mean", s) for s in range(S)])
        mask_t = torch.cat([stacked("mask", s) for s in range(S)])
        logp = gaussian_log_prob(act_t, mean_t, log_std.expand_as(mean_t))
        seqs = {
            "obs": obs_t.numpy(),
            "actions": act_t.numpy(),
            "log_probs": logp.numpy(),
            "mask": mask_t.numpy(),
            "moments": moments.result(),
            "version": self.version,
        }
        outcome = {"returns": returns.reshape(-1), "gid": np.concatenate(gid), "lengths": lengths.reshape(-1)}
        if send:
            self.traj_ch.put(seqs, traj_key(batch or gen, self.rank), timeout=self.timeout)
            self.traj_ch.put(outcome, reward_key(batch or gen, self.rank), timeout=self.timeout)
        return {"aborted": False, "version": self.version, "steps": n * sum(len(r["obs"]) for r in rec)}

    def _collect_sac(
        self, gen: int, T: int, random_actions: bool = False, chunk_steps: int = 8, send: bool = True
    ) -> dict[str, Any]:
        import torch

        model, S, n = self.model, self.stages, self.slots
        low = np.asarray(self.spec["action_low"], np.float32)
        high = np.asarray(self.spec["action_high"], np.float32)
        current: list[np.ndarray] = [None] * S  # type: ignore[list-item]
        pending: list[tuple[np.ndarray, np.ndarray]] = [None] * S  # type: ignore[list-item]
        chunk: dict[str, list[np.ndarray]] = {
            k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")
        }

        def absorb(s: int, msg: dict[str, Any]) -> None:
            obs, actions = pending[s]
            nxt = msg["obs"]
            if "final" in msg:
                nxt = nxt.copy()
                idx, rows = msg["final"]
                nxt[idx] = rows
            chunk["obs"].append(obs)
            chunk["actions"].append(actions)
            chunk["rewards"].append(msg["rew"])
            chunk["next_obs"].append(nxt)
            chunk["terminated"].append(msg["term"])
            chunk["truncated"].append(msg["trunc"])

        def flush() -> None:
            if not chunk["obs"]:
                return
            item: dict[str, Any] = {k: np.concatenate(v, 0) for k, v in chunk.items()}
            item["version"] = self.version  # the weights these actions came from
            for v in chunk.values():
                v.clear()
            if send:
                self.traj_ch.put(item, traj_key(gen, self.rank), timeout=self.timeout)
            self._sync(0)  # newer weights, if the learner published some since

        for s in range(S):
            msg = self._recv(gen, s)
            if msg is None:
                return {"aborted": True}
            current[s] = msg["obs"]
        with torch.no_grad():
            for t in range(T):
                for s in range(S):
                    if t > 0:
                        msg = self._recv(gen, s)
                        if msg is None:
                            return {"aborted": True}
                        absorb(s, msg)
                        current[s] = msg["obs"]
                    obs = current[s]
                    if random_actions:
                        actions = self.np_rng.uniform(low, high, size=(obs.shape[0], low.shape[0])).astype(
                            np.float32
                        )
                    else:
                        actions = model.predict(torch.from_numpy(obs), deterministic=False).numpy()
                    self._send(gen, s, actions)
                    pending[s] = (obs, actions)
                if t > 0 and t % chunk_steps == 0:
                    flush()
            for s in range(S):
                msg = self._recv(gen, s)
                if msg is None:
                    return {"aborted": True}
                absorb(s, msg)
            flush()
        return {"aborted": False, "version": self.version, "steps": T * S * n}


# -- GRPO: reward and reference ------------------------------------------------------------------


def _get(ch: Any, key: str, timeout: float) -> Any:
    """One item of ``key``; ``None`` for the driver's :data:`ABORT`."""
    item = ch.get(key, timeout=timeout)
    return None if isinstance(item, str) and item == ABORT else item


def _get_all(ch: Any, keys: Any, timeout: float) -> list[Any] | None:
    """One item of each key, in order; ``None`` as soon as one is the driver's :data:`ABORT`."""
    items = []
    for key in keys:
        item = _get(ch, key, timeout)
        if item is None:
            return None
        items.append(item)
    return items


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

        from rlinf_algos.grpo import group_advantages_by_id

        try:
            items = _get_all(
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
        _set_threads(1)

    def configure(self, spec: dict[str, Any]) -> int:
        """Build the policy and freeze version 0 of the weights; returns the version held."""
        from rlinf_algos.local_runner import build_policy
        from rlinf_scheduler.weights import WeightBroadcast

        self.model = build_policy(spec).requires_grad_(False)
        wb = WeightBroadcast.connect(self.weights_name, timeout=self.timeout, default_timeout=self.timeout)
        version, sd = wb.fetch(min_version=0, timeout=self.timeout)
        self.model.load_state_dict(sd)
        return int(version)

    def compute(self, gen: int | str) -> dict[str, Any]:
        """Pass generation ``gen``'s sequences on with reference log-probabilities."""
        import torch

        from rlinf_algos.models import gaussian_log_prob, seq_forward

        t0 = time.perf_counter()
        try:
            for r in range(self.rollout_world):
                item = _get(self.traj_ch, traj_key(gen, r), self.timeout)
                if item is None:
                    return {"aborted": True}
                if self.kl_coef > 0:
                    with torch.no_grad():
                        mean = seq_forward(self.model.actor_mean, torch.from_numpy(item["obs"]))
                        log_std = self.model.actor_log_std.expand_as(mean)
                        item["ref_log_probs"] = gaussian_log_prob(
                            torch.from_numpy(item["actions"]), mean, log_std
                        ).numpy()
                self.traj_ch.put(item, scored_key(gen, r), timeout=self.timeout)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        return {"aborted": False, "reference_s": time.perf_counter() - t0}

    def state(self) -> dict[str, Any]:
        return self.model.state_dict()

    def load(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)


# -- actor -------------------------------------------------------------------------------------


def _digest(obj: Any) -> str:
    """A content hash of nested dicts/lists of tensors, arrays and scalars (keys sorted, tensors by
    dtype, shape and bytes), equal for equal states wherever they were built."""
    import torch

    h = hashlib.sha256()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=repr):
                h.update(repr(k).encode())
                walk(x[k])
            h.update(b"}")
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for v in x:
                walk(v)
            h.update(b"]")
        elif isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, np.ndarray):
            h.update(f"A{x.dtype}{x.shape}".encode())
            h.update(np.ascontiguousarray(x).tobytes())
        else:
            h.update(repr(x).encode())

    walk(obj)
    return h.hexdigest()[:16]


class ActorWorker(Worker):
    """The learner: PPO (policy and critic, GAE, reward scaling, observation statistics) or SAC
    (replay buffer, twin critics, temperature; learning while collection goes on). Rank 0
    publishes the weights.

    Args:
        algo_cfg: the validated ``algorithm`` section (dict, with ``name``).
        model_cfg, runner_cfg: the ``model`` and ``runner`` sections (dicts).
        traj_ch: the trajectory channel; ``weights``: the weight broadcast's name.
        rollout_world: the number of rollout workers.
    """

    def __init__(
        self,
        algo_cfg: dict[str, Any],
        model_cfg: dict[str, Any],
        runner_cfg: dict[str, Any],
        traj_ch: Any,
        weights: str,
        rollout_world: int,
    ) -> None:
        self.algo_cfg, self.model_cfg, self.runner_cfg = algo_cfg, model_cfg, runner_cfg
        self.traj_ch, self.weights_name = traj_ch, weights
        self.rollout_world = rollout_world
        self.timeout = float(runner_cfg.get("worker_timeout", 300.0))

    def setup(self) -> None:
        if self.world_size != 1:
            raise RlinfError("the actor runs as one process; place it with one process (e.g. '0-3:0')")
        import torch

        import rlinf_algos.local_runner  # noqa: F401 - the heavy imports, while the envs start

        try:  # torch optimisers import torch._dynamo on first use (seconds): do it now, in parallel
            import torch._dynamo
        except Exception:  # pragma: no cover - a torch without dynamo
            pass
        _set_threads(int(self.runner_cfg.get("torch_threads", 1)))
        torch.manual_seed(int(self.runner_cfg.get("seed", 0)))

    def teardown(self) -> None:
        if getattr(self, "name", None) == "sac":
            self.learner.close()  # the actor step's thread (simultaneous, pipelined)

    def configure(self, spec: dict[str, Any]) -> int:
        """Build the networks, optimisers (and replay buffer) from ``spec``, create the weight
        broadcast and publish version 0. Returns the published version."""
        from rlinf_algos.algorithms import GRPOConfig, PPOConfig, SACConfig
        from rlinf_algos.local_runner import (
            GRPOLearner,
            PPOLearner,
            RewardScaler,
            SACLearner,
            build_policy,
            sac_critic,
        )
        from rlinf_algos.replay import ReplayBuffer
        from rlinf_scheduler.weights import WeightBroadcast

        self.spec = spec
        seed = int(self.runner_cfg.get("seed", 0))
        self.name = self.algo_cfg["name"]
        self.model = build_policy(self.spec)
        if self.name == "ppo":
            self.cfg = PPOConfig(**self.algo_cfg)
            self.learner: Any = PPOLearner(self.model, self.cfg, seed=seed)
            self.scaler = (
                RewardScaler(self.spec["num_slots"], self.cfg.gamma) if self.cfg.normalize_reward else None
            )
        elif self.name == "grpo":  # the frozen reference lives on the ReferenceWorker
            self.cfg = GRPOConfig(**self.algo_cfg)
            self.learner = GRPOLearner(self.model, self.cfg, seed=seed, reference=False)
        else:
            self.cfg = SACConfig(**self.algo_cfg)
            critic = sac_critic(self.spec)
            self.learner = SACLearner(self.model, critic, self.cfg, self.runner_cfg.get("device", "cpu"))
            self.buffer = ReplayBuffer(
                self.cfg.buffer_size, (self.spec["obs_dim"],), (self.spec["act_dim"],), seed=seed
            )
            self.debt = 0.0
            self.received = 0
            self._sums: dict[str, Any] = {}
            self._count = 0
        self.wb = WeightBroadcast.create(self.weights_name, default_timeout=self.timeout)
        self.published = -1
        self._publish()
        return self.published

    def _publish(self) -> None:
        v = int(self.learner.version)
        if v > self.published:
            model = self.learner.policy() if self.name == "sac" else self.model
            self.wb.publish(model.state_dict(), version=v)
            self.published = v

    def version(self) -> int:
        return int(self.learner.version)

    # -- PPO ---------------------------------------------------------------------------------
    def _gather(self, gen: int) -> list[Any] | None:
        return _get_all(self.traj_ch, [traj_key(gen, r) for r in range(self.rollout_world)], self.timeout)

    def train(self, gen: int, lr_frac: float = 1.0, **kw: Any) -> dict[str, Any]:
        """One iteration of learning on the data of generation ``gen``; publishes the new
        weights. Returns the learner's metrics, or ``aborted``."""
        try:
            if self.name == "ppo":
                return self._train_ppo(gen, lr_frac)
            if self.name == "grpo":
                return self._train_grpo(gen)
            return self._train_sac(gen, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}

    def _train_ppo(self, gen: int, lr_frac: float) -> dict[str, Any]:
        import torch

        from rlinf_algos.local_runner import PPORollout

        t0 = time.perf_counter()
        items = self._gather(gen)
        if items is None:
            return {"aborted": True}
        t1 = time.perf_counter()
        cat = {
            k: np.concatenate([it[k] for it in items], 1)
            for k in ("obs", "actions", "log_probs", "rewards", "terminated", "truncated")
        }
        last_obs = np.concatenate([it["last_obs"] for it in items], 0)
        T, N = cat["rewards"].shape
        # final observations of truncated steps, with slot offsets of each rollout rank
        fidx, fobs, off = [], [], 0
        for it in items:
            if len(it["final_idx"]):
                idx = it["final_idx"].copy()
                idx[:, 1] += off
                fidx.append(idx)
                fobs.append(it["final_obs"])
            off += it["last_obs"].shape[0]
        rewards = cat["rewards"]
        if self.scaler is not None:
            done = cat["terminated"] | cat["truncated"]
            rewards = np.stack([self.scaler(rewards[t].astype(np.float64), done[t]) for t in range(T)])
        model = self.model
        obs_t = torch.from_numpy(cat["obs"])
        with torch.no_grad():
            values = model.value(obs_t.reshape(T * N, -1)).reshape(T, N)
            last_value = model.value(torch.from_numpy(last_obs))
            final_values = torch.zeros(T, N)
            if fidx:
                idx = torch.from_numpy(np.concatenate(fidx)).long()
                final_values[idx[:, 0], idx[:, 1]] = model.value(torch.from_numpy(np.concatenate(fobs)))
        rollout = PPORollout(
            obs_t,
            torch.from_numpy(cat["actions"]),
            torch.from_numpy(cat["log_probs"]),
            values,
            torch.from_numpy(np.asarray(rewards, np.float32)),
            torch.from_numpy(cat["terminated"]),
            torch.from_numpy(cat["truncated"]),
            final_values,
            last_value,
        )
        if self.cfg.anneal_lr:
            self.learner.set_lr_fraction(lr_frac)
        metrics = self.learner.update(rollout)
        for it in items:  # observation statistics of this batch, for the next version
            m = it["moments"]
            merge_moments(model.obs_norm, m["mean"], m["var"], m["count"])
        self._publish()
        metrics["update_s"] = time.perf_counter() - t1
        metrics["wait_s"] = t1 - t0
        metrics["policy_lag"] = float(self.learner.version - 1 - min(it["version"] for it in items))
        metrics["aborted"] = False
        return metrics

    # -- GRPO --------------------------------------------------------------------------------
    def _train_grpo(self, gen: int | str) -> dict[str, Any]:
        """Take every rollout rank's sequences (with reference log-probabilities) and the reward
        worker's advantages, run the GRPO update, fold in the observation statistics, publish."""
        import torch

        from rlinf_algos.local_runner import GRPORollout

        t0 = time.perf_counter()
        keys = [scored_key(gen, r) for r in range(self.rollout_world)] + [advantage_key(gen)]
        got = _get_all(self.traj_ch, keys, self.timeout)
        if got is None:
            return {"aborted": True}
        *items, scored = got
        t1 = time.perf_counter()
        L = max(it["mask"].shape[1] for it in items)

        def cat(key: str) -> torch.Tensor:
            parts = []
            for it in items:
                x = it[key]
                if x.shape[1] < L:
                    x = np.concatenate([x, np.zeros((x.shape[0], L - x.shape[1], *x.shape[2:]), x.dtype)], 1)
                parts.append(x)
            return torch.from_numpy(np.concatenate(parts))

        rollout = GRPORollout(
            obs=cat("obs"),
            actions=cat("actions"),
            log_probs=cat("log_probs"),
            mask=cat("mask"),
            returns=torch.from_numpy(scored["returns"]),
            lengths=cat("mask").sum(1),
            version=min(it["version"] for it in items),
        )
        ref = cat("ref_log_probs") if self.cfg.kl_coef > 0 else None
        adv = torch.from_numpy(np.concatenate(scored["advantages"])).float()
        metrics: dict[str, Any] = self.learner.update(rollout, advantages=adv, ref_log_probs=ref)
        for it in items:
            m = it["moments"]
            merge_moments(self.model.obs_norm, m["mean"], m["var"], m["count"])
        self._publish()
        metrics["group_return_mean"] = float(rollout.returns.mean())
        metrics["update_s"] = time.perf_counter() - t1
        metrics["wait_s"] = t1 - t0
        metrics["policy_lag"] = float(self.learner.version - 1 - rollout.version)
        metrics["aborted"] = False
        return metrics

    # -- SAC ---------------------------------------------------------------------------------
    def _train_sac(self, gen: int, chunks: int, global_step: int) -> dict[str, Any]:
        """Consume ``chunks`` transition messages per rollout rank as they arrive, doing
        ``updates_per_step`` gradient steps per env step received (after ``learning_starts``)
        and publishing after each message that changed the weights. ``policy_lag``: the most
        gradient steps (weight versions) any message's actions were behind the learner when it
        arrived."""
        cfg, learner, buffer = self.cfg, self.learner, self.buffer
        t0 = time.perf_counter()
        waited = 0.0
        lag = 0
        got = 0  # env steps received in this iteration (global_step: those before it)
        for _ in range(chunks):
            for r in range(self.rollout_world):
                tw = time.perf_counter()
                item = self.traj_ch.get(traj_key(gen, r), timeout=self.timeout)
                waited += time.perf_counter() - tw
                if isinstance(item, str) and item == ABORT:
                    return {"aborted": True}
                n = item["obs"].shape[0]
                lag = max(lag, int(learner.version) - int(item["version"]))
                buffer.add(
                    item["obs"],
                    item["actions"],
                    item["rewards"],
                    item["next_obs"],
                    item["terminated"],
                    item["truncated"],
                )
                self.received += n
                start = global_step + got  # env-step index of this message's first transition
                got += n
                eligible = start + n - max(start, cfg.learning_starts)  # those past learning_starts
                if eligible <= 0 or len(buffer) < cfg.batch_size:
                    continue
                self.debt += eligible * cfg.updates_per_step
                while self.debt >= 1.0:
                    out = learner.update(buffer.sample(cfg.batch_size))
                    for k, v in out.items():
                        self._sums[k] = self._sums[k] + v if k in self._sums else v
                    self._count += 1
                    self.debt -= 1.0
                self._publish()
        metrics: dict[str, Any] = {
            "aborted": False,
            "update_s": time.perf_counter() - t0 - waited,
            "wait_s": waited,
            "policy_lag": float(lag),
        }
        if self._count:
            metrics.update({k: float(v) / self._count for k, v in self._sums.items()})
            self._sums, self._count = {}, 0
        metrics["updates"] = float(learner.updates)
        return metrics

    def discard(self, gen: int) -> int:
        """Drop whatever generation ``gen`` left in the trajectory channel (after an abort)."""
        dropped = 0
        for r in range(self.rollout_world):
            while True:
                try:
                    self.traj_ch.get_nowait(traj_key(gen, r))
                    dropped += 1
                except ChannelError:
                    break
        return dropped

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What a checkpoint holds of the learner: weights, optimiser, RNG, statistics, and (SAC)
        the replay buffer."""
        import torch

        out: dict[str, Any] = {"learner": self.learner.state_dict(), "torch_rng": torch.get_rng_state()}
        if self.name == "ppo":
            out["reward_scaler"] = self.scaler.state_dict() if self.scaler is not None else None
        elif self.name == "sac":
            out["buffer"] = self.buffer.state_dict()
            out["update_debt"] = self.debt
        return out

    def load(self, state: dict[str, Any]) -> str:
        """Restore :meth:`state` output and publish the restored weights; returns its digest."""
        import torch

        self.learner.load_state_dict(state["learner"])
        torch.set_rng_state(state["torch_rng"])
        if self.name == "ppo":
            if self.scaler is not None and state.get("reward_scaler"):
                self.scaler.load_state_dict(state["reward_scaler"])
        elif self.name == "sac":
            self.buffer.load_state_dict(state["buffer"])
            self.debt = float(state["update_debt"])
        self._publish()
        return self.digest()

    def digest(self) -> str:
        """A short hash of :meth:`state` (tests compare it with the checkpoint's)."""
        return _digest(self.state())

    def policy(self) -> dict[str, Any]:
        """The final policy record (``policy.pt``)."""
        spec = {k: v for k, v in self.spec.items() if k != "num_slots"}
        if self.name == "sac":
            self.learner.sync()
        return {"algorithm": self.name, "spec": spec, "state_dict": self.model.state_dict()}
