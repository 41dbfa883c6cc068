"""Secrets stay out of what is saved and printed (issue 53, item 6): a fake API key given to the
workers the documented way (``cluster.node_groups[].env_configs[].env_vars`` with
``${oc.env:NAME}``) is in no file of the run directory and nowhere on the console of
``--print-config``, ``--dry-run``, a validation error, or a real (short, in-process) run; the run
directory's ``config.yaml`` keeps the interpolation, as Hydra does."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"sk-test-{secrets.token_hex(12)}"
    monkeypatch.setenv("FAKE_API_KEY", value)
    return value


def _config(tmp_path: Path, **env: Any) -> Path:
    cfg = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    cfg["cluster"]["node_groups"] = [
        {
            "label": "cpu",
            "node_ranks": "0",
            "env_configs": [{"node_ranks": "0", "env_vars": [{"WANDB_API_KEY": "${oc.env:FAKE_API_KEY}"}]}],
        }
    ]
    cfg["env"] = {"id": "CartPole-v1", "num_envs": 2, **env}
    cfg["algorithm"].update(rollout_steps=16, minibatch_size=16, update_epochs=1)
    cfg["rollout"] = {"pipeline_stages": 1}
    cfg["runner"] = {"scheduler": "local", "total_steps": 64, "log_interval": 32, "checkpoint_interval": 32}
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _nowhere_in(folder: Path, value: str) -> None:
    for file in folder.rglob("*"):
        if file.is_file():
            assert value.encode() not in file.read_bytes(), file


def test_print_config_and_dry_run_keep_the_interpolation(rlinf_main: Any, tmp_path: Path, key: str) -> None:
    config = _config(tmp_path)
    code, out = rlinf_main("train", str(config), "--print-config")
    assert code == 0, out
    assert key not in out
    printed = yaml.safe_load(out)
    env_vars = printed["cluster"]["node_groups"][0]["env_configs"][0]["env_vars"]
    assert env_vars == [{"WANDB_API_KEY": "${oc.env:FAKE_API_KEY}"}]

    code, out = rlinf_main("train", str(config), "--dry-run")
    assert code == 0, out
    assert key not in out and "${oc.env:FAKE_API_KEY}" in out


def test_a_validation_error_does_not_echo_the_key(rlinf_main: Any, tmp_path: Path, key: str) -> None:
    config = _config(tmp_path, num_envs="${oc.env:FAKE_API_KEY}")
    code, out = rlinf_main("train", str(config), "--dry-run")
    assert code == 2, out
    assert "env.num_envs" in out and "Traceback" not in out
    assert key not in out


@pytest.mark.slow  # a real run: about 20 s on the 2-core machine
def test_a_real_run_saves_and_prints_no_key(rlinf_main: Any, tmp_path: Path, key: str) -> None:
    config = _config(tmp_path)
    run_dir = tmp_path / "run"
    code, out = rlinf_main("train", str(config), "--run-dir", str(run_dir), "--quiet")
    assert code == 0, out
    assert key not in out
    _nowhere_in(run_dir, key)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    env_vars = saved["cluster"]["node_groups"][0]["env_configs"][0]["env_vars"]
    assert env_vars == [{"WANDB_API_KEY": "${oc.env:FAKE_API_KEY}"}]
    # the saved config.yaml runs again as it is (the interpolation resolved anew)
    code, out = rlinf_main("train", str(run_dir / "config.yaml"), "--dry-run")
    assert code == 0, out
    assert key not in out


def test_mask_secrets_replaces_long_values_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlinf_core.compose import compose, mask_secrets

    monkeypatch.setenv("RLINF_TEST_TOKEN", "tok-abcdef123")
    monkeypatch.setenv("RLINF_TEST_SHORT", "0")
    data = compose({"a": "${oc.env:RLINF_TEST_TOKEN}", "b": "${oc.env:RLINF_TEST_SHORT}", "c": "x0"})
    assert data == {"a": "tok-abcdef123", "b": "0", "c": "x0"}
    assert mask_secrets("got 'tok-abcdef123' at x0") == "got '${oc.env:RLINF_TEST_TOKEN}' at x0"
