"""Tests for router.core.topics: validation, MQTT matching semantics, the subscription index."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.core.topics import (
    MAX_TOPIC_BYTES,
    SubscriptionIndex,
    TopicError,
    matches,
    validate_filter,
    validate_topic,
)

# --------------------------------------------------------------------------- validation

GOOD_TOPICS = [
    "orders/eu/paris",
    "a",
    "/",  # two empty levels (MQTT 5.0 4.7.1.1: zero-length levels are allowed)
    "//",
    "/finance",  # distinct from 'finance' (4.7.3)
    "finance/",
    "Accounts payable",  # spaces are allowed (4.7.3)
    "$SYS/broker/load",
    "$",
    "caf\u00e9/\u6771\u4eac/\U0001f600",
    "x" * MAX_TOPIC_BYTES,  # exactly at the limit
    "\u00e9" * (MAX_TOPIC_BYTES // 2),  # 2 bytes each: 65534 bytes
]

BAD_TOPICS = [
    ("", "empty"),
    ("orders/+", "'+'"),
    ("+", "'+'"),
    ("orders/#", "'#'"),
    ("#", "'#'"),
    ("sport/tennis#", "'#'"),
    ("a+b", "'+'"),
    ("a\x00b", "U+0000"),
    ("\x00", "U+0000"),
    ("a/\ud800", "surrogate"),
    ("x" * (MAX_TOPIC_BYTES + 1), "65536 bytes"),
    ("\u00e9" * (MAX_TOPIC_BYTES // 2 + 1), "65536 bytes"),
]

GOOD_FILTERS = [
    *GOOD_TOPICS,
    "#",  # 4.7.1.2
    "sport/tennis/#",
    "sport/#",
    "+",  # 4.7.1.3
    "+/tennis/#",
    "sport/+/player1",
    "+/+",
    "/+",
    "+/",
    "+/+/+/#",
    "$SYS/#",
    "$SYS/monitor/+",
    "/#",
]

BAD_FILTERS = [
    ("", "empty"),
    ("sport/tennis#", "inside the level 'tennis#'"),  # 4.7.1.2
    ("sport/tennis/#/ranking", "level 3 of 4"),  # 4.7.1.2
    ("#/a", "level 1 of 2"),
    ("#/", "level 1 of 2"),
    ("##", "inside the level '##'"),
    ("sport+", "inside the level 'sport+'"),  # 4.7.1.3
    ("sport/+tennis", "inside the level '+tennis'"),
    ("++", "inside the level '++'"),
    ("a/+#", "inside the level '+#'"),
    ("a/b\x00", "U+0000"),
    ("\udfff/#", "surrogate"),
    ("#" * 2 + "/" + "x" * MAX_TOPIC_BYTES, "bytes"),
]


@pytest.mark.parametrize("name", GOOD_TOPICS, ids=lambda n: repr(n[:30]))
def test_validate_topic_accepts(name: str) -> None:
    assert validate_topic(name) is name


@pytest.mark.parametrize(("name", "why"), BAD_TOPICS, ids=lambda v: repr(v[:30]))
def test_validate_topic_rejects(name: str, why: str) -> None:
    with pytest.raises(TopicError) as info:
        validate_topic(name)
    message = str(info.value)
    assert message.startswith("publish address ")
    assert why in message
    # The message names the offending address (shortened if it is long).
    assert repr(name[:60]) in message
    assert "\n" not in message
    assert len(message) < 400


def test_topic_error_is_a_value_error_and_reads_as_advice() -> None:
    with pytest.raises(ValueError) as info:
        validate_topic("orders/+")
    assert str(info.value) == (
        "publish address 'orders/+' contains the wildcard '+'; wildcards are only for "
        "subscription filters, so publish to a concrete topic such as 'orders/eu'"
    )


@pytest.mark.parametrize("name", GOOD_FILTERS, ids=lambda n: repr(n[:30]))
def test_validate_filter_accepts(name: str) -> None:
    assert validate_filter(name) is name


@pytest.mark.parametrize(("name", "why"), BAD_FILTERS, ids=lambda v: repr(v[:30]))
def test_validate_filter_rejects(name: str, why: str) -> None:
    with pytest.raises(TopicError) as info:
        validate_filter(name)
    message = str(info.value)
    assert message.startswith("subscription filter ")
    assert why in message
    assert repr(name[:60]) in message
    assert "\n" not in message


def test_filter_error_suggests_a_fix() -> None:
    with pytest.raises(TopicError, match=r"end the filter there, as in 'sport/tennis/#'"):
        validate_filter("sport/tennis/#/ranking")


@pytest.mark.parametrize("bad", [b"orders/eu", None, 3])
def test_non_str_is_a_type_error(bad: object) -> None:
    # "must be a str", or mypyc's "str object expected" when the module is compiled.
    with pytest.raises(TypeError, match="str"):
        validate_topic(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        validate_filter(bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- matching

# (filter, topic, expected), from MQTT 5.0 sections 4.7.1.2, 4.7.1.3, 4.7.2 and 4.7.3
# (the same examples appear in MQTT 3.1.1 section 4.7).
SPEC_CASES = [
    # 4.7.1.2 multi-level wildcard
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/tennis/player1/#", "sport/tennis/player2", False),
    ("sport/tennis/player1/#", "sport/tennis", False),
    ("sport/#", "sport", True),
    ("sport/#", "sport/", True),
    ("sport/#", "sports", False),
    ("#", "sport/tennis/player1", True),
    ("#", "/", True),
    ("#", "a", True),
    ("sport/tennis/#", "sport/tennis", True),
    # 4.7.1.3 single-level wildcard
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+", "sport", True),
    ("+", "", None),  # not a topic: raises
    ("+/tennis/#", "sport/tennis/player1", True),
    ("+/tennis/#", "sport/tennis", True),
    ("+/tennis/#", "sport/golf", False),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("sport/+/player1", "sport//player1", True),
    ("sport/+/player1", "sport/tennis/player2", False),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+", "/finance", False),
    ("+/+", "finance", False),
    ("+", "/", False),
    ("+/+", "/", True),
    # 4.7.2 topics beginning with '$'
    ("#", "$SYS/monitor/Clients", False),
    ("#", "$SYS", False),
    ("#", "$", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("+", "$SYS", False),
    ("+/#", "$SYS/a", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS/+/Clients", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS2/a", False),
    ("#", "/$SYS", True),  # the '$' rule is about the first character only
    ("+/$SYS", "a/$SYS", True),
    ("a/#", "a/$b", True),
    # 4.7.3 topic semantics: case-sensitive, exact, leading/trailing '/' significant
    ("ACCOUNTS", "Accounts", False),
    ("Accounts", "Accounts", True),
    ("Accounts payable", "Accounts payable", True),
    ("/finance", "finance", False),
    ("finance", "/finance", False),
    ("finance/", "finance", False),
    ("a/b", "a/b/c", False),
    ("a/b/c", "a/b", False),
    ("caf\u00e9", "cafe\u0301", False),  # no Unicode normalisation
]


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), SPEC_CASES)
def test_matches_spec_examples(topic_filter: str, topic: str, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(TopicError):
            matches(topic_filter, topic)
    else:
        assert matches(topic_filter, topic) is expected


def test_matches_validates_both_arguments() -> None:
    with pytest.raises(TopicError, match="subscription filter 'a#'"):
        matches("a#", "a")
    with pytest.raises(TopicError, match="publish address 'a/\\+'"):
        matches("a/+", "a/+")


@pytest.mark.parametrize(("topic_filter", "topic", "expected"), SPEC_CASES)
def test_index_agrees_with_spec_examples(
    topic_filter: str, topic: str, expected: bool | None
) -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    index.add(1, topic_filter)
    if expected is None:
        with pytest.raises(TopicError):
            index.match(topic)
    else:
        assert index.match(topic) == ((1,) if expected else ())
        assert index.match(topic) == ((1,) if expected else ())  # from the cache


# --------------------------------------------------------------------------- index


def test_index_basics_and_order() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    assert len(index) == 0
    assert index.match("a/b") == ()
    index.add(3, "a/#")
    index.add(1, "a/+")
    index.add(2, "#")
    index.add(5, "a/b")
    index.add(4, "x/y")
    assert len(index) == 5
    assert index.match("a/b") == (3, 1, 2, 5)
    assert index.match("a") == (3, 2)
    assert index.match("x/y") == (2, 4)
    assert index.match("$x/y") == ()
    # Re-adding a key replaces its filter and makes it the most recently added.
    index.add(3, "a/b")
    assert len(index) == 5
    assert index.filter_of(3) == "a/b"
    assert index.match("a/b") == (1, 2, 5, 3)
    assert index.match("a") == (2,)
    index.remove(1)
    index.remove(1)  # unknown key: no error
    index.remove(99)
    assert 1 not in index
    assert 3 in index
    assert index.filter_of(1) is None
    assert len(index) == 4
    assert index.match("a/b") == (2, 5, 3)


def test_index_keys_may_be_any_hashable() -> None:
    index: SubscriptionIndex[str | tuple[str, int]] = SubscriptionIndex()
    index.add("alice", "orders/#")
    index.add(("bob", 1), "orders/+/paris")
    assert index.match("orders/eu/paris") == ("alice", ("bob", 1))


def test_invalid_add_leaves_index_unchanged() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    index.add(1, "a/+")
    with pytest.raises(TopicError, match="subscription filter 'a/b#'"):
        index.add(1, "a/b#")
    assert index.filter_of(1) == "a/+"
    assert index.match("a/b") == (1,)


def test_match_rejects_invalid_topics() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    index.add(1, "#")
    for bad in ("", "a/+", "#", "a\x00"):
        with pytest.raises(TopicError, match="publish address"):
            index.match(bad)
    assert index.match("a") == (1,)


def test_cache_is_hit_and_invalidated() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    index.add(1, "a/+")
    first = index.match("a/b")
    assert index.match("a/b") is first  # served from the cache
    index.add(2, "a/b")
    assert index.match("a/b") == (1, 2)
    index.remove(1)
    assert index.match("a/b") == (2,)
    index.add(2, "c")
    assert index.match("a/b") == ()


def test_cache_is_bounded() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex(cache_size=3, cache_max_topic_chars=10)
    index.add(1, "#")
    for i in range(20):
        assert index.match(f"t/{i}") == (1,)
        assert len(index._cache) <= 3
    long_topic = "x" * 11
    assert index.match(long_topic) == (1,)
    assert long_topic not in index._cache


def test_equal_results_share_one_tuple() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    index.add(1, "t/#")
    index.add(2, "t/+")
    assert index.match("t/1") is index.match("t/2")


def test_removing_everything_prunes_the_trie() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    filters = ["a/b/c", "a/b/#", "a/+/c", "+", "#", "a", "/", "a/b/c"]
    for key, topic_filter in enumerate(filters):
        index.add(key, topic_filter)
    index.add(0, "z/z/z")  # replacing prunes the old branch too
    for key in range(len(filters)):
        index.remove(key)
    assert len(index) == 0
    assert index._root.children == {}
    assert index._root.keys == {}


def test_thousands_of_filters() -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    for i in range(3000):
        index.add(i, f"region{i % 30}/+/site{i}")
    assert index.match("region7/eu/site7") == (7,)
    assert index.match("region7/eu/site8") == ()
    index.add(3000, "#")
    assert index.match("region7/eu/site7") == (7, 3000)


# --------------------------------------------------------------------------- properties

# Small alphabets so that filters and topics actually collide.
TOPIC_LEVELS = st.sampled_from(["a", "b", "", "$s"])
FILTER_LEVELS = st.sampled_from(["a", "b", "", "$s", "+", "+"])


@st.composite
def topics(draw: st.DrawFn) -> str:
    levels = draw(st.lists(TOPIC_LEVELS, min_size=1, max_size=4))
    return "/".join(levels) or "/"  # a lone empty level is '', which is not a topic name


@st.composite
def filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(FILTER_LEVELS, min_size=0, max_size=4))
    if not levels or draw(st.booleans()):
        levels.append("#")
    return "/".join(levels) or "/"


KEYS = st.integers(min_value=0, max_value=7)
OPS = st.one_of(
    st.tuples(st.just("add"), KEYS, filters()),
    st.tuples(st.just("remove"), KEYS, st.just("")),
    st.tuples(st.just("match"), st.just(0), topics()),
)


def brute_force(model: dict[int, str], topic: str) -> tuple[int, ...]:
    return tuple(key for key, topic_filter in model.items() if matches(topic_filter, topic))


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(OPS, max_size=40), probes=st.lists(topics(), min_size=1, max_size=6))
def test_index_agrees_with_brute_force(ops: list[tuple[str, int, str]], probes: list[str]) -> None:
    index: SubscriptionIndex[int] = SubscriptionIndex()
    model: dict[int, str] = {}  # insertion order = order of (last) add
    for op, key, arg in ops:
        if op == "add":
            index.add(key, arg)
            model.pop(key, None)
            model[key] = arg
        elif op == "remove":
            index.remove(key)
            model.pop(key, None)
        else:
            assert index.match(arg) == brute_force(model, arg)
        assert len(index) == len(model)
    for topic in probes * 2:  # the second round comes from the cache
        assert index.match(topic) == brute_force(model, topic)


@given(topic=topics())
def test_a_topic_is_a_filter_that_matches_itself(topic: str) -> None:
    assert validate_filter(topic) == topic
    assert matches(topic, topic)
    assert matches("#", topic) is not topic.startswith("$")


@given(topic_filter=filters(), topic=topics())
def test_multi_level_wildcard_matches_the_parent(topic_filter: str, topic: str) -> None:
    # 4.7.1.2: 'x/#' matches the parent level too, so whatever 'x' matches, 'x/#' matches.
    parent = topic_filter.removesuffix("/#")
    if parent and parent != topic_filter and matches(parent, topic):
        assert matches(topic_filter, topic)


@given(text=st.text(max_size=20))
def test_validators_accept_or_raise_topic_error(text: str) -> None:
    for validate in (validate_topic, validate_filter):
        try:
            assert validate(text) is text
        except TopicError as exc:
            assert str(exc)
    if "+" in text or "#" in text:
        with pytest.raises(TopicError):
            validate_topic(text)
