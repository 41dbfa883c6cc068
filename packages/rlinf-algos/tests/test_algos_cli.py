"""``rlinf train|eval|plot``: configuration errors (paths, exit 2, no traceback), the in-process
path of ``rlinf train`` (``runner.scheduler=local``) followed by ``eval`` and ``plot``, and every
example config validating (the cloud/edge one planned against its inventory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlinf_algos.config.validate import validate_run_config
from rlinf_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
TRAIN_EXAMPLES = [
    "quickstart",
    "ppo_halfcheetah",
    "sac_halfcheetah",
    "ppo_hybrid",
    "ppo_cloud_edge",
    "grpo_pendulum",
]


def quickstart() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())


def problems(data: dict[str, Any], host: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        validate_run_config(data, host)
    return {p.path: p.message for p in err.value.problems}


@pytest.mark.parametrize("name", TRAIN_EXAMPLES)
def test_every_example_validates(name: str, host: Any) -> None:
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    algo_cls, cfg, scheduler = validate_run_config(data, host)
    assert cfg.name == algo_cls.PLUGIN_NAME and scheduler == "ray"


def test_cloud_edge_example_plans_as_seed_000(host: Any, invoke: Any) -> None:
    res = invoke(
        host,
        "cluster",
        "plan",
        str(EXAMPLES / "ppo_cloud_edge.yaml"),
        "--inventory",
        str(EXAMPLES / "inventory_cloud_edge.yaml"),
        "--json",
    )
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)["components"]
    (actor,) = plan["actor"]
    assert actor["node_rank"] == 0 and actor["visible_accelerators"] == [0, 1, 2, 3]
    assert [p["node_rank"] for p in plan["rollout"]] == [1]
    assert [p["node_rank"] for p in plan["env"]] == [1]


def test_every_problem_of_every_section_is_reported_with_its_path(host: Any) -> None:
    data = quickstart()
    data["algorithm"]["clip_low"] = 1.5
    data["env"]["num_envs"] = 0
    data["runner"].pop("total_steps")
    data["rollout"]["pipeline_stagez"] = 2
    data["rollout"]["max_chunks_ahead"] = -1
    data["model"]["activation"] = "sigmoid"
    data["cluster"]["component_placement"].pop("rollout")
    data["cluster"]["num_nodes"] = 0
    data["extra"] = {}
    got = problems(data, host)
    assert "algorithm.clip_low" in got and "(got 1.5)" in got["algorithm.clip_low"]
    assert "greater than or equal to 1" in got["env.num_envs"]
    assert "runner.total_steps" in got
    assert "unknown key" in got["rollout.pipeline_stagez"]
    assert "greater than or equal to 0" in got["rollout.max_chunks_ahead"]
    assert "'tanh'" in got["model.activation"]
    assert "cluster.num_nodes" in got
    assert "extra" in got and "unknown section" in got["extra"]


def test_names_and_fit_errors(host: Any) -> None:
    data = quickstart()
    data["algorithm"]["name"] = "ppo2"
    assert "registered" in problems(data, host)["algorithm.name"]
    data = quickstart()
    data["runner"]["scheduler"] = "slurm"
    assert "available: ray, local" in problems(data, host)["runner.scheduler"]
    data = quickstart()
    data["rollout"]["pipeline_stages"] = 3
    assert "do not divide env.num_envs=8" in problems(data, host)["rollout.pipeline_stages"]
    data = quickstart()  # PPO's learner may be a group of processes; SAC's may not
    data["cluster"]["component_placement"]["actor"]["placement"] = "0:0-1"
    assert validate_run_config(data, host)[0].PLUGIN_NAME == "ppo"
    data["algorithm"] = {"name": "sac"}
    got = problems(data, host)
    assert "one process" in got["cluster.component_placement.actor.placement"]
    data = quickstart()
    del data["cluster"]
    assert "runner.scheduler: local" in problems(data, host)["cluster"]
    data = quickstart()
    del data["cluster"]
    data["runner"]["scheduler"] = "local"
    assert validate_run_config(data, host)[2] == "local"


def test_cli_config_error_exits_2_without_a_traceback(tmp_path: Path) -> None:
    """The real console script, as a user runs it."""
    exe = shutil.which("rlinf", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the rlinf console script is not installed next to this interpreter")
    bad = quickstart()
    bad["env"]["id"] = "HalfCheetah-v4000"
    bad["algorithm"]["gamma"] = 2
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        [exe, "train", str(path), "runner.total_steps=-5", "rollout.max_staleness=x"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RLINF_DEBUG": ""},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    for path_ in ("algorithm.gamma", "runner.total_steps", "rollout.max_staleness", "env.id"):
        assert path_ in proc.stderr
    assert not (tmp_path / "runs").exists()
    dry = subprocess.run(
        [exe, "train", str(path), "--dry-run"], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert dry.returncode == 2 and "algorithm.gamma" in dry.stderr and "Traceback" not in dry.stderr
    assert not (tmp_path / "runs").exists()


def test_train_in_process_then_eval_and_plot(host: Any, tmp_path: Path, invoke: Any) -> None:
    run_dir = tmp_path / "run"
    res = invoke(
        host,
        "train",
        str(EXAMPLES / "quickstart.yaml"),
        "runner.scheduler=local",
        "runner.total_steps=2048",
        "runner.log_interval=1024",
        "algorithm.rollout_steps=128",
        "--run-dir",
        str(run_dir),
    )
    assert res.exit_code == 0, (res.output, res.exception)
    assert "done: 2048 env steps" in res.output
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["runner"]["total_steps"] == 2048 and resolved["algorithm"]["clip_low"] == 0.2
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] == 2048

    res = invoke(host, "eval", str(run_dir), "--episodes", "3", "--json")
    assert res.exit_code == 0, res.output
    ev = json.loads(res.output)
    assert ev["episodes"] == 3 and len(ev["returns"]) == 3 and ev["mean"] > 0
    res = invoke(host, "eval", str(run_dir), "-n", "2")
    assert "2 episodes: return" in res.output and "+-" in res.output

    res = invoke(host, "plot", str(run_dir))
    assert res.exit_code == 0, res.output
    pngs = sorted(p.name for p in (run_dir / "plots").glob("*.png"))
    assert pngs == ["metrics.png", "return.png"]
    assert (run_dir / "plots" / "return.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_and_plot_explain_a_wrong_directory(host: Any, tmp_path: Path, invoke: Any) -> None:
    res = invoke(host, "eval", str(tmp_path))
    assert "no saved policy" in str(res.exception)
    res = invoke(host, "plot", str(tmp_path))
    assert "no metrics.csv" in str(res.exception)


def test_resume_keeps_the_env_and_model_of_the_run(host: Any, tmp_path: Path, invoke: Any) -> None:
    run_dir = tmp_path / "run"
    base = [
        "train",
        str(EXAMPLES / "quickstart.yaml"),
        "runner.scheduler=local",
        "runner.checkpoint_interval=512",
        "algorithm.rollout_steps=64",
    ]
    res = invoke(host, *base, "runner.total_steps=1024", "--run-dir", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    res = invoke(host, *base, "runner.total_steps=2048", "env.num_envs=4", "--resume", str(run_dir))
    assert isinstance(res.exception, ConfigError)
    assert "env.num_envs: is 4, but the run being resumed used 8" in str(res.exception)
    res = invoke(host, *base, "runner.total_steps=2048", "--resume", str(run_dir))
    assert res.exit_code == 0, (res.output, res.exception)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_env_steps"] == 2048 and not summary["interrupted"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["runner"]["total_steps"] == 2048


def test_commands_and_runner_import_light() -> None:
    """`rlinf --help` must not pay for torch, ray, mujoco, tensorboardX or matplotlib."""
    code = (
        "import sys, click, rlinf_algos.plugin as p; p.rlinf_register_commands(click.Group()); "
        "import rlinf_algos.training, rlinf_algos.cli, rlinf_algos.plot; "
        "print([m for m in ('torch', 'ray', 'gymnasium', 'mujoco', 'tensorboardX', 'matplotlib') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


def test_dry_run_prints_the_resolved_config_and_the_plan_and_starts_nothing(
    host: Any, tmp_path: Path, invoke: Any
) -> None:
    cloud = EXAMPLES / "ppo_cloud_edge.yaml"
    res = invoke(
        host, "train", str(cloud), "--dry-run", "--inventory", str(EXAMPLES / "inventory_cloud_edge.yaml")
    )
    assert res.exit_code == 0, (res.output, res.exception)
    resolved = yaml.safe_load(res.output.split("# scheduler:")[0])
    assert resolved["algorithm"]["gae_lambda"] == 0.95  # defaults filled in
    assert resolved["runner"]["loggers"] == ["csv", "tensorboard"]
    assert "# placement plan" in res.output and "actor" in res.output and "nothing was started" in res.output
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "runner.scheduler=local", "--dry-run")
    assert res.exit_code == 0 and "placement: none" in res.output, res.output
    # a configuration problem: a ConfigError with its YAML path (the CLI host prints it and exits
    # 2, test_cli_config_error_exits_2_without_a_traceback), no run directory
    run_dir = tmp_path / "never"
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "runner.total_steps=-5", "--dry-run",
                 "--run-dir", str(run_dir))  # fmt: skip
    assert isinstance(res.exception, ConfigError) and "runner.total_steps" in str(res.exception)
    assert not run_dir.exists()
    res = invoke(host, "train", str(EXAMPLES / "quickstart.yaml"), "--gpus-per-node", "2")
    assert res.exit_code == 2 and "--dry-run" in res.output


def test_a_sigterm_delivered_twice_is_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``pkill -f`` matches ``uv run`` and rlinf, and uv forwards: one request arrives twice. The
    second within the window is ignored (the checkpoint is still written); one later kills."""
    import signal

    from rlinf_algos import cli_options as cli

    kills: list[int] = []
    monkeypatch.setattr(cli.os, "kill", lambda pid, sig: kills.append(sig))
    clock = [100.0]
    monkeypatch.setattr(cli.time, "monotonic", lambda: clock[0])
    stop = cli.StopOnTerm()
    try:
        with pytest.raises(KeyboardInterrupt):
            stop._handle(signal.SIGTERM, None)
        clock[0] += 0.5
        stop._handle(signal.SIGTERM, None)  # the forwarded copy: nothing happens
        assert stop.received and kills == []
        clock[0] += 5.0
        stop._handle(signal.SIGTERM, None)  # asked again, later: kill at once
        assert kills == [signal.SIGTERM]
    finally:
        stop.restore()
