"""What a shared run directory would make rlinf import, and the gate in front of it.

A run directory travels (a colleague's run, a paper's release, a run copied from a cluster). Its
state files are safetensors (:mod:`rlinf_algos.run_files`), but its ``config.yaml`` and the
metadata of ``policy.safetensors`` still name code: an ``env.id`` of the form
``module:Env-vN`` (the module is imported), ``env.wrappers`` (``module:attr`` called as
``attr(env, **kwargs)``), ``tools[].path`` and ``reward.path`` (Python files executed), and
``model.trust_remote_code: true`` (the model folder's own ``.py`` files run). ``rlinf eval RUN``
and ``rlinf train RUN/config.yaml --resume RUN`` list these references first
(:func:`config_references`, :func:`record_references`) and import none of them unless each is

- provided by an installed plugin: a module of a distribution that declares an ``rlinf`` entry
  point (rlinf's own packages included) or of gymnasium, and, for a wrapper, a
  ``gymnasium.Wrapper`` class there (a function of such a module may do anything with its
  keyword arguments);
- supplied anew on the command line (an override of its key, for ``--resume``);
- or trusted as a whole with ``--trust``.

Otherwise :class:`UntrustedCode` (exit 2) names each reference and where it was found, in one
line. Deciding needs no import of anything the run names: only modules of the trusted
distributions are imported, to check that a wrapper is a class.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rlinf_core.errors import RlinfError

__all__ = [
    "CodeRef",
    "UntrustedCode",
    "check_references",
    "config_references",
    "override_keys",
    "record_references",
    "run_config_references",
    "untrusted_references",
]


class UntrustedCode(RlinfError):
    """A shared run names code that is not an installed plugin's: not imported without ``--trust``."""

    exit_code = 2


@dataclass(frozen=True)
class CodeRef:
    """One reference to code: ``key`` (its YAML path, e.g. ``env.wrappers[0]``), ``kind``
    (``module``, ``wrapper``, ``file``, ``remote code``), ``value`` (what it names, with a
    wrapper's kwargs) and ``source`` (the file it was found in)."""

    key: str
    kind: str
    value: str
    source: str
    module: str | None = None
    """The module a ``module`` or ``wrapper`` reference imports."""
    attr: str | None = None
    """The attribute a ``wrapper`` reference takes of its module."""

    def __str__(self) -> str:
        return f"{self.key} {self.value} ({self.kind}, in {self.source})"


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _split_import(path: str) -> tuple[str, str]:
    """``(module, attr)`` of ``module:attr`` or ``module.attr`` (as the wrapper loader reads it)."""
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    return module, attr


def _wrapper_refs(wrappers: Any, key: str, source: str) -> list[CodeRef]:
    out = []
    for i, entry in enumerate(wrappers if isinstance(wrappers, list) else []):
        if isinstance(entry, str):
            path, kwargs = entry, {}
        elif isinstance(entry, Mapping):
            path, kwargs = str(entry.get("path")), entry.get("kwargs") or {}
        else:
            continue
        module, attr = _split_import(path)
        value = _short(path) + (f" with kwargs {_short(dict(kwargs))}" if kwargs else "")
        out.append(CodeRef(f"{key}[{i}]", "wrapper", value, source, module, attr))
    return out


def _env_id_ref(env_id: Any, key: str, source: str) -> list[CodeRef]:
    if isinstance(env_id, str) and ":" in env_id:
        module = env_id.partition(":")[0]
        return [CodeRef(key, "module", _short(env_id), source, module)]
    return []


def config_references(config: Mapping[str, Any], source: str = "config.yaml") -> list[CodeRef]:
    """Every reference to code in a run's configuration (a mapping as ``config.yaml`` holds it):
    ``env.id`` of the form ``module:Env-vN``, ``env.wrappers``, ``tools[].path``,
    ``reward.path``, ``model.trust_remote_code: true`` (and the critic's)."""
    refs: list[CodeRef] = []
    env = config.get("env")
    if isinstance(env, Mapping):
        refs += _env_id_ref(env.get("id"), "env.id", source)
        refs += _wrapper_refs(env.get("wrappers"), "env.wrappers", source)
    tools = config.get("tools")
    for i, entry in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(entry, Mapping) and entry.get("path"):
            refs.append(CodeRef(f"tools[{i}].path", "file", _short(str(entry["path"])), source))
    for section in ("reward",):
        part = config.get(section)
        if isinstance(part, Mapping) and part.get("path"):
            refs.append(CodeRef(f"{section}.path", "file", _short(str(part["path"])), source))
    for section in ("model", "critic"):
        part = config.get(section)
        if isinstance(part, Mapping) and part.get("trust_remote_code") is True:
            refs.append(CodeRef(f"{section}.trust_remote_code", "remote code", "true", source))
    return refs


def record_references(record: Mapping[str, Any], source: str) -> list[CodeRef]:
    """Every reference to code in a saved policy's metadata (``env_id``, ``env_wrappers``)."""
    return _env_id_ref(record.get("env_id"), "env_id", source) + _wrapper_refs(
        record.get("env_wrappers"), "env_wrappers", source
    )


def run_config_references(run_dir: Any) -> list[CodeRef]:
    """:func:`config_references` of ``run_dir/config.yaml`` (none when there is no such file;
    :class:`~rlinf_core.errors.ConfigError` when it cannot be read as YAML)."""
    from pathlib import Path

    from rlinf_core.config import load_yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        return []
    data = load_yaml(path, what="config.yaml of the run")
    return config_references(data, str(path)) if isinstance(data, Mapping) else []


@functools.cache
def _trusted_packages() -> frozenset[str]:
    """Top-level import names of gymnasium and of every distribution that declares an ``rlinf``
    entry point (an installed plugin, rlinf's own packages among them)."""
    import importlib.metadata as md

    from rlinf_core.plugins import ENTRY_POINT_GROUP

    dists = {"gymnasium"}
    packages = {"gymnasium"}
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        packages.add(ep.value.split(":")[0].split(".")[0])  # an editable install lists no files
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.metadata["Name"]:
            dists.add(_normal(dist.metadata["Name"]))
    for top, owners in md.packages_distributions().items():
        if any(_normal(o) in dists for o in owners):
            packages.add(top)
    return frozenset(packages)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _is_plugin_wrapper(module: str, attr: str) -> bool:
    """Whether ``module:attr`` (of a trusted distribution) is a ``gymnasium.Wrapper`` class."""
    import importlib

    import gymnasium

    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception:
        return True  # not there: the wrapper loader names what is wrong, importing nothing else
    return isinstance(obj, type) and issubclass(obj, gymnasium.Wrapper)


def _provided(ref: CodeRef) -> bool:
    if ref.module is None:
        return False  # files and remote code are the run's own
    top = ref.module.split(".")[0]
    if not top.isidentifier() or top not in _trusted_packages():
        return False
    return ref.kind != "wrapper" or _is_plugin_wrapper(ref.module, ref.attr or "")


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The keys command-line overrides set (``a.b=1``, ``+a.b=1``, ``++a.b=1``, ``~a.b``)."""
    keys = []
    for raw in overrides:
        key = raw.partition("=")[0].strip().lstrip("+~")
        if key:
            keys.append(key)
    return keys


def _overridden(key: str, keys: Iterable[str]) -> bool:
    return any(key == k or key.startswith((k + ".", k + "[")) for k in keys)


def untrusted_references(refs: Iterable[CodeRef], overrides: Iterable[str] = ()) -> list[CodeRef]:
    """The references of ``refs`` that no installed plugin provides and no override supplies anew."""
    keys = override_keys(overrides)
    return [r for r in refs if not _overridden(r.key, keys) and not _provided(r)]


def check_references(
    refs: Iterable[CodeRef],
    what: str,
    *,
    trust: bool = False,
    overrides: Iterable[str] = (),
    anew: str = "",
) -> None:
    """Refuse (:class:`UntrustedCode`, one line) when ``refs`` hold code no installed plugin
    provides, unless ``trust``; ``what`` names the run (``rlinf eval runs/x``); ``anew``: how
    the command takes a reference anew (e.g. ``, or give them anew as overrides``)."""
    if trust:
        return
    bad = untrusted_references(refs, overrides)
    if bad:
        raise UntrustedCode(
            f"{what} would import code the run names, which is not an installed plugin's: "
            f"{'; '.join(str(r) for r in bad)}; nothing was imported. Pass --trust if you trust whoever "
            f"wrote this run{anew}, or install the plugin that provides it"
        )
