"""The Python API (``rlinf_algos.train``), ``rlinf train --print-config`` and ``--multirun``, on
configs composed from files written here (defaults lists, interpolation), trained for real in
process (``runner.scheduler: local``, Pendulum-v1, a few hundred env steps)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

import rlinf_algos
from rlinf_algos.config import EnvConfig, ModelConfig, RunnerConfig
from rlinf_algos.ppo import PPOConfig
from rlinf_algos.train_api import SweepRun, multirun_table
from rlinf_core.errors import ConfigError, RlinfError

FILES = {
    "train.yaml": """\
defaults:
  - env/pendulum@env
  - model/small@model
  - _self_
algorithm:
  name: ppo
  rollout_steps: 64
  minibatch_size: 64
  update_epochs: 1
env:
  num_envs: 2
runner:
  scheduler: local
  total_steps: ???
  log_interval: ${runner.total_steps}
  seed: 0
  loggers: [csv]
""",
    "env/pendulum.yaml": "id: Pendulum-v1\nnum_envs: 4\n",
    "model/small.yaml": "hidden_sizes: [16, 16]\n",
}
"""A tiny run: 2 envs x 64 steps per update; `runner.total_steps` must be given."""

TOTAL = "runner.total_steps=512"


def write_config(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root / "train.yaml"


def test_print_config_round_trip(host: Any, invoke: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path / "conf")
    res = invoke(host, "train", str(config), "--print-config", TOTAL, "runner.seed=5")
    assert res.exit_code == 0, (res.output, res.exception)
    printed = yaml.safe_load(res.output)
    assert printed["env"] == {"id": "Pendulum-v1", "num_envs": 2}
    assert printed["model"] == {"hidden_sizes": [16, 16]}
    assert printed["runner"]["total_steps"] == 512 and printed["runner"]["seed"] == 5
    assert "defaults" not in printed
    out = tmp_path / "printed.yaml"
    out.write_text(res.output, encoding="utf-8")
    again = invoke(host, "train", str(out), "--print-config")
    assert again.exit_code == 0 and again.output == res.output
    dry = invoke(host, "train", str(out), "--dry-run")
    assert dry.exit_code == 0, (dry.output, dry.exception)
    # the printed config trains as it is
    summary = rlinf_algos.train(out, run_dir=tmp_path / "run")
    assert summary["total_env_steps"] == 512
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["runner"]["seed"] == 5


def test_composition_errors_exit_2_with_one_line(rlinf_script: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    proc = rlinf_script("train", str(config), "--print-config", timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{config}: runner.total_steps: a value is required (??? in the config); give it on the command "
        "line: runner.total_steps=VALUE"
    )
    proc = rlinf_script("train", str(config), TOTAL, "env.id=${env.name}", timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "override 'env.id=${env.name}': env.id: cannot resolve '${env.name}': Interpolation key "
        "'env.name' not found; interpolations name keys from the top: ${section.key}"
    )
    proc = rlinf_script("train", str(config), "model=huge", TOTAL, "--dry-run", timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{config}: override 'model=huge' (for defaults entry 'model/small@model'): no file model/huge.yaml "
        f"in {tmp_path}; model/ has: small"
    )


def test_multirun_three_seeds_prints_one_table(host: Any, invoke: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path / "conf")
    sweep = tmp_path / "sweep"
    res = invoke(
        host, "train", str(config), "-m", "runner.seed=0,1,2", TOTAL, "--run-dir", str(sweep), "--quiet"
    )
    assert res.exit_code == 0, (res.output, res.exception)
    dirs = [sweep / f"{i}_seed={i}" for i in range(3)]
    returns = []
    for i, run_dir in enumerate(dirs):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["total_env_steps"] == 512
        assert yaml.safe_load((run_dir / "config.yaml").read_text())["runner"]["seed"] == i
        returns.append(summary["final_return_mean"])
    table = res.output[res.output.index("metric") :]
    header = table.splitlines()[0].split()
    assert header == ["metric", "run", "0", "run", "1", "run", "2", "mean", "std"]
    row = next(line for line in table.splitlines() if line.startswith("final_return_mean")).split()
    mean = sum(returns) / 3
    std = math.sqrt(sum((r - mean) ** 2 for r in returns) / 2)
    assert float(row[-2]) == pytest.approx(mean, abs=1e-3) and float(row[-1]) == pytest.approx(std, abs=1e-3)
    assert "run 1: runner.seed=1" in res.output
    listed = json.loads((sweep / "multirun.json").read_text())["runs"]
    assert [r["status"] for r in listed] == ["ok", "ok", "ok"]
    assert listed[2]["overrides"] == ["runner.seed=2", TOTAL]


def test_multirun_names_the_failed_run_and_checks_every_combination_first(
    host: Any, invoke: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "conf")
    sweep = tmp_path / "sweep"
    bad = invoke(host, "train", str(config), "--multirun", "runner.seed=0,x", TOTAL, "--run-dir", str(sweep))
    assert isinstance(bad.exception, ConfigError) and not sweep.exists()  # nothing ran
    assert "(run 1: runner.seed=x)" in str(bad.exception) and "runner.seed" in str(bad.exception)

    taken = sweep / "0_seed=0"
    taken.mkdir(parents=True)
    (taken / "config.yaml").write_text("{}\n")
    (taken / "summary.json").write_text("{}\n")  # a run is there already: run 0 fails at its start
    res = invoke(
        host, "train", str(config), "--multirun", "runner.seed=0,1", TOTAL, "--run-dir", str(sweep), "--quiet"
    )
    assert res.exit_code == 1
    assert f"run 0 (runner.seed=0, {taken}) failed: {taken} holds a run" in res.output
    assert json.loads((sweep / "1_seed=1" / "summary.json").read_text())["total_env_steps"] == 512
    assert "run 1: runner.seed=1" in res.output  # the table has the run that finished
    listed = json.loads((sweep / "multirun.json").read_text())["runs"]
    assert listed[0]["status"].startswith("failed: ") and listed[1]["status"] == "ok"


def test_train_takes_a_path_a_dict_and_models(tmp_path: Path) -> None:
    config = write_config(tmp_path / "conf")
    by_path = rlinf_algos.train(config, run_dir=tmp_path / "a", overrides=[TOTAL, "runner.seed=3"])
    assert by_path["total_env_steps"] == 512 and by_path["run_dir"] == str(tmp_path / "a")
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["total_env_steps"] == 512

    data = yaml.safe_load(FILES["train.yaml"])
    data["runner"]["total_steps"] = 128
    by_dict = rlinf_algos.train(data, tmp_path / "b", config_path=config)  # defaults next to config
    assert by_dict["total_env_steps"] == 128

    models = {
        "algorithm": PPOConfig(rollout_steps=64, minibatch_size=64, update_epochs=1),
        "env": EnvConfig(id="Pendulum-v1", num_envs=2),
        "model": ModelConfig(hidden_sizes=[16]),
        "runner": RunnerConfig(scheduler="local", total_steps=128, log_interval=128, loggers=["csv"]),
    }
    by_models = rlinf_algos.train(models, tmp_path / "c", ["runner.seed=1"])
    assert by_models["total_env_steps"] == 128
    assert yaml.safe_load((tmp_path / "c" / "config.yaml").read_text())["model"]["hidden_sizes"] == [16]


def test_train_raises_rlinf_errors_not_system_exit(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with pytest.raises(ConfigError, match=r"runner\.total_steps: Input should be greater than or equal to 1"):
        rlinf_algos.train(config, tmp_path / "r", ["runner.total_steps=-5"])
    with pytest.raises(ConfigError, match=r"runner\.seed is already set"):
        rlinf_algos.train(config, tmp_path / "r", [TOTAL, "+runner.seed=2"])
    with pytest.raises(ConfigError, match="a list of strings"):
        rlinf_algos.train(config, tmp_path / "r", TOTAL)
    with pytest.raises(ConfigError, match="config must be a YAML path, a mapping or a pydantic model"):
        rlinf_algos.train(42)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary.json").write_text("{}")
    with pytest.raises(RlinfError, match="holds a run"):
        rlinf_algos.train(config, tmp_path / "r", [TOTAL])
    assert not (tmp_path / "runs").exists()


def test_multirun_table_mean_and_spread(tmp_path: Path) -> None:
    runs = [SweepRun(i, (f"runner.seed={i}",), (f"runner.seed={i}",), tmp_path / str(i)) for i in range(3)]
    table = multirun_table(
        [
            (runs[0], {"final_return_mean": 1.0, "wall_s": 2.0, "algorithm": "ppo", "interrupted": False}),
            (runs[1], None),  # failed: no column
            (runs[2], {"final_return_mean": 3.0, "wall_s": 4.0, "success_rate": None}),
        ]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "run", "0", "run", "2", "mean", "std"]
    assert lines[1].split() == ["final_return_mean", "1", "3", "2", "1.414"]
    assert lines[2].split() == ["wall_s", "2", "4", "3", "1.414"]
    assert len([line for line in lines if line.startswith("run ")]) == 2
    assert multirun_table([(runs[0], None)]).startswith("no run finished")
