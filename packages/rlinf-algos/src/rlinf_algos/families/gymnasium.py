"""The ``gymnasium`` env family: any registered gymnasium id (MuJoCo, Box2D, classic control,
an id a plugin registers through ``rlinf_register_envs``, or ``module:EnvName-vN``), built as a
gymnasium vector env with ``gymnasium.make_vec``; and the checks of its ``env`` settings
(``env.id``, ``env.kwargs``, ``env.wrappers``) before anything starts.

This is rlinf's original env path, unchanged: :func:`make_gymnasium_vector` is what
:func:`rlinf_algos.envs.make_vector_env` did before env families existed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rlinf_core.config import describe_value
from rlinf_core.envs import EnvFamily
from rlinf_core.errors import ConfigError, ConfigProblem, join_path

__all__ = [
    "GymnasiumFamily",
    "bare_env_id",
    "ensure_registered",
    "env_kwargs_problems",
    "make_gymnasium_vector",
    "missing_dependency_error",
    "probe_spaces",
    "resolve_wrappers",
    "wrapper_problems",
]


def ensure_registered(env_id: str, path: str = "env.id") -> None:
    """Make sure gymnasium knows ``env_id``: if it does not, register the ids plugins contribute
    (``rlinf_register_envs``) and look again. An unknown id is a :class:`ConfigError` at ``path``
    naming the closest registered ids.

    ``module:EnvName-vN`` (gymnasium's own form) imports ``module`` first, which registers the
    env, as ``gymnasium.make`` does; the module must be importable here (and on every node that
    runs envs)."""
    import gymnasium

    if ":" in env_id:
        module, _, name = env_id.partition(":")
        _import_env_module(module, env_id, path)
        if name in gymnasium.registry:
            return
        close = difflib.get_close_matches(name, list(gymnasium.registry), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(f'{module}:{c}') for c in close)}?" if close else ""
        raise ConfigError(
            f"module {module!r} was imported but registers no env {name!r}{hint} (it should call "
            f"gymnasium.register(id={name!r}, entry_point=...) when imported)",
            path=path,
        )
    if env_id in gymnasium.registry:
        return
    from rlinf_core.envs import register_with_gymnasium
    from rlinf_core.plugins import load_plugins

    register_with_gymnasium(load_plugins().envs.values())
    if env_id in gymnasium.registry:
        return
    close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"{env_id!r} is not a registered gymnasium environment id{hint} (MuJoCo ids look like "
        f"'HalfCheetah-v5'; plugin ids are registered by installed rlinf plugins)",
        path=path,
    )


def _import_env_module(module: str, env_id: str, path: str) -> None:
    import importlib

    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(
            f"{env_id!r} is not of the form 'module:EnvName-vN' (module: a dotted Python module name)",
            path=path,
        )
    try:
        importlib.import_module(module)
    except Exception as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ConfigError(
            f"cannot import module {module!r} of {env_id!r} ({why}); 'module:EnvName-vN' needs the module "
            "importable (installed, or on PYTHONPATH)",
            path=path,
        ) from None


# gymnasium env families whose dependencies rlinf-algos ships as an optional extra:
# entry-point module prefix -> (what they need, the extra)
_ENV_EXTRAS = {"gymnasium.envs.box2d.": ("Box2D and pygame-ce", "box2d")}


def missing_dependency_error(env_id: str, err: BaseException, path: str = "env.id") -> ConfigError:
    """The one-line :class:`ConfigError` for an env that gymnasium cannot build because a package
    it imports is missing (``gymnasium.error.DependencyNotInstalled``, ``err``): which module is
    missing and what to install (rlinf-algos' extra for the envs it has one for, e.g.
    ``box2d`` for ``LunarLander-v3``)."""
    import gymnasium

    cause = err.__cause__ or err.__context__
    module = getattr(cause, "name", None)
    missing = f"no module named {module!r}" if module else str(err).splitlines()[0][:160]
    try:
        entry = gymnasium.spec(bare_env_id(env_id)).entry_point
    except Exception:
        entry = None
    for prefix, (needs, extra) in _ENV_EXTRAS.items():
        if isinstance(entry, str) and entry.startswith(prefix):
            return ConfigError(
                f"{env_id!r} needs {needs}, which are not installed here ({missing}): install rlinf-algos' "
                f"{extra} extra (`uv sync --all-packages` in the rlinf workspace, or "
                f"`pip install 'rlinf-algos[{extra}]'`)",
                path=path,
            )
    return ConfigError(
        f"{env_id!r} cannot be built here: a package it needs is not installed ({missing}); install it "
        "on every machine that runs envs",
        path=path,
    )


def bare_env_id(env_id: str) -> str:
    """``EnvName-vN`` of ``module:EnvName-vN`` (the id gymnasium registered); other ids as they are."""
    return env_id.partition(":")[2] if ":" in env_id else env_id


# -- env.wrappers --------------------------------------------------------------------------------


def _wrapper_entry(entry: Any) -> tuple[str, dict[str, Any]]:
    """``(import path, kwargs)`` of one ``env.wrappers`` entry (a string, or ``{path, kwargs}``,
    a dict or the config model)."""
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict):
        return str(entry.get("path")), dict(entry.get("kwargs") or {})
    return str(entry.path), dict(entry.kwargs or {})


def _load_wrapper(path: str, where: str) -> Any:
    """The object ``module:Name`` (or ``module.Name``) names: a per-env gymnasium wrapper (a
    class or a callable ``env -> env``). Raises :class:`ConfigError` at ``where``."""
    import importlib

    import gymnasium

    form = "give 'module:Name' of a gymnasium wrapper, e.g. 'gymnasium.wrappers:ClipReward'"
    if ":" in path:
        module, _, name = path.partition(":")
    else:
        module, _, name = path.rpartition(".")
    if not module or not name or not all(p.isidentifier() for p in [*module.split("."), *name.split(".")]):
        raise ConfigError(f"{describe_value(path)} is not an import path: {form}", path=where)
    try:
        obj: Any = importlib.import_module(module)
    except Exception as err:
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ConfigError(
            f"cannot import module {module!r} of {path!r} ({why}); {form}", path=where
        ) from None
    for attr in name.split("."):
        if not hasattr(obj, attr):
            names = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(attr, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(f"module {module!r} has no {attr!r}{hint} ({form})", path=where)
        obj = getattr(obj, attr)
    if isinstance(obj, type) and issubclass(obj, gymnasium.vector.VectorWrapper):
        raise ConfigError(
            f"{path!r} is a vector wrapper; env.wrappers takes per-env wrappers (gymnasium.wrappers:..., "
            "not gymnasium.wrappers.vector:...)",
            path=where,
        )
    if not callable(obj):
        raise ConfigError(f"{path!r} is not callable ({type(obj).__name__}); {form}", path=where)
    return obj


def wrapper_problems(wrappers: Any, path: str = "env.wrappers") -> list[ConfigProblem]:
    """Every entry of ``env.wrappers`` that does not import, is no per-env wrapper, or whose
    ``kwargs`` its signature does not take (each at its YAML path)."""
    import inspect

    problems: list[ConfigProblem] = []
    for i, entry in enumerate(wrappers or []):
        if isinstance(entry, dict) and not (
            isinstance(entry.get("path"), str) and isinstance(entry.get("kwargs") or {}, dict)
        ):
            continue  # the config model reports its shape
        if not isinstance(entry, (str, dict)) and not hasattr(entry, "path"):
            continue
        target, kwargs = _wrapper_entry(entry)
        where = f"{path}[{i}]" if isinstance(entry, str) else f"{path}[{i}].path"
        try:
            obj = _load_wrapper(target, where)
        except ConfigError as err:
            problems.extend(err.problems)
            continue
        try:
            inspect.signature(obj).bind(None, **kwargs)
        except TypeError as err:
            problems.append(
                ConfigProblem(
                    f"{path}[{i}].kwargs", f"{target!r} does not take {describe_value(kwargs)}: {err}"
                )
            )
        except ValueError:  # no signature (a builtin): its own error will say, when applied
            pass
    return problems


def resolve_wrappers(wrappers: Any, path: str = "env.wrappers") -> list[Any]:
    """``env.wrappers`` as callables ``env -> env`` to apply in order (``functools.partial`` of
    each wrapper with its kwargs: picklable, for async vector envs)."""
    import functools

    problems = wrapper_problems(wrappers, path)
    if problems:
        raise ConfigError(problems)
    out = []
    for i, entry in enumerate(wrappers or []):
        target, kwargs = _wrapper_entry(entry)
        out.append(
            _Wrap(functools.partial(_load_wrapper(target, f"{path}[{i}]"), **kwargs), target, f"{path}[{i}]")
        )
    return out


class _Wrap:
    """One ``env.wrappers`` entry applied to an env: a wrapper that fails on it is a
    :class:`ConfigError` at its YAML path (picklable, for async vector envs)."""

    def __init__(self, fn: Any, target: str, path: str) -> None:
        self.fn, self.target, self.path = fn, target, path

    def __call__(self, env: Any) -> Any:
        try:
            return self.fn(env)
        except Exception as err:
            why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
            raise ConfigError(
                f"{self.target!r} failed on {env.spec.id if env.spec else env}: {why}", path=self.path
            ) from None


def probe_spaces(
    env_id: str, kwargs: Any = None, wrappers: Any = None, timeout_s: float = 60.0
) -> tuple[Any, Any] | None:
    """``(observation_space, action_space)`` of one copy of ``env_id`` (with ``env.kwargs`` and
    ``env.wrappers``), built and closed here, for the checks before anything starts; ``None``
    where it is not built here: ids of installed plugins (a robot's env may connect to the robot
    when built; the env worker checks those) and any env that fails to build here. Raises
    :class:`ConfigError` for a wrapper that does not import or fails on the env, and for a
    user's env whose ``reset`` does not return within ``timeout_s`` (``env.timeout_s``; it runs
    on a thread of its own, :mod:`rlinf_algos.env_guard`)."""
    import json

    try:
        key = json.dumps([env_id, kwargs or {}, [_wrapper_entry(w) for w in wrappers or []]], sort_keys=True)
    except (TypeError, ValueError):  # kwargs that are not plain data: build it every time
        return _probe_spaces(env_id, kwargs, wrappers, timeout_s)
    if key not in _PROBED:
        if len(_PROBED) >= 64:
            _PROBED.clear()
        _PROBED[key] = _probe_spaces(env_id, kwargs, wrappers, timeout_s)
    return _PROBED[key]


_PROBED: dict[str, tuple[Any, Any] | None] = {}
""":func:`probe_spaces` results of this process (validation runs more than once per run)."""


def _probe_spaces(env_id: str, kwargs: Any, wrappers: Any, timeout_s: float) -> tuple[Any, Any] | None:
    import gymnasium

    from rlinf_algos.env_guard import EnvThread, EnvTimeout, needs_guard

    try:
        ensure_registered(env_id)
        spec = gymnasium.spec(bare_env_id(env_id))
    except Exception:
        return None
    entry = spec.entry_point
    own = isinstance(entry, str) and entry.startswith("gymnasium.")
    if not (own or ":" in env_id):
        return None
    guard = (
        EnvThread(f"rlinf-probe-{bare_env_id(env_id)}")
        if needs_guard(GymnasiumFamily(), env_id, wrappers)
        else None
    )

    def call(what: str, wait: float, fn: Any, *args: Any, **kw: Any) -> Any:
        return guard.call(what, wait, fn, *args, **kw) if guard is not None else fn(*args, **kw)

    try:
        return _probe_on(env_id, kwargs, wrappers, timeout_s, call)
    except EnvTimeout as err:
        raise ConfigError(
            f"{env_id!r}: its {err.call} did not return within {err.waited:g} s (env.timeout_s; blocked at "
            f"{err.place}) when one copy was built here to check its spaces; raise env.timeout_s if a "
            f"{err.call} may take longer",
            path="env.timeout_s" if err.call == "reset" else "env.id",
        ) from None
    finally:
        if guard is not None:
            guard.close()


def _probe_on(env_id: str, kwargs: Any, wrappers: Any, timeout_s: float, call: Any) -> tuple[Any, Any] | None:
    """:func:`_probe_spaces`' building, reset and wrapping, each through ``call`` (its thread)."""
    import gymnasium

    from rlinf_algos.env_guard import EnvTimeout

    build_s = max(300.0, timeout_s)
    try:
        env = call("make", build_s, gymnasium.make, bare_env_id(env_id), **dict(kwargs or {}))
    except gymnasium.error.DependencyNotInstalled as err:
        raise missing_dependency_error(env_id, err) from None
    except (TypeError, ValueError) as err:
        _raise_kwargs_error(env_id, kwargs, err)
        return None
    except (ConfigError, EnvTimeout):
        raise
    except Exception:  # unknown keys are reported by env_kwargs_problems
        return None
    closed = False
    try:
        try:  # a value of the wrong type often fails only when the env first uses it
            call("reset", timeout_s, env.reset, seed=0)
        except (TypeError, ValueError) as err:
            _raise_kwargs_error(env_id, kwargs, err)
        except EnvTimeout:
            closed = True  # never call an env whose call did not return
            raise
        except Exception:
            pass  # not the kwargs' fault as far as can be told here: the env worker reports it
        for wrap in resolve_wrappers(wrappers):  # a wrapper that fails is reported at its YAML path
            env = call("wrap", build_s, wrap, env)
        return env.observation_space, env.action_space
    finally:
        if not closed:
            try:
                call("close", build_s, env.close)
            except (ConfigError, EnvTimeout):
                raise
            except Exception as err:  # the user's close: one line, before anything starts
                from rlinf_algos.env_guard import user_place

                why = f"{type(err).__name__}: {err}".strip().splitlines()[0][:300]
                raise ConfigError(
                    f"{env_id!r}: close raised {why} (at {user_place(err)}) when one copy was built here "
                    "to check its spaces",
                    path="env.id",
                ) from None


def _raise_kwargs_error(env_id: str, kwargs: Any, err: BaseException) -> None:
    """A ``ConfigError`` at ``env.kwargs`` when the env, built with them, refused a value
    (a ``TypeError``/``ValueError`` from building or resetting it); nothing without kwargs."""
    if not kwargs:
        return
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    raise ConfigError(
        [
            ConfigProblem(
                "env.kwargs",
                f"{env_id!r} built with {dict(kwargs)!r} fails when built and reset: {type(err).__name__}: {first} "
                "(check each value's type against the env's constructor)",
            )
        ]
    )


def env_kwargs_problems(env_id: str, kwargs: Any, path: str = "env.kwargs") -> list[ConfigProblem]:
    """The keys of ``kwargs`` that the constructor of the registered ``env_id`` does not take
    (with the closest it takes), checked against its signature without building the env. Where
    the constructor takes ``**kwargs``, one of gymnasium's own envs is built once to see (a cheap
    simulation) and its error reported; nothing is reported for other such constructors, or one
    whose module does not import here (it may on the node that runs the env)."""
    import inspect

    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    if not isinstance(kwargs, dict) or not kwargs:
        return []
    try:
        spec = gymnasium.spec(bare_env_id(env_id))
        entry = spec.entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        params = inspect.signature(creator).parameters.values()
    except Exception:  # not importable on this machine, or no signature
        return []
    if creator is None:
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        # the signature does not say; gymnasium's own envs (MuJoCo, classic control) are cheap
        # simulations: build one to see, the way an env worker would
        if not getattr(creator, "__module__", "").startswith("gymnasium."):
            return []
        try:
            gymnasium.make(env_id, **kwargs).close()
        except Exception as err:
            why = f"{type(err).__name__}: {err}".splitlines()[0]
            why = why if len(why) <= 160 else why[:157] + "..."
            return [ConfigProblem(path, f"cannot create {env_id!r} with these kwargs ({why})")]
        return []
    takes = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    takes |= {"max_episode_steps", "disable_env_checker"}  # gymnasium.make's own
    problems = []
    for key in kwargs:
        if key in takes:
            continue
        close = difflib.get_close_matches(str(key), sorted(takes), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        problems.append(
            ConfigProblem(
                join_path(path, str(key)),
                f"{env_id!r} takes no keyword argument {describe_value(key)} ({hint}it takes: "
                f"{', '.join(sorted(takes)) or 'none'})",
            )
        )
    return problems


def make_gymnasium_vector(request: Any) -> Any:
    """A gymnasium vector env of ``request.id`` (``gymnasium.make_vec``, ``SAME_STEP``
    autoreset), with ``env.wrappers``, the pixel observation wrapper of the pixel obs modes and
    flat float actions for non-``Box`` action spaces."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    from rlinf_algos.action_spaces import wrap_flat_actions
    from rlinf_algos.pixels import PixelObservation, pixel_mode_kwargs, prepare_gl

    env_id = request.id
    ensure_registered(env_id)
    user_wrappers = resolve_wrappers(request.wrappers)
    env_id = bare_env_id(env_id)
    kwargs = dict(request.kwargs or {})
    if request.max_episode_steps is not None:
        kwargs["max_episode_steps"] = request.max_episode_steps
    prepare_gl()  # before any env can make a GL context (envs that emit images render themselves)
    per_env = list(user_wrappers)
    image_size = tuple(request.image_size)
    if request.obs_mode != "state":
        kwargs = {**pixel_mode_kwargs(env_id, image_size), **kwargs}
        per_env.append(PixelObservation(request.obs_mode, image_size))
    per_env.append(wrap_flat_actions)
    try:
        return gym.make_vec(
            env_id,
            num_envs=request.num_envs,
            vectorization_mode=request.vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            wrappers=per_env,
            **kwargs,
        )
    except gym.error.DependencyNotInstalled as err:
        raise missing_dependency_error(env_id, err) from None
    except TypeError as err:  # an unknown keyword of the env's constructor
        raise ConfigError(
            f"cannot create {env_id!r} with kwargs {describe_value(kwargs)}: {describe_value(str(err))}",
            path="env.kwargs",
        ) from None


class GymnasiumFamily(EnvFamily):
    """Any registered gymnasium id (``env.id``): MuJoCo, Box2D, classic control, a plugin's
    id, or ``module:EnvName-vN``; ``env.kwargs`` go to ``gymnasium.make``, ``env.wrappers``
    wrap every copy. Runs in rlinf's interpreter."""

    PLUGIN_NAME = "gymnasium"
    description = "any registered gymnasium id (MuJoCo, Box2D, classic control, plugin ids, module:Env-vN)"

    def make_vector(self, request: Any) -> Any:
        return make_gymnasium_vector(request)

    def problems(self, env: Mapping[str, Any]) -> list[ConfigProblem]:
        env_id = env.get("id")
        if not isinstance(env_id, str) or not env_id:
            return []
        wrappers = env.get("wrappers")
        problems = wrapper_problems(wrappers) if isinstance(wrappers, list) else []
        if env.get("options"):
            problems.append(
                ConfigProblem(
                    "env.options",
                    "the gymnasium family takes no env.options (give gymnasium.make's keyword arguments in env.kwargs)",
                )
            )
        try:
            ensure_registered(env_id)
        except ConfigError as err:
            return list(err.problems) + problems
        return env_kwargs_problems(env_id, env.get("kwargs")) + problems
