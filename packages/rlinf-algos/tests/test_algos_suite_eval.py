"""``rlinf eval --suite``'s thread policy (:func:`rlinf_algos.suite_eval.evaluate_suite`): torch
computes a policy's small forward passes on ``torch_threads`` threads (1 by default, as
``runner.torch_threads``), and the caller's setting comes back afterwards, also on an error."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlinf_algos import suite_eval


def test_the_suite_is_evaluated_on_torch_threads_and_the_callers_setting_returns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []

    def evaluate(*args: Any) -> dict[str, Any]:
        seen.append(torch.get_num_threads())
        if len(seen) == 3:
            raise RuntimeError("the simulator died")
        return {"tasks": []}

    monkeypatch.setattr(suite_eval, "_evaluate_suite", evaluate)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert suite_eval.evaluate_suite("random", "metaworld:MT10") == {"tasks": []}
        assert suite_eval.evaluate_suite("random", "metaworld:MT10", torch_threads=2) == {"tasks": []}
        with pytest.raises(RuntimeError, match="simulator died"):
            suite_eval.evaluate_suite("random", "metaworld:MT10", torch_threads=1)
        assert seen == [1, 2, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
