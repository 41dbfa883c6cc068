"""The embedded single-node Ray that ``rlinf train`` starts by default, on this machine."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from ray import cloudpickle  # noqa: E402

from rlinf_core import Worker  # noqa: E402
from rlinf_scheduler.runtime.cluster import Cluster  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this module

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]


class Niceness(Worker):
    def niceness(self) -> int:
        return os.nice(0)


@pytest.mark.slow  # starts an embedded Ray (README, Development)
def test_embedded_ray_runs_workers_at_the_drivers_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ray renices its workers to 15 unless told otherwise; on a shared machine they would then
    # yield their CPU to any other process (a benchmark's peer, a colleague's job).
    for var in ("RAY_worker_niceness", "RAY_ADDRESS", "RLINF_NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("RLINF_KEEP_RAY_SESSION", raising=False)
    cluster = Cluster(1, ray_init={"num_cpus": 1})
    session = cluster._embedded_node.get_session_dir_path()
    assert os.path.isdir(session)
    try:
        plan = cluster.plan(
            {"num_nodes": 1, "component_placement": {"probe": {"node_group": "node", "placement": "0"}}}
        )
        group = cluster.launch(plan["probe"], Niceness)
        try:
            assert group.niceness().wait(120) == [os.nice(0)]
        finally:
            group.shutdown()
    finally:
        cluster.shutdown()
    # each run's embedded Ray takes its session folder (logs, sockets) with it
    assert not os.path.exists(session)


# What a raylet wrote to raylet.err when its dashboard agent missed the 15 s window (a loaded
# 2-core machine, Ray's modules compiled from source on every start), stack trace shortened.
_RAYLET_ERR = """\
[2026-11-21 20:51:17,431 C 10365 10365] (raylet) node_manager.cc:3588:  An unexpected system state \
has occurred. You have likely discovered a bug in Ray. Please report this issue at \
https://github.com/ray-project/ray/issues and we'll work with you to fix it. Check failed: \
statussetor3588.has_value() Timed out waiting for file /tmp/ray/session_x/dashboard_agent_listen_port_db43
*** StackTrace Information ***
    raylet(+0x286092) [0x559d4b810092] std::make_unique<>()
"""
_TIMED_OUT = Exception(
    "The current node timed out during startup. This could happen because some of the raylet failed to "
    "startup or the GCS has become overloaded."
)


def test_an_embedded_start_that_timed_out_names_the_raylets_reason_and_the_fix(tmp_path) -> None:
    from rlinf_scheduler.runtime.cluster import embedded_start_failure

    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.err").write_text(_RAYLET_ERR)
    text = embedded_start_failure(_TIMED_OUT, str(tmp_path), {"PYTHONDONTWRITEBYTECODE": "1"})
    assert text.startswith("could not start an embedded Ray: The current node timed out during startup")
    assert "the raylet of the newest Ray session logged: Timed out waiting for file " in text
    assert "dashboard_agent_listen_port_db43" in text and "has_value" not in text
    assert (
        "fixed waits" in text
        and "15 s for its dashboard agent" in text
        and "PYTHONDONTWRITEBYTECODE is set" in text
        and "compileall" in text
    )
    # Without the variable there is no bytecode advice; without a raylet.err, no raylet line.
    plain = embedded_start_failure(_TIMED_OUT, str(tmp_path / "none"), {})
    assert "raylet of the newest" not in plain and "PYTHONDONTWRITEBYTECODE" not in plain
    assert "fixed waits" in plain and "load now" in plain
    assert embedded_start_failure(RuntimeError("boom"), str(tmp_path / "none"), {}) == (
        "could not start an embedded Ray: boom"
    )


def test_the_start_up_waits_grow_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 9 of issue 53: an embedded Ray on a busy machine is started more times, and Ray's wait
    for its GCS port grows with the load, within bounds; a wait the user set is left alone."""
    from rlinf_scheduler.runtime import embedded
    from rlinf_scheduler.runtime.embedded import gcs_port_wait_s, machine_load, start_attempts

    assert [start_attempts(x) for x in (0.0, 0.9, 1.0, 2.5, 50.0)] == [2, 2, 3, 4, 5]
    assert [gcs_port_wait_s(x) for x in (0.0, 1.0, 4.0, 100.0)] == [30.0, 30.0, 120.0, 300.0]
    assert machine_load() >= 0.0
    monkeypatch.setattr(embedded.os, "getloadavg", lambda: (8.0, 0.0, 0.0))
    monkeypatch.setattr(embedded.os, "sched_getaffinity", lambda pid: {0, 1})
    assert machine_load() == 4.0
    seen: list[str | None] = []

    class Node:  # records what Ray's Node would read from the environment
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.append(os.environ.get(embedded.GCS_PORT_WAIT_ENV))

    import ray._private.node

    monkeypatch.setattr(ray._private.node, "Node", Node)
    monkeypatch.delenv(embedded.GCS_PORT_WAIT_ENV, raising=False)
    embedded.start_local_node({"num_cpus": 1})
    assert seen == ["120"] and embedded.GCS_PORT_WAIT_ENV not in os.environ
    monkeypatch.setenv(embedded.GCS_PORT_WAIT_ENV, "45")
    embedded.start_local_node({"num_cpus": 1})
    assert seen[-1] == "45"


def _children() -> set[int]:
    """The live processes whose parent is this one."""
    me, out = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.add(int(entry))
    return out


@pytest.mark.slow  # starts Ray's GCS and dashboard
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_start_that_fails_leaves_no_ray_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A start that times out (here: failing right after Ray started its GCS, dashboard and
    raylet) stops what it started, so the retries on a busy machine do not pile up Rays."""
    import ray._private.node

    from rlinf_scheduler.runtime.embedded import start_local_node

    started = ray._private.node.Node.start_ray_processes

    def start_then_time_out(self: Any) -> None:
        started(self)
        raise RuntimeError("The current node timed out during startup (simulated)")

    monkeypatch.setattr(ray._private.node.Node, "start_ray_processes", start_then_time_out)
    before = _children()
    with pytest.raises(RuntimeError, match="simulated"):
        start_local_node({"num_cpus": 1})
    assert _children() - before == set()
