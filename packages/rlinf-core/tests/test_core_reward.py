"""The reward registry: ``rlinf_register_rewards`` fills ``PluginHost.rewards`` the way
``rlinf_register_models`` fills ``PluginHost.models``."""

from __future__ import annotations

from typing import ClassVar

import pytest

from rlinf_core import PluginError, hookimpl, load_plugins
from rlinf_core.reward import RewardFunction


class Contains(RewardFunction):
    PLUGIN_NAME: ClassVar[str] = "Contains"
    description: ClassVar[str] = "the answer appears in the completion"

    def __call__(self, completions, answers, *, prompts=None, columns=None):  # type: ignore[no-untyped-def]
        return [float(a in c) for c, a in zip(completions, answers, strict=True)]


class Plugin:
    @hookimpl
    def rlinf_register_rewards(self) -> list[type]:
        return [Contains]


def test_in_process_plugin_registers_a_reward() -> None:
    host = load_plugins(entry_points=[], extra=[("mine", Plugin())])
    assert host.rewards.names() == ["Contains"]
    cls = host.rewards.get("contains")  # case-insensitive, like every registry
    assert cls is Contains and "contains" in host.rewards
    assert cls()(["x = 42", "x = 41"], ["42", "42"]) == [1.0, 0.0]
    assert host.rewards.owner("Contains").distribution == "(in-process)"
    (row,) = host.describe()
    assert row["registers"]["rewards"] == ["Contains"]


def test_reward_registry_errors() -> None:
    host = load_plugins(entry_points=[], extra=[("one", Plugin()), ("two", Plugin())])
    with pytest.raises(PluginError, match=r"reward function 'Contains' is registered twice"):
        host.rewards  # noqa: B018

    class NotAReward:
        @hookimpl
        def rlinf_register_rewards(self) -> list[type]:
            return [dict]

    host = load_plugins(entry_points=[], extra=[("bad", NotAReward())])
    with pytest.raises(PluginError, match=r"expected a subclass of rlinf_core\.reward\.RewardFunction"):
        host.rewards  # noqa: B018

    empty = load_plugins(entry_points=[])
    with pytest.raises(
        PluginError,
        match=r"unknown reward function 'math'; installed: none\. 'math' is provided by rlinf-algos",
    ):
        empty.rewards.get("math")


def test_reward_function_is_abstract() -> None:
    class Incomplete(RewardFunction):
        PLUGIN_NAME = "incomplete"

    with pytest.raises(TypeError):
        Incomplete()  # type: ignore[abstract]
