"""Fixtures shared by rlinf-scheduler's tests."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """An embedded Ray for one test module (2 CPUs, no dashboard), its workers on this interpreter."""
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ray_constants, "RAY_ENABLE_UV_RUN_RUNTIME_ENV", False)  # workers: this interpreter
        for attempt in (1, 2):
            try:
                ray.init(
                    num_cpus=2,
                    include_dashboard=False,
                    log_to_driver=False,
                    namespace=f"test-{uuid.uuid4().hex[:8]}",
                )
                break
            except Exception as err:  # Ray's own: its raylet has 30 s (fixed) to register
                # on a 2-core CI machine busy with another worker's Ray, that can run out: once more
                ray.shutdown()
                if attempt == 2 or "timed out during startup" not in str(err):
                    raise
    yield
    ray.shutdown()
