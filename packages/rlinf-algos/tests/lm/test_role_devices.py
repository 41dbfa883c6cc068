"""Every role computes where the run reports it does (issue 52, item 2).

``runner.scheduler: local`` runs every language-model role in the driver's process (the
in-process scheduler's worker objects); the
one device ``--dry-run`` and ``summary.json`` report for it (:func:`rlinf_algos.devices.local_devices`)
must be where the actor, the rollout engine and the reference hold their parameters. Before,
the policy was loaded without a device, the learner got no data-parallel context and the
reference stayed on the CPU: only the rollout followed ``runner.device``, so a GPU run trained
on the CPU while ``summary.json`` said ``cuda:0``. Here (no GPU) the check runs on the CPU; the
``gpu``-marked twin runs it on ``cuda``, where the old code fails it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from rlinf_algos.training import _record_devices, run_training

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = (  # beside conftest's tiny_lm
    "algorithm.kl_coef=0.01",  # starts the reference
    "runner.scheduler=local",
    "runner.torch_threads=1",
    "sft.steps=1",
    "task.eval_size=2",
    "runner.loggers=[csv]",
)


def device_mismatches(reported: Sequence[str], actual: Mapping[str, Sequence[str]]) -> list[str]:
    """One line per role whose parameters are not all on the one ``reported`` device of a
    local run (``reported``: ``summary.json``'s ``devices.roles.local``)."""
    (want,) = reported
    want_dev = torch.device(want)
    out = []
    for role, devs in actual.items():
        wrong = [d for d in devs if torch.device(d) != want_dev]
        if wrong:
            out.append(f"{role}: parameters on {', '.join(wrong)}, reported {want}")
    return out


def module_devices(obj: Any, depth: int = 4, seen: set[int] | None = None) -> list[str]:
    """The devices of the parameters of every torch module ``obj`` holds (attributes followed
    ``depth`` deep)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        return sorted({str(p.device) for p in obj.parameters()})
    found: set[str] = set()
    for value in getattr(obj, "__dict__", {}).values():
        if isinstance(value, (str, int, float, bytes, Path)) or value is None:
            continue
        found.update(module_devices(value, depth - 1, seen))
    return sorted(found)


def check_local_run(tiny_lm: Any, tmp_path: Path, device: str, algorithm: str) -> None:
    """A local run (the in-process scheduler: every role a worker object in this process) of
    one iteration: while it generates, every role's parameters are on the device reported."""
    data = tiny_lm.config(*TINY, f"runner.device={device}", f"algorithm.name={algorithm}")
    reported = _record_devices(tmp_path, {}, None, data)["devices"]["roles"]["local"]
    actual: dict[str, list[str]] = {}

    def on_generating(run: Any, k: int, report: Any) -> None:
        if k > 0 and not actual:  # an iteration (evaluations are k < 0): every role is up
            for role, group in run.groups.items():
                devs = module_devices(group.workers[0].body)
                if devs:
                    actual[role] = devs

    summary = run_training(data, run_dir=tmp_path / "run", callbacks={"on_generating": on_generating})
    assert summary["iterations"] == 1
    assert set(actual) == {"actor", "rollout", "reference"}, actual
    assert device_mismatches(reported, actual) == []


def test_the_mismatch_check_names_each_role_off_the_reported_device() -> None:
    actual = {"actor": ["cpu"], "rollout": ["cuda:0"], "reference": ["cpu", "cuda:0"]}
    assert device_mismatches(["cuda:0"], actual) == [
        "actor: parameters on cpu, reported cuda:0",
        "reference: parameters on cpu, reported cuda:0",
    ]
    assert device_mismatches(["cpu"], {"actor": ["cpu"]}) == []


@pytest.mark.parametrize("algorithm", ["grpo_lm", "ppo_lm"])
def test_a_local_lm_run_computes_on_the_device_it_reports(
    tmp_path: Path, algorithm: str, tiny_lm: Any
) -> None:
    check_local_run(tiny_lm, tmp_path, "auto", algorithm)  # auto: the CPU here


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("algorithm", ["grpo_lm", "ppo_lm"])
def test_a_local_lm_run_on_cuda_computes_on_the_gpu_it_reports(
    tmp_path: Path, algorithm: str, tiny_lm: Any
) -> None:
    check_local_run(tiny_lm, tmp_path, "cuda", algorithm)
