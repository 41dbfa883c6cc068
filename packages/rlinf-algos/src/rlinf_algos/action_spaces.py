"""Action spaces as plain data and their flat float form (no torch: the env side imports it).

PPO and embodied GRPO act in any of gymnasium's ``Box`` (1-D), ``Discrete``, ``MultiDiscrete``,
``MultiBinary`` spaces and ``Dict`` / ``Tuple`` spaces of them (a *hybrid* space: a continuous
arm with a discrete gripper). Three pieces:

- :func:`action_space_spec`: a gymnasium action space as JSON-able data (``str``/``int``/
  ``float``/``list``/``dict``), what a policy spec records (``spec["action_space"]``)::

      {"kind": "box", "dims": 7}
      {"kind": "discrete", "n": 2, "start": 0}
      {"kind": "multi_discrete", "nvec": [3, 5], "start": [0, 0]}
      {"kind": "multi_binary", "shape": [4]}
      {"kind": "dict", "parts": [{"key": "arm", "space": {...}}, {"key": "gripper", "space": {...}}]}
      {"kind": "tuple", "parts": [{"space": {...}}, ...]}

- the *flat form* of an action: one float vector ``[A]`` (the parts in order: a ``Box`` part's
  values, one index per ``Discrete`` / ``MultiDiscrete`` dimension, one 0/1 per ``MultiBinary``
  bit). Actions travel as ``[N, A]`` float tensors through rollout buffers, links and channels;
  :func:`to_native` / :func:`to_flat` convert at the env boundary (:class:`FlatActions`, a
  gymnasium wrapper the env side puts around every copy whose space is not a flat ``Box``).
- :class:`~rlinf_algos.distributions.ActionDist`: the policy's distribution over the flat form, built from the spec: a
  diagonal Normal over the ``Box`` dims (a state-independent ``log_std``; samples are not
  clipped, the env side clips them as for a plain ``Box``), a Categorical per discrete
  dimension (the network emits its ``n`` logits), a Bernoulli per bit (one logit). The
  log-probability and the entropy of an action are the sums over the parts (they are
  independent given the observation).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np

__all__ = [
    "FlatActionBox",
    "FlatActions",
    "action_space_spec",
    "action_spec_of",
    "flat_action_bounds",
    "flat_dims",
    "is_plain_box",
    "leaves",
    "space_kinds",
    "to_flat",
    "to_native",
    "wrap_flat_actions",
]


def is_plain_box(space: Any) -> bool:
    """A 1-D ``Box``: the action space the Gaussian policies take as it is."""
    from gymnasium import spaces

    return isinstance(space, spaces.Box) and len(space.shape) == 1


def action_space_spec(space: Any) -> dict[str, Any]:
    """The action space ``space`` as plain data (see the module docstring). Raises ``ValueError``
    naming the part that is none of the supported spaces (a 2-D ``Box``, ``Text``, ``Graph``...)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        if len(space.shape) != 1:
            raise ValueError(f"a Box action (part) must be 1-D (a vector), got shape {tuple(space.shape)}")
        return {"kind": "box", "dims": int(space.shape[0])}
    if isinstance(space, spaces.Discrete):
        return {"kind": "discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise ValueError(f"a MultiDiscrete action must be 1-D, got nvec of shape {space.nvec.shape}")
        return {
            "kind": "multi_discrete",
            "nvec": [int(n) for n in space.nvec],
            "start": [int(s) for s in space.start],
        }
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "multi_binary", "shape": [int(d) for d in np.atleast_1d(space.n)]}
    if isinstance(space, spaces.Dict):
        return {
            "kind": "dict",
            "parts": [{"key": str(k), "space": action_space_spec(s)} for k, s in space.spaces.items()],
        }
    if isinstance(space, spaces.Tuple):
        return {"kind": "tuple", "parts": [{"space": action_space_spec(s)} for s in space.spaces]}
    raise ValueError(
        f"action space {space} is not a Box (1-D), Discrete, MultiDiscrete, MultiBinary, or a Dict/Tuple of them"
    )


def space_kinds(spec: Mapping[str, Any]) -> set[str]:
    """The leaf kinds of a spec (``{"box"}`` for a plain continuous space)."""
    if spec["kind"] in ("dict", "tuple"):
        return set().union(*(space_kinds(p["space"]) for p in spec["parts"])) if spec["parts"] else set()
    return {spec["kind"]}


def leaves(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if spec["kind"] in ("dict", "tuple"):
        return [leaf for p in spec["parts"] for leaf in leaves(p["space"])]
    return [spec]


def flat_dims(spec: Mapping[str, Any]) -> int:
    kind = spec["kind"]
    if kind == "box":
        return int(spec["dims"])
    if kind == "discrete":
        return 1
    if kind == "multi_discrete":
        return len(spec["nvec"])
    if kind == "multi_binary":
        return int(np.prod(spec["shape"]))
    return sum(flat_dims(p["space"]) for p in spec["parts"])


# -- the env boundary ----------------------------------------------------------------------------


def flat_action_bounds(space: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` ``[A]`` of the flat form: a ``Box`` part's bounds, ``[start, start + n -
    1]`` per discrete dimension, ``[0, 1]`` per bit."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return space.low.astype(np.float32).reshape(-1), space.high.astype(np.float32).reshape(-1)
    if isinstance(space, spaces.Discrete):
        return np.array([space.start], np.float32), np.array([space.start + space.n - 1], np.float32)
    if isinstance(space, spaces.MultiDiscrete):
        return space.start.astype(np.float32), (space.start + space.nvec - 1).astype(np.float32)
    if isinstance(space, spaces.MultiBinary):
        k = int(np.prod(space.n))
        return np.zeros(k, np.float32), np.ones(k, np.float32)
    parts = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
    bounds = [flat_action_bounds(s) for s in parts]
    return np.concatenate([b[0] for b in bounds]), np.concatenate([b[1] for b in bounds])


def to_native(space: Any, flat: np.ndarray) -> Any:
    """One flat action ``[A]`` as ``space`` takes it: ints for the discrete parts (rounded and
    clipped into range), a 0/1 ``int8`` array for ``MultiBinary``, a dict or tuple for
    ``Dict`` / ``Tuple``; a ``Box`` part's floats as they are (the env side clips them)."""
    from gymnasium import spaces

    flat = np.asarray(flat, dtype=np.float64).reshape(-1)
    try:
        out, used = _to_native(space, flat, 0, spaces)
    except (ValueError, IndexError):  # too few values for a part
        out, used = None, -1
    if used != flat.shape[0]:
        want = flat_action_bounds(space)[0].shape[0]
        raise ValueError(f"a flat action of {flat.shape[0]} values for {space}, which takes {want}")
    return out


def _to_native(space: Any, flat: np.ndarray, at: int, spaces: Any) -> tuple[Any, int]:
    if isinstance(space, spaces.Box):
        k = int(np.prod(space.shape))
        return flat[at : at + k].astype(space.dtype).reshape(space.shape), at + k
    if isinstance(space, spaces.Discrete):
        v = int(np.clip(np.rint(flat[at]), space.start, space.start + space.n - 1))
        return np.int64(v), at + 1
    if isinstance(space, spaces.MultiDiscrete):
        k = len(space.nvec)
        v = np.clip(np.rint(flat[at : at + k]), space.start, space.start + space.nvec - 1)
        return v.astype(space.dtype), at + k
    if isinstance(space, spaces.MultiBinary):
        k = int(np.prod(space.n))
        return (flat[at : at + k] > 0.5).astype(np.int8).reshape(space.shape), at + k
    if isinstance(space, spaces.Dict):
        out = {}
        for key, sub in space.spaces.items():
            out[key], at = _to_native(sub, flat, at, spaces)
        return out, at
    if isinstance(space, spaces.Tuple):
        items = []
        for sub in space.spaces:
            item, at = _to_native(sub, flat, at, spaces)
            items.append(item)
        return tuple(items), at
    raise ValueError(f"unsupported action space {space}")


def to_flat(space: Any, action: Any) -> np.ndarray:
    """The flat form ``[A]`` (float32) of one native action of ``space`` (the inverse of
    :func:`to_native` on valid actions)."""
    from gymnasium import spaces

    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return np.asarray(action, dtype=np.float32).reshape(-1)
    if isinstance(space, spaces.Dict):
        return np.concatenate([to_flat(sub, action[k]) for k, sub in space.spaces.items()])
    if isinstance(space, spaces.Tuple):
        return np.concatenate([to_flat(sub, a) for sub, a in zip(space.spaces, action, strict=True)])
    raise ValueError(f"unsupported action space {space}")


class FlatActionBox(gymnasium.spaces.Box):
    """The ``Box`` ``[A]`` of a :class:`FlatActions` env: bounds from :func:`flat_action_bounds`,
    and ``native_spec``, the plain data of the space it stands for (a vector env's
    ``single_action_space`` is this object, so the spec is read without asking the copies)."""

    def __init__(self, native: Any) -> None:
        low, high = flat_action_bounds(native)
        super().__init__(low, high, dtype=np.float32)
        self.native_spec = action_space_spec(native)


class FlatActions(gymnasium.ActionWrapper):
    """A gymnasium wrapper that takes flat float actions (a :class:`FlatActionBox`) and hands the
    wrapped env its native ones (:func:`to_native`); ``native_action_space`` is the wrapped env's
    space."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.native_action_space = space = env.action_space
        self.action_space = FlatActionBox(space)
        # a lone Discrete (the common case) skips to_native's walk: this runs every env step
        discrete = isinstance(space, gymnasium.spaces.Discrete)
        self._range = (int(space.start), int(space.start + space.n - 1)) if discrete else None

    def action(self, action: Any) -> Any:
        if self._range is not None and np.shape(action) == (1,):
            lo, hi = self._range
            try:
                return np.int64(min(max(round(float(action[0])), lo), hi))  # as to_native: rint, clip
            except ValueError:  # NaN: to_native says what is wrong
                pass
        return to_native(self.native_action_space, action)


def action_spec_of(single_action_space: Any) -> dict[str, Any]:
    """The spec of what an env (or a vector env's ``single_action_space``) takes natively: the
    space a :class:`FlatActions` stands for, else the space's own."""
    if isinstance(single_action_space, FlatActionBox):
        return dict(single_action_space.native_spec)
    return action_space_spec(single_action_space)


def wrap_flat_actions(env: Any) -> Any:
    """``env`` itself when its action space is a flat ``Box``, else :class:`FlatActions` around it
    (a module-level function, so async vector envs can pickle it)."""
    return env if is_plain_box(env.action_space) else FlatActions(env)
