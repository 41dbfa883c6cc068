"""Damaged files and configs that cannot work, caught before anything starts: one line each
(which file or YAML path, what is wrong, what would be valid), never a traceback."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.config.validate import validate_run_config
from rlinf_core.errors import ConfigError, RlinfError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def problems(data: dict[str, Any], host: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        validate_run_config(data, host)
    return {p.path: p.message for p in err.value.problems}


def test_damaged_config_and_inventory_files_are_one_line_errors(tmp_path: Path) -> None:
    """The real console script: exit 2, one line naming the file, no traceback, no hang."""
    exe = shutil.which("rlinf", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the rlinf console script is not installed next to this interpreter")
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("runner: {device: caf\xe9}\n".encode("latin-1"))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.yaml"
    deep.write_text("env: " + "[" * 5000 + "]" * 5000 + "\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text((EXAMPLES / "quickstart.yaml").read_text() + "\nrunner:\n  total_steps: 5\n")
    cases = [
        ([str(bad), "--dry-run"], str(bad), "not UTF-8"),
        ([str(fifo), "--dry-run"], str(fifo), "not a regular file"),
        (["/dev/zero", "--dry-run"], "/dev/zero", "not a regular file"),
        ([str(deep), "--dry-run"], str(deep), "nested"),
        ([str(dup), "--dry-run"], str(dup), "key given twice"),
        (
            [str(EXAMPLES / "quickstart.yaml"), "--dry-run", "--inventory", str(bad)],
            str(bad),
            "not UTF-8",
        ),
    ]
    for args, where, what in cases:
        proc = subprocess.run(
            [exe, "train", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "RLINF_DEBUG": ""},
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(lines) == 1 and where in lines[0] and what in lines[0], (args, proc.stderr)


@pytest.mark.parametrize(
    ("name", "override", "path"),
    [
        ("quickstart", ("algorithm", "lr", float("inf")), "algorithm.lr"),
        ("quickstart", ("algorithm", "gamma", float("nan")), "algorithm.gamma"),
        ("quickstart", ("runner", "total_steps", True), "runner.total_steps"),
        ("quickstart", ("env", "num_envs", True), "env.num_envs"),
        ("quickstart", ("rollout", "max_staleness", False), "rollout.max_staleness"),
        ("sac_halfcheetah", ("algorithm", "tau", float("nan")), "algorithm.tau"),
        ("grpo_pendulum", ("algorithm", "group_size", True), "algorithm.group_size"),
        ("grpo_arith", ("algorithm", "lr", float("-inf")), "algorithm.lr"),
        ("grpo_arith", ("runner", "seed", True), "runner.seed"),
    ],
)
def test_numbers_are_strict_in_every_section(
    name: str, override: tuple[str, str, Any], path: str, host: Any
) -> None:
    data = example(name)
    section, key, value = override
    data[section][key] = value
    message = problems(data, host)[path]
    assert "not a boolean" in message or "finite number" in message


@pytest.mark.parametrize(
    ("name", "section", "key", "value", "path"),
    [
        ("quickstart", "env", "num_envs", 1_000_000_000, "env.num_envs"),
        ("quickstart", "model", "hidden_sizes", [10_000_000, 10_000_000], "model.hidden_sizes"),
        ("quickstart", "algorithm", "rollout_steps", 10**12, "algorithm.rollout_steps"),
        ("sac_halfcheetah", "algorithm", "buffer_size", 10**15, "algorithm.buffer_size"),
    ],
)
def test_sizes_that_cannot_fit_in_memory_are_refused_up_front(
    name: str, section: str, key: str, value: Any, path: str, host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = example(name)
    data.setdefault(section, {})[key] = value
    message = problems(data, host)[path]
    assert "would need at least" in message and "of memory of this machine" in message
    assert "iB" in message  # the estimate, in binary units
    monkeypatch.setenv("RLINF_SKIP_MEMORY_CHECK", "1")
    validate_run_config(data, host)


def test_env_kwargs_are_checked_before_anything_starts(host: Any) -> None:
    data = example("quickstart")
    data["env"]["kwargs"] = {"x": 1}
    message = problems(data, host)["env.kwargs"]
    assert "unexpected keyword argument 'x'" in message and "\n" not in message
    data["env"]["kwargs"] = {"reset_noise_scale": 0.02}
    validate_run_config(data, host)


def test_env_kwargs_typo_gets_a_did_you_mean(host: Any) -> None:
    pytest.importorskip("rlinf_hw_franka", reason="the Franka env ids come with rlinf-hw-franka")
    data = example("franka_reach_sac")
    data["env"]["kwargs"] = {"backnd": "mujoco"}
    message = problems(data, host)["env.kwargs.backnd"]
    assert "did you mean 'backend'?" in message


def test_unknown_or_missing_components_are_errors_before_ray_starts(host: Any) -> None:
    data = example("quickstart")
    data["cluster"]["component_placement"]["rolout,foo"] = {"node_group": "node", "placement": 0}
    message = problems(data, host)["cluster.component_placement.rolout,foo"]
    assert "'rolout', 'foo'" in message and "env, rollout, actor" in message
    for missing in (None, {}):
        data = example("quickstart")
        if missing is None:
            del data["cluster"]["component_placement"]
        else:
            data["cluster"]["component_placement"] = missing
        message = problems(data, host)["cluster.component_placement"]
        assert message.startswith("missing") and "env, rollout, actor" in message


def test_rlinf_cluster_keys_load_with_one_warning_and_typos_do_not(
    host: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, invoke: Any
) -> None:
    data = example("quickstart")
    data["cluster"].update(
        profiling={"backend": "torch"}, tracer={"enable": True}, net_emulation={}, auto_scheduler=False
    )
    path = tmp_path / "rlinf.yaml"
    path.write_text(yaml.safe_dump(data))
    with caplog.at_level(logging.WARNING, logger="rlinf.config"):
        res = invoke(host, "train", str(path), "--dry-run")
    assert res.exit_code == 0, res.output
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "rlinf.config"]
    for key in ("profiling", "tracer", "net_emulation", "auto_scheduler"):
        assert f"cluster.{key}" in warning
    data["cluster"]["num_node"] = 1
    message = problems(data, host)["cluster.num_node"]
    assert "did you mean 'num_nodes'?" in message


def test_eval_of_a_damaged_policy_is_one_line(host: Any, tmp_path: Path, invoke: Any) -> None:
    import torch

    run = tmp_path / "run"
    run.mkdir()
    good = tmp_path / "good.pt"
    torch.save({"spec": {"kind": "x"}, "state_dict": {"w": torch.zeros(1000)}}, good)
    blob = good.read_bytes()
    for content in (blob[: len(blob) // 2], b"", b"garbage", None):
        if content is None:
            torch.save({"not": "a policy"}, run / "policy.pt")
        else:
            (run / "policy.pt").write_bytes(content)
        res = invoke(host, "eval", str(run))
        assert isinstance(res.exception, RlinfError), res.exception
        text = str(res.exception)
        assert "\n" not in text and str(run / "policy.pt") in text and "Traceback" not in res.output


def test_plot_of_a_damaged_metrics_file_is_one_line(host: Any, tmp_path: Path, invoke: Any) -> None:
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.csv"
    for content, what in (
        (b"wall_s,episode_return_mean\n1,2\n", "no `step` column"),
        (b"step,episode_return_mean\n1,\xff\n", "not UTF-8"),
    ):
        metrics.write_bytes(content)
        res = invoke(host, "plot", str(run))
        assert isinstance(res.exception, RlinfError), res.exception
        assert what in str(res.exception) and str(metrics) in str(res.exception)
    metrics.unlink()
    os.mkfifo(metrics)
    res = invoke(host, "plot", str(run))
    assert isinstance(res.exception, RlinfError) and "not a regular file" in str(res.exception)
    metrics.unlink()
    metrics.write_text("step,loss\n1,0.5\n2,0.25\n")  # no episode return (grpo_lm): the other panels
    res = invoke(host, "plot", str(run))
    assert res.exit_code == 0, res.output
    assert res.output.strip().endswith("metrics.png")
