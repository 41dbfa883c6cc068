"""The ``tools`` section checked when the configuration is validated (``rlinf train --dry-run``
included), not when the tools load 50 s into a run (*light*: no torch, no transformers).

:func:`tool_problems` finds, with each one's YAML path (``tools[1].kwargs.memory_mb``):

- a ``path`` that is not a file, not UTF-8 Python source, or that defines no ``name`` at its top
  level (the file is parsed, never imported: validating a configuration runs none of its code);
  ``kwargs`` given to a function;
- a name that is neither built in nor registered by an installed plugin (listing those that are);
- ``kwargs`` a ToolSet's constructor does not take; for a ToolSet with a ``config_model`` (a
  :class:`~rlinf_core.config.ConfigSection`, as the built-in ``python`` and ``search`` have), every
  problem that model finds: a negative, zero, NaN or infinite limit, a corpus file that does not
  exist; and what its ``host_problems(kwargs)`` classmethod reports (``python``: an isolation
  that cannot hold on this machine, e.g. no bubblewrap). ``rlinf sft``, which only renders the
  tools' schemas, checks the kwargs but not the machine.

What is not checked here is checked when the tools load (a user file's tool's type hints and
docstring: that needs importing it).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlinf_algos.tools.registry import ToolEntry, check_kwargs, resolve_registered
from rlinf_core.errors import ConfigError, ConfigProblem, PluginError
from rlinf_core.tools import ToolSet

__all__ = ["describe_tools", "tool_problems"]


def _top_level_names(tree: ast.Module) -> tuple[dict[str, str], bool]:
    """``{name: "function" | "class" | "value"}`` defined at the top of a module, and whether
    it may define more (a star import or a module ``__getattr__``)."""
    names: dict[str, str] = {}
    more = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = "function"
            more = more or node.name == "__getattr__"
        elif isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.setdefault(n.id, "value")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    more = True
                else:
                    names.setdefault(alias.asname or alias.name.split(".")[0], "value")
        elif isinstance(node, ast.If | ast.Try | ast.With):
            more = True  # definitions under a condition: not followed here
    return names, more


def _file_problems(entry: Any, base: Path, key: str) -> list[ConfigProblem]:
    path = Path(entry.path).expanduser()
    if not path.is_absolute():
        path = base / path
    if not path.is_file():
        return [ConfigProblem(f"{key}.path", f"tool file not found: {path}")]
    try:
        tree = ast.parse(path.read_bytes().decode("utf-8"), filename=str(path))
    except UnicodeDecodeError as err:
        return [
            ConfigProblem(f"{key}.path", f"{path} is not UTF-8 text (byte {err.start}): not a Python file")
        ]
    except SyntaxError as err:
        return [ConfigProblem(f"{key}.path", f"{path}: SyntaxError at line {err.lineno}: {err.msg}")]
    except (ValueError, RecursionError, MemoryError) as err:
        return [ConfigProblem(f"{key}.path", f"{path} cannot be parsed as Python ({type(err).__name__})")]
    names, more = _top_level_names(tree)
    kind = names.get(entry.name)
    if kind is None and not more:
        have = sorted(n for n, k in names.items() if k in ("function", "class") and not n.startswith("_"))
        return [
            ConfigProblem(
                f"{key}.name",
                f"{path} defines no {entry.name!r}; its functions and classes: {', '.join(have) or 'none'}",
            )
        ]
    if kind == "function" and entry.kwargs:
        return [
            ConfigProblem(
                f"{key}.kwargs", f"{entry.name!r} is a function; kwargs apply to ToolSet classes only"
            )
        ]
    return []


def tool_problems(
    entries: Sequence[Any], *, root: str | Path | None = None, plugins: Any = None, key: str = "tools"
) -> list[ConfigProblem]:
    """Every problem of the ``tools`` entries (:class:`~rlinf_algos.tools.ToolEntry`) that can
    be found without importing a user's file (see the module doc). ``plugins``: the plugin
    host whose ``rlinf_register_tools`` tools count (default: the installed plugins)."""

    base = Path(root) if root is not None else Path.cwd()
    if plugins is None:
        from rlinf_core.plugins import load_plugins

        plugins = load_plugins()
    problems: list[ConfigProblem] = []
    for i, entry in enumerate(entries):
        k = f"{key}[{i}]"
        if entry.path:
            problems += _file_problems(entry, base, k)
            continue
        try:
            obj, _ = resolve_registered(entry, plugins, k)
        except ConfigError as err:
            problems += err.problems
            continue
        except PluginError as err:
            problems.append(ConfigProblem(f"{k}.name", str(err)))
            continue
        if isinstance(obj, type) and issubclass(obj, ToolSet):
            try:
                check_kwargs(obj, dict(entry.kwargs), f"{k}.kwargs")
            except ConfigError as err:
                problems += err.problems
                continue
            host_problems = getattr(obj, "host_problems", None)  # e.g. no bubblewrap for `python`
            if host_problems is not None:
                for field, message in host_problems(dict(entry.kwargs)).items():
                    problems.append(ConfigProblem(f"{k}.kwargs.{field}", message))
        elif entry.kwargs:
            problems.append(
                ConfigProblem(
                    f"{k}.kwargs", f"{entry.name!r} is a function; kwargs apply to ToolSet classes only"
                )
            )
    return problems


def describe_tools(entries: Sequence[Any]) -> list[str]:
    """One line per tool entry (a name, a mapping or a ToolEntry) whose isolation matters (the ``python`` sandbox): what holds on
    this machine (``rlinf train --dry-run`` prints them)."""
    from rlinf_algos.tools.sandbox import PythonConfig, describe_isolation

    out = []
    for i, raw in enumerate(entries):
        entry = ToolEntry(name=raw) if isinstance(raw, str) else ToolEntry.model_validate(dict(raw))
        if entry.path or entry.name.casefold() != "python":
            continue
        isolation = entry.kwargs.get("isolation", PythonConfig.model_fields["isolation"].default)
        out.append(f"tools[{i}] python sandbox: {describe_isolation(str(isolation))}")
    return out
