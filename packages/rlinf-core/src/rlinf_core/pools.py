"""The worker-pool form of a run configuration (RLinf seed 003) and its ``cluster`` section.

Seed 003 writes a run as worker pools rather than as a placement::

    algorithm: ppo
    ray_cluster: {num_nodes: 4, head_node_gpus: 8}
    rollout_worker: {num_workers: 24, num_gpus: 1, device: cuda}
    trainer: {num_gpus: 8, gradient_accumulation_steps: 8}
    reward_worker: {device: cpu, num_workers: 16}

:func:`expand_pools` turns the four pool sections into the ordinary ``cluster`` section (pure,
no Ray, no torch), so the planner, ``rlinf cluster plan`` and ``rlinf train`` treat it like any
other. The rules (also in ``packages/rlinf-algos/docs/seed-form.md``):

- the **trainer** (component ``actor``) takes GPUs ``0..num_gpus-1`` of the head node (node 0),
  one process per GPU; ``num_gpus: 0`` is one CPU process on node 0;
- **rollout workers** (``rollout``) are packed onto the GPUs of the other nodes (``1..N-1``, in
  node order, ``num_gpus`` GPUs per worker); on one node they take the GPUs after the trainer's;
  ``device: cpu`` makes them processes spread evenly over those nodes;
- **reward workers** are CPU processes spread evenly over the rollout nodes: the ``reward``
  component when the algorithm has one, else the ``env`` component (an embodied algorithm without
  a reward component gets its reward from the simulator, which the env workers step);
- **env workers**, when reward workers are not them, are one process beside each rollout worker.

Every problem names the seed-style key the user wrote (``rollout_worker.num_worker: unknown key
(did you mean 'num_workers'?)``); :meth:`PoolExpansion.translate` renames the problems the
planner later finds in the generated section the same way.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from rlinf_core.config import ConfigSection, describe_value, validate_model
from rlinf_core.errors import ConfigError, ConfigProblem, join_path

__all__ = [
    "POOL_SECTIONS",
    "SEED_KEYS",
    "PoolExpansion",
    "RayClusterPool",
    "RewardPool",
    "RolloutPool",
    "TrainerPool",
    "expand_pools",
    "is_seed_form",
    "spread",
    "unknown_key_problems",
]


class RayClusterPool(ConfigSection):
    """``ray_cluster``: how many nodes, and the head node's GPUs."""

    num_nodes: int = Field(1, ge=1, le=1_000_000, description="nodes of the Ray cluster (node 0 is the head)")
    head_node_gpus: int | None = Field(
        None, ge=0, description="GPUs of the head node, where the trainer runs (null: as many as it needs)"
    )


class RolloutPool(ConfigSection):
    """``rollout_worker``: the pool that runs the policy against the environments."""

    num_workers: int = Field(1, ge=1, description="rollout worker processes")
    num_gpus: int | None = Field(
        None, ge=0, description="GPUs per rollout worker (null: 1 with device cuda, 0 with device cpu)"
    )
    device: Literal["cuda", "gpu", "cpu"] = Field(
        "cuda", description="cuda (or gpu): on GPUs; cpu: CPU processes"
    )
    num_envs_per_worker: int = Field(
        8, ge=1, description="environments each rollout worker serves (env.num_envs = this x num_workers)"
    )


class TrainerPool(ConfigSection):
    """``trainer``: the learner (component ``actor``) on the head node."""

    num_gpus: int = Field(
        1, ge=0, description="trainer GPUs on the head node, one process each (0: one CPU process)"
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="micro-batches per optimiser step on each trainer process"
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description="tensor-parallel degree; rlinf has no tensor-parallel backend: > 1 falls back to FSDP over the trainer processes (stated when the run starts)",
    )


class RewardPool(ConfigSection):
    """``reward_worker``: CPU processes that compute rewards."""

    device: Literal["cpu", "cuda", "gpu"] = Field(
        "cpu", description="cpu (a reward model on GPUs is not supported)"
    )
    num_workers: int = Field(1, ge=1, description="reward worker processes")


POOL_SECTIONS: Mapping[str, type[BaseModel]] = {
    "ray_cluster": RayClusterPool,
    "rollout_worker": RolloutPool,
    "trainer": TrainerPool,
    "reward_worker": RewardPool,
}
"""The pool sections and their models."""

SEED_KEYS: tuple[str, ...] = (*POOL_SECTIONS, "checkpoint_interval", "task", "reward_fn")
"""Top-level keys that only the worker-pool form has."""


def is_seed_form(data: Any) -> bool:
    """Whether ``data`` is written in the worker-pool form: it has a seed key, or ``algorithm``
    is a bare name (``algorithm: ppo``) and there is no ``cluster`` section. ``task`` counts only
    as a name (``task: embodied_vla``): a ``task`` section (a mapping) belongs to language-model
    runs."""
    if not isinstance(data, Mapping):
        return False
    if any(key in data for key in SEED_KEYS if key != "task"):
        return True
    if "task" in data and not isinstance(data["task"], Mapping):
        return True
    return isinstance(data.get("algorithm"), str) and "cluster" not in data


def unknown_key_problems(
    keys: Iterable[Any], valid: Iterable[str], prefix: str, what: str
) -> list[ConfigProblem]:
    """One problem per key of ``keys`` not in ``valid``: it names itself and the closest valid
    key (``did you mean 'num_workers'?``)."""
    valid = list(valid)
    problems = []
    for key in keys:
        if key in valid:
            continue
        close = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            ConfigProblem(join_path(prefix, str(key)), f"unknown key ({hint}{what}: {', '.join(valid)})")
        )
    return problems


def _pool(data: Mapping[str, Any], name: str, problems: list[ConfigProblem]) -> Any:
    model = POOL_SECTIONS[name]
    raw = data.get(name)
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.append(ConfigProblem(name, f"must be a mapping, got {describe_value(raw)}"))
        return model()
    problems.extend(unknown_key_problems(raw, model.model_fields, name, f"{name} takes"))
    known = {k: v for k, v in raw.items() if k in model.model_fields}
    try:
        return validate_model(model, known, prefix=name)
    except ConfigError as err:
        problems.extend(err.problems)
    # the valid keys still count (their own checks run), the bad ones take their defaults
    bad = {p.path.removeprefix(f"{name}.").split(".")[0].split("[")[0] for p in problems}
    try:
        return validate_model(model, {k: v for k, v in known.items() if k not in bad}, prefix=name)
    except ConfigError:
        return model()


def spread(count: int, nodes: range) -> str:
    """A placement string of ``count`` processes spread evenly over ``nodes`` (node group
    ``node``): the first nodes get one more when it does not divide; runs of nodes with the same
    count share one part (``spread(16, range(1, 4)) == "1:0-5,2-3:6-15"``)."""
    n = min(len(nodes), count)
    base, extra = divmod(count, n)
    parts: list[str] = []
    first = 0
    i = 0
    while i < n:
        per = base + (1 if i < extra else 0)
        j = i
        while j + 1 < n and base + (1 if j + 1 < extra else 0) == per:
            j += 1
        k = j - i + 1
        last = first + per * k - 1
        node_text = str(nodes[i]) if i == j else f"{nodes[i]}-{nodes[j]}"
        parts.append(f"{node_text}:{_span(first, last)}")
        first = last + 1
        i = j + 1
    return ",".join(parts)


def _span(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _nodes_text(nodes: range) -> str:
    return f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {nodes[0]}-{nodes[-1]}"


@dataclass
class PoolExpansion:
    """What :func:`expand_pools` made of the pool sections.

    ``cluster``: the ordinary ``cluster`` section; ``inventory``: the GPUs per node the pools
    imply (``nodes: [...]`` of an inventory file; used to plan when no inventory is given);
    ``notes``: one line per decision (where each pool went, what fell back to what);
    ``paths``: generated YAML path -> the seed key it came from; ``problems``: what is wrong,
    named by seed key."""

    cluster: dict[str, Any]
    inventory: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    problems: list[ConfigProblem] = field(default_factory=list)
    pools: dict[str, Any] = field(default_factory=dict)

    def translate(self, problems: Iterable[ConfigProblem]) -> list[ConfigProblem]:
        """``problems`` with the paths of generated sections renamed to the seed key they came
        from (``rollout_worker (cluster.component_placement.rollout.placement)``)."""
        out = []
        for p in problems:
            best = ""
            for generated in self.paths:
                if (p.path == generated or p.path.startswith((generated + ".", generated + "["))) and len(
                    generated
                ) > len(best):
                    best = generated
            if best:
                out.append(ConfigProblem(f"{self.paths[best]} (became {p.path})", p.message))
            else:
                out.append(p)
        return out


def expand_pools(
    data: Mapping[str, Any],
    components: Iterable[str] = ("env", "rollout", "actor"),
    sections: Iterable[str] | None = None,
) -> PoolExpansion:
    """The ``cluster`` section of a worker-pool config (see the module docstring for the rules).

    ``components``: those of the run's algorithm; a ``reward`` among them receives the reward
    workers, else the ``env`` component does. ``sections``: the algorithm's own top-level
    sections; given, every other top-level key that is not a seed key is a problem (with the
    closest key). Problems are collected in the result's ``problems`` (never raised), named by
    seed key.
    """
    components = tuple(components)
    problems: list[ConfigProblem] = []
    if sections is not None:
        valid = list(dict.fromkeys([*SEED_KEYS, "algorithm", *(s for s in sections if s != "cluster")]))
        problems.extend(unknown_key_problems(data, valid, "", "a worker-pool config has"))
    rc = _pool(data, "ray_cluster", problems)
    ro = _pool(data, "rollout_worker", problems)
    tr = _pool(data, "trainer", problems)
    rw = _pool(data, "reward_worker", problems)
    n_nodes, head = rc.num_nodes, rc.head_node_gpus
    T, R = tr.num_gpus, ro.num_workers
    on_gpu = ro.device != "cpu"
    g = ro.num_gpus if ro.num_gpus is not None else (1 if on_gpu else 0)
    if on_gpu and g == 0:
        problems.append(
            ConfigProblem(
                "rollout_worker.num_gpus", "device cuda needs at least 1 GPU per worker; or use device: cpu"
            )
        )
        g = 1
    if not on_gpu and g:
        problems.append(
            ConfigProblem(
                "rollout_worker.num_gpus", f"device cpu takes no GPUs (got {g}); or use device: cuda"
            )
        )
    if rw.device != "cpu":
        problems.append(
            ConfigProblem(
                "reward_worker.device",
                f"{rw.device!r}: a reward model on GPUs is not supported; rewards run in CPU processes "
                "(device: cpu)",
            )
        )
    notes: list[str] = []
    groups: list[dict[str, Any]] = []
    placement: dict[str, Any] = {}
    paths = {
        "cluster.num_nodes": "ray_cluster.num_nodes",
        "cluster.node_groups": "ray_cluster",
        "cluster": "ray_cluster",
    }
    head_needs = T
    worker_nodes = range(0, 1) if n_nodes == 1 else range(1, n_nodes)
    if T > 0 or (on_gpu and n_nodes == 1):
        groups.append({"label": "head", "node_ranks": 0})
    if on_gpu and n_nodes > 1:
        groups.append({"label": "workers", "node_ranks": _span(1, n_nodes - 1)})
    # the trainer
    if T > 0:
        placement["actor"] = {"node_group": "head", "placement": _span(0, T - 1)}
        notes.append(f"trainer -> actor: {T} process(es) on GPUs {_span(0, T - 1)} of node 0 (the head)")
        if head is not None and head < T:
            problems.append(
                ConfigProblem(
                    "trainer.num_gpus",
                    f"{T} trainer GPUs do not fit on the head node's {head} (ray_cluster.head_node_gpus)",
                )
            )
    else:
        placement["actor"] = {"node_group": "node", "placement": "0"}
        notes.append("trainer -> actor: one CPU process on node 0 (trainer.num_gpus: 0)")
    paths["cluster.component_placement.actor"] = "trainer"
    # the rollout workers
    need = R * g
    procs = f":0-{R - 1}" if g > 1 else ""
    if on_gpu and n_nodes == 1:
        placement["rollout"] = {"node_group": "head", "placement": f"{_span(T, T + need - 1)}{procs}"}
        head_needs = T + need
        notes.append(f"rollout_worker -> rollout: {R} process(es) on GPUs {_span(T, T + need - 1)} of node 0")
        if head is not None and T + need > head:
            problems.append(
                ConfigProblem(
                    "rollout_worker.num_workers",
                    f"{R} workers x {g} GPU(s) after the trainer's {T} need {T + need} GPUs on the one node, "
                    f"more than ray_cluster.head_node_gpus {head}",
                )
            )
    elif on_gpu:
        per_node = math.ceil(need / len(worker_nodes))
        placement["rollout"] = {"node_group": "workers", "placement": f"{_span(0, need - 1)}{procs}"}
        notes.append(
            f"rollout_worker -> rollout: {R} process(es) packed onto the {need} GPUs of {_nodes_text(worker_nodes)} "
            f"({per_node} per node when the nodes are alike)"
        )
    else:
        placement["rollout"] = {"node_group": "node", "placement": spread(R, worker_nodes)}
        notes.append(
            f"rollout_worker -> rollout: {R} CPU process(es) spread over {_nodes_text(worker_nodes)}"
        )
    paths["cluster.component_placement.rollout"] = "rollout_worker"
    if head is not None and n_nodes > 1 and head > T:
        notes.append(f"{head - T} of the head node's {head} GPUs stay idle (the trainer uses {T})")
    # reward and env workers
    has_reward_pool = isinstance(data.get("reward_worker"), Mapping)
    if "reward" in components:
        placement["reward"] = {"node_group": "node", "placement": spread(rw.num_workers, worker_nodes)}
        paths["cluster.component_placement.reward"] = "reward_worker"
        notes.append(
            f"reward_worker -> reward: {rw.num_workers} CPU process(es) over {_nodes_text(worker_nodes)}"
        )
    if "env" in components:
        if "reward" not in components and has_reward_pool:
            placement["env"] = {"node_group": "node", "placement": spread(rw.num_workers, worker_nodes)}
            paths["cluster.component_placement.env"] = "reward_worker"
            notes.append(
                f"reward_worker -> env: {rw.num_workers} CPU process(es) over {_nodes_text(worker_nodes)}; they step "
                "the simulator and compute its reward (the algorithm has no separate reward component)"
            )
        else:
            placement["env"] = {"node_group": "node", "placement": spread(R, worker_nodes)}
            paths["cluster.component_placement.env"] = "rollout_worker"
            notes.append(f"env: {R} CPU process(es), one beside each rollout worker")
    elif has_reward_pool and "reward" not in components:
        notes.append("reward_worker: the algorithm has neither a reward nor an env component; not placed")
    for name in [n for n in placement if n not in components]:
        del placement[name]
        notes.append(f"{name}: not a component of this algorithm; not placed")
    cluster: dict[str, Any] = {"num_nodes": n_nodes}
    if groups:
        cluster["node_groups"] = groups
    cluster["component_placement"] = placement
    # the inventory these pools imply: the head's GPUs, and the rollout GPUs over the other nodes
    nodes: list[dict[str, Any]] = [{"node_ranks": "0", "gpus": head if head is not None else head_needs}]
    if n_nodes > 1:
        nodes.append(
            {
                "node_ranks": _span(1, n_nodes - 1),
                "gpus": math.ceil(need / len(worker_nodes)) if on_gpu else 0,
            }
        )
    return PoolExpansion(
        cluster=cluster,
        inventory={"nodes": nodes},
        notes=notes,
        paths=paths,
        problems=problems,
        pools={
            "ray_cluster": rc,
            "rollout_worker": ro,
            "trainer": tr,
            "reward_worker": rw,
            "gpus_per_rollout": g,
        },
    )
