"""The reward of the verl-format example, with verl's signature: a user file a GRPO run names with
``reward.path`` (and ``reward.name: compute_score``, the default).

Partial credit, so a policy that has only learnt the format still gets a signal:

- 1.0: the number after the last ``####`` equals the ground truth;
- 0.1: a well-formed ``#### <number>`` with a wrong number;
- 0.0: no ``#### <number>`` at all.
"""

from __future__ import annotations

import re
from typing import Any

FORMAT_SCORE = 0.1
_ANSWER = re.compile(r"####\s*(-?[\d,]*\.?\d+)")


def extract_answer(solution_str: str) -> str | None:
    """The number after the last ``####`` (commas dropped), or ``None``."""
    found = _ANSWER.findall(solution_str)
    return found[-1].replace(",", "") if found else None


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None
) -> float:
    """Score one response: 1.0 right, 0.1 well-formed but wrong, 0.0 otherwise."""
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    try:
        right = float(answer) == float(str(ground_truth).replace(",", ""))
    except ValueError:
        right = answer == str(ground_truth).strip()
    return 1.0 if right else FORMAT_SCORE
