"""Topic names, topic filters and the subscription index used on the router's hot path.

In exactmesh an AMQP address and an MQTT topic are the same thing: a topic name made of
levels separated by '/', such as ``orders/eu/paris``.  Publishers send to a topic name;
subscribers subscribe with a topic filter that may use the MQTT wildcards ``+`` (exactly one
level) and ``#`` (all remaining levels).  The rules are those of MQTT 5.0 section 4.7, which
match MQTT 3.1.1 section 4.7 (section numbers below are MQTT 5.0; the 3.1.1 numbers are the
same except where noted).

This module is pure logic: no IO, no locks.  ``SubscriptionIndex`` is not thread-safe; the
router owns one per node and drives it from a single task.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = [
    "MAX_TOPIC_BYTES",
    "SubscriptionIndex",
    "TopicError",
    "matches",
    "split_shared",
    "validate_filter",
    "validate_topic",
]

K = TypeVar("K", bound=Hashable)

# MQTT 5.0 section 1.5.4 (3.1.1: 1.5.3): a UTF-8 Encoded String is prefixed by a two-byte
# length, so topic names and filters are at most 65535 bytes once encoded.
MAX_TOPIC_BYTES = 65535

# Section 4.7.1.1: '/' separates topic levels.
_SEP = "/"
# Section 4.7.1.2: the multi-level wildcard; section 4.7.1.3: the single-level wildcard.
_MULTI = "#"
_SINGLE = "+"

# How many characters of an offending name an error message quotes.
_SHOW_CHARS = 60


class TopicError(ValueError):
    """A topic name or topic filter that the router cannot accept.

    ``str()`` is one sentence a person can act on: what was wrong with which name, and what to
    do, e.g. "publish address 'orders/+' contains the wildcard '+'; publish to a concrete topic
    such as 'orders/eu'".
    """


def _show(name: str) -> str:
    """``repr`` of *name*, shortened when it is too long to be useful in a message."""
    if len(name) <= _SHOW_CHARS:
        return repr(name)
    return f"{name[:_SHOW_CHARS]!r}... ({len(name)} characters)"


def _check_string(name: object, what: str, example: str) -> str:
    """The checks shared by topic names and filters; returns *name*.

    *what* is how an error message refers to the name ("publish address" or
    "subscription filter"), *example* a valid name of that kind.
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}: {name!r}")
    # Section 4.7.3: topic names and topic filters MUST be at least one character long.
    if not name:
        raise TopicError(f"{what} '' is empty; give at least one character, such as {example!r}")
    # Section 1.5.4: a UTF-8 Encoded String MUST NOT include U+0000 (also 4.7.3).
    if "\x00" in name:
        raise TopicError(
            f"{what} {_show(name)} contains the null character U+0000 at index "
            f"{name.index(chr(0))}; remove it, as MQTT forbids U+0000 in topic names and filters"
        )
    # Section 1.5.4: the UTF-16 surrogates U+D800..U+DFFF MUST NOT appear in a UTF-8 string;
    # Python lets lone surrogates into a str, and encoding rejects them.  Encoding is needed
    # anyway to measure the size in bytes, except for ASCII (the common case: one byte each).
    if name.isascii():
        size = len(name)
    else:
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise TopicError(
                f"{what} {_show(name)} contains the unpaired surrogate "
                f"U+{ord(name[exc.start]):04X} at index {exc.start}, which cannot be encoded as "
                f"UTF-8; remove it, or decode the name's bytes as UTF-8 with errors='strict'"
            ) from None
    # Section 1.5.4 / 4.7.3: at most 65535 bytes once encoded.
    if size > MAX_TOPIC_BYTES:
        raise TopicError(
            f"{what} {_show(name)} is {size} bytes in UTF-8, over the limit of "
            f"{MAX_TOPIC_BYTES} bytes; shorten it"
        )
    return name


def validate_topic(name: str) -> str:
    """Check that *name* is a valid publish address (an MQTT topic name); return it.

    Raises ``TopicError`` if *name* is empty, longer than ``MAX_TOPIC_BYTES`` bytes in UTF-8,
    not valid UTF-8, contains U+0000, or contains a wildcard character.  ``TypeError`` if it is
    not a ``str``.
    """
    _check_string(name, "publish address", "orders/eu")
    # Section 3.3.2.1 [MQTT-3.3.2-2] and 4.7.1: wildcards MUST NOT be used in a topic name.
    for wildcard in (_SINGLE, _MULTI):
        if wildcard in name:
            raise TopicError(
                f"publish address {_show(name)} contains the wildcard {wildcard!r}; wildcards "
                f"are only for subscription filters, so publish to a concrete topic such as "
                f"'orders/eu'"
            )
    return name


def validate_filter(topic_filter: str) -> str:
    """Check that *topic_filter* is a valid subscription filter; return it.

    Raises ``TopicError`` if it is empty, longer than ``MAX_TOPIC_BYTES`` bytes in UTF-8, not
    valid UTF-8, contains U+0000, or misuses a wildcard: ``#`` must be a whole level and the
    last one, ``+`` must be a whole level.  ``TypeError`` if it is not a ``str``.
    """
    _check_string(topic_filter, "subscription filter", "orders/#")
    if topic_filter.startswith(SHARE_PREFIX):
        split_shared(topic_filter)
    if _SINGLE not in topic_filter and _MULTI not in topic_filter:
        return topic_filter
    levels = topic_filter.split(_SEP)
    last = len(levels) - 1
    for i, level in enumerate(levels):
        if level in (_SINGLE, _MULTI):
            # Section 4.7.1.2 [MQTT-4.7.1-1] (3.1.1: [MQTT-4.7.1-2]): '#' MUST be the last
            # character of the filter.
            if level == _MULTI and i != last:
                raise TopicError(
                    f"subscription filter {_show(topic_filter)} has '#' at level {i + 1} of "
                    f"{last + 1}; '#' matches all remaining levels so it must be the last "
                    f"level: end the filter there, as in {_show(_SEP.join(levels[: i + 1]))}"
                )
            continue
        for wildcard in (_MULTI, _SINGLE):
            if wildcard in level:
                # Section 4.7.1.2 [MQTT-4.7.1-1] for '#' and 4.7.1.3 [MQTT-4.7.1-2] for '+'
                # (3.1.1: [MQTT-4.7.1-2] and [MQTT-4.7.1-3]): a wildcard MUST occupy an entire
                # level of the filter.
                raise TopicError(
                    f"subscription filter {_show(topic_filter)} has {wildcard!r} inside the "
                    f"level {_show(level)}; a wildcard must be a whole level between '/' "
                    f"separators, as in 'sport/{wildcard}'"
                    + ("" if wildcard == _MULTI else " or 'sport/+/player1'")
                )
    return topic_filter


# Section 4.8.2: a shared subscription's filter is '$share/' + ShareName + '/' + a filter.
SHARE_PREFIX = "$share/"


def split_shared(topic_filter: str) -> tuple[str, str] | None:
    """The share name and the inner filter of a shared subscription ``$share/NAME/FILTER``,
    or ``None`` for a filter that does not start with ``$share/``.

    Raises ``TopicError`` if the share name is empty or has a wildcard, or no valid filter
    follows it.
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    name, slash, inner = topic_filter[len(SHARE_PREFIX):].partition(_SEP)
    problem = ""
    if not name:
        problem = "its share name is empty"
    elif _SINGLE in name or _MULTI in name:
        problem = "its share name contains a wildcard"
    elif not slash or not inner:
        problem = "no topic filter follows the share name"
    if problem:
        # [MQTT-4.8.2-1]: a ShareName of at least one character; [MQTT-4.8.2-2]: no '/', '+'
        # or '#' in it, and a Topic Filter after the '/' that ends it.
        raise TopicError(
            f"shared subscription filter {_show(topic_filter)} is invalid: {problem}; write "
            f"'$share/<name>/<filter>', as in '$share/workers/orders/#'")
    validate_filter(inner)
    return name, inner


def _match_levels(filter_levels: list[str], topic_levels: list[str]) -> bool:
    """Whether already-validated filter levels match already-validated topic levels."""
    n = len(topic_levels)
    for i, level in enumerate(filter_levels):
        # Section 4.7.1.2: '#' matches the parent level and any number of child levels, so
        # 'sport/#' matches 'sport' as well as 'sport/tennis/player1'.
        if level == _MULTI:
            return True
        if i >= n:
            return False
        # Section 4.7.1.3: '+' matches exactly one level, including an empty one.
        if level != _SINGLE and level != topic_levels[i]:
            return False
    return len(filter_levels) == n


def matches(topic_filter: str, topic: str) -> bool:
    """Whether *topic_filter* matches the topic name *topic*, by MQTT rules (section 4.7).

    ``'a/#'`` matches ``'a'`` and ``'a/b/c'``; ``'+'`` matches exactly one level, including an
    empty one, so ``'+/+'`` matches ``'/finance'``; a topic starting with ``'$'`` is not matched
    by a filter whose first level is ``'+'`` or ``'#'`` (section 4.7.2).  Matching is
    case-sensitive and byte-exact (section 4.7.3).

    Both arguments are validated first; an invalid one raises ``TopicError``.  This is the
    reference definition; the router's hot path uses ``SubscriptionIndex``.
    """
    validate_filter(topic_filter)
    validate_topic(topic)
    # Section 4.7.2 [MQTT-4.7.2-1]: a filter starting with a wildcard does not match a topic
    # name starting with '$'.
    if topic[0] == "$" and topic_filter[0] in (_SINGLE, _MULTI):
        return False
    return _match_levels(topic_filter.split(_SEP), topic.split(_SEP))


class _Node(Generic[K]):
    """One level of the subscription trie.

    ``children`` maps a level to the node below it; a filter level of '+' or '#' is stored
    under the key '+' or '#', which cannot clash with a literal level because topic names
    contain no wildcards.  ``keys`` holds the subscribers whose filter ends at this node, as
    key -> sequence number, in increasing sequence order.
    """

    __slots__ = ("children", "keys")

    def __init__(self) -> None:
        self.children: dict[str, _Node[K]] = {}
        self.keys: dict[K, int] = {}


class SubscriptionIndex(Generic[K]):
    """Which subscribers' filters match a topic name.

    Each key (a hashable subscriber handle) has at most one filter; adding a key again replaces
    its filter and counts as a new addition for ordering.  ``match`` returns the matching keys
    in the order they were (last) added.

    Filters live in a trie by level with exact children, a '+' child and a '#' terminal, so a
    lookup walks only the branches that can match.  Results are cached per topic name in a
    bounded dict (cleared wholesale when full, and on every ``add`` or ``remove``), so a cache
    hit costs one dict lookup.
    """

    __slots__ = ("_cache", "_filters", "_results", "_root", "_seq", "cache_max_topic_chars",
                 "cache_size")

    def __init__(self, cache_size: int = 10_000, cache_max_topic_chars: int = 1024) -> None:
        # At most `cache_size` topic names are cached; the cache is cleared when it is full.
        # Names longer than `cache_max_topic_chars` are not cached, which bounds its memory
        # at about cache_size * cache_max_topic_chars characters of keys. (Arguments, not
        # class attributes to override: mypyc may compile this module, router/accel.py, and
        # interpreted classes cannot subclass compiled ones.)
        self.cache_size = cache_size
        self.cache_max_topic_chars = cache_max_topic_chars
        self._root: _Node[K] = _Node()
        # key -> (its filter split into levels, its sequence number); dict order is add order.
        self._filters: dict[K, tuple[list[str], int]] = {}
        self._seq = 0
        self._cache: dict[str, tuple[K, ...]] = {}
        # Interns result tuples so that many cached topics with the same subscribers share one
        # tuple: memory is bounded by distinct results, not by topics times subscribers.
        self._results: dict[tuple[K, ...], tuple[K, ...]] = {}

    def __len__(self) -> int:
        return len(self._filters)

    def __contains__(self, key: object) -> bool:
        return key in self._filters

    def items(self) -> list[tuple[K, str]]:
        """Every key with its filter, in the order they were added."""
        return [(key, _SEP.join(entry[0])) for key, entry in self._filters.items()]

    def filter_of(self, key: K) -> str | None:
        """The filter *key* is subscribed with, or ``None`` if it has none."""
        entry = self._filters.get(key)
        return None if entry is None else _SEP.join(entry[0])

    def add(self, key: K, topic_filter: str) -> None:
        """Subscribe *key* with *topic_filter*, replacing any filter *key* already has.

        Raises ``TopicError`` for an invalid filter, leaving the index unchanged.
        """
        validate_filter(topic_filter)
        if key in self._filters:
            self._unlink(key)
        levels = topic_filter.split(_SEP)
        node = self._root
        for level in levels:
            child = node.children.get(level)
            if child is None:
                child = node.children[level] = _Node()
            node = child
        self._seq += 1
        node.keys[key] = self._seq
        self._filters[key] = (levels, self._seq)
        self._invalidate()

    def remove(self, key: K) -> None:
        """Unsubscribe *key*; a key that has no filter is ignored."""
        if key in self._filters:
            self._unlink(key)
            self._invalidate()

    def match(self, topic: str) -> tuple[K, ...]:
        """The keys whose filter matches the topic name *topic*, in the order they were added.

        Raises ``TopicError`` if *topic* is not a valid topic name.
        """
        try:
            return self._cache[topic]
        except KeyError:
            pass
        validate_topic(topic)
        result = self._walk(topic)
        if len(topic) <= self.cache_max_topic_chars:
            if len(self._cache) >= self.cache_size:
                self._invalidate()
            result = self._results.setdefault(result, result)
            self._cache[topic] = result
        return result

    def _walk(self, topic: str) -> tuple[K, ...]:
        levels = topic.split(_SEP)
        n = len(levels)
        found: list[dict[K, int]] = []
        root = self._root
        if topic[0] == "$":
            # Section 4.7.2 [MQTT-4.7.2-1]: filters whose first level is '+' or '#' do not
            # match topic names starting with '$', so only the literal first level applies.
            child = root.children.get(levels[0])
            if child is None:
                return ()
            stack = [(child, 1)]
        else:
            stack = [(root, 0)]
        # Each node stands for one filter prefix and so sits at one depth: it is visited at
        # most once, and a key is found at most once.
        while stack:
            node, depth = stack.pop()
            children = node.children
            # Section 4.7.1.2: '#' matches this level's parent and everything below it.
            multi = children.get(_MULTI)
            if multi is not None:
                found.append(multi.keys)
            if depth == n:
                if node.keys:
                    found.append(node.keys)
                continue
            exact = children.get(levels[depth])
            if exact is not None:
                stack.append((exact, depth + 1))
            # Section 4.7.1.3: '+' matches exactly one level, empty or not.
            single = children.get(_SINGLE)
            if single is not None:
                stack.append((single, depth + 1))
        if not found:
            return ()
        if len(found) == 1:
            # A node's keys are already in sequence order.
            return tuple(found[0])
        pairs = [pair for keys in found for pair in keys.items()]
        pairs.sort(key=_by_seq)
        return tuple([key for key, _ in pairs])

    def _unlink(self, key: K) -> None:
        """Take *key* out of the trie and the filter table, pruning emptied nodes."""
        levels, _ = self._filters.pop(key)
        path = [self._root]
        for level in levels:
            path.append(path[-1].children[level])
        del path[-1].keys[key]
        for i in range(len(levels) - 1, -1, -1):
            node = path[i + 1]
            if node.keys or node.children:
                break
            del path[i].children[levels[i]]

    def _invalidate(self) -> None:
        self._cache.clear()
        self._results.clear()


def _by_seq(pair: tuple[object, int]) -> int:
    return pair[1]
