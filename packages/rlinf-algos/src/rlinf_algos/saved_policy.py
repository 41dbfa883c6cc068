"""``rlinf_algos.load_policy(run_dir)``: a trained policy in a user's own loop.

An embodied run (PPO, SAC, embodied GRPO; ``mlp`` and ``vla`` models) gives a :class:`Policy`:
``act(obs, deterministic=True)`` maps one observation, or a batch, to actions, numpy in and numpy
out (``predict`` is the same with Stable-Baselines3's signature). A language-model run (its
``policy/`` folder holds a transformers model) gives an :class:`LMPolicy`: the transformers model
and tokenizer. Nothing is loaded with pickle (:mod:`rlinf_algos.run_files`)::

    import gymnasium as gym
    from rlinf_algos import load_policy

    policy = load_policy("runs/quickstart-20250101-120000")
    env = gym.make(policy.env_id)
    obs, _ = env.reset(seed=0)
    for _ in range(1000):
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        if terminated or truncated:
            obs, _ = env.reset()
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlinf_core.errors import RlinfError

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["LMPolicy", "Policy", "load_policy"]


@dataclass
class LMPolicy:
    """A language-model run's policy: ``model`` (``AutoModelForCausalLM``, in eval mode, LoRA
    adapters merged as the run saved it) and ``tokenizer`` (``AutoTokenizer``) of ``folder``.
    Unpacks as ``model, tokenizer = load_policy(run_dir)``."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    folder: Path

    def __iter__(self) -> Iterator[Any]:
        return iter((self.model, self.tokenizer))


class Policy:
    """An embodied run's final policy (or its warm start), rebuilt from its safetensors file.

    Attributes:
        module: the ``torch.nn.Module`` (eval mode, on the CPU).
        record: what the file holds besides the weights (``algorithm``, ``spec``, ``env_id``,
            ``env_kwargs``, ``obs_mode``...).
        path: the file it was read from.
    """

    def __init__(
        self, module: nn.Module, record: Mapping[str, Any], path: Path, *, trust: bool = False
    ) -> None:
        self.module = module
        self.record = dict(record)
        self.path = path
        self.trust = trust
        self._spaces: tuple[Any, Any] | None = None

    @property
    def algorithm(self) -> str | None:
        """``ppo``, ``sac``, ``grpo``..."""
        return self.record.get("algorithm")

    @property
    def env_id(self) -> str | None:
        """The gymnasium id the policy was trained in."""
        return self.record.get("env_id")

    @property
    def spec(self) -> dict[str, Any]:
        """The network's spec (model type, sizes, observation space)."""
        return dict(self.record.get("spec") or {})

    @property
    def observation_space(self) -> Any:
        """The observation space the policy takes (the env's, after the run's ``env.obs_mode``
        and ``env.wrappers``); one copy of the env is built (and closed) the first time."""
        return self._env_spaces()[0]

    @property
    def action_space(self) -> Any:
        """The env's own action space (what :meth:`act` returns actions of); built as
        :attr:`observation_space` is."""
        return self._env_spaces()[1]

    def _env_spaces(self) -> tuple[Any, Any]:
        if self._spaces is None:
            from rlinf_algos.envs import open_vector_env
            from rlinf_algos.evaluate import check_run_code

            check_run_code(self.path, self.record, trust=self.trust)
            if not isinstance(self.env_id, str):
                raise RlinfError(f"{self.path} does not name the env it was trained in (no env_id in it)")
            extra = {"wrappers": self.record["env_wrappers"]} if self.record.get("env_wrappers") else {}
            envs, _ = open_vector_env(
                self.env_id,
                1,
                0,
                env_kwargs=dict(self.record.get("env_kwargs") or {}),
                max_episode_steps=self.record.get("max_episode_steps"),
                obs_mode=self.record.get("obs_mode", "state"),
                image_size=tuple(self.record.get("image_size") or (64, 64)),
                family=self.record.get("env_family") or "gymnasium",
                options=self.record.get("env_options") or {},
                timeout_s=float(self.record.get("env_timeout_s") or 60.0),
                **extra,
            )
            try:
                self._spaces = (envs.single_observation_space, _native_action_space(envs))
            finally:
                envs.close()
        return self._spaces

    def _is_single(self, obs: Any) -> bool:
        import numpy as np

        space = self.spec.get("obs_space") or {}
        if isinstance(obs, Mapping):
            for key, part in (space.get("keys") or {}).items():
                if key in obs and part.get("kind") == "box":
                    return np.ndim(obs[key]) == len(part["shape"])
                if key in obs and part.get("kind") == "text":
                    return isinstance(obs[key], str)
            raise RlinfError(
                f"act(): an observation with keys {sorted(obs)}, but the policy takes "
                f"{sorted(space.get('keys') or {})}"
            )
        shape = space.get("shape") or [self.spec.get("obs_dim")]
        return np.ndim(obs) == len(shape)

    def act(self, obs: Any, deterministic: bool = True, *, clip: bool = True) -> Any:
        """Actions for one observation (as ``env.step`` takes it) or a batch ``[B, ...]``
        (an array ``[B, A]``, or for discrete and hybrid action spaces one native action per
        row, stacked where they are arrays or ints).

        Args:
            obs: an observation as the env gives it (an array, or a dict of arrays and
                strings for ``vla`` policies), or a batch of them (a leading axis; lists of
                strings for text entries).
            deterministic: the mean action (``True``) or a sample of the policy's distribution.
            clip: clip ``Box`` actions into the action space's bounds (as the env side does in
                training); ``False`` returns the network's output as it is and builds no env.
        """
        import numpy as np
        import torch

        from rlinf_algos.envs import batch_obs, nonfinite_rows

        if obs is None:
            raise RlinfError("act(): no observation (None); give one as env.step returns it, or a batch")
        single = self._is_single(obs)
        if single:
            obs = (
                {k: ([v] if isinstance(v, str) else np.asarray(v)[None]) for k, v in obs.items()}
                if isinstance(obs, Mapping)
                else np.asarray(obs)[None]
            )
        if isinstance(obs, Mapping):
            obs = {k: (np.asarray(v, dtype=object) if _is_text(v) else np.asarray(v)) for k, v in obs.items()}
        else:
            obs = np.asarray(obs)
        self._check_batch(obs)
        bad = nonfinite_rows(obs)
        if bad.any():
            raise RlinfError(
                f"act(): observation {int(np.flatnonzero(bad)[0])} of the batch holds NaN or inf; the policy "
                "takes finite observations"
            )
        with torch.no_grad():
            flat = self.module.predict(batch_obs(obs), deterministic).detach().cpu().numpy()
        out = self._native(flat) if clip or self._kind() != "box" else flat
        return out[0] if single else out

    def _check_batch(self, obs: Any) -> None:
        """A batch whose entries do not have the shapes the policy was trained on is one line."""
        import numpy as np

        space = self.spec.get("obs_space") or {}
        parts = (space.get("keys") or {}) if isinstance(obs, Mapping) else {None: space}
        for key, part in parts.items():
            if part.get("kind") != "box" or (key is not None and key not in obs):
                continue
            got = np.shape(obs[key] if key is not None else obs)[1:]
            if tuple(got) != tuple(part["shape"]):
                name = f"observation {key!r}" if key is not None else "an observation"
                raise RlinfError(
                    f"act(): {name} of shape {list(got)}; the policy takes {list(part['shape'])} (one) or "
                    f"[B, {', '.join(map(str, part['shape']))}] (a batch)"
                )

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[Any, None]:
        """Stable-Baselines3's ``predict``: ``(actions, None)`` (no recurrent state)."""
        return self.act(observation, deterministic), None

    def _kind(self) -> str:
        return str((self.spec.get("action_space") or {"kind": "box"}).get("kind", "box"))

    def _native(self, flat: Any) -> Any:
        import numpy as np
        from gymnasium import spaces

        space = self.action_space
        if isinstance(space, spaces.Box):
            return np.clip(flat, space.low.reshape(-1), space.high.reshape(-1)).astype(space.dtype)
        from rlinf_algos.action_spaces import to_native

        rows = [to_native(space, row) for row in flat]
        if rows and not isinstance(rows[0], (dict, tuple)):
            return np.stack([np.asarray(r) for r in rows])
        return rows


def _is_text(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and bool(v) and isinstance(v[0], str)


def _native_action_space(envs: Any) -> Any:
    """The action space of one copy as the env itself takes it (the space a flat-action wrapper
    stands for, where rlinf put one around it)."""
    inner = envs
    while not hasattr(inner, "envs") and hasattr(inner, "env"):
        inner = inner.env
    copies = getattr(inner, "envs", None)
    if copies:
        native = getattr(copies[0], "native_action_space", None)
        if native is not None:
            return native
    return envs.single_action_space


def _lm_policy(run_dir: Path, folder: Path, trust_remote_code: bool) -> LMPolicy:
    import yaml
    from transformers import AutoTokenizer

    from rlinf_algos.lm.config import LMModelConfig
    from rlinf_algos.lm.model_type import load_lm_model

    saved: dict[str, Any] = {}
    cfg_file = run_dir / "config.yaml"
    if cfg_file.is_file():
        try:
            model_section = (yaml.safe_load(cfg_file.read_text(encoding="utf-8")) or {}).get("model")
            saved = dict(model_section) if isinstance(model_section, dict) else {}
        except (OSError, yaml.YAMLError, AttributeError):
            pass
    kind = str(saved.get("type") or "hf")
    # the run's model type and its own options; the written folder holds merged weights (no LoRA)
    own = {k: v for k, v in saved.items() if k not in LMModelConfig.model_fields} if kind != "hf" else {}
    spec = {
        **own,
        "type": kind,
        "path": str(folder),
        "dtype": saved.get("dtype") or "float32",
        "trust_remote_code": trust_remote_code,
    }
    model = load_lm_model(spec, folder, trainable=False)
    model.eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    except Exception as err:
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise RlinfError(f"{folder}: its tokenizer cannot be loaded ({first})") from None
    return LMPolicy(model, tokenizer, folder)


def load_policy(
    run_dir: str | Path, *, warm_start: bool = False, trust_remote_code: bool = False, trust: bool = False
) -> Policy | LMPolicy:
    """The trained policy of the run directory ``run_dir``.

    Args:
        run_dir: a run directory (or an embodied run's policy file itself).
        warm_start: an embodied vla run's warm start (``warm_start.safetensors``, the weights
            RL started from) instead of its final policy.
        trust_remote_code: a language-model run's model folder may run code it ships (off:
            such a folder is refused).
        trust: an embodied run's env may import the code the run names (a ``module:Env-vN``
            id, ``env.wrappers``) that no installed plugin provides; off, building its env
            (:attr:`Policy.observation_space`, ``act`` with clipping) is refused naming each
            reference (:mod:`rlinf_algos.code_refs`).

    Returns:
        a :class:`Policy` for an embodied run, an :class:`LMPolicy` (model, tokenizer) for a
        language-model run.

    Raises:
        RlinfError: no policy there, or one that cannot be read (one line naming the file);
            :class:`~rlinf_algos.run_files.UnsafeStateFile` for an earlier version's pickle
            that holds more than tensors (``rlinf convert RUN --trust`` converts a trusted run).
    """
    from rlinf_algos.evaluate import load_policy as load_module
    from rlinf_algos.run_files import POLICY, policy_file, warm_start_file

    path = Path(run_dir).expanduser()
    if path.is_dir() and not warm_start and (path / "policy" / "config.json").is_file():
        return _lm_policy(path, path / "policy", trust_remote_code)
    file = path
    if path.is_dir():
        file = warm_start_file(path) if warm_start else policy_file(path)
    if not file.exists() and not path.is_dir():
        raise RlinfError(f"{path}: no such run directory or policy file")
    if not file.exists() and not warm_start:
        raise RlinfError(
            f"{path} holds no policy ({POLICY}, or policy/ for a language-model run): a finished or "
            "interrupted run writes it"
        )
    module, record = load_module(file)
    return Policy(module, record, file, trust=trust)
