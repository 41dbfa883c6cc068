"""``model.type: vla``: policies over camera images, proprioception and a language instruction.

The observation is a dict (:mod:`rlinf_algos.obs`): ``image`` ``[B, H, W, 3]`` uint8 (further
cameras as ``image_<name>``), ``state`` ``[B, D]`` float and ``instruction`` (strings). A policy
first *prepares* it (:meth:`VLAEncoder.prepare`): images stay ``uint8``, the state is normalised
with running statistics, the instruction becomes token ids; what the rollout stores and the
learner trains on is that prepared dict, so both compute the same log-probabilities.

The encoder (seed 003's VLA shape, small enough for a CPU):

- **vision**: by default a CNN (``model.vision.channels``: a 5x5 then a 3x3 layer of stride 2,
  further 3x3 layers of stride 1), run on each camera's image on its own, whose last feature
  maps are modulated by the instruction (FiLM: a per-channel scale and shift computed from it)
  and reduced by a spatial softmax to one expected image coordinate per channel and camera —
  where the named thing is. Or
  ``model.vision.path``: a ``transformers`` vision model (``AutoModel``) whose pooled output is
  the feature.
- **language**: by default a token embedding (words hashed into ``buckets`` rows, averaged). Or
  ``model.language.path``: a ``transformers`` text model (mean of the last hidden states over
  the instruction's tokens), with that folder's tokenizer.
- **fusion and heads**: image features, instruction embedding and state concatenated, then MLP
  heads. ``model.lora`` puts peft LoRA adapters on the encoder folders (their own weights
  frozen) while the fusion and action heads train at full precision, as seed 003 describes.

:class:`VLAActorCritic` has the policy interface of PPO (that of
:class:`~rlinf_algos.models.mlp.GaussianActorCritic`); :class:`VLASquashedActor` and
:class:`VLATwinQ` are SAC's actor and critics, sharing the encoder design.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from rlinf_algos.models.mlp import (
    RunningNorm,
    SquashedGaussianActor,
    TwinQ,
    as_tensor,
    fold_moments,
    gaussian_entropy,
    gaussian_log_prob,
    mlp,
    on_module,
    seq_forward,
)
from rlinf_core.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "VLAActorCritic",
    "VLAEncoder",
    "VLASquashedActor",
    "VLATwinQ",
    "hash_tokens",
    "random_shift",
    "shift_images",
]

_WORD = re.compile(r"[a-z0-9]+")


def hash_tokens(text: str, buckets: int, max_tokens: int) -> list[int]:
    """The words of ``text`` (lower-cased, alphanumeric runs) as rows ``1..buckets-1`` of the
    token embedding (CRC-32 of the word, so the same in every process); ``0`` pads."""
    ids = [zlib.crc32(w.encode()) % (buckets - 1) + 1 for w in _WORD.findall(text.lower())]
    return ids[:max_tokens]


class SpatialSoftmax(nn.Module):
    """``[B, C, H, W] -> [B, 2C]``: per channel the expected ``(x, y)`` in ``[-1, 1]`` under a
    softmax over its pixels, sharpened by a learnt per-channel temperature (Levine et al., 2016).

    It reads the feature maps before any activation: a ReLU in front of it makes the background
    a floor of ``exp(0)`` over every pixel that a peak must outweigh, which pulls the expected
    position towards the image's centre unless the activations grow large."""

    def __init__(self, h: int, w: int, channels: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], 1), persistent=False)
        self.log_inv_temp = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        b, c = x.shape[:2]
        p = torch.softmax(x.reshape(b, c, -1) * self.log_inv_temp.exp()[:, None], -1)
        return (p @ self.grid).reshape(b, 2 * c)


def _image_keys(space: Mapping[str, Any]) -> list[str]:
    keys = [k for k, v in space.items() if k == "image" or k.startswith("image_")]
    for k in keys:
        s = space[k]
        if s.get("kind") != "box" or s.get("dtype") != "uint8" or len(s["shape"]) != 3 or s["shape"][2] != 3:
            raise ConfigError(f"observation {k!r} must be an (H, W, 3) uint8 image, got {s}", "env.id")
    return sorted(keys)


def _load_folder(kind: str, path: str) -> PreTrainedModel:
    from pathlib import Path

    if not Path(path).is_dir():
        raise ConfigError(
            f"no such folder: {path} (a transformers {kind} model folder)", f"model.{kind}.path"
        )
    from transformers import AutoModel

    try:
        return AutoModel.from_pretrained(path)
    except Exception as err:  # not a model folder, or an architecture transformers lacks
        why = f"{type(err).__name__}: {err}".splitlines()[0][:200]
        raise ConfigError(
            f"{path} cannot be loaded as a {kind} model ({why})", f"model.{kind}.path"
        ) from None


def _lora(model: nn.Module, lora: Mapping[str, Any] | None, trainable: bool, where: str) -> nn.Module:
    """``model`` frozen (unless ``trainable`` and no LoRA), with peft adapters when ``lora``."""
    if lora is None:
        for p in model.parameters():
            p.requires_grad_(trainable)
        return model
    from rlinf_algos.models.lora import add_adapters

    for p in model.parameters():
        p.requires_grad_(False)
    return add_adapters(model, dict(lora), where=where)


class VLAEncoder(nn.Module):
    """Images + instruction + state -> one feature vector (see the module docstring).

    Args:
        obs_space: the observation space as :func:`~rlinf_algos.obs.describe_space` records it
            (a dict with at least one image, or a state).
        vision, language: the ``model.vision`` / ``model.language`` sections as dicts (``None``:
            defaults).
        lora: ``model.lora`` as a dict, or ``None``.
        normalize_state: keep running statistics of the state.
    """

    def __init__(
        self,
        obs_space: Mapping[str, Any],
        vision: Mapping[str, Any] | None = None,
        language: Mapping[str, Any] | None = None,
        lora: Mapping[str, Any] | None = None,
        normalize_state: bool = True,
    ) -> None:
        super().__init__()
        if obs_space.get("kind") != "dict":
            raise ConfigError(
                "model.type vla takes dict observations (image, state, instruction); this env gives a "
                "vector: set env.obs_mode to pixels or pixels+state, or use model.type mlp",
                "model.type",
            )
        keys = obs_space["keys"]
        vision, language = dict(vision or {}), dict(language or {})
        self.image_keys = _image_keys(keys)
        self.has_state = "state" in keys
        self.has_text = "instruction" in keys
        self.privileged_dim = 0
        if "privileged" in keys:
            s = keys["privileged"]
            if s.get("kind") != "box" or len(s["shape"]) != 1:
                raise ConfigError(f"observation 'privileged' must be a 1-D float vector, got {s}", "env.id")
            self.privileged_dim = int(s["shape"][0])
        if not self.image_keys and not self.has_state:
            raise ConfigError(f"the observation has neither an image nor a state: {sorted(keys)}", "env.id")
        self.state_dim = int(keys["state"]["shape"][0]) if self.has_state else 0
        self.state_norm: nn.Module = (
            RunningNorm(self.state_dim) if self.has_state and normalize_state else nn.Identity()
        )
        # language
        self.lang_dim = int(language.get("dim", 32)) if self.has_text else 0
        self.max_tokens = int(language.get("max_tokens", 16))
        self.buckets = int(language.get("buckets", 1024))
        self.text_model: Any = None  # a transformers model, or peft's around it
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self._token_cache: dict[str, list[int]] = {}
        if self.has_text:
            if language.get("path"):
                from transformers import AutoTokenizer

                self.text_model = _lora(
                    _load_folder("language", language["path"]),
                    lora,
                    language.get("trainable", True),
                    "the text model",
                )
                self.tokenizer = AutoTokenizer.from_pretrained(language["path"])
                self.pad_id = int(self.tokenizer.pad_token_id or 0)
                width = int(self.text_model.config.hidden_size)
                self.lang_proj = nn.Linear(width, self.lang_dim)
            else:
                self.pad_id = 0
                self.embed = nn.EmbeddingBag(self.buckets, self.lang_dim, mode="mean", padding_idx=0)
        # vision
        self.vision_model: Any = None  # a transformers model, or peft's around it
        feat = 0
        if self.image_keys:
            h, w = keys[self.image_keys[0]]["shape"][:2]
            if vision.get("path"):
                self.vision_model = _lora(
                    _load_folder("vision", vision["path"]),
                    lora,
                    vision.get("trainable", True),
                    "the vision model",
                )
                cfg = self.vision_model.config
                self.vision_size = int(getattr(cfg, "image_size", h))
                width = int(getattr(cfg, "hidden_size", 0) or cfg.hidden_sizes[-1])
                self.vision_proj = nn.Linear(width, 64)
                feat = 64 * len(self.image_keys)
            else:
                chans = list(vision.get("channels", [32, 32, 32]))
                layers: list[nn.Module] = []
                c_in = 3
                for i, c in enumerate(chans):
                    # in place: nothing needs a conv's output but its ReLU (7% of an update)
                    layers += [
                        nn.Conv2d(c_in, c, 5 if i == 0 else 3, stride=2 if i < 2 else 1),
                        nn.ReLU(inplace=True),
                    ]
                    c_in = c
                self.cnn = nn.Sequential(*layers[:-1])  # the last map goes to FiLM, then the keypoints
                with torch.no_grad():
                    fh, fw = self.cnn(torch.zeros(1, 3, h, w)).shape[2:]
                self.film = nn.Linear(self.lang_dim, 2 * c_in) if self.has_text else None
                self.keypoints = SpatialSoftmax(int(fh), int(fw), c_in)
                feat = 2 * c_in * len(self.image_keys)
        self.out_dim = feat + self.lang_dim + self.state_dim

    # -- preparing raw observations ----------------------------------------------------------------
    def _tokens(self, texts: Sequence[str]) -> np.ndarray:
        out = np.full((len(texts), self.max_tokens), self.pad_id, np.int64)
        for i, t in enumerate(texts):
            t = str(t)
            ids = self._token_cache.get(t)
            if ids is None:
                if self.tokenizer is not None:
                    ids = list(self.tokenizer(t, add_special_tokens=True)["input_ids"])[: self.max_tokens]
                else:
                    ids = hash_tokens(t, self.buckets, self.max_tokens)
                if len(self._token_cache) < 4096:
                    self._token_cache[t] = ids
            out[i, : len(ids)] = ids
        return out

    def prepare_into(self, raw: Mapping[str, Any], out: Mapping[str, Tensor]) -> None:
        """Write the prepared form of raw observations into ``out`` (tensors of :meth:`prepare`'s
        shapes): images copied as uint8, the state normalised, the instruction tokenised."""
        for k in self.image_keys:
            out[k].copy_(as_tensor(raw[k]))
        if self.has_state:
            out["state"].copy_(self.state_norm(as_tensor(np.asarray(raw["state"], np.float32))))
        if self.has_text:
            out["instruction"].copy_(torch.from_numpy(self._tokens(list(raw["instruction"]))))
        if self.privileged_dim:
            out["privileged"].copy_(as_tensor(np.asarray(raw["privileged"], np.float32)))

    def prepare(self, raw: Mapping[str, Any]) -> dict[str, Tensor]:
        """Raw observations (numpy, as the env gives them) -> the prepared tensors."""
        out: dict[str, Tensor] = {k: as_tensor(np.ascontiguousarray(raw[k])).clone() for k in self.image_keys}
        if self.has_state:
            out["state"] = self.state_norm(as_tensor(np.asarray(raw["state"], np.float32)))
        if self.has_text:
            out["instruction"] = torch.from_numpy(self._tokens(list(raw["instruction"])))
        if self.privileged_dim and "privileged" in raw:  # a real arm's observation has none
            out["privileged"] = as_tensor(np.asarray(raw["privileged"], np.float32)).clone()
        return out

    # -- the network ---------------------------------------------------------------------------------
    def _language(self, ids: Tensor) -> Tensor:
        if self.text_model is not None:
            mask = (ids != self.pad_id).long()
            mask[:, 0] = 1
            hidden = self.text_model(input_ids=ids, attention_mask=mask).last_hidden_state
            pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
            return self.lang_proj(pooled)
        return self.embed(ids)

    def _pixels(self, obs: Mapping[str, Tensor]) -> Tensor:
        return torch.cat([obs[k] for k in self.image_keys], -1).permute(0, 3, 1, 2).float().div_(255.0)

    def forward(self, obs: Mapping[str, Tensor]) -> Tensor:
        """Prepared observations -> ``[B, out_dim]``."""
        parts: list[Tensor] = []
        lang = self._language(obs["instruction"]) if self.has_text else None
        if self.image_keys:
            x = self._pixels(obs)
            if self.vision_model is not None:
                feats = []
                for i in range(len(self.image_keys)):
                    img = x[:, 3 * i : 3 * i + 3]
                    if img.shape[-1] != self.vision_size:
                        img = nn.functional.interpolate(
                            img, size=(self.vision_size, self.vision_size), mode="bilinear"
                        )
                    out = self.vision_model(pixel_values=(img - 0.5) / 0.5)
                    pooled = getattr(out, "pooler_output", None)
                    if pooled is None:
                        pooled = out.last_hidden_state.mean(1)
                    feats.append(self.vision_proj(pooled.reshape(pooled.shape[0], -1)))
                parts.append(torch.cat(feats, -1))
            else:
                # One CNN for every camera, each image on its own (the cameras folded into the
                # batch): stacking them as channels would mix pixel (u, v) of one view with pixel
                # (u, v) of another, which show different places.
                b, ncam = x.shape[0], len(self.image_keys)
                f = self.cnn(torch.cat(x.split(3, 1), 0) if ncam > 1 else x)
                if self.film is not None and lang is not None:
                    gamma, beta = self.film(lang).repeat(ncam, 1).chunk(2, -1)
                    f = f * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
                kp = self.keypoints(f)
                parts.append(torch.cat(kp.split(b, 0), 1) if ncam > 1 else kp)
        if lang is not None:
            parts.append(lang)
        if self.has_state:
            parts.append(obs["state"])
        return torch.cat(parts, -1)

    def fold_moments(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Fold a batch's raw-state moments into the statistics (nothing without them)."""
        if isinstance(self.state_norm, RunningNorm):
            fold_moments(self.state_norm, mean, var, count)


def privileged_problem(has_entry: bool, critic_input: str, predict_privileged: float) -> ConfigError | None:
    """What is wrong with the privileged options for an observation with (``has_entry``) or
    without a ``privileged`` entry: an unknown ``critic_input``, or an option that reads the
    entry when there is none; ``None`` when nothing is."""
    if critic_input not in ("features", "privileged"):
        return ConfigError(
            f"unknown critic input {critic_input!r}; valid: features, privileged", "model.critic_input"
        )
    for key, on in (
        ("critic_input", critic_input == "privileged"),
        ("predict_privileged", predict_privileged > 0),
    ):
        if on and not has_entry:
            return ConfigError(
                f"{key} reads the observation's 'privileged' entry, which this env does not give "
                "(rlinf/FrankaInstructReach-v0 gives it with env.kwargs.privileged: true)",
                f"model.{key}",
            )
    return None


def _checked(encoder: VLAEncoder, critic_input: str, predict_privileged: float = 0.0) -> bool:
    """Raise :func:`privileged_problem`'s error, if any; whether the critic is privileged."""
    problem = privileged_problem(bool(encoder.privileged_dim), critic_input, predict_privileged)
    if problem is not None:
        raise problem
    return critic_input == "privileged"


def privileged_input(obs: Mapping[str, Tensor]) -> Tensor:
    """What a privileged critic reads: the (prepared) state, when there is one, and ``privileged``."""
    return torch.cat([obs["state"], obs["privileged"]], -1) if "state" in obs else obs["privileged"]


class VLAActorCritic(nn.Module):
    """A Gaussian policy and a value head over one shared :class:`VLAEncoder` (PPO, GRPO): the
    interface of :class:`~rlinf_algos.models.mlp.GaussianActorCritic`, over prepared dicts.

    ``critic_input="privileged"`` makes it an *asymmetric* actor-critic (Pinto et al., 2017):
    the value head reads the normalised state and the env's ``privileged`` entry (what a
    simulator knows and the policy must not see, such as the target's position) instead of the
    encoder's features. The policy still acts from the images, the state and the words; the
    encoder learns from the policy loss alone, and the advantages no longer carry the error of a
    value function that has to find the target in the image first. Only training reads
    ``privileged``: :meth:`predict` (evaluation, a real arm) does not need it.

    ``encoder_loss="auxiliary"`` (with ``predict_privileged``) trains the encoder with the
    auxiliary loss alone: the policy and value heads read its features detached, so perception is
    learnt by supervision and control by RL, and the policy gradient's noise never reaches the
    encoder.

    ``predict_privileged > 0`` adds an auxiliary loss (:meth:`auxiliary_loss`): an MLP head on
    the encoder's features predicts the ``privileged`` entry, so the encoder is taught directly to
    find what the simulator knows (the named target) instead of only through the returns; the
    policy and value heads read that prediction beside the features (a perception stage feeding
    control, computed from the images and words alone, so acting still needs no ``privileged``).
    """

    def __init__(
        self,
        obs_space: Mapping[str, Any],
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        log_std_init: float = 0.0,
        normalize_obs: bool = True,
        vision: Mapping[str, Any] | None = None,
        language: Mapping[str, Any] | None = None,
        lora: Mapping[str, Any] | None = None,
        critic_input: str = "features",
        predict_privileged: float = 0.0,
        encoder_loss: str = "all",
    ) -> None:
        super().__init__()
        self.encoder = VLAEncoder(obs_space, vision, language, lora, normalize_obs)
        self.act_dim = act_dim
        self.privileged_critic = _checked(self.encoder, critic_input, predict_privileged)
        self.aux_coef = float(predict_privileged)
        if encoder_loss not in ("all", "auxiliary"):
            raise ConfigError(
                f"unknown encoder_loss {encoder_loss!r}; valid: all, auxiliary", "model.encoder_loss"
            )
        if encoder_loss == "auxiliary" and self.aux_coef <= 0:
            raise ConfigError(
                "encoder_loss auxiliary trains the encoder with the auxiliary loss alone: set "
                "model.predict_privileged above 0",
                "model.encoder_loss",
            )
        self.encoder_detached = encoder_loss == "auxiliary"
        self.aux_head: nn.Module | None = None
        d = self.encoder.out_dim
        if self.aux_coef > 0:
            # an MLP, not a linear map: which keypoint is the target's depends on the words
            p = self.encoder.privileged_dim
            self.aux_head = mlp(d, hidden, p, activation, out_std=1.0)
            d += p  # the heads read the prediction too
            # the head predicts the entry standardised by these (identity until a warm start
            # measures them; they travel with the weights), so the heads read unit-scale inputs
            self.register_buffer("privileged_mean", torch.zeros(p))
            self.register_buffer("privileged_std", torch.ones(p))
        self._aux: Tensor | None = None
        self.actor_mean = mlp(d, hidden, act_dim, activation, out_std=0.01)
        self.actor_log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))
        critic_dim = self.encoder.state_dim + self.encoder.privileged_dim if self.privileged_critic else d
        self.critic = mlp(critic_dim, hidden, 1, activation, out_std=1.0)

    def _features(self, obs: Mapping[str, Tensor], aux: bool = False) -> Tensor:
        """What the heads read: the encoder's output, and with ``predict_privileged`` the
        prediction of the privileged entry (detached: only its own loss trains that head). With
        ``aux`` (a training forward) the auxiliary loss is kept for :meth:`auxiliary_loss`."""
        z = self.encoder(obs)
        if self.aux_head is None:
            return z
        pred = seq_forward(self.aux_head, z)
        if aux and torch.is_grad_enabled():
            self._aux = self.aux_coef * (pred - self.standardized_privileged(obs)).square().sum(-1).mean()
        return torch.cat([z.detach() if self.encoder_detached else z, pred.detach()], -1)

    def standardized_privileged(self, obs: Mapping[str, Tensor]) -> Tensor:
        """The observation's ``privileged`` entry as the auxiliary head predicts it (standardised by
        :meth:`set_privileged_scale`'s statistics)."""
        return (obs["privileged"] - self.privileged_mean) / self.privileged_std

    def predicted_privileged(self, obs: Mapping[str, Tensor]) -> Tensor:
        """The auxiliary head's prediction of the ``privileged`` entry, in the entry's own units."""
        pred = seq_forward(self.aux_head, self.encoder(obs))
        return pred * self.privileged_std + self.privileged_mean

    @torch.no_grad()
    def set_privileged_scale(self, mean: Tensor, std: Tensor, floor: float = 0.01) -> None:
        """Standardise the auxiliary head's target by ``mean`` and ``std`` (each entry's standard
        deviation at least ``floor``: a constant entry stays 0 instead of blowing up)."""
        self.privileged_mean.copy_(mean)
        self.privileged_std.copy_(std.clamp(min=floor))

    def _value(self, obs: Mapping[str, Tensor], z: Tensor | None) -> Tensor:
        if self.privileged_critic:
            return seq_forward(self.critic, privileged_input(obs)).squeeze(-1)
        return seq_forward(self.critic, self._features(obs) if z is None else z).squeeze(-1)

    def parameter_counts(self) -> dict[str, int]:
        from rlinf_algos.models import parameter_counts

        return parameter_counts(self)

    def value(self, obs: Mapping[str, Tensor]) -> Tensor:
        return self._value(obs, None)

    def action_mean(self, obs: Mapping[str, Tensor]) -> Tensor:
        return seq_forward(self.actor_mean, self._features(obs))

    def action_log_std(self) -> Tensor:
        return self.actor_log_std.detach()

    def evaluate(self, obs: Mapping[str, Tensor], actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = self._features(obs, aux=True)
        mean = seq_forward(self.actor_mean, z)
        log_std = self.actor_log_std.expand_as(mean)
        value = self._value(obs, z)
        return gaussian_log_prob(actions, mean, log_std), gaussian_entropy(log_std), value

    @torch.no_grad()
    def act(self, obs: Mapping[str, Tensor], deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        z = self._features(obs)
        mean = seq_forward(self.actor_mean, z)
        log_std = self.actor_log_std.expand_as(mean)
        action = mean if deterministic else mean + torch.randn_like(mean) * log_std.exp()
        return action, gaussian_log_prob(action, mean, log_std), self._value(obs, z)

    @torch.no_grad()
    def predict(self, raw_obs: Mapping[str, Any], deterministic: bool = True) -> Tensor:
        """Actions for raw observations (the value head is not run: ``privileged`` may be absent),
        on the host whatever the policy's device."""
        mean = self.action_mean(on_module(self, self.normalize(raw_obs)))
        if deterministic:
            return mean.cpu()
        return (mean + torch.randn_like(mean) * self.actor_log_std.exp()).cpu()

    def normalize(self, raw_obs: Mapping[str, Any]) -> dict[str, Tensor]:
        return self.encoder.prepare(raw_obs)

    def normalizer(self) -> Callable[[Mapping[str, Any], Mapping[str, Tensor]], None]:
        return self.encoder.prepare_into

    def auxiliary_loss(self) -> Tensor | None:
        """The auxiliary loss of the last :meth:`evaluate` with gradients (``predict_privileged``
        times the squared error of the privileged entry predicted from the encoder's features),
        once; ``None`` without one. PPO's learner adds it to the minibatch's loss."""
        aux, self._aux = self._aux, None
        return aux

    def policy_parameters(self) -> list[nn.Parameter]:
        """Every trainable parameter but the value head's."""
        skip = {id(p) for p in self.critic.parameters()}
        return [p for p in self.parameters() if p.requires_grad and id(p) not in skip]

    def fold_obs_moments(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        self.encoder.fold_moments(mean, var, count)


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """DrQ's augmentation on a batch of ``[B, H, W, C]`` images (uint8 or float): pad by ``pad``
    pixels (edge replicated) and crop back at a random offset per image."""
    b, h, w, _ = images.shape
    dev = generator.device if generator is not None else images.device  # offsets drawn where it draws
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator, device=dev) - pad
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator, device=dev) - pad
    rows = (dy[:, None] + torch.arange(h, device=dev)[None]).clamp_(0, h - 1)  # [B, H]: edge replicate
    cols = (dx[:, None] + torch.arange(w, device=dev)[None]).clamp_(0, w - 1)  # [B, W]
    return images[torch.arange(b, device=dev)[:, None, None], rows[:, :, None], cols[:, None, :]]


def shift_images(
    batch: Mapping[str, Tensor], keys: Sequence[str], pad: int, generator: torch.Generator | None = None
) -> dict[str, Tensor]:
    """``batch`` with each image of ``keys`` shifted by up to ``pad`` pixels (:func:`random_shift`:
    edge replicated, a fresh offset per image and per camera, drawn from ``generator`` in the
    batch's key order); the other entries as they are. ``pad`` 0: ``batch`` unchanged."""
    if pad <= 0:
        return dict(batch)
    return {k: random_shift(v, pad, generator) if k in keys else v for k, v in batch.items()}


class VLASquashedActor(nn.Module):
    """SAC's actor over a :class:`VLAEncoder` (the state not normalised, as SAC's MLPs): the
    encoder's features feed a :class:`~rlinf_algos.models.mlp.SquashedGaussianActor`. Takes
    prepared dicts (:meth:`normalize`)."""

    def __init__(self, obs_space: Mapping[str, Any], encoders: Mapping[str, Any], **actor: Any) -> None:
        super().__init__()
        self.encoder = VLAEncoder(obs_space, normalize_state=False, **encoders)
        self.head = SquashedGaussianActor(self.encoder.out_dim, **actor)
        self.act_dim = self.head.act_dim

    def parameter_counts(self) -> dict[str, int]:
        from rlinf_algos.models import parameter_counts

        return parameter_counts(self)

    def sample(
        self, obs: Mapping[str, Tensor], generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        return self.head.sample(self.encoder(obs), generator)

    @torch.no_grad()
    def predict(self, raw_obs: Mapping[str, Any], deterministic: bool = True) -> Tensor:
        return self.head.predict(self.encoder(on_module(self, self.encoder.prepare(raw_obs))), deterministic)

    def normalize(self, raw_obs: Mapping[str, Any]) -> dict[str, Tensor]:
        return self.encoder.prepare(raw_obs)


class VLATwinQ(nn.Module):
    """SAC's twin critics over an encoder of their own (:class:`VLAEncoder`), on prepared dicts.

    ``critic_input="privileged"``: no encoder; the critics read the state and the env's
    ``privileged`` entry (an asymmetric actor-critic, see :class:`VLAActorCritic`). The actor
    still acts from the images, the state and the words, and learns from the critics' gradient
    with respect to its action."""

    def __init__(
        self,
        obs_space: Mapping[str, Any],
        encoders: Mapping[str, Any],
        act_dim: int,
        critic_input: str = "features",
        **critic: Any,
    ) -> None:
        super().__init__()
        self.encoder = VLAEncoder(obs_space, normalize_state=False, **encoders)
        self.privileged = _checked(self.encoder, critic_input)
        if self.privileged:
            self.encoder = None  # type: ignore[assignment]
            keys = obs_space["keys"]
            width = int(keys["privileged"]["shape"][0]) + (
                int(keys["state"]["shape"][0]) if "state" in keys else 0
            )
            self.q = TwinQ(width, act_dim, **critic)
        else:
            self.q = TwinQ(self.encoder.out_dim, act_dim, **critic)

    def forward(self, obs: Mapping[str, Tensor], actions: Tensor) -> Tensor:
        if self.privileged:
            return self.q(privileged_input(obs), actions)
        return self.q(self.encoder(obs), actions)
