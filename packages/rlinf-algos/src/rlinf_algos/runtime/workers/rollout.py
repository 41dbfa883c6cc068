"""The rollout role: a versioned copy of the policy that samples. The host follows the learner's
weight sync (:meth:`RolloutWorker.sync`, at least the version a call asks for), keeps the
sampling random streams (checkpointed), and for embodied flows is a *port* over its direct links
to the env workers (:mod:`rlinf_algos.ports`, :mod:`rlinf_algos.runtime.workers.env`). The body
the flow gives it does the sampling: an embodied flow's policy network and collection loop
(:meth:`RolloutWorker.collect`), a language-model flow's rollout engine answering generation
requests (:meth:`RolloutWorker.serve`).

The body: ``configure(spec)`` (build the policy for ``spec``; ``None`` for a flow whose model is
known up front), ``version``, ``set_weights(state_dict, version)``, ``weights()`` (what it acts
with), and the calls ``collect(gen, steps, **kw)`` / ``serve()``; optionally ``rng_state()`` /
``set_rng_state()`` for streams of its own.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from rlinf_algos import obs as obs_tree
from rlinf_algos.runtime.host_values import to_cpu
from rlinf_algos.runtime.workers.base import RoleWorker, close_links
from rlinf_algos.runtime.workers.env import shards
from rlinf_core.errors import ChannelError, RlinfError
from rlinf_core.links import LinkListener, Links
from rlinf_core.weights import WeightSync

__all__ = ["RolloutWorker"]


class RolloutWorker(RoleWorker):
    """Policy inference with a versioned copy of the weights (see the module docstring).

    Options (embodied flows, beside :class:`~rlinf_algos.runtime.workers.base.RoleWorker`'s):
    ``env_world`` (the number of env workers; 0: no env links), ``per_stage`` (envs per stage of
    each), ``stages`` (``rollout.pipeline_stages``) and ``links`` (the run's
    :class:`~rlinf_core.links.Links`, from :meth:`rlinf_core.Scheduler.links`: this worker
    listens, the env workers connect). The channel ``traj`` carries what it collects.
    """

    role = "rollout"

    def setup(self) -> None:
        import torch

        super_setup = super().setup
        opts = self.options
        self.env_world = int(opts.get("env_world", 0))
        self.per_stage = int(opts.get("per_stage", 0))
        self.stages = int(opts.get("stages", 1))
        self.link_factory: Links | None = opts.get("links")
        self.traj_ch = self.channels.get("traj")
        self.links: dict[int, Any] = {}
        self.links_gen: int | None = None
        self._report: str | None = None
        self.wb: WeightSync | None = None
        self.listener: LinkListener | None = None
        # the sampling streams: seeded per rank, saved in checkpoints
        torch.manual_seed(self.rank_seed)
        self.generator = torch.Generator().manual_seed(self.rank_seed)
        self.np_rng = np.random.default_rng(self.rank_seed)
        if self.env_world:
            plan = shards(self.per_stage, self.env_world, self.world_size)
            self.my_shards = [sh for sh in plan if sh.dst == self.rank]
            self.slots = sum(sh.size for sh in self.my_shards)  # env slots of each stage
            if self.link_factory is None:
                raise RlinfError(
                    f"rollout rank {self.rank}: {self.env_world} env workers but no links to them"
                )
            self.listener = self.link_factory.listen(
                name=f"rollout rank {self.rank}", backlog=max(16, self.env_world)
            )
        super_setup()

    def teardown(self) -> None:
        close_links(getattr(self, "links", {}))
        if getattr(self, "listener", None) is not None:
            self.listener.close()
        if getattr(self, "wb", None) is not None:
            try:
                self.wb.close()  # leave the weight sync's group (the weights stay)
            except Exception:  # the publisher is gone already
                pass
        super().teardown()

    # -- weights ---------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """The weight version the body acts with (-1 before the first)."""
        return int(getattr(self.body, "version", -1))

    def configure(
        self,
        spec: dict[str, Any] | None = None,
        weights: WeightSync | None = None,
        timeout: float | None = None,
    ) -> int:
        """Build the body's policy for ``spec`` (the env's sizes are known once an env worker
        runs) and pull the newest weights (a restarted worker catches up here). ``weights``: the
        weight sync to follow from now on (a restarted learner publishes through a new one, from
        the version of its checkpoint; this worker leaves the old one). ``timeout``: how long to
        wait for the first version (default ``timeout``; the driver passes less when one was
        published already, so that a worker whose learner died since fails soon). Returns the
        version."""
        if weights is not None and weights.name != getattr(self.weights, "name", None):
            old, self.weights = self.wb, weights
            self.wb = None
            if old is not None:
                old.close()  # a consumer of the old publisher leaves its group
        # (the same weights again, as a call retried after a restart passes them: kept as they are)
        self.spec = spec
        self.body.configure(spec)
        self.sync(0, timeout)
        return self.version

    def sync(self, min_version: int, timeout: float | None = None) -> None:
        """Load the newest weights, waiting for version ``min_version`` at least (up to
        ``timeout``, default the worker's)."""
        if self.wb is None:
            if self.weights is None:
                raise RlinfError(
                    f"rollout rank {self.rank}: no weight sync to follow (the driver passes one)"
                )
            self.wb = self.weights
        if self.version < min_version:
            version, sd = self.wb.fetch(min_version=min_version, timeout=timeout or self.timeout)
        else:
            got = self.wb.fetch_if_newer(self.version)
            if got is None:
                return
            version, sd = got
        self.body.set_weights(sd, version)

    def policy_weights(self) -> dict[str, Any]:
        """The weights this worker acts with and their version: the newest the learner published
        that this worker fetched (what ``policy.safetensors`` holds when the learner is gone)."""
        return {"version": self.version, "state_dict": to_cpu(self.body.weights())}

    # -- random streams --------------------------------------------------------------------------
    def rng_state(self) -> dict[str, Any]:
        """The sampling streams (a checkpoint keeps them): this process's torch and numpy
        streams, the sampling generator, and the body's own."""
        import torch

        from rlinf_algos.runtime.stop import cuda_rng_state

        state = {
            "generator": self.generator.get_state(),
            "torch": torch.get_rng_state(),
            "numpy": self.np_rng.bit_generator.state,
        }
        cuda = cuda_rng_state()  # a policy on a GPU may draw there (vla's predict)
        if cuda is not None:
            state["cuda"] = cuda
        own = getattr(self.body, "rng_state", None)
        if own is not None:
            state["body"] = own()
        return state

    def set_rng_state(self, state: dict[str, Any]) -> None:
        import torch

        self.generator.set_state(state["generator"])
        from rlinf_algos.runtime.stop import set_cuda_rng_state

        torch.set_rng_state(state["torch"])
        set_cuda_rng_state(state.get("cuda"))
        self.np_rng.bit_generator.state = state["numpy"]
        if "body" in state and hasattr(self.body, "set_rng_state"):
            self.body.set_rng_state(state["body"])

    # -- the port over the env links (embodied flows) --------------------------------------------
    def link_address(self) -> Any:
        """Where env workers connect to this worker's direct links (what
        :meth:`rlinf_core.links.Links.connect` takes)."""
        if self.listener is None:
            raise ChannelError(f"rollout rank {self.rank} has no env links (no env workers in this run)")
        return self.listener.address

    def _accept(self, gen: int) -> None:
        """Take the links of generation ``gen`` from every env rank this worker's shards come
        from (connections of other generations or without the run's token are closed)."""
        if self.links_gen == gen or self.listener is None:
            return
        close_links(self.links)
        self.links_gen = None
        need = {sh.src for sh in self.my_shards}
        self.links = self.listener.accept(gen, need, timeout=self.timeout, peer="env")
        self.links_gen = gen

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
        offsets = [sh.dst_offset for sh in self.my_shards]
        finals = [
            (p["final"][0] + off, p["final"][1])
            for p, off in zip(parts, offsets, strict=True)
            if "final" in p
        ]
        if finals:
            out["final"] = (np.concatenate([f[0] for f in finals]), obs_tree.concat([f[1] for f in finals]))
        return out

    def send(self, s: int, actions: np.ndarray | None) -> None:
        """The actions ``[slots, A]`` of stage ``s`` to the env workers they belong to;
        ``None``: every env of the stage is done here (whole-episode iterations)."""
        for sh in self.my_shards:
            if actions is None:
                self.links[sh.src].send((s, None))
                continue
            a = sh.dst_offset
            self.links[sh.src].send((s, actions[a : a + sh.size]))

    # -- the role's calls --------------------------------------------------------------------------
    def collect(
        self, gen: int, steps: int, min_version: int, report: str | None = None, **kw: Any
    ) -> dict[str, Any]:
        """One iteration of ``steps`` vector steps per stage (at most, for whole episodes) with
        weights of version ``min_version`` or newer; the body's collection loop sends the data
        on. Returns timing and the weight version used, or ``aborted``. ``report``: a channel key
        rank 0 puts ``True`` on once the iteration's first env message has arrived (the driver's
        ``on_collecting`` callback waits for it)."""
        t0 = time.perf_counter()
        self._report = report if self.rank == 0 else None
        out: dict[str, Any] = {"aborted": True}
        try:
            self._accept(gen)
            self.sync(min_version)
            out = self._body_call("collect")(gen, steps, **kw)
        except ChannelError as err:
            return {"aborted": True, "error": str(err)}
        finally:
            if out.get("aborted"):  # the env workers still waiting on this one learn it at once
                close_links(self.links)
                self.links_gen = None
        out["rollout_s"] = time.perf_counter() - t0
        return out

    def serve(self) -> dict[str, Any]:
        """Answer generation requests until the driver says stop (the body's loop over the
        ``gen`` channel); returns what it served."""
        return self._body_call("serve")()
