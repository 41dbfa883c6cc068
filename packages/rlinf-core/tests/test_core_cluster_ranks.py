"""Rank expressions and placement strings of the ``cluster`` section (pure parsing)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlinf_core.cluster import (
    PlacementPart,
    compress_ranks,
    expand_placement,
    parse_placement,
    parse_rank_expr,
    rank_expr_problems,
)
from rlinf_core.errors import ConfigError


@pytest.mark.parametrize(
    ("expr", "size", "expected"),
    [
        ("3", 8, [3]),
        ("0-3", 8, [0, 1, 2, 3]),
        ("0-3,5", 8, [0, 1, 2, 3, 5]),
        (" 0 - 2 ,  7 ", 8, [0, 1, 2, 7]),
        ("all", 3, [0, 1, 2]),
        ("ALL", 2, [0, 1]),
        (4, 8, [4]),
        ([0, "2-3", 7], 8, [0, 2, 3, 7]),
        (["1"], 2, [1]),
        ("5,1", 8, [1, 5]),
        ("0-99", None, list(range(100))),
    ],
)
def test_rank_expressions_accepted(expr, size, expected):
    assert parse_rank_expr(expr, size) == expected


def _messages(expr, size=None, **kw):
    with pytest.raises(ConfigError) as info:
        parse_rank_expr(expr, size, path="cluster.node_groups[1].node_ranks", **kw)
    assert all(p.path.startswith("cluster.node_groups[1].node_ranks") for p in info.value.problems)
    return [p.message for p in info.value.problems]


def test_out_of_range_names_the_rank_and_the_valid_range():
    with pytest.raises(ConfigError) as info:
        parse_rank_expr("16-17,19", 18, path="cluster.node_groups[1].node_ranks")
    assert str(info.value) == "cluster.node_groups[1].node_ranks: rank 19 is outside 0..17"


def test_every_member_is_checked_not_only_the_endpoints():
    msgs = _messages("0-3,25,7,19-20", 18)
    assert msgs == ["rank 25 is outside 0..17", "range 19-20: ranks 19-20 are outside 0..17"]
    assert _messages("16-19", 18) == ["range 16-19: ranks 18-19 are outside 0..17"]


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("-1", "cannot be negative"),
        (-2, "cannot be negative"),
        ("3--1", "cannot be negative"),
        ("5-3", "range 5-3 is descending; write 3-5"),
        ("", "blank"),
        ("   ", "blank"),
        ("0,,1", "empty member"),
        ("0,", "empty member"),
        ("x", "'x' is not a rank or range"),
        ("1-2-3", "is not a rank or range"),
        (1.5, "expected a rank expression"),
        (True, "expected a rank expression"),
        (None, "expected a rank expression"),
        ([], "the rank list is empty"),
        ([[0, 1]], "nested lists"),
        ({"a": 1}, "expected a rank expression"),
        ("0-3,2", "listed more than once: 2"),
        ([1, "0-1"], "listed more than once: 1"),
    ],
)
def test_rank_expressions_rejected(expr, fragment):
    msgs = _messages(expr, 8)
    assert any(fragment in m for m in msgs), msgs


def test_all_needs_a_size_and_can_be_forbidden():
    assert any("needs a known number" in m for m in _messages("all"))
    assert any("'all' is not allowed" in m for m in _messages("all", 4, allow_all=False))


def test_problems_form_returns_good_members_too():
    ranks, problems = rank_expr_problems("0-1,9", 4)
    assert ranks == [0, 1] and len(problems) == 1


def test_compress_ranks():
    assert compress_ranks([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert compress_ranks([3]) == "3"
    assert compress_ranks([]) == ""


@settings(deadline=None)
@given(st.sets(st.integers(0, 200), min_size=1))
def test_compress_then_parse_round_trips(ranks):
    ordered = sorted(ranks)
    assert parse_rank_expr(compress_ranks(ordered), 201) == ordered


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789-, al\t", max_size=20),
        st.integers(-5, 50),
        st.lists(st.one_of(st.integers(-3, 30), st.text(alphabet="0123456789-,", max_size=6)), max_size=4),
        st.none(),
        st.floats(allow_nan=True),
        st.booleans(),
    ),
    st.one_of(st.none(), st.integers(0, 30)),
)
def test_rank_parser_raises_only_config_error(value, size):
    try:
        ranks = parse_rank_expr(value, size)
    except ConfigError as err:
        assert err.problems and all(p.message for p in err.problems)
    else:
        assert ranks == sorted(set(ranks))
        assert all(0 <= r < size for r in ranks) if size is not None else all(r >= 0 for r in ranks)


# -- placement strings ---------------------------------------------------------------------------
def _expand(text, n):
    assignment, problems = expand_placement(parse_placement(text), n)
    assert not problems, problems
    return assignment


def test_parse_placement_parts():
    assert parse_placement("0-3:0-7, 4") == (
        PlacementPart("0-3:0-7", (0, 3), (0, 7)),
        PlacementPart("4", (4, 4), None),
    )
    assert parse_placement(0) == (PlacementPart("0", (0, 0), None),)
    assert parse_placement("all") == (PlacementPart("all", None, None),)
    assert parse_placement(" 0 - 1 : 0 - 199 ") == (PlacementPart("0 - 1 : 0 - 199", (0, 1), (0, 199)),)


def test_one_process_per_resource_when_proc_is_omitted():
    assert _expand("0-3", 8) == [(0,), (1,), (2,), (3,)]
    # a later part without proc continues from the previous maximum + 1
    assert _expand("0-1:0-3,4-5", 8) == [(0,), (0,), (1,), (1,), (4,), (5,)]


def test_more_processes_than_resources_share_consecutively():
    assert _expand("0-3:0-7", 4) == [(0,), (0,), (1,), (1,), (2,), (2,), (3,), (3,)]


def test_more_resources_than_processes_get_contiguous_blocks():
    assert _expand("0-7:0-3", 8) == [(0, 1), (2, 3), (4, 5), (6, 7)]


def test_node_group_style_string():
    got = _expand("0-1:0-199,2-3:200-399", 4)
    assert len(got) == 400
    assert {got[p][0] for p in range(100)} == {0} and {got[p][0] for p in range(100, 200)} == {1}
    assert {got[p][0] for p in range(200, 300)} == {2} and {got[p][0] for p in range(300, 400)} == {3}


def test_empty_parts_are_skipped_as_rlinf_does():
    # RLinf's parse_rank_config skips the empty parts of "0-1," (rlinf/scheduler/cluster/utils.py)
    assert _expand("0-1,", 4) == _expand("0-1", 4)
    assert _expand("0,,2", 4) == [(0,), (2,)]


def test_all_selects_every_resource():
    assert _expand("all", 3) == [(0,), (1,), (2,)]
    assert _expand("all:0-1", 4) == [(0, 1), (2, 3)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "blank"),
        (",", "has no ranks"),
        (" , ", "has no ranks"),
        ("a", "'a' is not a resource rank"),
        ("-1", "cannot be negative"),
        ("3-1", "descending; write 1-3"),
        ("0:1:2", "more than one ':'"),
        ("0-3:all", "'all' is not allowed for process ranks"),
        ("0-3:", "the process ranks are empty"),
        ("0-3:x", "not a process rank"),
        (True, "expected a placement string"),
        (["0-3"], "expected a placement string"),
    ],
)
def test_placement_syntax_errors(text, fragment):
    with pytest.raises(ConfigError) as info:
        parse_placement(text, path="cluster.component_placement.actor")
    assert any(fragment in p.message for p in info.value.problems), str(info.value)
    assert all(p.path == "cluster.component_placement.actor" for p in info.value.problems)


def test_every_syntax_problem_is_reported():
    with pytest.raises(ConfigError) as info:
        parse_placement("a,3-1,0:x")
    assert len(info.value.problems) == 3


@pytest.mark.parametrize(
    ("text", "n", "fragment"),
    [
        ("4-7,0-3", 8, "unique and ascending"),
        ("0-3,3-5", 8, "unique and ascending"),
        ("0-3:1-4", 8, "must start at 0, not 1"),
        ("0-1:0-1,2-3:3-4", 8, "must continue from 2, not 3"),
        ("0-1,2-3:0-1", 8, "must continue from 2, not 0"),
        ("0-2:0-1", 8, "one count must divide the other"),
        ("0-3:0-5", 8, "one count must divide the other"),
        ("0-8", 8, "resource rank 8 is outside 0..7"),
        ("9-10", 8, "resource rank 9 is outside 0..7"),
        ("all", 0, "selects no resources"),
        ("0", 0, "outside nothing"),
    ],
)
def test_placement_rules_rejected(text, n, fragment):
    _, problems = expand_placement(parse_placement(text), n)
    assert any(fragment in p.message for p in problems), problems


def test_a_placement_may_not_ask_for_absurdly_many_processes():
    _, problems = expand_placement(parse_placement("0:0-99999999"), 1)
    assert "asks for 100000000 processes; at most 1000000 per component" in problems[0].message


def test_out_of_range_hint_is_appended():
    _, problems = expand_placement(parse_placement("0-9"), 8, out_of_range_hint=lambda r: f" [hint {r}]")
    assert problems[0].message.endswith("outside 0..7 [hint 8]")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789-:, al", max_size=24), st.integers(0, 20))
def test_placement_parser_raises_only_config_error(text, n):
    try:
        parts = parse_placement(text)
    except ConfigError:
        return
    assignment, problems = expand_placement(parts, n)
    if not problems:
        used = [r for res in assignment for r in res]
        assert all(0 <= r < n for r in used)
