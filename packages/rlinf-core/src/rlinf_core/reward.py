"""The reward-function interface: what ``reward.name`` in a run YAML selects.

A reward function scores a batch of generated completions against their samples' reference
answers. Plugins add them with the ``rlinf_register_rewards`` hook (a package can ship rewards
without touching rlinf); rlinf-algos ships ``exact_match``, ``math`` and ``arith``. Torch-free on
purpose: the reward component must be placeable on CPU-only nodes, and the class is registered
(and ``reward.name`` validated) in processes that never build a network.

The contract, for a subclass::

    class Contains(RewardFunction):
        PLUGIN_NAME = "contains"

        def __init__(self, ignore_case: bool = False) -> None:   # reward.kwargs
            self.ignore_case = ignore_case

        def __call__(self, completions, answers, *, prompts=None, columns=None):
            fold = str.casefold if self.ignore_case else str
            return [float(fold(a) in fold(c)) for c, a in zip(completions, answers)]

- rlinf builds one instance per process that scores, as ``cls(**reward.kwargs)``;
- ``__call__`` gets equal-length lists and returns one finite number per completion, in order;
- raising, returning something else than a number, NaN or a list of the wrong length is reported
  by the caller with the sample it failed on (its ``file:row`` and the completion).

Files with verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` and
TRL-style callables ``(completions, **columns) -> list[float]`` need no class: ``reward.path``
loads them (see ``rlinf_algos.lm.rewards``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

__all__ = ["RewardFunction"]


class RewardFunction(ABC):
    """Base class of a registered reward function (``exact_match``, ``math``, ``arith``...).

    Class attributes:
        PLUGIN_NAME: the name ``reward.name`` selects (matched case-insensitively).
        description: one line for listings and error messages.

    The constructor takes the keyword arguments of ``reward.kwargs`` (none by default); an
    unknown keyword is reported against ``reward.kwargs`` with the accepted ones.
    """

    PLUGIN_NAME: ClassVar[str]
    description: ClassVar[str] = ""

    @abstractmethod
    def __call__(
        self,
        completions: Sequence[str],
        answers: Sequence[str],
        *,
        prompts: Sequence[str] | None = None,
        columns: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[float]:
        """Score a batch.

        Args:
            completions: the generated texts (the response only, without the prompt).
            answers: per completion, its sample's reference answer as text.
            prompts: per completion, the prompt text the policy saw (chat template applied).
            columns: per completion, the other columns of its data-set row (``data_source``,
                ``extra_info``, ``reward_model``...), as plain Python values.

        Returns:
            One finite float per completion, in order.

        Raises:
            Anything: the caller reports it with the sample being scored; raise
            :class:`~rlinf_core.errors.RlinfError` with a message that says what is wrong with
            the input (an answer that is not an integer, for example).
        """
