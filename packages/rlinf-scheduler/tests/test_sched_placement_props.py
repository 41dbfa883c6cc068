"""Property tests of the planner with hypothesis.

Random valid configs (node groups, GPUs per node, robot hardware, concatenated groups, placement
strings with blocks and sharing) are planned and checked against an independent model of each
group's rank space: every process's resources lie inside its group, processes of a component
share a resource only where the string asked for sharing, and the world size equals the number of
processes asked for. Random invalid input only ever raises ConfigError.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlinf_core import HardwareConfig, HardwarePlugin, hookimpl, load_plugins
from rlinf_core.errors import ConfigError
from rlinf_scheduler.placement import Inventory, plan_placement


class ArmConfig(HardwareConfig):
    robot_ip: str


class Arm(HardwarePlugin):
    """Test robot type (no robot exists here; planning never contacts one)."""

    PLUGIN_NAME = "Franka"
    config_model = ArmConfig


class _Plugin:
    @hookimpl
    def rlinf_register_hardware(self):
        return [Arm]


HOST = load_plugins(entry_points=[], extra=[("test-hw", _Plugin())])


@st.composite
def cluster_cases(draw):
    num_nodes = draw(st.integers(1, 10))
    gpus = [draw(st.sampled_from([0, 0, 1, 2, 4, 8])) for _ in range(num_nodes)]
    nodes = list(range(num_nodes))
    order = draw(st.permutations(nodes))
    n_groups = draw(st.integers(0, min(3, num_nodes)))
    cuts = sorted(draw(st.lists(st.integers(1, num_nodes), min_size=n_groups, max_size=n_groups)))
    groups = []
    model = {}  # label -> list of (kind, node, local)
    start = 0
    for gi, cut in enumerate(cuts):
        members = sorted(order[start:cut]) if cut > start else []
        start = max(start, cut)
        if not members:
            continue
        label = f"g{gi}"
        group = {"label": label, "node_ranks": ",".join(map(str, members))}
        if draw(st.booleans()) and gi == 0:
            configs = []
            for n in members:
                for k in range(draw(st.integers(0, 2))):  # some nodes own no robot
                    configs.append({"robot_ip": f"10.0.{n}.{k}", "node_rank": n})
            if configs:
                draw(st.randoms()).shuffle(configs)
                group["hardware"] = {"type": "franka", "configs": configs}
                space = []
                for n in members:
                    mine = [c for c in configs if c["node_rank"] == n]
                    space.extend(("franka", n, i) for i in range(len(mine)))
                model[label] = space
        if label not in model:
            acc = [("accelerator", n, i) for n in members for i in range(gpus[n])]
            model[label] = acc or [("node", n, 0) for n in members]
        groups.append(group)
    model["node"] = [("node", n, 0) for n in nodes]
    acc_all = [("accelerator", n, i) for n in nodes for i in range(gpus[n])]
    model["cluster"] = acc_all or [("node", n, 0) for n in nodes]

    placements = {}
    expected = {}
    user = [g["label"] for g in groups]
    for ci in range(draw(st.integers(1, 3))):
        choice = draw(
            st.sampled_from(["cluster", "node", *user, *user[:1], *user[:1], "concat", "concat", "concat"])
        )
        if choice == "concat":
            if len(user) < 2:
                continue
            labels = draw(st.permutations(user))[: draw(st.integers(2, len(user)))]
        else:
            labels = [choice]
        space = [(lab, *r) for lab in labels for r in model[lab]]
        if not space:
            continue
        parts, shares, nproc, pos = [], {}, 0, 0
        while pos < len(space) and len(parts) < 4:
            pos += draw(st.integers(0, 2))  # skip some resources
            if pos >= len(space):
                break
            n_res = draw(st.integers(1, min(4, len(space) - pos)))
            mode = draw(st.sampled_from(["one", "share", "block", "implicit"]))
            if mode == "share":
                n_proc = n_res * draw(st.integers(2, 3))
            elif mode == "block":
                divs = [d for d in range(1, n_res + 1) if n_res % d == 0]
                n_proc = draw(st.sampled_from(divs))
            else:
                n_proc = n_res
            res = f"{pos}-{pos + n_res - 1}" if n_res > 1 else f"{pos}"
            parts.append(res if mode == "implicit" else f"{res}:{nproc}-{nproc + n_proc - 1}")
            for r in range(pos, pos + n_res):
                shares[r] = max(1, n_proc // n_res)
            nproc += n_proc
            pos += n_res
        if not parts:
            continue
        name = f"c{ci}"
        placements[name] = {"node_group": ",".join(labels), "placement": ",".join(parts)}
        expected[name] = (labels, space, shares, nproc, parts)
    cfg = {"num_nodes": num_nodes, "node_groups": groups, "component_placement": placements}
    inv = {"nodes": [{"node_ranks": n, "gpus": g} for n, g in enumerate(gpus) if g]}
    return cfg, inv, gpus, model, expected


def _spans(space, parts):
    """Independent check: does some process get resources on two nodes or two groups?"""
    for part in parts:
        res, _, proc = part.partition(":")
        a, _, b = res.partition("-")
        r0, r1 = int(a), int(b or a)
        n_res = r1 - r0 + 1
        if proc:
            p0, _, p1 = proc.partition("-")
            n_proc = int(p1 or p0) - int(p0) + 1
        else:
            n_proc = n_res
        if n_res > n_proc:
            k = n_res // n_proc
            for i in range(n_proc):
                block = space[r0 + i * k : r0 + (i + 1) * k]
                if len({(lab, node) for lab, _, node, _ in block}) > 1:
                    return True
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster_cases())
def test_random_valid_configs(case):
    cfg, inv, gpus, _model, expected = case
    spans = {name: _spans(space, parts) for name, (_, space, _, _, parts) in expected.items()}
    try:
        plan = plan_placement(cfg, inv, hardware=HOST)
    except ConfigError as err:
        # the only way a generated config can be invalid: a block of resources crossing nodes/groups
        assert any(spans.values()), str(err)
        assert all("would span two node" in p.message for p in err.problems), str(err)
        event("rejected: a block spans nodes or groups")
        return
    assert not any(spans.values())
    assert set(plan.components) == set(expected)
    event("planned")
    kinds = {p.hardware_type for comp in plan.components.values() for p in comp}
    for kind in kinds:
        event(f"placed on {kind}")
    if any(len(labels) > 1 for labels, *_ in expected.values()):
        event("concatenated groups")
    for name, (_labels, space, shares, nproc, _parts) in expected.items():
        comp = plan[name]
        assert comp.world_size == nproc == len(comp.processes)
        assert [p.rank for p in comp] == list(range(nproc))
        used = Counter()
        for p in comp:
            assert p.hardware_ranks and len(set(p.hardware_ranks)) == len(p.hardware_ranks)
            for r, local in zip(p.hardware_ranks, p.local_hardware_ranks, strict=True):
                assert 0 <= r < len(space)
                label, kind, node, loc = space[r]
                # the resource lies inside the group the process was placed through
                assert (p.node_group, p.node_rank, local) == (label, node, loc)
                assert p.hardware_type == kind
                used[r] += 1
            if p.hardware_type == "accelerator":
                assert p.visible_accelerators == p.local_hardware_ranks
                assert all(a < gpus[p.node_rank] for a in p.visible_accelerators)
            else:
                assert p.visible_accelerators == tuple(range(gpus[p.node_rank]))
            if p.hardware_type == "franka":
                assert p.hardware[0].node_rank == p.node_rank
        # sharing only where the string asked for it, and exactly as much as asked
        assert dict(used) == {r: shares[r] for r in used}
        assert set(used) == set(shares)


_junk = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-2, 20),
        st.text(alphabet="0123456789-,:alnodeclusterg ", max_size=10),
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "num_nodes",
                    "node_groups",
                    "component_placement",
                    "label",
                    "node_ranks",
                    "placement",
                    "node_group",
                    "hardware",
                    "type",
                    "configs",
                    "node_rank",
                    "robot_ip",
                    "a",
                    "nodes",
                    "gpus",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_junk, _junk)
def test_random_invalid_input_raises_only_config_error(cfg, inv):
    try:
        plan_placement(cfg, inv if isinstance(inv, dict) else None, hardware=HOST)
    except ConfigError as err:
        assert err.problems


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(0, 4),
    st.text(alphabet="0123456789-,: al", max_size=16),
    st.sampled_from(["cluster", "node", "g", "g,h"]),
)
def test_random_placement_strings_raise_only_config_error(num_nodes, gpus, placement, group):
    cfg = {
        "num_nodes": num_nodes,
        "node_groups": [
            {"label": "g", "node_ranks": 0},
            {"label": "h", "node_ranks": num_nodes - 1 if num_nodes > 1 else 0},
        ],
        "component_placement": {"x": {"node_group": group, "placement": placement}},
    }
    try:
        plan = plan_placement(cfg, Inventory.uniform(gpus), hardware=HOST)
    except ConfigError as err:
        assert err.problems
    else:
        assert plan["x"].world_size >= 1
