"""A third party adds an advantage estimator and a policy loss from its own package: one function
each and one hook each (``rlinf_register_advantage_estimators``,
``rlinf_register_policy_losses``). The plugin is a real installed-looking distribution written
here (a ``*.dist-info`` with an ``rlinf`` entry point on ``sys.path``), found as any installed
plugin is; a run names its functions in the YAML and trains with them (embodied GRPO: both;
embodied PPO: the loss), and ``rlinf plugins`` lists them."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos import objectives
from rlinf_algos.grpo.config import GRPOConfig
from rlinf_algos.training import run_training
from rlinf_core.config import apply_overrides, load_yaml, validate_model
from rlinf_core.errors import ConfigError, PluginError

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

PLUGIN = '''
"""A test plugin: the estimator ``best_of_group`` and the loss ``plain_pg``."""

import torch

from rlinf_algos.objectives import advantage_estimator, policy_loss
from rlinf_algos.objectives.losses import aggregate
from rlinf_core.plugins import hookimpl

CALLS = {"best_of_group": 0, "plain_pg": 0}


@advantage_estimator("best_of_group")
def best_of_group(outcomes, cfg):
    """1 for each group's best episode (its first, on ties), 0 for the others."""
    CALLS["best_of_group"] += 1
    out = torch.zeros_like(outcomes.rewards)
    for g in outcomes.group_ids.unique():
        idx = (outcomes.group_ids == g).nonzero().flatten()
        out[idx[outcomes.rewards[idx].argmax()]] = 1.0
    return out


@policy_loss("plain_pg", aggregation="seq-mean-token-sum")
def plain_pg(log_prob, old_log_prob, advantages, mask, settings, ref_log_prob=None):
    """REINFORCE: -log pi(y_t) * A, no ratio, no clip."""
    CALLS["plain_pg"] += 1
    adv = advantages.unsqueeze(1) if advantages.ndim == 1 else advantages
    zero = torch.zeros((), device=log_prob.device)
    return aggregate(-log_prob * adv, mask, settings.aggregation), {
        "kl": zero, "clip_fraction": zero, "ratio_mean": zero + 1.0,
    }


@hookimpl
def rlinf_register_advantage_estimators():
    return [best_of_group]


@hookimpl
def rlinf_register_policy_losses():
    return [plain_pg]
'''

CLASH = """
from rlinf_algos.objectives import advantage_estimator
from rlinf_core.plugins import hookimpl


@advantage_estimator("GRPO")
def mine(outcomes, cfg):
    return outcomes.rewards


@hookimpl
def rlinf_register_advantage_estimators():
    return [mine]
"""


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str) -> None:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    dist = module.replace("_", "-")
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rlinf]\n{module} = {module}\n")
    monkeypatch.syspath_prepend(str(site))


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The plugin installed in a folder on ``sys.path``; yields its module (its call counts)."""
    monkeypatch.delenv("RLINF_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("RLINF_LOAD_PLUGINS", raising=False)
    _install(tmp_path, monkeypatch, "rlinf_testobjectives", PLUGIN)
    objectives.clear_cache()
    try:
        import importlib

        yield importlib.import_module("rlinf_testobjectives")
    finally:
        objectives.clear_cache()
        sys.modules.pop("rlinf_testobjectives", None)


def test_the_plugins_functions_are_registered_and_validated(plugin: Any) -> None:
    assert "best_of_group" in objectives.estimator_names(critic=False)
    assert "plain_pg" in objectives.policy_loss_names()
    cfg = validate_model(
        GRPOConfig, {"adv_estimator": "best_of_group", "policy_loss": "plain_pg"}, "algorithm"
    )
    assert objectives.resolve_aggregation(cfg) == "seq-mean-token-sum"  # the loss's own
    with pytest.raises(ConfigError, match=r"registered: best_of_group, dr_grpo, grpo"):
        validate_model(GRPOConfig, {"adv_estimator": "best_of_grup"}, "algorithm")
    est = objectives.estimator("best_of_group")
    out = est(_outcomes(torch.tensor([0.0, 2.0, 1.0, 3.0, 3.0, 0.0])), None)
    assert out.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 0.0]


def _outcomes(rewards: torch.Tensor) -> Any:
    from rlinf_algos.objectives.advantages import Outcomes

    return Outcomes.consecutive(rewards, 3)


def test_a_run_trains_with_the_plugins_functions_by_name(plugin: Any, tmp_path: Path) -> None:
    config = apply_overrides(
        load_yaml(EXAMPLES / "grpo_pendulum.yaml"),
        [
            "runner.scheduler=local", "algorithm.group_size=2", "algorithm.num_groups=2", "algorithm.update_epochs=1",
            "env.num_envs=4", "env.max_episode_steps=30", "model.hidden_sizes=[16,16]", "runner.total_steps=100",
            "runner.checkpoint_interval=0", "algorithm.adv_estimator=best_of_group", "algorithm.policy_loss=plain_pg",
        ],
    )  # fmt: skip
    summary = run_training(config, run_dir=tmp_path / "run")
    assert summary["total_env_steps"] >= 100
    assert plugin.CALLS["best_of_group"] >= 1 and plugin.CALLS["plain_pg"] >= 1


def test_embodied_ppo_trains_with_the_plugins_loss_by_name(plugin: Any, tmp_path: Path) -> None:
    # embodied PPO hands the loss its single steps as [B, 1] rows (mask all ones)
    config = apply_overrides(
        load_yaml(EXAMPLES / "quickstart.yaml"),
        [
            "runner.scheduler=local", "algorithm.rollout_steps=16", "algorithm.minibatch_size=16",
            "algorithm.update_epochs=1", "env.num_envs=2", "model.hidden_sizes=[16,16]", "runner.total_steps=64",
            "runner.checkpoint_interval=0", "algorithm.policy_loss=plain_pg",
        ],
    )  # fmt: skip
    summary = run_training(config, run_dir=tmp_path / "run")
    assert summary["total_env_steps"] >= 64 and plugin.CALLS["plain_pg"] >= 1


def test_rlinf_plugins_lists_the_estimators_and_losses_by_name(plugin: Any, invoke: Any) -> None:
    from rlinf_core.plugins import load_plugins

    host = load_plugins()
    res = invoke(host, "plugins", "--json")
    assert res.exit_code == 0, res.output
    rows = {p["name"]: p["registers"] for p in json.loads(res.stdout)["plugins"]}
    assert rows["rlinf_testobjectives"]["advantage_estimators"] == ["best_of_group"]
    assert rows["rlinf_testobjectives"]["policy_losses"] == ["plain_pg"]
    assert rows["algos"]["advantage_estimators"] == ["gae", "grpo", "dr_grpo", "rloo", "reinforce_plus_plus"]
    assert rows["algos"]["policy_losses"] == ["ppo_clip", "dapo", "gspo"]


def test_two_plugins_claiming_one_name_are_both_named(
    plugin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, monkeypatch, "rlinf_testclash", CLASH)
    objectives.clear_cache()
    try:
        with pytest.raises(
            PluginError, match=r"advantage estimator '(grpo|GRPO)' is registered twice"
        ) as err:
            objectives.estimator_names()
        assert "plugin 'algos' (rlinf-algos" in str(err.value)
        assert "plugin 'rlinf_testclash' (rlinf-testclash 0.1)" in str(err.value)
    finally:
        sys.modules.pop("rlinf_testclash", None)
