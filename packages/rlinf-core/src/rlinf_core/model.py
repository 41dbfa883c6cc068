"""The model-type interface: what ``model.type`` in a run YAML selects.

A model type declares the model of its ``model`` section (``config_model``: its own options,
validated with their YAML paths before anything starts) and turns a *spec* (a plain dict of sizes
and options, saved beside the weights and sent to every worker) into a fresh policy module.
Plugins add types with the ``rlinf_register_models`` hook; rlinf-algos ships ``mlp``, ``vla`` and
``hf``. Torch-free on purpose: the class is registered (and ``model.type`` validated) in processes
that never build a network.

The runtime uses a policy only through a small interface, never through its attributes:

- ``act(obs)`` / ``predict(raw_obs, deterministic)``: actions for a batch of observations;
- ``evaluate(obs, actions)``: log-probabilities, entropy and (actor-critics) values;
- ``state_dict()`` / ``load_state_dict(state)``: the weights that are broadcast and saved.

Each algorithm documents what more it asks of the policies it trains (PPO's rollout reads a
Gaussian head's mean and standard deviation through methods of the policy, for example).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel

__all__ = ["ModelType"]


class ModelType(ABC):
    """Base class of a model type (``mlp``, ``vla``, ``hf``...).

    Class attributes:
        PLUGIN_NAME: the name ``model.type`` selects.
        config_model: the pydantic model of the whole ``model`` section when this type is
            selected (``type`` included): a subclass of the base model of the algorithms it serves,
            adding the type's own options (rlinf-algos: ``rlinf_algos.models.config.ModelConfig``
            for the embodied algorithms, ``rlinf_algos.lm.config.LMModelConfig`` for the
            language-model ones). ``None``: no options of its own (the base validates the section).
            Unknown keys are errors naming their YAML path (``model.<key>``); an option of another
            type is named as such.
        roles: the networks it can build (``spec["cls"]`` values), for error messages.
    """

    PLUGIN_NAME: ClassVar[str]
    config_model: ClassVar[type[BaseModel] | None] = None
    roles: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def build(self, spec: Mapping[str, Any]) -> Any:
        """A fresh module for ``spec`` (its ``cls`` picks the network of this type); raise
        :class:`~rlinf_core.errors.RlinfError` naming what is wrong with the spec."""
