"""Token files, auth modes and node records, without a Ray cluster: what ``rlinf node start``,
the embedded Ray and ``rlinf node list`` decide before any Ray process runs.

The real-Ray side (a head that loses its GCS, an auth refusal, the embedded Ray on loopback) is
``test_sched_node_stale.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlinf_core.errors import ConfigError
from rlinf_scheduler.runtime.auth import (
    auth_mode,
    auth_refused_message,
    create_token_file,
    prepare_local_token,
    secure_token_file,
)
from rlinf_scheduler.runtime.cluster import unreachable_message
from rlinf_scheduler.runtime.node import (
    NodeRecord,
    NodeStartOptions,
    build_ray_start,
    head_answers,
    record_alive,
    stop_command,
)

pytestmark = pytest.mark.xdist_group("loopback")  # fixed loopback addresses: see conftest.py

SECRET = "0123456789abcdef" * 4


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def token(path: Path, mode: int = 0o644, text: str = SECRET) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


# -- 1. token files are private ---------------------------------------------------------------
def test_a_token_file_open_to_others_is_set_to_600_with_one_line(tmp_path, capsys):
    path = token(tmp_path / "t", 0o644)
    assert secure_token_file(path) == path
    assert mode_of(path) == 0o600 and path.read_text() == SECRET
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path} was open to other users (mode 0644); set it to 0600" in err
    assert SECRET not in err
    secure_token_file(path)  # already private: silent
    assert capsys.readouterr().err == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_token_file_open_to_others_is_refused_not_changed(tmp_path):
    path = token(tmp_path / "t", 0o644)
    os.chown(path, 54321, -1)
    with pytest.raises(ConfigError, match=r"belongs to uid 54321, not to you .* will not change it") as err:
        secure_token_file(path, "--token-file")
    assert str(err.value).startswith("--token-file: ") and "\n" not in str(err.value)
    assert mode_of(path) == 0o644
    path.chmod(0o600)  # another user's private file (readable by root) is fine
    secure_token_file(path)


def test_unusable_token_files_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="is not a regular file"):
        secure_token_file(tmp_path)
    with pytest.raises(ConfigError, match="is empty"):
        secure_token_file(token(tmp_path / "empty", 0o600, ""))


def test_the_embedded_rays_token_is_created_private_or_fixed(clean_env, capsys):
    home_token = clean_env / "home" / ".ray" / "auth_token"
    # Ray writes ~/.ray/auth_token with the umask (0644); rlinf creates it first, 0600
    assert prepare_local_token() == home_token
    assert mode_of(home_token) == 0o600 and len(home_token.read_text()) == 64
    first = home_token.read_text()
    assert prepare_local_token() == home_token and home_token.read_text() == first  # reused, not replaced
    home_token.chmod(0o644)  # made by an older rlinf, or by Ray itself
    prepare_local_token()
    assert mode_of(home_token) == 0o600 and "set it to 0600" in capsys.readouterr().err
    custom = clean_env / "custom" / "tok"
    assert prepare_local_token({"RAY_AUTH_TOKEN_PATH": str(custom)}) == custom and mode_of(custom) == 0o600
    assert prepare_local_token({"RAY_AUTH_MODE": "disabled"}) is None
    assert prepare_local_token({"RAY_AUTH_TOKEN": "x"}) is None


def test_creating_a_token_file_never_replaces_one(tmp_path):
    path = tmp_path / "d" / "tok"
    assert create_token_file(path) is True
    first = path.read_text()
    assert create_token_file(path) is False and path.read_text() == first
    assert [p.name for p in path.parent.iterdir()] == ["tok"]  # no temp file left


def test_node_start_fixes_a_reused_head_token_and_creates_a_private_one(clean_env, capsys):
    reused = token(clean_env / "reused", 0o644)
    _, env, _, _ = build_ray_start(
        NodeStartOptions(rank=0, head=True, node_ip="10.1.2.3", token_file=str(reused))
    )
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(reused)
    assert mode_of(reused) == 0o600 and "set it to 0600" in capsys.readouterr().err
    fresh = clean_env / "new" / "tok"
    build_ray_start(NodeStartOptions(rank=0, head=True, node_ip="10.1.2.3", token_file=str(fresh)))
    assert mode_of(fresh) == 0o600
    worker = token(clean_env / "worker", 0o640)  # a copy made with the wrong mode on a worker
    build_ray_start(NodeStartOptions(rank=1, address="10.1.2.3:6379", token_file=str(worker)))
    assert mode_of(worker) == 0o600


# -- 2. a loopback head stays on loopback -----------------------------------------------------
def test_a_loopback_head_keeps_127_0_0_1_and_a_joining_node_cannot_take_it(clean_env):
    cmd, env, node_ip, address = build_ray_start(
        NodeStartOptions(rank=0, head=True, port=6390, node_ip="127.0.0.1", auth="disabled")
    )
    # without this, `ray start` swaps 127.0.0.1 for the external address (and listens everywhere)
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert "--node-ip-address=127.0.0.1" in cmd and (node_ip, address) == ("127.0.0.1", "127.0.0.1:6390")
    _, env, _, _ = build_ray_start(NodeStartOptions(rank=0, head=True, node_ip="10.1.2.3", auth="disabled"))
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in env
    with pytest.raises(ConfigError, match=r"^--node-ip: a joining node cannot use 127\.0\.0\.1"):
        build_ray_start(
            NodeStartOptions(rank=1, address="127.0.0.1:6390", node_ip="127.0.0.1", auth="disabled")
        )


# -- 4. RAY_AUTH_MODE is honoured or refused ---------------------------------------------------
def test_node_start_follows_ray_auth_mode(clean_env, monkeypatch):
    head = {"rank": 0, "head": True, "node_ip": "10.1.2.3"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    _, env, _, _ = build_ray_start(NodeStartOptions(**head))
    assert env["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN_PATH" not in env
    _, env, _, _ = build_ray_start(NodeStartOptions(**head, auth="disabled"))
    assert env["RAY_AUTH_MODE"] == "disabled"
    with pytest.raises(ConfigError, match=r"^--auth: --auth token conflicts with RAY_AUTH_MODE=disabled"):
        build_ray_start(NodeStartOptions(**head, auth="token"))
    monkeypatch.setenv("RAY_AUTH_MODE", "Token")
    _, env, _, _ = build_ray_start(NodeStartOptions(**head, token_file=str(clean_env / "t")))
    assert env["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "k8s")
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE='k8s' in the environment is not an auth mode"):
        build_ray_start(NodeStartOptions(**head))
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert auth_mode() is None
    _, env, _, _ = build_ray_start(NodeStartOptions(**head, token_file=str(clean_env / "t")))
    assert env["RAY_AUTH_MODE"] == "token"  # the default without the variable


def test_node_start_cli_refuses_a_conflict_in_one_line_before_starting_ray(clean_env):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RLINF_STATE_DIR": str(clean_env / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "rlinf_core", "node", "start", "--rank", "0", "--head", "--auth", "token",
         "--node-ip", "127.0.0.9"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--auth token conflicts with RAY_AUTH_MODE=disabled" in lines[0], lines
    assert not (clean_env / "state").exists() or not list((clean_env / "state").glob("node-*.json"))


def test_an_auth_refusal_names_the_cause_never_the_token():
    text = auth_refused_message("10.0.0.1:6379", {"RAY_AUTH_MODE": "disabled"})
    assert "refused this process: it uses token authentication and RAY_AUTH_MODE is 'disabled' here" in text
    text = auth_refused_message("10.0.0.1:6379", {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": SECRET})
    assert "refused this process's token (RAY_AUTH_TOKEN)" in text and SECRET not in text
    assert "\n" not in text


# -- 3. stale node records ---------------------------------------------------------------------
@pytest.fixture
def leftover_agent():
    """A process in a session of its own, like the raylet a crashed head leaves behind."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def record(sid: int, address: str, state: Path) -> NodeRecord:
    rec = NodeRecord(
        rank=0, head=True, node_ip=address.rpartition(":")[0], address=address, sid=sid, pids=[sid],
        auth_mode="disabled", token_path=None, temp_dir=None, log_path=str(state / "x.log"),
        started_at=time.time(),
    )  # fmt: skip
    state.mkdir(parents=True, exist_ok=True)
    (state / f"node-{rec.node_ip}-{sid}.json").write_text(json.dumps(rec.to_dict()))
    return rec


def test_a_record_is_alive_only_while_its_head_answers(tmp_path, leftover_agent):
    with socket.socket() as gcs:
        gcs.bind(("127.0.0.7", 0))
        gcs.listen()
        rec = record(leftover_agent.pid, f"127.0.0.7:{gcs.getsockname()[1]}", tmp_path)
        assert head_answers(rec) and record_alive(rec)
    t0 = time.monotonic()
    assert not head_answers(rec) and not record_alive(rec)  # the GCS is gone, the "raylet" lives on
    assert time.monotonic() - t0 < 3
    assert stop_command(rec) == "rlinf node stop --node-ip 127.0.0.7"


def test_node_list_and_the_driver_report_a_stale_record_with_the_command_that_clears_it(
    tmp_path, leftover_agent
):
    dead_gcs = socket.socket()  # bound, never listening: the port is held but refuses connections
    dead_gcs.bind(("127.0.0.7", 0))
    port = dead_gcs.getsockname()[1]
    state = tmp_path / "state"
    record(leftover_agent.pid, f"127.0.0.7:{port}", state)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "RLINF_"))}
    env.update(
        RLINF_STATE_DIR=str(state), RAY_TMPDIR=str(tmp_path / "raytmp"), RLINF_LOAD_PLUGINS="scheduler"
    )

    def rlinf(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rlinf_core", *args], env=env, capture_output=True, text=True, timeout=120
        )

    listed = rlinf("node", "list")
    assert listed.returncode == 0, listed.stderr
    assert (
        f"rank 0 head 127.0.0.7 -> 127.0.0.7:{port}: STALE (its head does not answer, 1 of its processes "
        f"still run, session {leftover_agent.pid}); clear it with `rlinf node stop --node-ip 127.0.0.7`"
    ) in listed.stdout
    import json

    (row,) = json.loads(rlinf("node", "list", "--json").stdout)["nodes"]
    assert (row["state"], row["head_answers"], row["clear_with"]) == (
        "stale",
        False,
        "rlinf node stop --node-ip 127.0.0.7",
    )
    # the inspection commands do not attach to it and say why, without sending the user in circles
    status = rlinf("cluster", "status")
    assert status.returncode != 0
    assert "no Ray cluster is running" in status.stderr and "stale node record of 127.0.0.7" in status.stderr
    assert "rlinf node stop --node-ip 127.0.0.7" in status.stderr
    assert "rlinf cluster status" not in status.stdout + status.stderr
    status = rlinf("cluster", "status", "--address", f"127.0.0.7:{port}")
    assert status.returncode != 0 and "cannot reach the Ray head" in status.stderr
    assert "rlinf cluster status" not in status.stdout + status.stderr
    assert leftover_agent.poll() is None  # nothing was stopped behind the user's back
    dead_gcs.close()


def test_the_unreachable_head_message_does_not_suggest_cluster_status():
    text = unreachable_message("10.0.0.1:6379", "Connection refused")
    assert "rlinf cluster status" not in text and "rlinf node list" in text
