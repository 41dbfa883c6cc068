"""Tool-using agents for language models (*light*: no torch).

The language-model half of tool use; the tools themselves (loading, schemas, safe calls, the
built-in ``search`` and ``python``) are in :mod:`rlinf_algos.tools`, which tool processes import
without a tokenizer. Here, where the tokenizer is:

- :mod:`~rlinf_algos.lm.agentic.calls`: ``<tool_call>{json}</tool_call>`` blocks (Qwen2.5 /
  Hermes) parsed from sampled text, malformed ones reported rather than raised;
- :mod:`~rlinf_algos.lm.agentic.episode`: the multi-turn episode, token in and token out: the
  trained sequence is the sampled ids plus the ids the chat template inserts between turns
  (computed as a difference of renderings), the loss mask covers sampled ids only; it stops on an
  answer, ``max_turns`` or a token budget. ``generate`` is passed in, so the same loop runs
  against the rollout engine or a scripted policy; :meth:`ChatFormat.encode_conversation` lays
  a whole conversation out the same way for ``rlinf sft``;
- :mod:`~rlinf_algos.lm.agentic.multihop`: the search example's made-up world, its two-hop
  questions and a teacher's traces (``examples/search_agent``).
"""

from __future__ import annotations

from rlinf_algos.lm.agentic.calls import ToolCall, parse_tool_calls
from rlinf_algos.lm.agentic.episode import (
    ChatFormat,
    Episode,
    EpisodeConfig,
    EpisodeToolCalls,
    GenerateFn,
    ToolProvider,
    play_episodes,
    run_episodes,
)

__all__ = [
    "ChatFormat",
    "Episode",
    "EpisodeConfig",
    "EpisodeToolCalls",
    "GenerateFn",
    "ToolCall",
    "ToolProvider",
    "parse_tool_calls",
    "play_episodes",
    "run_episodes",
]
