"""``rollout.weight_sync``: decided against the planned devices, the same way in ``--dry-run`` and
in the driver (:mod:`rlinf_algos.weight_sync`); a bad choice is a one-line error with its YAML
path before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlinf_algos.config.prepare import prepare_run
from rlinf_algos.weight_sync import choose_weight_sync, sync_devices
from rlinf_core.config import apply_overrides, load_yaml
from rlinf_core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SPLIT = {
    "num_nodes": 2,
    "node_groups": [{"label": "cloud", "node_ranks": 0}, {"label": "edge", "node_ranks": 1}],
    "component_placement": {
        "actor": {"node_group": "cloud", "placement": "0"},
        "rollout": {"node_group": "edge", "placement": "0:0-1"},
        "reward": {"node_group": "edge", "placement": "0"},
        "reference": {"node_group": "cloud", "placement": "1"},
    },
}
"""A language-model run split over a GPU node (actor, reference) and a CPU node (rollout)."""


def _lm(*overrides: str) -> dict[str, Any]:
    return apply_overrides(load_yaml(EXAMPLES / "grpo_arith.yaml"), list(overrides))  # runner.device: auto


def test_members_are_the_learners_rank_0_and_every_consumer_rank() -> None:
    devices = {"actor": ["cuda:0@node 0", "cuda:1@node 0"], "rollout": ["cpu", "cpu"], "env": ["cpu"]}
    assert sync_devices(devices, ("actor", "rollout")) == {
        "actor rank 0": "cuda:0@node 0",
        "rollout rank 0": "cpu",
        "rollout rank 1": "cpu",
    }


@pytest.mark.parametrize(
    ("mode", "devices", "adapter", "chosen"),
    [
        ("auto", {"actor": ["cpu"], "rollout": ["cpu"]}, False, "object_store"),
        ("auto", {"actor": ["cuda:0@node 0"], "rollout": ["cuda:1@node 0"]}, False, "collective"),
        ("auto", {"actor": ["cuda:0@node 0"], "rollout": ["cpu"]}, False, "object_store"),
        ("auto", None, False, "object_store"),  # a scheduler without a plan: devices unknown
        ("collective", {"actor": ["cpu"], "rollout": ["cpu"]}, False, "collective"),  # Gloo
        ("object_store", {"actor": ["cuda:0@node 0"], "rollout": ["cuda:1@node 0"]}, False, "object_store"),
        ("auto", {"actor": ["cuda:0@node 0"], "rollout": ["cuda:1@node 0"]}, True, "object_store"),
    ],
)
def test_the_mode_follows_the_devices(mode: str, devices: Any, adapter: bool, chosen: str) -> None:
    assert choose_weight_sync(mode, devices, adapter_only=adapter)[0] == chosen


@pytest.mark.parametrize(
    ("mode", "devices", "adapter", "says"),
    [
        ("collective", {"actor": ["cuda:0@node 0"], "rollout": ["cpu"]}, False, "rollout rank 0 on cpu"),
        ("collective", {"actor": ["cpu"], "rollout": ["cpu"]}, True, "not for LoRA runs"),
        ("nccl", {"actor": ["cpu"]}, False, "auto, collective, object_store"),
        ("nccl", {"actor": ["cpu"]}, True, "auto, collective, object_store"),
    ],
)
def test_a_mode_the_run_cannot_use_names_the_key(mode: str, devices: Any, adapter: bool, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        choose_weight_sync(mode, devices, adapter_only=adapter)
    assert err.value.problems[0].path == "rollout.weight_sync" and says in str(err.value)


def test_dry_run_decides_it_against_the_plan(host: Any, invoke: Any) -> None:
    res = invoke(
        host, "train", str(EXAMPLES / "quickstart.yaml"), "--dry-run", "rollout.weight_sync=collective"
    )
    assert res.exit_code == 0, res.output
    assert (
        "# weight sync: collective (rollout.weight_sync: collective; actor rank 0 on cpu, rollout rank 0 on cpu)"
        in res.output
    )
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "--dry-run")
    assert "# weight sync: object_store (rollout.weight_sync: auto;" in res.output
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "--dry-run", "runner.scheduler=local")
    assert "# weight sync: none needed in process" in res.output
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "--dry-run", "rollout.weight_sync=nccl")
    assert isinstance(res.exception, ConfigError) and "rollout.weight_sync" in str(res.exception)


def test_dry_run_refuses_a_collective_over_gpus_and_cpus(host: Any) -> None:
    data = {**_lm(), "cluster": SPLIT}
    plan = prepare_run(data, host=host, plan=True, inventory={"nodes": [{"node_ranks": "0", "gpus": 2}]})
    assert plan.devices["actor"] == ["cuda:0@node 0"] and plan.devices["rollout"] == ["cpu", "cpu"]
    assert plan.weight_sync["mode"] == "object_store"  # auto, over a mixed set
    with pytest.raises(ConfigError) as err:
        prepare_run(
            {**_lm("rollout.weight_sync=collective"), "cluster": SPLIT},
            host=host,
            plan=True,
            inventory={"nodes": [{"node_ranks": "0", "gpus": 2}]},
        )
    msg = str(err.value)
    assert (
        "rollout.weight_sync" in msg
        and "actor rank 0 on cuda:0@node 0" in msg
        and "rollout rank 1 on cpu" in msg
    )


def test_dry_run_sends_a_lora_adapter_through_the_object_store(host: Any) -> None:
    lora = "model.lora={rank: 4}"
    assert prepare_run(_lm(lora), host=host, plan=True).weight_sync["mode"] == "object_store"
    with pytest.raises(ConfigError) as err:
        prepare_run(_lm(lora, "rollout.weight_sync=collective"), host=host, plan=True)
    assert "not for LoRA runs" in str(err.value)


def test_members_sharing_a_gpu_never_form_a_collective() -> None:
    shared = {"actor": ["cuda:0@node 0"], "rollout": ["cuda:0@node 0"], "reference": ["cuda:1@node 0"]}
    assert choose_weight_sync("auto", shared)[0] == "object_store"
    with pytest.raises(ConfigError) as err:
        choose_weight_sync("collective", shared)
    assert err.value.problems[0].path == "rollout.weight_sync"
    assert "actor rank 0 and rollout rank 0 share cuda:0@node 0" in str(err.value)
    # the same GPU index on other nodes is another GPU
    apart = {"actor": ["cuda:0@node 0"], "rollout": ["cuda:0@node 1", "cuda:1@node 1"]}
    assert choose_weight_sync("auto", apart)[0] == "collective"


@pytest.mark.parametrize("example", ["grpo_arith.yaml", "grpo_multiagent.yaml"])
def test_one_gpu_node_syncs_through_the_object_store(host: Any, invoke: Any, example: str) -> None:
    """``--gpus-per-node 1`` plans the actor, rollout and reference on cuda:0 of node 0: NCCL
    would refuse them at the first publish, so ``auto`` picks the object store and an explicit
    ``collective`` is a one-line error at ``rollout.weight_sync``."""
    res = invoke(host, "train", str(EXAMPLES / example), "--dry-run", "--gpus-per-node", "1")
    assert res.exit_code == 0, res.output
    assert (
        "# weight sync: object_store (rollout.weight_sync: auto; actor rank 0 on cuda:0@node 0" in res.output
    )
    assert "share a GPU, which NCCL refuses" in res.output
    res = invoke(
        host,
        "train",
        str(EXAMPLES / example),
        "--dry-run",
        "--gpus-per-node",
        "1",
        "rollout.weight_sync=collective",
    )
    assert isinstance(res.exception, ConfigError), res.output
    assert res.exception.problems[0].path == "rollout.weight_sync"
    assert "\n" not in str(res.exception) and "share cuda:0@node 0" in str(res.exception)


def test_the_32_gpu_seed_config_still_broadcasts_over_nccl(host: Any) -> None:
    plan = prepare_run(EXAMPLES / "seed003" / "ppo_vla_32gpu.yaml", host=host, plan=True, inventory=8)
    assert plan.weight_sync["mode"] == "collective"
    assert len(set(plan.weight_sync["members"].values())) == len(plan.weight_sync["members"]) == 25
