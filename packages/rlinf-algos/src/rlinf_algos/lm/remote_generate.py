"""Generation over the ``gen`` channel of a distributed language-model run: an agent (in the
driver or an agent worker) asks the rollout ranks for responses (:class:`ChannelGenerate`) and
plays its episodes with them (:func:`play`; the agent process's body is
:class:`~rlinf_algos.lm.roles.AgentPlayer`). Imports no torch."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlinf_algos.channels import Aborted, is_abort
from rlinf_algos.lm.agents import EpisodeBatch
from rlinf_algos.lm.config import LMRunConfig
from rlinf_core.errors import ChannelTimeout, RlinfError

__all__ = ["ChannelGenerate", "play", "run_config"]


def run_config(data: Mapping[str, Any] | LMRunConfig) -> LMRunConfig:
    """The run's sections, as a worker receives them (a dict) or as they are."""
    return data if isinstance(data, LMRunConfig) else LMRunConfig.model_validate(data)


class ChannelGenerate:
    """``generate(prompts, max_new_tokens, stop_ids) -> responses`` over the ``gen`` channel:
    the prompts are split into at most ``n_rollout`` parts, each put on key ``req`` (any rollout
    rank takes it), and the replies are read from key ``reply`` in part order.

    Args:
        channel: the ``gen`` channel.
        n_rollout: rollout ranks (the prompts are split so that each can take a part).
        reply: this caller's reply key (unique per agent).
        temperature: ``None`` is the rollout's sampling temperature, 0 greedy.
        min_version: the oldest policy version the rollout ranks may answer with.
        timeout: seconds to wait for the replies.
        check: called every ``poll_s`` while waiting (raises for a rollout rank found dead).
        report: a key each rollout rank that takes a request reports its rank and pid on.
        behaviour: ask the rollout ranks for the behaviour log-probs of their responses (an
            asynchronous run's training pass); they are kept in :attr:`behaviour`,
            ``{(prompt, response without pad ids): (version, log-probs)}``, else ``None``.
    """

    poll_s = 0.5

    def __init__(
        self,
        channel: Any,
        n_rollout: int,
        reply: str,
        temperature: float | None,
        min_version: int,
        timeout: float,
        check: Callable[[], None] | None = None,
        report: str | None = None,
        behaviour: bool = False,
    ) -> None:
        self.behaviour: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[int, list[float]]] | None = (
            {} if behaviour else None
        )
        self.channel, self.n_rollout, self.reply = channel, max(1, n_rollout), reply
        self.temperature, self.min_version, self.timeout = temperature, min_version, timeout
        self.check, self.report = check, report
        self.tokens = 0
        self.seconds = 0.0

    def __call__(
        self, prompts: list[list[int]], max_new_tokens: int, stop_ids: Sequence[int]
    ) -> list[list[int]]:
        if not prompts:
            return []
        t0 = time.perf_counter()
        n = min(self.n_rollout, len(prompts))
        size = -(-len(prompts) // n)
        parts = [prompts[i : i + size] for i in range(0, len(prompts), size)]
        for i, part in enumerate(parts):
            self.channel.put(
                {
                    "reply": self.reply,
                    "part": i,
                    "prompts": part,
                    "max_new_tokens": int(max_new_tokens),
                    "stop_ids": list(stop_ids),
                    "temperature": self.temperature,
                    "min_version": self.min_version,
                    "report": self.report,
                    **({"behaviour": True} if self.behaviour is not None else {}),
                },
                "req",
                timeout=self.timeout,
            )
        got: dict[int, list[list[int]]] = {}
        deadline = time.monotonic() + self.timeout
        while len(got) < len(parts):
            wait = self.timeout if self.check is None else self.poll_s
            try:
                item = self.channel.get(self.reply, timeout=max(0.01, min(wait, deadline - time.monotonic())))
            except ChannelTimeout:
                if self.check is not None:
                    self.check()
                if time.monotonic() >= deadline:
                    raise RlinfError(
                        f"no reply from the rollout ranks for {len(parts) - len(got)} of {len(parts)} "
                        f"generation requests ({self.reply}) within {self.timeout:g} s (runner.worker_timeout)"
                    ) from None
                continue
            if is_abort(item):
                raise Aborted(self.reply)
            got[int(item["part"])] = item["responses"]
            self.tokens += int(item["tokens"])
            if self.behaviour is not None and "log_probs" in item:
                pad, version = item["pad_id"], int(item["version"])
                for prompt, resp, lp in zip(
                    parts[int(item["part"])], item["responses"], item["log_probs"], strict=True
                ):
                    self.behaviour[(tuple(prompt), tuple(t for t in resp if t != pad))] = (version, lp)
        self.seconds += time.perf_counter() - t0
        return [r for i in range(len(parts)) for r in got[i]]


def play(
    agent: Any,
    problems: Sequence[Any],
    group_size: int,
    generate: ChannelGenerate,
    tools: Any = None,
) -> tuple[EpisodeBatch, dict[str, Any]]:
    """Play ``group_size`` episodes of each problem through ``generate`` (tool-calling episodes:
    their tools from ``tools``, a :class:`~rlinf_algos.tools.placed.PlacedTools` when a ``tool``
    component is placed, else the agent's own); returns the episodes and
    ``{"episodes", "generated_tokens", "generate_s", "metrics"}``."""
    t0 = time.perf_counter()
    if tools is not None:
        eps = agent.run(list(problems), group_size, generate, tools=tools)
    else:
        eps = agent.run(list(problems), group_size, generate)
    return eps, {
        "episodes": eps.num_episodes,
        "generated_tokens": eps.generated_tokens,
        "generate_s": time.perf_counter() - t0,
        "metrics": eps.metrics,  # per episode: tool-calling episodes' figures, else empty
    }
