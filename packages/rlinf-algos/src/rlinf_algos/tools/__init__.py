"""Tools for agents: what a policy can call between turns, loaded and executed safely.

Why a package of its own (``rlinf_algos.tools``) rather than under ``rlinf_algos.lm``: tools run
where the placement puts them, often on CPU-only nodes, in processes that never build a model or
a tokenizer. Nothing here imports torch, and transformers only when a schema is built (on the
agent side), so a tool process stays small. The language-model side of tool use (parsing
``<tool_call>`` blocks, chat templates, the token-in/token-out multi-turn episode) lives in
:mod:`rlinf_algos.lm.agentic`, next to the other agents.

Modules:

- :mod:`~rlinf_algos.tools.registry`: a tool is a typed, documented function or a
  :class:`~rlinf_core.tools.ToolSet`; :func:`load_tools` resolves ``tools:`` entries (a user's
  file by path, a name registered through ``rlinf_register_tools``, or a built-in) into a
  :class:`ToolBox`, whose per-episode :class:`EpisodeTools` run calls (sync or async) with a
  per-call timeout and answer the model with an error text, counted in :class:`ToolStats`,
  when a tool raises, times out or gets malformed arguments: a failing tool never raises.
- :mod:`~rlinf_algos.tools.search`: ``search``, a BM25 index over a JSONL or parquet corpus
  (numpy, built in memory at start, no network).
- :mod:`~rlinf_algos.tools.sandbox`: ``python``, code in a bubblewrap sandbox (namespaces, a
  read-only root, a private ``/tmp``) with CPU-time, memory, file-size, process and wall-clock
  limits and no network.
- :mod:`~rlinf_algos.tools.guard`: tool calls parsed within limits, results made text safely.
- :mod:`~rlinf_algos.tools.checks`: the ``tools`` section checked when the config is validated.
- :mod:`~rlinf_algos.tools.placed`: tools as a placed ``tool`` component: a
  :class:`~rlinf_algos.tools.placed.ToolServer` per tool process serving calls over a Channel,
  and the agents' :class:`~rlinf_algos.tools.placed.PlacedTools` client.
"""

from __future__ import annotations

from rlinf_algos.tools.registry import (
    BUILTIN_TOOLS,
    EpisodeTools,
    Tool,
    ToolBox,
    ToolEntry,
    ToolResult,
    ToolStats,
    function_schema,
    load_run_tools,
    load_tools,
    tools_from,
)
from rlinf_core.tools import ToolSet

__all__ = [
    "BUILTIN_TOOLS",
    "EpisodeTools",
    "Tool",
    "ToolBox",
    "ToolEntry",
    "ToolResult",
    "ToolSet",
    "ToolStats",
    "function_schema",
    "load_run_tools",
    "load_tools",
    "tools_from",
]
