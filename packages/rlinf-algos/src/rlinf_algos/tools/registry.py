"""Tools: loading them from ``tools:`` entries and calling them without ever raising.

A tool is a function with type hints and a Google-style docstring, or a
:class:`~rlinf_core.tools.ToolSet` whose public methods are tools (see :mod:`rlinf_core.tools`).
Its JSON schema (``{"type": "function", "function": {"name", "description", "parameters"}}``,
what ``apply_chat_template(tools=...)`` takes) comes from transformers'
:func:`~transformers.utils.get_json_schema`, imported only when a schema is asked for.

``tools:`` entries, in the run YAML or as Python dicts::

    tools:
      - {path: my_tools.py, name: lookup}                  # a function (or ToolSet class) in a file
      - {name: search, kwargs: {corpus: docs.jsonl}}       # built in, or from rlinf_register_tools
      - python                                             # a bare name: same as {name: python}

Calling: :meth:`ToolBox.episode` gives one :class:`EpisodeTools` per episode (per-episode tool
sets built and ``reset()``); :meth:`EpisodeTools.call` runs one call, ``async`` tools awaited and
sync ones in a worker thread, under ``timeout_s``. Whatever happens (the tool raises, times out,
is unknown, its arguments are not an object, miss a required name, name an unknown parameter or
have the wrong JSON type) the result is a :class:`ToolResult` whose text tells the model what went
wrong, and :class:`ToolStats` counts it. A sync tool runs in a daemon thread of its own; one that times out cannot be
stopped (Python threads cannot be killed): its result is dropped and its thread finishes on its
own without holding up the event loop or the process's exit. Tools that may hang for good belong
in a subprocess (as the ``python`` tool does).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import sys
import threading
import time
import types
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from rlinf_algos.tools.guard import as_text, describe_error, loads_bounded
from rlinf_core.config import ConfigSection, validate_model
from rlinf_core.errors import ConfigError, PluginError
from rlinf_core.tools import ToolSet

__all__ = [
    "BUILTIN_TOOLS",
    "EpisodeTools",
    "Tool",
    "ToolBox",
    "ToolEntry",
    "ToolResult",
    "ToolStats",
    "function_schema",
    "load_run_tools",
    "load_tools",
    "tools_from",
]

BUILTIN_TOOLS: dict[str, str] = {
    "search": "rlinf_algos.tools.search:Search",
    "python": "rlinf_algos.tools.sandbox:Python",
}
"""Tools rlinf-algos ships, by name: ``module:ToolSet`` (imported when used)."""

SCHEMA_HELP = (
    "a tool is a function with a type hint on every parameter and a Google-style docstring "
    "(a summary line, then 'Args:' with one 'name: description' line per parameter)"
)


class ToolEntry(ConfigSection):
    """One item of the ``tools`` list (numbers strict, unknown keys refused)."""

    name: str = Field(
        description="The tool's name: a function or ToolSet class in `path`, or (without `path`) a built-in "
        "(`search`, `python`) or a name registered by a package's `rlinf_register_tools` hook."
    )
    path: str | None = Field(
        default=None,
        description="A Python file defining `name` (relative to the working directory, as data files are).",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of a ToolSet class's constructor."
    )
    timeout_s: float | None = Field(
        default=None, gt=0, description="Per-call timeout of this entry's tools, in seconds (default: 10)."
    )


# -- schemas ------------------------------------------------------------------------------------


def function_schema(fn: Callable[..., Any], *, where: str = "") -> dict[str, Any]:
    """The JSON schema of a tool function (or bound method) from its type hints and docstring.

    Raises:
        ConfigError: a parameter without a type hint, a missing docstring or ``Args:`` line,
            a type with no JSON equivalent; the message names the function and ``where``.
    """
    from transformers.utils import get_json_schema

    name = getattr(fn, "__name__", repr(fn))
    try:
        schema = get_json_schema(fn)
    except Exception as err:  # DocstringParsingException, TypeHintParsingException, ValueError
        detail = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(
            f"tool {name!r}{' in ' + where if where else ''}: {detail}; {SCHEMA_HELP}"
        ) from None
    schema["function"].pop("return", None)
    return schema


@dataclass
class Tool:
    """One callable tool: a function, or a method of a :class:`ToolSet` (``owner``)."""

    name: str
    fn: Callable[..., Any]  # the function; for a method, the unbound function
    schema: dict[str, Any]
    where: str  # "my_tools.py", "plugin 'x' (dist 1.0)", "built-in"
    owner: type[ToolSet] | None = None
    timeout_s: float | None = None

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"].get("properties", {})

    @property
    def required(self) -> list[str]:
        return list(self.schema["function"]["parameters"].get("required", []))


def _public_methods(cls: type[ToolSet]) -> list[str]:
    return [
        n
        for n, v in inspect.getmembers(cls, inspect.isfunction)
        if not n.startswith("_") and n != "reset" and not hasattr(ToolSet, n)
    ]


def tools_from(obj: Any, *, where: str, timeout_s: float | None = None) -> list[Tool]:
    """The tools of a function or :class:`ToolSet` subclass (schemas built and checked)."""
    if isinstance(obj, type):
        if not issubclass(obj, ToolSet):
            raise ConfigError(
                f"{obj.__name__} in {where} is a class but not a rlinf_core.tools.ToolSet subclass; "
                "a tool is a function, or a ToolSet whose public methods are tools"
            )
        names = _public_methods(obj)
        if not names:
            raise ConfigError(f"ToolSet {obj.__name__} in {where} has no public method: it defines no tool")
        out = []
        for n in names:
            fn = getattr(obj, n)
            bound = types.MethodType(fn, object())  # drops `self` for the schema
            out.append(Tool(n, fn, function_schema(bound, where=where), where, obj, timeout_s))
        return out
    if not callable(obj) or not inspect.isroutine(obj):
        raise ConfigError(f"{obj!r} in {where} is a {type(obj).__name__}, not a function; {SCHEMA_HELP}")
    name = obj.__name__
    return [Tool(name, obj, function_schema(obj, where=where), where, None, timeout_s)]


# -- loading ------------------------------------------------------------------------------------


def _import_file(path: Path, key: str) -> types.ModuleType:
    if not path.is_file():
        raise ConfigError(f"tool file not found: {path}", key)
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    mod_name = f"rlinf_user_tools_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    loader = importlib.machinery.SourceFileLoader(mod_name, str(path))
    spec = importlib.util.spec_from_loader(mod_name, loader)
    if spec is None:
        raise ConfigError(f"{path}: cannot be imported as Python source", key)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        loader.exec_module(module)
    except BaseException as err:
        sys.modules.pop(mod_name, None)
        if isinstance(err, KeyboardInterrupt):
            raise
        if isinstance(err, SyntaxError):
            raise ConfigError(
                f"{path}: import failed: SyntaxError at line {err.lineno}: {err.msg}", key
            ) from None
        detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ConfigError(
            f"{path}: import failed: {type(err).__name__}{': ' + detail if detail else ''}", key
        ) from None
    return module


def _from_file(entry: ToolEntry, base: Path, key: str) -> tuple[Any, str]:
    path = Path(entry.path or "").expanduser()
    if not path.is_absolute():
        path = base / path
    module = _import_file(path, f"{key}.path")
    obj = getattr(module, entry.name, None)
    if obj is None:
        have = sorted(
            k
            for k, v in vars(module).items()
            if not k.startswith("_")
            and getattr(v, "__module__", None) == module.__name__
            and (inspect.isroutine(v) or (isinstance(v, type) and issubclass(v, ToolSet)))
        )
        raise ConfigError(
            f"{path} has no {entry.name!r}; its functions and ToolSet classes: {', '.join(have) or 'none'}",
            f"{key}.name",
        )
    return obj, str(path)


def resolve_registered(entry: ToolEntry, plugins: Any, key: str) -> tuple[Any, str]:
    """The function or ToolSet class a ``tools`` entry without ``path`` names: an installed
    plugin's, else a built-in; and where it comes from.

    Raises:
        ConfigError: no such tool (listing those there are).
    """
    if plugins is not None and entry.name in plugins.tools:
        return plugins.tools.get(entry.name), f"plugin {plugins.tools.owner(entry.name).label}"
    target = BUILTIN_TOOLS.get(entry.name.casefold())
    if target is not None:
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr), "built-in"
    names = sorted(set(BUILTIN_TOOLS) | (set(plugins.tools.names()) if plugins is not None else set()))
    raise ConfigError(
        f"unknown tool {entry.name!r}; available: {', '.join(names)} "
        "(or give `path:` to a Python file that defines it)",
        f"{key}.name",
    )


def load_tools(
    entries: Sequence[str | Mapping[str, Any] | ToolEntry],
    *,
    root: str | Path | None = None,
    plugins: Any = None,
    timeout_s: float = 10.0,
    max_result_chars: int = 4000,
    key: str = "tools",
) -> ToolBox:
    """Resolve ``tools:`` entries into a :class:`ToolBox`.

    Args:
        entries: names, dicts (``{path, name, kwargs, timeout_s}``) or :class:`ToolEntry`.
        root: the directory relative ``path`` values are resolved against (default: the working
            directory).
        plugins: a :class:`~rlinf_core.plugins.PluginHost` whose ``tools`` registry is searched
            for names without ``path`` before the built-ins.
        timeout_s: default per-call timeout.
        max_result_chars: tool results longer than this are cut (with a note saying so).
        key: the YAML path of the list, for error messages.

    Raises:
        ConfigError: naming ``tools[i]...``: a bad entry, a missing or failing file, an unknown
            name (listing what is valid), a tool without type hints or docstring, two tools of
            one name, ``kwargs`` a ToolSet does not take.
    """
    guard_exit()
    base = Path(root) if root is not None else Path.cwd()
    tools: list[Tool] = []
    kwargs_of: dict[type[ToolSet], dict[str, Any]] = {}
    for i, raw in enumerate(entries):
        k = f"{key}[{i}]"
        try:
            entry = (
                raw
                if isinstance(raw, ToolEntry)
                else ToolEntry(name=raw)
                if isinstance(raw, str)
                else ToolEntry.model_validate(dict(raw))
            )
        except Exception as err:
            msg = str(err).splitlines()
            raise ConfigError(
                f"not a tool entry ({'; '.join(m.strip() for m in msg[1:3]) or err}); "
                "expected a name or {path: FILE.py, name: NAME, kwargs: {...}, timeout_s: S}",
                k,
            ) from None
        try:
            obj, where = _from_file(entry, base, k) if entry.path else resolve_registered(entry, plugins, k)
        except PluginError as err:
            raise ConfigError(str(err), f"{k}.name") from None
        try:
            found = tools_from(obj, where=where, timeout_s=entry.timeout_s)
        except ConfigError as err:
            raise err.prefixed(k) from None
        if isinstance(obj, type):
            check_kwargs(obj, entry.kwargs, f"{k}.kwargs")
            kwargs_of[obj] = dict(entry.kwargs)
        elif entry.kwargs:
            raise ConfigError(
                f"{entry.name!r} is a function; kwargs apply to ToolSet classes only", f"{k}.kwargs"
            )
        for t in found:
            clash = next((o for o in tools if o.name == t.name), None)
            if clash is not None:
                raise ConfigError(f"two tools are named {t.name!r}: from {clash.where} and from {t.where}", k)
            tools.append(t)
    return ToolBox(tools, kwargs_of, timeout_s=timeout_s, max_result_chars=max_result_chars)


def load_run_tools(entries: Sequence[str | Mapping[str, Any] | ToolEntry], **kwargs: Any) -> ToolBox:
    """:func:`load_tools` of a run's ``tools`` section: names are looked up among the installed
    plugins' ``rlinf_register_tools`` tools, then the built-ins (``kwargs`` as :func:`load_tools`
    takes them)."""
    from rlinf_core.plugins import load_plugins

    return load_tools(entries, plugins=load_plugins(), **kwargs)


def check_kwargs(cls: type, kwargs: Mapping[str, Any], key: str) -> None:
    """Check a ToolSet class's ``kwargs``: against its ``config_model`` (a
    :class:`~rlinf_core.config.ConfigSection` naming each field's bounds) when it has one, else
    against its constructor's signature.

    Raises:
        ConfigError: naming ``key.FIELD`` (or ``key``) and what would be valid.
    """
    model = getattr(cls, "config_model", None)
    if model is not None:
        validate_model(model, dict(kwargs), prefix=key)
        return
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as err:
        params = [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
        raise ConfigError(
            f"{cls.__name__} does not take these kwargs ({err}); it takes: {', '.join(params) or 'none'}", key
        ) from None
    except ValueError:  # no signature to check against
        pass


# -- calling ------------------------------------------------------------------------------------


@dataclass
class ToolResult:
    """The outcome of one call. ``status``: ``ok``, ``error`` (the tool raised), ``timeout``,
    ``malformed`` (bad arguments or an unparsable call) or ``unknown`` (no such tool)."""

    name: str
    text: str
    status: str = "ok"
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class ToolStats:
    """Counters of tool use: per tool name, calls, errors and timeouts; totals of malformed and
    unknown calls; the summed latency (for the mean)."""

    calls: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    timeouts: Counter[str] = field(default_factory=Counter)
    malformed: int = 0
    unknown: int = 0
    latency_s: float = 0.0

    def add(self, result: ToolResult) -> None:
        self.calls[result.name] += 1
        self.latency_s += result.latency_s
        if result.status == "error":
            self.errors[result.name] += 1
        elif result.status == "timeout":
            self.timeouts[result.name] += 1
        elif result.status == "malformed":
            self.malformed += 1
        elif result.status == "unknown":
            self.unknown += 1

    def merge(self, other: ToolStats) -> None:
        self.calls.update(other.calls)
        self.errors.update(other.errors)
        self.timeouts.update(other.timeouts)
        self.malformed += other.malformed
        self.unknown += other.unknown
        self.latency_s += other.latency_s

    def metrics(self) -> dict[str, float]:
        """Flat metrics: ``tools/calls``, ``tools/calls/NAME``, ``tools/errors``, ``tools/timeouts``,
        ``tools/malformed``, ``tools/unknown``, ``tools/latency_mean_s``."""
        total = sum(self.calls.values())
        out: dict[str, float] = {
            "tools/calls": float(total),
            "tools/errors": float(sum(self.errors.values())),
            "tools/timeouts": float(sum(self.timeouts.values())),
            "tools/malformed": float(self.malformed),
            "tools/unknown": float(self.unknown),
            "tools/latency_mean_s": self.latency_s / total if total else 0.0,
        }
        for name, n in sorted(self.calls.items()):
            out[f"tools/calls/{name}"] = float(n)
        return out


class ToolBox:
    """The tools of a run: their schemas and, per episode, a place to call them.

    Process-wide tool sets (``per_episode = False``) are built on first use and shared;
    per-episode ones are built by :meth:`episode`. ``stats`` accumulates every call made through
    any of this box's episodes.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        kwargs_of: Mapping[type[ToolSet], Mapping[str, Any]] | None = None,
        *,
        timeout_s: float = 10.0,
        max_result_chars: int = 4000,
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self.kwargs_of = {cls: dict(kw) for cls, kw in (kwargs_of or {}).items()}
        self.timeout_s = float(timeout_s)
        self.max_result_chars = int(max_result_chars)
        self.stats = ToolStats()
        self.runner = ToolRunner()
        self._shared: dict[type[ToolSet], ToolSet] = {}

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    @property
    def schemas(self) -> list[dict[str, Any]]:
        """What ``apply_chat_template(tools=...)`` takes, in entry order."""
        return [t.schema for t in self.tools.values()]

    def _build(self, cls: type[ToolSet]) -> ToolSet:
        return cls(**self.kwargs_of.get(cls, {}))

    def episode(self) -> EpisodeTools:
        """Tools for one new episode: per-episode tool sets built and ``reset()``."""
        instances: dict[type[ToolSet], ToolSet] = {}
        for t in self.tools.values():
            cls = t.owner
            if cls is None or cls in instances:
                continue
            if cls.per_episode:
                inst = self._build(cls)
                inst.reset()
            else:
                if cls not in self._shared:
                    self._shared[cls] = self._build(cls)
                inst = self._shared[cls]
            instances[cls] = inst
        return EpisodeTools(self, instances)


class EpisodeTools:
    """The tools of one episode. :meth:`call` never raises (except for cancellation)."""

    def __init__(self, box: ToolBox, instances: Mapping[type[ToolSet], ToolSet]) -> None:
        self.box = box
        self.instances = dict(instances)
        self.stats = ToolStats()

    def _record(self, result: ToolResult) -> ToolResult:
        self.stats.add(result)
        self.box.stats.add(result)
        return result

    def malformed(self, text: str, name: str = "(unparsed)") -> ToolResult:
        """Count a call that could not even be parsed and return the model's error message."""
        return self._record(ToolResult(name, f"error: {text}", "malformed"))

    async def call(self, name: Any, arguments: Any) -> ToolResult:
        """Run tool ``name`` with ``arguments`` (a dict, or a JSON string of one)."""
        if not isinstance(name, str) or name not in self.box.tools:
            shown = _shown(name)
            return self._record(
                ToolResult(
                    shown.strip("'\""),
                    f"error: unknown tool {shown}; available tools: {', '.join(self.box.names)}",
                    "unknown",
                )
            )
        tool = self.box.tools[name]
        args, problem = _check_arguments(tool, arguments)
        if problem is not None:
            return self._record(
                ToolResult(name, f"error: malformed call to {name!r}: {problem}", "malformed")
            )
        fn = tool.fn if tool.owner is None else getattr(self.instances[tool.owner], tool.name)
        timeout = tool.timeout_s or self.box.timeout_s
        start = time.perf_counter()
        try:
            text, err = await asyncio.wait_for(
                self.box.runner.run(fn, args, self.box.max_result_chars), timeout
            )
        except TimeoutError:
            return self._record(
                ToolResult(
                    name,
                    f"error: tool {name!r} timed out after {timeout:g} s",
                    "timeout",
                    time.perf_counter() - start,
                )
            )
        if err is not None:  # whatever the tool raised, KeyboardInterrupt and SystemExit included
            return self._record(
                ToolResult(name, f"error: tool {name!r} {err}", "error", time.perf_counter() - start)
            )
        return self._record(ToolResult(name, text, "ok", time.perf_counter() - start))

    def call_sync(self, name: Any, arguments: Any) -> ToolResult:
        """:meth:`call` from code that has no running event loop."""
        return asyncio.run(self.call(name, arguments))


def _shown(name: Any) -> str:
    """A tool name as an error message quotes it (at most 60 characters)."""
    text = name if isinstance(name, str) else f"<{type(name).__name__}>"
    text = as_text(text, 60).split("\n[truncated", 1)[0]
    return repr(text)


class ToolExit(BaseException):
    """What ``os._exit`` raises in a tool's thread (:func:`guard_exit`): a tool cannot end the
    process it runs in."""

    def __init__(self, code: Any) -> None:
        super().__init__(f"os._exit({code!r})")


_TOOL_THREADS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()
_REAL_EXIT = os._exit


def _guarded_exit(code: int) -> None:
    if threading.current_thread() in _TOOL_THREADS:
        raise ToolExit(code)
    _REAL_EXIT(code)


def guard_exit() -> None:
    """Make ``os._exit`` called from a thread that runs a tool raise :class:`ToolExit` (a
    counted tool error) instead of ending the process; every other thread's ``os._exit`` is the
    real one. Installed by :func:`load_tools` before it imports a tool file."""
    if os._exit is not _guarded_exit:
        os._exit = _guarded_exit  # type: ignore[assignment]


class ToolRunner:
    """Where a :class:`ToolBox`'s tools run, never in the caller's thread or event loop:

    - a sync tool in a daemon thread of its own (one that never returns is left behind without
      holding up the event loop's shutdown or the process's exit);
    - an ``async`` tool (or an awaitable a sync tool returns) on the box's tool loop, an event
      loop in a daemon thread shared by its async tools (a session a tool keeps stays on one
      loop); a tool that blocks that loop gets its call's timeout, and later calls a new loop
      (the blocked one's heartbeat stopped; it ends once its tools have).

    Whatever a tool raises (``KeyboardInterrupt``, ``SystemExit``, ``asyncio.CancelledError``,
    ``os._exit`` through :func:`guard_exit`) comes back as an error description, and its result
    is made text (:func:`~rlinf_algos.tools.guard.as_text`) in the tool's own thread: nothing a
    user's object does runs in the caller's thread, so a ``KeyboardInterrupt`` there is the
    user's Ctrl-C and one in a tool is the tool's.
    """

    HEARTBEAT_S = 0.05
    """The tool loop notes the time this often; one silent for five beats is blocked."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._left: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._beat = 0.0
        self._lock = threading.Lock()

    def _tool_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None and time.monotonic() - self._beat > 5 * self.HEARTBEAT_S:
                self._left.add(self._loop)  # a tool blocks it: leave it to that tool, start another
                self._loop = None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._loop, self._beat = loop, time.monotonic()
                loop.call_soon(self._heartbeat, loop)
                thread = threading.Thread(target=loop.run_forever, name="rlinf-tool-loop", daemon=True)
                _TOOL_THREADS.add(thread)
                thread.start()
            return self._loop

    def _heartbeat(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop not in self._left:
            self._beat = time.monotonic()
        elif not asyncio.all_tasks(loop):  # left behind, and its tools have ended: end its thread
            loop.stop()
            return
        loop.call_later(self.HEARTBEAT_S, self._heartbeat, loop)

    async def run(
        self, fn: Callable[..., Any], args: Mapping[str, Any], limit: int
    ) -> tuple[str, str | None]:
        """``(text, None)`` for a result, ``("", description)`` for what the tool raised."""
        if inspect.iscoroutinefunction(fn):
            return await self._on_loop(fn(**args), limit)
        text, err, pending = await _in_daemon_thread(fn, args, limit)
        if pending is not None:
            return await self._on_loop(pending, limit)
        return text, err

    async def _on_loop(self, awaitable: Any, limit: int) -> tuple[str, str | None]:
        future = asyncio.run_coroutine_threadsafe(_guarded(awaitable, limit), self._tool_loop())
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise


def _raised(err: BaseException) -> str:
    if isinstance(err, ToolExit):
        return f"called {err} (a tool cannot end the run)"
    return f"raised {describe_error(err)}"


async def _guarded(awaitable: Any, limit: int) -> tuple[str, str | None]:
    """Await a tool's result on the tool loop; what it raises becomes a description (its own
    ``CancelledError`` too; this call's cancellation is passed on)."""
    try:
        value = await awaitable
    except asyncio.CancelledError as err:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        return "", _raised(err)
    except BaseException as err:  # a tool's KeyboardInterrupt / SystemExit is the tool's
        return "", _raised(err)
    return as_text(value, limit), None


def _in_daemon_thread(
    fn: Callable[..., Any], args: Mapping[str, Any], limit: int
) -> asyncio.Future[tuple[str, str | None, Any]]:
    """Run a sync tool in a daemon thread of its own (see :class:`ToolRunner`): ``(text, None,
    None)``, ``("", description, None)``, or ``("", None, awaitable)`` when it returned one."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[tuple[str, str | None, Any]] = loop.create_future()

    def settle(outcome: tuple[str, str | None, Any]) -> None:
        if not future.done():
            future.set_result(outcome)

    def run() -> None:
        try:
            value = fn(**args)
            outcome = ("", None, value) if inspect.isawaitable(value) else (as_text(value, limit), None, None)
        except BaseException as err:  # handed to the awaiting call, which reports it
            outcome = ("", _raised(err), None)
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop is closed: nobody waits for this result any more
            pass

    thread = threading.Thread(target=run, name=f"tool-{getattr(fn, '__name__', 'call')}", daemon=True)
    _TOOL_THREADS.add(thread)
    thread.start()
    return future


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def _type_ok(value: Any, spec: Mapping[str, Any]) -> bool:
    kinds = spec.get("type")
    if kinds is None:
        return True
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if value is None and spec.get("nullable"):
        return True
    for kind in kinds:
        types_ = _JSON_TYPES.get(kind)
        if types_ is None:
            return True
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if isinstance(value, types_):
            return True
    return False


def _check_arguments(tool: Tool, arguments: Any) -> tuple[dict[str, Any], str | None]:
    expected = ", ".join(f"{n}: {s.get('type', 'any')}" for n, s in tool.parameters.items()) or "no arguments"
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = loads_bounded(arguments) if arguments.strip() else {}
        except ValueError as err:
            return {}, f"the arguments are {err}; expected an object with {expected}"
    if not isinstance(arguments, dict):
        return {}, f"arguments must be a JSON object, got {type(arguments).__name__}; expected {expected}"
    unknown = sorted(set(arguments) - set(tool.parameters))
    if unknown:
        return {}, f"unknown argument(s) {', '.join(map(repr, unknown))}; expected {expected}"
    missing = [n for n in tool.required if n not in arguments]
    if missing:
        return {}, f"missing argument(s) {', '.join(map(repr, missing))}; expected {expected}"
    for n, v in arguments.items():
        if not _type_ok(v, tool.parameters[n]):
            return {}, f"argument {n!r} must be {tool.parameters[n].get('type')}, got {type(v).__name__}"
    return arguments, None
