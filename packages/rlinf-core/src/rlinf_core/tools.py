"""The tool interfaces agents call: what ``tools:`` in a run YAML and ``rlinf_register_tools`` name.

Torch-free on purpose, like :mod:`rlinf_core.reward`: tool processes run on CPU-only nodes and a
plugin that ships tools must import without torch.

A *tool* is either

- a plain function with type hints on every parameter and a Google-style docstring (a summary
  line and an ``Args:`` section); its JSON schema is built from them and its name is the
  function's ``__name__``; sync or ``async``; or
- a :class:`ToolSet` subclass: its public methods (every method not starting with ``_``, except
  :meth:`ToolSet.reset`) are tools, documented the same way. ``per_episode = True`` (the default)
  builds one instance per episode and calls ``reset()`` before its first turn, for tools with
  episode state (TRL's ``environment_factory`` idea); ``per_episode = False`` builds one instance
  per process, shared by every episode it serves (a search index, a sandbox).

Functions and tool sets reach rlinf from a user's file (``tools: [{path: my_tools.py, name:
lookup}]``) or from a package's ``rlinf_register_tools`` hook; rlinf-algos builds and calls them
(``rlinf_algos.tools``).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["ToolSet"]


class ToolSet:
    """Base class of a set of tools sharing state.

    Class attributes:
        PLUGIN_NAME: the name ``tools[].name`` selects when registered through a hook (matched
            case-insensitively); a class loaded from a user's file is selected by its class name.
        per_episode: ``True``: one instance per episode, :meth:`reset` before its first turn;
            ``False``: one instance per process, shared by the episodes it serves (make its
            methods safe to call concurrently).

    The constructor takes the keyword arguments of the tool entry's ``kwargs``.
    """

    PLUGIN_NAME: ClassVar[str] = ""
    per_episode: ClassVar[bool] = True

    def reset(self) -> None:
        """Start a new episode (called once per episode, before the first tool call)."""
