"""The rollout-engine interface: what ``rollout.engine`` in a language-model run YAML selects.

A rollout engine holds a versioned copy of the policy and samples responses from it: the rollout
component of ``grpo_lm``/``ppo_lm`` builds one per process and calls two methods. Plugins add
engines with the ``rlinf_register_rollout_engines`` hook; rlinf-algos ships ``hf`` (Hugging Face
``generate`` with a KV cache, left padding, temperature and top-p, a stop on the stop tokens). An engine for GPU
machines (vLLM, SGLang) implements the same two calls over its own server or library. Torch-free
on purpose: the class is registered, and ``rollout.engine`` validated, in processes that never
build a model; an engine imports its library when it is constructed.

The contract, for a subclass::

    class MyEngine(RolloutEngine):
        PLUGIN_NAME = "mine"

        def __init__(self, model_config, *, gpu_memory: float = 0.9, **run):  # rollout.options
            super().__init__(model_config, **run)  # temperature, top_p, seed, pad_id, max_len
            import vllm                            # the library, only when built
            ...                                    # load model_config.path

        def set_weights(self, state_dict, version): ...
        def generate(self, prompts, max_new_tokens, stop_ids, temperature=None): ...

- ``generate`` takes token ids and returns token ids: per prompt, the generated ids only, the
  stop token included when one was produced, at most ``max_new_tokens`` (fewer where the
  model's context ends); ``temperature`` overrides the engine's (``0`` is greedy decoding);
- ``set_weights`` loads what the actor publishes: every weight, or the LoRA adapter's tensors
  alone (peft's names) when the model has an adapter; ``version`` then is the version given;
- ``tokens`` and ``seconds`` count what ``generate`` produced and how long it took (throughput
  metrics), ``version`` is ``-1`` before the first weights;
- optionally ``generate_with_log_probs(prompts, max_new_tokens, stop_ids, temperature=None)``
  returns ``(responses, log_probs)``: per response the log-prob of each of its ids under the
  distribution it was sampled from (``log softmax(logits / temperature)``). An asynchronous run
  (``rollout.max_staleness > 0``) trains on these as the behaviour policy's; an engine without it
  gets them from a second forward of the ``hf`` model it exposes as ``model``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

__all__ = ["RolloutEngine"]


class RolloutEngine(ABC):
    """Base class of a registered rollout engine (``hf``...).

    Class attributes:
        PLUGIN_NAME: the name ``rollout.engine`` selects.
        description: one line for listings and error messages.

    Args:
        model_config: the validated ``model`` section (``path`` is the model folder to load,
            ``dtype``, ``trust_remote_code``, ``lora``...).
        temperature, top_p: sampling (``algorithm.temperature`` / ``top_p``).
        seed: of the sampling generator (each rollout process gets its own).
        pad_id: the tokenizer's pad token.
        max_len: the longest sequence, prompt and response (``model.max_seq_len``; ``None``:
            the model's context).

    ``rollout.options`` go to the constructor as further keyword arguments: a subclass names
    the options it takes as its own parameters and passes the six above on to this one. The
    base takes no options, so an option no parameter names is refused at ``rollout.options``
    before the run starts (rlinf inspects the signature; it does not build the engine to check).

    Attributes:
        version: the ``version`` of the weights :meth:`generate` samples from, as last given
            to :meth:`set_weights`; ``-1`` before the first weights.
        tokens: how many tokens :meth:`generate` has produced in all (throughput metrics).
        seconds: how long :meth:`generate` has taken in all, in seconds of wall time.
    """

    PLUGIN_NAME: ClassVar[str]
    description: ClassVar[str] = ""

    def __init__(
        self,
        model_config: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        pad_id: int = 0,
        max_len: int | None = None,
    ) -> None:
        self.model_config = model_config
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.pad_id, self.max_len = pad_id, max_len
        self.version = -1
        self.tokens = 0
        self.seconds = 0.0

    @abstractmethod
    def set_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Load the actor's published weights and make them the ones :meth:`generate` samples
        from.

        Args:
            state_dict: tensors by parameter name, as the actor publishes them: every weight of
                the model (a tied weight once), or, when the ``model`` section has ``lora``, the
                adapter's tensors alone (peft's names; the base weights never change), on the
                CPU: copy them where the engine needs them.
            version: the actor's update count these weights come from (``0``: the warm-started
                policy, then one more per update); store it in :attr:`version`, which is what
                ``generate_batch`` reports and what the rollout compares against the newest
                publish to decide whether to reload.
        """

    @abstractmethod
    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        stop_ids: Sequence[int],
        temperature: float | None = None,
    ) -> list[list[int]]:
        """Sample one response per prompt with the current weights.

        Args:
            prompts: token ids of each prompt (chat template applied, no padding).
            max_new_tokens: the most tokens to generate per prompt (fewer where the sequence
                would pass ``max_len``).
            stop_ids: token ids that end a response (EOS, the task's end markers).
            temperature: overrides the engine's for this call; ``0`` is greedy decoding.

        Returns:
            Per prompt, in order, the generated token ids only (without the prompt): the stop
            token included when one was produced, nothing after it. Add their count to
            :attr:`tokens` and the call's wall time to :attr:`seconds`.
        """

    def generate_batch(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`generate` over a dict (``prompts``, ``max_new_tokens``, ``stop_ids``, optional
        ``temperature``), the form a channel carries; returns ``responses`` and ``version``."""
        responses = self.generate(
            request["prompts"],
            int(request["max_new_tokens"]),
            request["stop_ids"],
            request.get("temperature"),
        )
        return {"responses": responses, "version": self.version}
