"""A lead agent whose tool is a subagent: WideSeek-R1's shape (*light*: no torch).

Seed 003 describes RLinf's multi-agent mode for WideSeek-R1 (arXiv:2602.04634): "a lead agent and
subagents that share a single LLM but maintain isolated contexts per agent", trained "end-to-end
via multi-agent RL" with "the combined multi-agent RL loss across the full hierarchical
interaction trace". Here, with ``algorithm.subagents`` set in a run with a ``tools`` section:

- **The lead** plays the data set's prompts as a tool-calling episode
  (:mod:`~rlinf_algos.lm.agentic.episode`) whose tools are one ``ask(question: str)`` (its name
  and description from the config; :func:`ask_schema`) and, if asked for, some of the run's tools
  (``lead_tools``). It calls ``ask`` in its chat template's own ``<tool_call>`` format.
- **Each call** plays a subagent episode with the same policy in a fresh context: its one user
  message is the question, its tools are the run's (``subagents.tools``: e.g. ``search``),
  its limits its own (``max_turns``, ``max_new_tokens``, ``max_response_tokens``). Its final
  answer text is the call's ``tool`` message; a subagent that stops without an answer
  (``max_turns``, the budget, a cut turn) answers the lead with an error saying so. The calls of
  one lead turn run concurrently, and every subagent's turns are sampled in the same batches as
  the other episodes' (:class:`~rlinf_algos.lm.agentic.episode.EpisodeSlot`); a lead waiting on
  its subagents holds no batch back, so the episodes never deadlock. A subagent cannot call
  ``ask`` (one level, as in WideSeek-R1).
- **Training** (``grpo_lm``; :class:`~rlinf_algos.lm.agents.ToolAgent` builds the batch): the
  lead's sequence (``agent_kind`` ``lead``) and every subagent's (``sub``) join the batch, each
  token in and token out with its own loss mask (its sampled ids only). The reward is the lead's
  outcome (the reward section scores the lead's last turn: exact match in the search example),
  and every subagent of a lead episode shares it. The group advantage is computed over the
  ``group_size`` lead episodes of one prompt and given to each lead sequence and to all of its
  subagents' sequences (:func:`~rlinf_algos.lm.learner.sequence_advantages` by
  ``episode_index``), as the arithmetic multi-agent mode does. What we chose where the seed says
  no more: one advantage per lead episode for all its agents (no per-subagent credit: a subagent
  that answered well inside a failed episode is pushed down with it), and the loss's
  ``algorithm.aggregation`` over all sequences together, so with ``token-mean`` a lead episode
  that delegated more contributes more tokens, as one trace of the whole interaction would.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlinf_algos.lm.agentic.episode import ChatFormat, Episode, EpisodeConfig, EpisodeSlot, ToolProvider
from rlinf_algos.tools.registry import ToolResult, ToolStats
from rlinf_core.errors import ConfigError, RlinfError

__all__ = [
    "LeadTools",
    "OnlyTools",
    "SubagentSetup",
    "ask_schema",
    "lead_setup",
    "subagent_figures",
]


def ask_schema(name: str = "ask", description: str | None = None) -> dict[str, Any]:
    """The JSON schema of the lead's subagent tool (what its chat template renders): one
    required string argument, ``question``."""
    from rlinf_algos.lm.config import ASK_DESCRIPTION

    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or ASK_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {
                    "question": {
                        "type": "string",
                        "description": "The question, complete on its own: the subagent sees nothing else.",
                    }
                },
                "required": ["question"],
            },
        },
    }


class _OnlyEpisode:
    """An episode's tools limited to ``allowed``; another name is answered as unknown, listing
    ``shown`` (what this agent's template lists)."""

    def __init__(self, inner: Any, allowed: set[str], shown: Sequence[str]) -> None:
        self.inner, self.allowed, self.shown = inner, allowed, list(shown)
        self.stats: ToolStats = inner.stats

    def malformed(self, text: str, name: str = "(unparsed)") -> ToolResult:
        return self.inner.malformed(text, name)  # type: ignore[no-any-return]

    async def call(self, name: Any, arguments: Any) -> ToolResult:
        if isinstance(name, str) and name in self.allowed:
            return await self.inner.call(name, arguments)  # type: ignore[no-any-return]
        shown = name if isinstance(name, str) else repr(name)
        result = ToolResult(
            str(shown),
            f"error: unknown tool {shown!r}; available tools: {', '.join(self.shown) or 'none'}",
            "unknown",
        )
        self.stats.add(result)
        return result


class OnlyTools:
    """A :class:`~rlinf_algos.lm.agentic.ToolProvider` giving only the tools ``allowed`` of
    ``provider`` (a ToolBox or the tool ranks' client); ``shown``: the names an unknown call's
    error lists (default ``allowed``)."""

    def __init__(
        self, provider: ToolProvider, allowed: Sequence[str], shown: Sequence[str] | None = None
    ) -> None:
        self.provider, self.allowed = provider, set(allowed)
        self.shown = list(shown if shown is not None else allowed)

    def episode(self) -> _OnlyEpisode:
        return _OnlyEpisode(self.provider.episode(), self.allowed, self.shown)


@dataclass
class SubagentSetup:
    """What a lead's subagent tool needs: its name, the calls allowed per lead episode, the
    subagents' tool names, chat format (their tools' schemas) and limits, and the tools the
    lead may call itself."""

    tool: str
    max_calls: int
    tools: list[str]
    chat: ChatFormat
    config: EpisodeConfig
    lead_tools: list[str]

    def lead(self, provider: ToolProvider) -> LeadTools:
        """The lead's tools over ``provider`` (where the run's tools run)."""
        return LeadTools(self, provider)


def _pick(names: Sequence[str], wanted: Sequence[str] | None, key: str) -> list[str]:
    if wanted is None:
        return list(names)
    for i, name in enumerate(wanted):
        if name not in names:
            raise ConfigError(
                f"{name!r} is not one of the tools section's tools; they are: {', '.join(names)}",
                f"{key}[{i}]",
            )
    return list(wanted)


def lead_setup(
    hf_tokenizer: Any,
    schemas: Sequence[Mapping[str, Any]],
    cfg: Any,
    *,
    max_new_tokens: int,
    max_context: int,
) -> tuple[list[dict[str, Any]], SubagentSetup]:
    """The lead's tool schemas (``ask`` first, then its own ``lead_tools``) and the
    :class:`SubagentSetup` of ``cfg`` (``algorithm.subagents``), given the run's tools'
    ``schemas`` and the lead's ``max_new_tokens`` and the model's context ``max_context``.

    Raises:
        ConfigError: at ``algorithm.subagents.tools[i]`` / ``lead_tools[i]``, a name that is not a
            tool of the tools section (listing those that are), or at ``algorithm.subagents.tool``
            when the subagent tool's name is one of them.
    """
    by_name = {str(s["function"]["name"]): dict(s) for s in schemas}
    names = list(by_name)
    key = "algorithm.subagents"
    if cfg.tool in by_name:
        raise ConfigError(
            f"{cfg.tool!r} is also a tool of the tools section; name the subagent tool something else",
            f"{key}.tool",
        )
    sub_tools = _pick(names, cfg.tools, f"{key}.tools")
    lead_tools = _pick(names, cfg.lead_tools, f"{key}.lead_tools")
    chat = ChatFormat(hf_tokenizer, [by_name[n] for n in sub_tools])
    config = EpisodeConfig(
        max_turns=cfg.max_turns,
        max_new_tokens=cfg.max_new_tokens or max_new_tokens,
        max_response_tokens=cfg.max_response_tokens or max_context,
        stop_ids=chat.stop_ids,
        max_sequence_tokens=max_context,
    )
    lead = [ask_schema(cfg.tool, cfg.description), *(by_name[n] for n in lead_tools)]
    return lead, SubagentSetup(cfg.tool, cfg.max_calls, sub_tools, chat, config, lead_tools)


class LeadTools:
    """The lead's :class:`~rlinf_algos.lm.agentic.ToolProvider`: per lead episode, the subagent
    tool and the lead's own tools (``lead_tools`` of ``provider``)."""

    def __init__(self, setup: SubagentSetup, provider: ToolProvider) -> None:
        self.setup = setup
        self.own = OnlyTools(provider, setup.lead_tools, [setup.tool, *setup.lead_tools])
        self.subagent_tools = OnlyTools(provider, setup.tools)

    def episode(self) -> LeadEpisodeTools:
        return LeadEpisodeTools(self.setup, self.own.episode(), self.subagent_tools)


class LeadEpisodeTools:
    """The tools of one lead episode. A call of the subagent tool plays a subagent episode in
    the lead's batches (the episode loop hands this object its
    :class:`~rlinf_algos.lm.agentic.episode.EpisodeSlot` through :meth:`bind`); its result is
    the subagent's answer, counted under the tool's name like any call (``ok``, or ``error``
    when the subagent gave no answer or the lead asked more than ``max_calls`` times,
    ``malformed`` for arguments other than one ``question`` string)."""

    def __init__(self, setup: SubagentSetup, own: _OnlyEpisode, subagent_tools: OnlyTools) -> None:
        self.setup, self.own, self.subagent_tools = setup, own, subagent_tools
        self.stats: ToolStats = own.stats
        self.slot: EpisodeSlot | None = None
        self.asked = 0

    def bind(self, slot: EpisodeSlot) -> None:
        self.slot = slot

    def malformed(self, text: str, name: str = "(unparsed)") -> ToolResult:
        return self.own.malformed(text, name)

    def _record(self, result: ToolResult) -> ToolResult:
        self.stats.add(result)
        return result

    async def call(self, name: Any, arguments: Any) -> ToolResult:
        tool = self.setup.tool
        if name != tool:
            return await self.own.call(name, arguments)
        args = arguments if isinstance(arguments, Mapping) else None
        question = args.get("question") if args is not None else None
        if args is None or set(args) != {"question"} or not isinstance(question, str) or not question.strip():
            got = sorted(args) if args is not None else type(arguments).__name__
            return self._record(
                ToolResult(
                    tool,
                    f'error: malformed call to {tool!r}: expected {{"question": a non-empty string}}, got {got}',
                    "malformed",
                )
            )
        if self.asked >= self.setup.max_calls:
            return self._record(
                ToolResult(
                    tool,
                    f"error: at most {self.setup.max_calls} {tool!r} calls per episode; answer with what you have",
                    "error",
                )
            )
        if self.slot is None:
            raise RlinfError(f"the {tool!r} tool was called outside an episode loop (no slot bound)")
        index, self.asked = self.asked, self.asked + 1
        start = time.perf_counter()
        child = await self.slot.spawn(
            [{"role": "user", "content": question.strip()}],
            index=index,
            tools=self.subagent_tools.episode(),
            chat=self.setup.chat,
            config=self.setup.config,
        )
        latency = time.perf_counter() - start
        if child.stop == "answer":
            return self._record(ToolResult(tool, child.final_text, "ok", latency))
        why = f"the subagent stopped on {child.stop} after {child.turns} turns without an answer"
        return self._record(ToolResult(tool, f"error: {why}", "error", latency))


def subagent_figures(ep: Episode, tool_names: Sequence[str]) -> dict[str, float]:
    """A lead episode's subagent figures (sums over its subagents): ``subagent_calls`` (the
    subagent episodes played), ``subagent_turns``, ``subagent_answered``, ``subagent_tool_calls``
    and per tool ``subagent_tool_calls/NAME`` (every name of ``tool_names``, 0 if not called),
    ``subagent_tool_errors`` (errors, timeouts, malformed and unknown calls)."""
    subs = ep.subagents
    out = {
        "subagent_calls": float(len(subs)),
        "subagent_turns": float(sum(c.turns for c in subs)),
        "subagent_answered": float(sum(c.stop == "answer" for c in subs)),
        "subagent_tool_calls": float(sum(sum(c.stats.calls.values()) for c in subs)),
        "subagent_tool_errors": float(
            sum(
                sum(c.stats.errors.values())
                + sum(c.stats.timeouts.values())
                + c.stats.malformed
                + c.stats.unknown
                for c in subs
            )
        ),
    }
    for name in tool_names:
        out[f"subagent_tool_calls/{name}"] = float(sum(c.stats.calls.get(name, 0) for c in subs))
    return out
