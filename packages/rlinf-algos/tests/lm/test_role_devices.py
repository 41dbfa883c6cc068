"""Every role computes where the run reports it does (issue 52, item 2).

``runner.scheduler: local`` runs every language-model component in the driver's process; the
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

from rlinf_algos.lm.config import load_lm_sections
from rlinf_algos.lm.local import LocalComponents
from rlinf_algos.lm.tasks import make_task
from rlinf_algos.lm.trainer import policy_to_train, resolve_model
from rlinf_algos.training import _record_devices
from rlinf_core.config import apply_overrides, load_yaml

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"

TINY = [
    "model.init.hidden_size=16",
    "model.init.num_layers=1",
    "model.init.num_heads=2",
    "algorithm.kl_coef=0.01",  # starts the reference
    "algorithm.prompts_per_iter=2",
    "algorithm.group_size=2",
    "runner.scheduler=local",
    "runner.torch_threads=1",
]


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


def local_components(tmp_path: Path, device: str, algorithm: str) -> tuple[LocalComponents, dict[str, Any]]:
    data = apply_overrides(
        load_yaml(EXAMPLES / "grpo_arith.yaml"),
        [*TINY, f"runner.device={device}", f"algorithm.name={algorithm}"],
    )
    run = resolve_model(load_lm_sections(data), tmp_path / "run", lambda _m: None)
    model, tok = policy_to_train(run)
    return LocalComponents(run, tok, model, make_task(run, tok)), data


def check_local_run(tmp_path: Path, device: str, algorithm: str) -> None:
    comps, data = local_components(tmp_path, device, algorithm)
    reported = _record_devices(tmp_path, {}, None, data)["devices"]["roles"]["local"]
    actual = comps.devices()
    roles = {"actor", "rollout", "reference", *(["critic"] if algorithm == "ppo_lm" else [])}
    assert set(actual) == roles, actual
    assert device_mismatches(reported, actual) == []
    # and it computes there: one iteration, every role taking part
    out = comps.iterate(comps.task.sampler(0).sample(2), 2)
    assert out["sequences"] == 4 and all(torch.isfinite(torch.as_tensor(out["stats"]["loss"])).reshape(-1))
    assert device_mismatches(reported, comps.devices()) == []


def test_the_mismatch_check_names_each_role_off_the_reported_device() -> None:
    actual = {"actor": ["cpu"], "rollout": ["cuda:0"], "reference": ["cpu", "cuda:0"]}
    assert device_mismatches(["cuda:0"], actual) == [
        "actor: parameters on cpu, reported cuda:0",
        "reference: parameters on cpu, reported cuda:0",
    ]
    assert device_mismatches(["cpu"], {"actor": ["cpu"]}) == []


@pytest.mark.parametrize("algorithm", ["grpo_lm", "ppo_lm"])
def test_a_local_lm_run_computes_on_the_device_it_reports(tmp_path: Path, algorithm: str) -> None:
    check_local_run(tmp_path, "auto", algorithm)  # auto: the CPU here


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("algorithm", ["grpo_lm", "ppo_lm"])
def test_a_local_lm_run_on_cuda_computes_on_the_gpu_it_reports(tmp_path: Path, algorithm: str) -> None:
    check_local_run(tmp_path, "cuda", algorithm)
