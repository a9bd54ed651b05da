"""mosquitto's `acl_file`: which client may publish to, and receive from, which topics.

The format (mosquitto.conf(5), "acl_file"; the parser is `aclfile__parse` in
src/security_default.c of eclipse/mosquitto, tag v2.0.11, which Debian 12 ships)::

    # a comment
    topic [read|write|readwrite|deny] TOPIC      # rules before any `user` line: anonymous clients
    user USERNAME                                # the rules after it, up to the next `user` line
    topic [read|write|readwrite|deny] TOPIC      #   belong to USERNAME
    pattern [read|write|readwrite|deny] PATTERN  # every client, %u = username, %c = client id

Evaluation, as mosquitto 2.0's `mosquitto_acl_check_default` does it, for a client
(username or None, client id) and a topic:

1. The client's section: the section of its username, or, for a client without a username
   (None, or "": mosquitto reads an empty username field as none, `packet__read_string`),
   the anonymous section (the `topic` lines before the first `user` line). A client with a
   username whose section does not exist has no section: a username never falls back to the
   anonymous rules. Two `user` lines with one name make one section. In the section `deny`
   rules come first: a matching `deny` refuses; else a matching rule that grants the access
   asked for allows; a matching rule that grants only the other access is passed over.
2. Then the patterns, only if nothing in the section decided. If the username or the client
   id contains `+` or `#`, every pattern is skipped (mosquitto's fix for CVE-2017-7650 denies
   the check here). Patterns with `%u` are skipped for a client without a username. Again
   `deny` patterns first, then granting ones.
3. Nothing decided: refused (default deny; an empty file refuses everything, as mosquitto
   does since CVE-2018-12550).

So `deny` wins over any grant of the same list, and a section's `deny` also wins over the
patterns; but a grant in the client's section is consulted before a pattern `deny` and wins
over it. This is what mosquitto does (its man page only says "Any deny topics are handled
before topics that grant read/write access"); it is the precise meaning of "deny wins" here.

Topic matching is MQTT's: `+` one level, `#` (last level only) any number of further levels
including none (`a/#` matches `a`), and a filter whose first level is `+` or `#` (or a
first-level `%u` / `%c`) never matches a topic starting with `$` (so `#` does not grant
`$SYS/...`; `topic read $SYS/#` does). Topics containing `+` or `#` match nothing.

`%u` and `%c` are substituted only where they are a whole topic level (`sensor/%u/data`), as
mosquitto.conf(5) says ("The substitution pattern must be the only text for that level of
hierarchy") and mosquitto's current development branch does (`topic_matches_sub_with_pattern`
in libcommon/topic_common.c): the substituted level matches a topic level equal to the
username / client id. Hence a username or client id containing `/` matches no topic level
and cannot widen a pattern (a user named `alice/x` never reaches `users/alice/x/...`
through `users/%u/#`), an empty one
matches nothing, and one starting with `$` does not match at the first level. (mosquitto
2.0.11 substitutes the text anywhere and would let a username `a/b` act inside user `a`'s
levels; this module does not.) A pattern level with `%u` or `%c` inside other text
(`x%uy`) is refused when the file is read, because mosquitto versions disagree on it.
`%u`/`%c` in `topic` lines are plain text, as in mosquitto (`Acl.warnings` notes them).

Subscriptions: mosquitto's acl_file does not check SUBSCRIBE at all (the default check
returns success for MOSQ_ACL_SUBSCRIBE, "FIXME - implement ACL subscription strings", since
1.5; 1.4 had the check disabled): every subscription is accepted and each message is checked
with the read rules on its way to the subscriber (`subs.c`, `retain.c`). `may_subscribe` is
an early refusal on top of that: it is False only when no topic the filter matches could pass
`may_read`, and True when some could (it does not promise every one can: delivery must still
call `may_read` per message). Precisely, it is True when some read-granting rule's filter
intersects the subscription filter in a set of topics that no single `deny` consulted before
that grant covers whole. A subscription whose every topic is denied only by several `deny`
rules together is still accepted (and then receives nothing), never the other way round.
Pass the plain filter: strip a `$share/GROUP/` prefix first.

Where this reader is stricter than mosquitto's: a lone access word (`topic read`) is an
error (mosquitto reads a readwrite rule for the topic named "read"); a line with an unknown
keyword, a bad access type, an invalid topic filter or a missing username is an `AclFileError`
naming the file, the line and the fix (mosquitto refuses these too, without the line number).
It is more lenient in two harmless ways: tabs separate words like spaces, and a `#` after
leading blanks starts a comment.

Speed: the rules are compiled once into tries (one per user section, one for all patterns,
with `%u`/`%c` as special edges matched against the client's values during the walk), so a
check walks a few trie paths, whatever the number of rules; recent answers are kept in an
LRU keyed by (username, client id, topic, access). An `Acl` is immutable: load a new one to
change the rules.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple, cast

from router.security.lines import file_lines, text_lines

Access = Literal["read", "write", "readwrite", "deny"]
Kind = Literal["topic", "pattern"]

_READ = 0  # index into a trie node's rank pairs
_WRITE = 1
_MASKS: dict[str, int] = {"read": 1, "write": 2, "readwrite": 3, "deny": 0}

# Ranks: the order mosquitto consults rules in. The lowest rank among the rules that match
# (and deny, or grant the access asked for) decides; odd ranks allow.
_USER_DENY = 0
_USER_GRANT = 1
_PATTERN_DENY = 2
_PATTERN_GRANT = 3
_NONE = 4

MAX_TOPIC_BYTES = 65535
_CACHE_SIZE = 65536  # answers kept; topics longer than _CACHE_TOPIC_CHARS are not kept
_CACHE_TOPIC_CHARS = 256
_BLANKS = " \t\n\r\v\f"
_WORD = re.compile(r"([^ \t]+)(?:[ \t]+(.*))?", re.DOTALL)
_FORMAT = "'topic [read|write|readwrite|deny] TOPIC', 'user USERNAME' or 'pattern ...'"


class AclFileError(ValueError):
    """An ACL file that cannot be used; the message names the file, the line (when there is
    one), what is wrong and what to do."""

    def __init__(self, name: str, line: int | None, problem: str, fix: str) -> None:
        where = f"{name} line {line}" if line is not None else name
        super().__init__(f"{where}: {problem}; {fix}")
        self.name = name
        self.line = line
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True, slots=True)
class AclRule:
    """One `topic` or `pattern` line. `user` is the section of a `topic` rule (None: the
    anonymous section); always None for a pattern."""

    kind: Kind
    access: Access
    topic: str
    user: str | None
    line: int

    @property
    def deny(self) -> bool:
        return self.access == "deny"

    @property
    def rank(self) -> int:
        if self.kind == "topic":
            return _USER_DENY if self.deny else _USER_GRANT
        return _PATTERN_DENY if self.deny else _PATTERN_GRANT

    def grants(self, which: int) -> bool:
        """Whether this rule decides a check of access `which` (0 read, 1 write) it matches:
        a deny always does, a grant when it grants that access."""
        return self.deny or bool(_MASKS[self.access] & (1 << which))

    def __str__(self) -> str:
        section = ""
        if self.kind == "topic":
            section = "anonymous, " if self.user is None else f"user {self.user!r}, "
        return f"line {self.line} ({section}{self.kind}): {self.access} {self.topic}"


# ----------------------------------------------------------------------------- matching


def _filter_problem(topic: str) -> str | None:
    """What is wrong with `topic` as a topic filter (mosquitto_sub_topic_check), or None."""
    if not topic:
        return "empty topic"
    if len(topic) > MAX_TOPIC_BYTES // 4 and len(topic.encode("utf-8", "surrogatepass")) > (
        MAX_TOPIC_BYTES
    ):
        return "topic longer than 65535 bytes"
    levels = topic.split("/")
    for i, level in enumerate(levels):
        if level in ("+", "#"):
            if level == "#" and i != len(levels) - 1:
                return f"'#' is not the last level in {topic!r}"
        elif "+" in level or "#" in level:
            return f"'+' and '#' must each be a whole topic level, not part of {level!r}"
    return None


def _filter_levels(topic_filter: str) -> list[str] | None:
    if not isinstance(topic_filter, str) or _filter_problem(topic_filter) is not None:
        return None
    return topic_filter.split("/")


def _topic_ok(topic: str) -> bool:
    """Whether `topic` is a topic name a rule may match: non-empty, no wildcard, not too long."""
    if not topic or "+" in topic or "#" in topic:
        return False
    return len(topic) <= MAX_TOPIC_BYTES // 4 or len(
        topic.encode("utf-8", "surrogatepass")
    ) <= MAX_TOPIC_BYTES


def _matches(filter_levels: tuple[str, ...] | list[str], topic_levels: list[str]) -> bool:
    """MQTT matching of a (substituted) filter against a topic, level by level."""
    if topic_levels[0][:1] == "$" and filter_levels[0] in ("+", "#"):
        return False
    for i, f in enumerate(filter_levels):
        if f == "#":
            return True
        if i >= len(topic_levels) or (f != "+" and f != topic_levels[i]):
            return False
    return len(filter_levels) == len(topic_levels)


def _intersect(a: list[str] | tuple[str, ...], b: list[str] | tuple[str, ...]) -> (
    list[str] | None
):
    """A filter matching exactly the topics both `a` and `b` match, or None if there are none.
    (MQTT filters are closed under intersection, `$` rule included.)"""
    out: list[str] = []
    i = 0
    while True:
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if i == 0:
            # A leading wildcard matches no '$' topic.
            if x in ("+", "#") and y is not None and y[:1] == "$":
                return None
            if y in ("+", "#") and x is not None and x[:1] == "$":
                return None
        if x == "#":
            return out + list(b[i:])
        if y == "#":
            return out + list(a[i:])
        if x is None or y is None:
            return out if x is None and y is None else None
        if x == "+":
            out.append(y)
        elif y in ("+", x):
            out.append(x)
        else:
            return None
        i += 1


def _covers(d: list[str] | tuple[str, ...], h: list[str] | tuple[str, ...]) -> bool:
    """Whether every topic filter `h` matches is matched by filter `d`."""
    for i in range(len(h) + 1):
        if i < len(d) and d[i] == "#":
            return not (i == 0 and h[0][:1] == "$")
        if i == len(h):
            return i == len(d)
        if h[i] == "#":
            # `h` goes on with any number of levels, none included; below the first level
            # only a '#' does too. At the first level there is always a level: '+/#' will do.
            return i == 0 and list(d) == ["+", "#"]
        if i == len(d):
            return False
        if d[i] == "+":
            if i == 0 and h[0][:1] == "$":
                return False
        elif d[i] != h[i]:
            return False
    return False  # not reached


class _Node:
    """A trie node: a filter's levels lead from the root to it. `end[access]` is the lowest
    rank of the rules (deciding that access) whose filter ends here, `rest[access]` of those
    whose filter goes on with `/#` here."""

    __slots__ = ("children", "client", "end", "plus", "rest", "user")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.plus: _Node | None = None
        self.user: _Node | None = None  # a %u level (patterns only)
        self.client: _Node | None = None  # a %c level (patterns only)
        self.end = [_NONE, _NONE]
        self.rest = [_NONE, _NONE]


def _build(rules: Iterable[AclRule]) -> _Node:
    root = _Node()
    for rule in rules:
        node = root
        levels = rule.topic.split("/")
        target = node.end
        for level in levels:
            if level == "#":
                target = node.rest
                break
            if level == "+":
                node.plus = node.plus or _Node()
                node = node.plus
            elif rule.kind == "pattern" and level == "%u":
                node.user = node.user or _Node()
                node = node.user
            elif rule.kind == "pattern" and level == "%c":
                node.client = node.client or _Node()
                node = node.client
            else:
                child = node.children.get(level)
                if child is None:
                    child = node.children[level] = _Node()
                node = child
            target = node.end
        for which in (_READ, _WRITE):
            if rule.grants(which) and rule.rank < target[which]:
                target[which] = rule.rank
    return root


def _walk(root: _Node, levels: list[str], which: int, user: str | None, client: str | None) -> int:
    """The lowest rank among the trie's rules that match `levels` and decide `which`."""
    best = _NONE
    n = len(levels)
    dollar = levels[0][:1] == "$"
    stack = [(root, 0)]
    pop = stack.pop
    push = stack.append
    while stack:
        node, i = pop()
        wild = i or not dollar  # wildcards (and %u/%c) may match at this level
        if wild and node.rest[which] < best:
            best = node.rest[which]
        if i == n:
            if node.end[which] < best:
                best = node.end[which]
            continue
        level = levels[i]
        child = node.children.get(level)
        if child is not None:
            push((child, i + 1))
        if wild:
            if node.plus is not None:
                push((node.plus, i + 1))
            if node.user is not None and level == user:
                push((node.user, i + 1))
            if node.client is not None and level == client:
                push((node.client, i + 1))
    return best


def _dangerous(value: str | None) -> bool:
    return value is not None and ("+" in value or "#" in value)


def _level_value(value: str | None) -> str | None:
    """The value a %u / %c level matches, or None when it matches nothing."""
    if not value or "/" in value:
        return None
    return value


class _Effective(NamedTuple):
    """A rule as it applies to one client: `levels` substituted, or None with `note` saying
    why it matches nothing for that client."""

    rule: AclRule
    levels: tuple[str, ...] | None
    note: str


# ----------------------------------------------------------------------------- the ACL


class Acl:
    """The rules of an ACL file (see the module's docstring for the exact semantics)."""

    def __init__(
        self, rules: Iterable[AclRule], name: str = "<acl>", warnings: Iterable[str] = ()
    ) -> None:
        self.name = name
        self.rules: tuple[AclRule, ...] = tuple(rules)
        self.warnings: tuple[str, ...] = tuple(warnings)
        sections: dict[str | None, list[AclRule]] = {}
        patterns: list[AclRule] = []
        for rule in self.rules:
            if rule.kind == "pattern":
                patterns.append(rule)
            else:
                sections.setdefault(rule.user, []).append(rule)
        # consult order: denies first, then grants, each in file order
        self._sections = {
            user: sorted(rules, key=lambda r: r.rank) for user, rules in sections.items()
        }
        self._patterns = sorted(patterns, key=lambda r: r.rank)
        self._tries = {user: _build(rules) for user, rules in self._sections.items()}
        self._pattern_trie = _build(self._patterns) if self._patterns else None
        self._answers = functools.lru_cache(maxsize=_CACHE_SIZE)(self._decide)
        self._effective = functools.lru_cache(maxsize=1024)(self._effective_rules)

    # -- the checks

    def may_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        """Whether the client may publish to `topic` (a topic name; wildcards never match)."""
        if len(topic) <= _CACHE_TOPIC_CHARS:
            return self._answers(username, client_id, topic, _WRITE)
        return self._decide(username, client_id, topic, _WRITE)

    def may_read(self, username: str | None, client_id: str, topic: str) -> bool:
        """Whether a message published to `topic` may be delivered to the client."""
        if len(topic) <= _CACHE_TOPIC_CHARS:
            return self._answers(username, client_id, topic, _READ)
        return self._decide(username, client_id, topic, _READ)

    def may_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        """Whether a subscription to `topic_filter` could ever deliver a message: False when no
        topic the filter matches can pass `may_read`; True when some rule grants read access
        to some of them that no single earlier `deny` takes back (see the module's docstring:
        mosquitto itself accepts every subscription, so this refuses only hopeless ones).
        False for an invalid filter."""
        levels = _filter_levels(topic_filter)
        if levels is None:
            return False
        effective, skipped = self._effective(username, client_id)
        user_denies: list[tuple[str, ...]] = []
        all_denies: list[tuple[str, ...]] = []
        for eff in effective:
            if eff.rule.kind == "pattern" and skipped:
                break
            if eff.levels is None:
                continue
            rank = eff.rule.rank
            if rank == _USER_DENY:
                user_denies.append(eff.levels)
                all_denies.append(eff.levels)
            elif rank == _PATTERN_DENY:
                all_denies.append(eff.levels)
            elif eff.rule.grants(_READ):
                common = _intersect(levels, eff.levels)
                if common is None:
                    continue
                earlier = user_denies if rank == _USER_GRANT else all_denies
                if not any(_covers(d, common) for d in earlier):
                    return True
        return False

    def _decide(self, username: str | None, client_id: str, topic: str, which: int) -> bool:
        if not _topic_ok(topic):
            return False
        if username == "":
            username = None
        levels = topic.split("/")
        trie = self._tries.get(username)
        if trie is not None:
            rank = _walk(trie, levels, which, None, None)
            if rank != _NONE:
                return rank == _USER_GRANT
        if self._pattern_trie is None or _dangerous(username) or _dangerous(client_id):
            return False
        rank = _walk(
            self._pattern_trie, levels, which, _level_value(username), _level_value(client_id)
        )
        return rank == _PATTERN_GRANT

    # -- debugging

    def _effective_rules(
        self, username: str | None, client_id: str | None
    ) -> tuple[tuple[_Effective, ...], str | None]:
        """The rules that apply to the client in the order they are consulted, and why the
        patterns are all skipped for it, if they are."""
        if username == "":
            username = None
        out = [
            _Effective(rule, tuple(rule.topic.split("/")), "")
            for rule in self._sections.get(username, ())
        ]
        skipped = None
        if self._patterns and (_dangerous(username) or _dangerous(client_id)):
            which = "username" if _dangerous(username) else "client id"
            skipped = f"the {which} contains '+' or '#', so no pattern applies (as in mosquitto)"
        values = {"%u": username, "%c": client_id}
        for rule in self._patterns:
            levels: list[str] = []
            note = ""
            for i, level in enumerate(rule.topic.split("/")):
                if level in values and client_id is not None:
                    value = _level_value(values[level])
                    if value is None or (i == 0 and value[:1] == "$"):
                        what = "username" if level == "%u" else "client id"
                        shown = values[level]
                        note = (
                            f"no {what}" if shown is None
                            else f"{what} {shown!r} cannot be a topic level here"
                        )
                        break
                    level = value
                levels.append(level)
            out.append(_Effective(rule, None if note else tuple(levels), note))
        return tuple(out), skipped

    def rules_for(self, username: str | None, client_id: str | None = None) -> list[str]:
        """The rules that apply to a client, one line each, in the order they are consulted;
        with a `client_id`, patterns are shown substituted (or why they match nothing)."""
        effective, skipped = self._effective(username, client_id)
        lines: list[str] = []
        for eff in effective:
            if eff.rule.kind == "pattern" and skipped:
                lines.append(f"(patterns skipped: {skipped})")
                break
            text = str(eff.rule)
            if eff.note:
                text += f"  -> matches nothing: {eff.note}"
            elif eff.rule.kind == "pattern" and client_id is not None:
                text += f"  -> {'/'.join(eff.levels or ())}"
            lines.append(text)
        return lines

    def explain(
        self, username: str | None, client_id: str, topic: str, *, write: bool = False
    ) -> tuple[bool, str]:
        """(allowed, why) for reading (or, with `write=True`, publishing to) `topic`, by a
        plain walk over `rules_for`'s list: slow, for debugging and as the tests' reference."""
        which = _WRITE if write else _READ
        verb = "write" if write else "read"
        if not _topic_ok(topic):
            return False, "refused: not a valid topic name"
        topic_levels = topic.split("/")
        effective, skipped = self._effective(username, client_id)
        for eff in effective:
            if eff.rule.kind == "pattern" and skipped:
                return False, f"refused: {skipped}"
            if eff.levels is None or not eff.rule.grants(which):
                continue
            if _matches(eff.levels, topic_levels):
                if eff.rule.deny:
                    return False, f"refused by {eff.rule}"
                return True, f"allowed by {eff.rule}"
        return False, f"refused: no rule grants {verb} access (default deny)"

    @property
    def users(self) -> frozenset[str]:
        """The usernames that have a section."""
        return frozenset(u for u in self._sections if u is not None)

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"Acl({self.name!r}, {len(self.rules)} rules)"


# ----------------------------------------------------------------------------- the file


def _parse_lines(lines: Iterable[tuple[int, str]], name: str) -> Acl:
    user: str | None = None
    rules: list[AclRule] = []
    warnings: list[str] = []
    for number, line in lines:
        text = line.strip(_BLANKS)
        if not text or text.startswith("#"):
            continue

        def fail(problem: str, fix: str, number: int = number) -> AclFileError:
            return AclFileError(name, number, problem, fix)

        m = _WORD.fullmatch(text)
        assert m is not None  # text is stripped and not empty
        keyword, rest = m.group(1), (m.group(2) or "").strip(_BLANKS)
        if keyword == "user":
            if not rest:
                raise fail("'user' without a username", "write 'user USERNAME'")
            user = rest
            continue
        if keyword not in ("topic", "pattern"):
            raise fail(
                f"unknown keyword {keyword[:40]!r}",
                f"lines are {_FORMAT}; '#' starts a comment",
            )
        if not rest:
            raise fail(
                f"'{keyword}' without a topic",
                f"write '{keyword} [read|write|readwrite|deny] TOPIC'",
            )
        m = _WORD.fullmatch(rest)
        assert m is not None
        first, topic = m.group(1), (m.group(2) or "").strip(_BLANKS)
        access: Access
        if topic:
            if first not in _MASKS:
                raise fail(
                    f"unknown access type {first[:40]!r}",
                    "use read, write, readwrite or deny (lower case) before the topic "
                    "(a topic containing a space needs the access type)",
                )
            access = cast(Access, first)
        else:
            if first in _MASKS:
                raise fail(
                    f"'{keyword} {first}' has an access type but no topic",
                    f"write '{keyword} {first} TOPIC' (or '{keyword} readwrite {first}' for "
                    f"the topic named {first!r})",
                )
            access, topic = "readwrite", first
        problem = _filter_problem(topic)
        if problem is not None:
            raise fail(
                f"invalid topic filter: {problem}",
                "'+' and '#' must each be a whole level, '#' the last (e.g. 'a/+/c', 'a/#')",
            )
        levels = topic.split("/")
        if keyword == "pattern":
            for level in levels:
                if level not in ("%u", "%c") and ("%u" in level or "%c" in level):
                    raise fail(
                        f"'%u' and '%c' are substituted only as a whole topic level, not inside "
                        f"{level[:40]!r}",
                        "write them as a level of their own (e.g. 'sensor/%u/data'); mosquitto "
                        "versions treat text around them differently",
                    )
            if "%u" not in levels and "%c" not in levels:
                warnings.append(
                    f"{name} line {number}: pattern {topic!r} has no %u or %c level, so it "
                    "applies to every client alike (mosquitto warns about this too)"
                )
            rules.append(AclRule("pattern", access, topic, None, number))
        else:
            if "%u" in levels or "%c" in levels:
                warnings.append(
                    f"{name} line {number}: 'topic' lines do not substitute %u or %c "
                    f"({topic!r} is matched literally); use 'pattern' to substitute"
                )
            rules.append(AclRule("topic", access, topic, user, number))
    return Acl(rules, name, warnings)


def parse_acl(text: str, name: str = "<acl file>") -> Acl:
    """The rules of ACL-file `text`; `name` (the file's name) goes into error messages."""
    return _parse_lines(text_lines(text), name)


def load_acl_file(path: str | os.PathLike[str]) -> Acl:
    """Read and parse the ACL file at `path` (UTF-8). Raises `AclFileError`."""
    lines = file_lines(path, AclFileError, "the ACL file",
                       "save the file as UTF-8 (MQTT topics and usernames are UTF-8)")
    return _parse_lines(lines, os.fspath(path))
