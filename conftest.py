"""Session-wide test set-up for every package's tests.

When ``RLINF_FAULT_LOG`` names a file, a native crash of the pytest process (a C++ abort in a
library's driver, a segmentation fault) writes the Python stack of every thread there. pytest's
own fault handler writes to stderr, which its capture has redirected into a temporary file that
dies with the process; ``.ci/run`` sets the variable and prints the file when a suite fails.

Under pytest-xdist with ``--dist loadgroup`` (how ``.ci/run`` runs the slow suite on two
workers), each module is one unit of work: its module-scoped fixtures (model folders, Ray
clusters, trained tokenizers) are built once, as in a serial run. A module that binds fixed
loopback addresses, ports or network-namespace names (Ray nodes on 127.0.0.2, EasyTier
instances, the Franka simulator) says ``pytest.mark.xdist_group("loopback")``: all of those run
one after another on one worker, so two of them never claim the same address at once.

The learning checks are few and long (one of them a third of the stage), so module-by-module
dealing leaves a worker idle while the other finishes: each says what it costs,
``pytest.mark.learning(seconds=S)`` (its call time in CI's learning stage), and under xdist the
checks are dealt to one group per worker, longest first onto the least loaded
(``learning_bins``), so the workers finish together.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os

import pytest

_FAULT_LOG: list[object] = []  # keeps the open file alive for the whole session

# How many pytest-xdist workers a whole-suite run (`uv run pytest`, no test paths named) gets
# unless `-n` says otherwise (the README's fast suite on the 2-core CI machine: 512-537 s on two
# workers against 613 s in one process, measured at 91a0cc1; 289-363 s from fresh clones of
# fa79d65 and f3778a6, after its multi-process tests moved to `slow`).
DEFAULT_WORKERS = 2


@pytest.hookimpl(tryfirst=True)  # before xdist's own pytest_cmdline_main turns -n into workers
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Run a whole suite on ``min(DEFAULT_WORKERS, cores)`` workers with ``--dist loadgroup``.

    Only when pytest-xdist is installed (a package's own environment may lack it), in the
    controlling process, and when the run names no test paths (``pytest path/test_x.py`` stays in
    one process, where start-up dominates), does not ask for ``-n``, collects only, or debugs
    (``--pdb``, ``-s``). ``-n 0`` keeps any run in one process.
    """
    opt = config.option
    if (
        not config.pluginmanager.hasplugin("xdist")
        or hasattr(config, "workerinput")
        or getattr(opt, "numprocesses", None) is not None
        or config.args_source == pytest.Config.ArgsSource.ARGS
        or opt.collectonly
        or getattr(opt, "usepdb", False)
        or getattr(opt, "capture", "fd") == "no"
    ):
        return
    workers = min(DEFAULT_WORKERS, os.cpu_count() or 1)
    if workers < 2:
        return
    opt.numprocesses = workers
    if getattr(opt, "dist", "no") == "no":
        opt.dist = "loadgroup"
        # a worker parses the controller's invocation arguments again and groups only when they
        # say loadgroup (xdist's remote.setup_config), not when this option object does
        params = config.invocation_params
        config.invocation_params = dataclasses.replace(params, args=(*params.args, "--dist", "loadgroup"))


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, which would replace it
def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("RLINF_FAULT_LOG")
    if not path:
        return
    f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open until the process ends
    f.write(f"pytest pid {os.getpid()}: {' '.join(config.invocation_params.args) or '(no arguments)'}\n")
    f.flush()
    _FAULT_LOG.append(f)
    faulthandler.enable(file=f, all_threads=True)


# the cost of a learning check that does not declare one (`pytest.mark.learning(seconds=...)`)
DEFAULT_LEARNING_SECONDS = 120.0


def learning_seconds(item: pytest.Item, mark: pytest.Mark) -> float:
    """What a `learning` check (``mark``) declares it costs; 0 when a `skipif` already decided to
    skip it."""
    if any(m.args and m.args[0] is True for m in item.iter_markers("skipif")):
        return 0.0
    return float(mark.kwargs.get("seconds", DEFAULT_LEARNING_SECONDS))


def learning_bins(costs: dict[str, float], workers: int) -> dict[str, int]:
    """Deal tests (nodeid -> seconds) to ``workers`` bins, longest first onto the least loaded
    (ties to the lower bin, then nodeid order): the same bins on every worker."""
    loads = [0.0] * workers
    bins: dict[str, int] = {}
    for nodeid, cost in sorted(costs.items(), key=lambda kv: (-kv[1], kv[0])):
        b = min(range(workers), key=lambda i: (loads[i], i))
        bins[nodeid] = b
        loads[b] += cost
    return bins


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    learning = {
        item.nodeid: learning_seconds(item, mark)
        for item in items
        if workers > 1 and (mark := item.get_closest_marker("learning")) is not None
    }
    # every learning check collected (this hook runs before `-m` deselects): a run of a few of
    # them with -k may deal them unevenly, never wrongly
    bins = learning_bins(learning, workers) if len(learning) > 1 else {}
    for item in items:
        # `extended` tests are the slow suite's longest (outside CI's budget): a test marked
        # `extended` alone would run in the fast suite, which deselects only `slow`
        if item.get_closest_marker("extended") and not item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid}: marked extended but not slow; mark it slow as well")
        if item.get_closest_marker("xdist_group") is None:
            group = f"learning-{bins[item.nodeid]}" if item.nodeid in bins else item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(group))
