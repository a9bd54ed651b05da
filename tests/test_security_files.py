"""router/security: mosquitto's password_file and acl_file.

Passwords are checked against files written by the real `mosquitto_passwd` (Debian's 2.0.11,
/usr/bin/mosquitto_passwd) and against vectors it wrote; the ACL semantics against a table
ported from mosquitto's own test (test/broker/09-acl-access-variants.py), hand-written cases,
property tests (the trie against a plain rule-by-rule walk, the topic matcher against paho's)
and, when /usr/sbin/mosquitto is installed, against the real broker on loopback. The
micro-benchmark prints µs per check (`pytest -s`).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import itertools
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.security import (
    Acl,
    AclFileError,
    PasswordFileError,
    PasswordHash,
    hash_password,
    load_acl_file,
    load_password_file,
    parse_acl,
    parse_password_file,
)
from router.security import acl as acl_module
from router.security import passwords as passwords_module

MOSQUITTO_PASSWD = "/usr/bin/mosquitto_passwd"
MOSQUITTO = "/usr/sbin/mosquitto"

needs_mosquitto_passwd = pytest.mark.skipif(
    not os.access(MOSQUITTO_PASSWD, os.X_OK),
    reason=f"{MOSQUITTO_PASSWD} is not installed (Debian package 'mosquitto')",
)
needs_mosquitto = pytest.mark.skipif(
    not os.access(MOSQUITTO, os.X_OK),
    reason=f"{MOSQUITTO} is not installed (Debian package 'mosquitto')",
)


def mosquitto_passwd(*args: str) -> None:
    subprocess.run([MOSQUITTO_PASSWD, *args], check=True, capture_output=True, timeout=30)


# ============================================================================ passwords

# Written by mosquitto_passwd 2.0.11 (Debian 12):
#   mosquitto_passwd -c -b f alice 'sécret pw'; mosquitto_passwd -H sha512 -b f bob hunter2
#   mosquitto_passwd -I 1000 -b f carol x;      mosquitto_passwd -b f dävid ''
MOSQUITTO_2_0_11_FILE = """\
alice:$7$101$hPTZUsXCPfFx4M3C$Ckr4IxbT9l6QjE276vm8nAYkkNmJOqrSU9r1ymiXZjw27na8RhZVazf1baUgE43yNVi1dbkMfTmntI2xg2pTLg==
bob:$6$2VwZQ21043PWNGcg$oE6zzPktLr259ElLRgV2ejAfKFV/FZFaq9O8AZuxaptiZFjH44PJl8rVjPXlsKcDax7BZIi7PM5sFUqqLOcKOg==
carol:$7$1000$KqyOXraV1JHamCVb$ea1iKoo5sp/+9T36kOqpkiEP48jIqQDy1eO69l4SeA1CuhG/AWTVuR9A0VTFhGeVok/Htei++SXXgH466hDXJw==
dävid:$7$101$YnnLxHu+meQTNkUL$Z07aP4qL0pJyAGwdu6W4rvF40F5jz7QrwLqXefYCBDdgIDLCrd0wFEb48G7GYdkJ4T54tw/fHvNMXhNzl2ke8w==
"""
SALT_B64 = base64.b64encode(bytes(range(12))).decode()
HASH_B64 = base64.b64encode(bytes(range(64))).decode()


def test_vectors_written_by_mosquitto_passwd_2_0_11() -> None:
    p = parse_password_file(MOSQUITTO_2_0_11_FILE, "vectors")
    assert len(p) == 4
    assert list(p) == ["alice", "bob", "carol", "dävid"]
    assert p.check("alice", "sécret pw")
    assert p.check("alice", "sécret pw".encode())
    assert not p.check("alice", "secret pw")
    assert p.check("bob", b"hunter2") and not p.check("bob", b"hunter3")
    assert p.check("carol", "x") and not p.check("carol", "X")
    # mosquitto_passwd writes an empty password, but the broker refuses it (see below)
    assert not p.check("dävid", b"") and not p.check("dävid", b" ")
    entry = p.entry("dävid")
    assert entry is not None and entry.matches(b"")
    entries = {u: p.entry(u) for u in p}
    assert entries["bob"] is not None and entries["bob"].scheme == "sha512"
    assert entries["carol"] is not None and entries["carol"].iterations == 1000
    assert entries["alice"] is not None and entries["alice"].iterations == 101


def test_the_two_formulas_written_out() -> None:
    """$6$ is SHA-512(password + salt), one pass; $7$ is PBKDF2-HMAC-SHA512, 64 bytes."""
    salt = b"0123456789ab"
    six = f"$6${base64.b64encode(salt).decode()}$" + base64.b64encode(
        hashlib.sha512(b"pw" + salt).digest()
    ).decode()
    seven = f"$7$5${base64.b64encode(salt).decode()}$" + base64.b64encode(
        hashlib.pbkdf2_hmac("sha512", b"pw", salt, 5, 64)
    ).decode()
    p = parse_password_file(f"six:{six}\nseven:{seven}\n")
    assert p.check("six", "pw") and p.check("seven", "pw")
    assert not p.check("six", "pW") and not p.check("seven", "pw ")
    assert hash_password("pw", scheme="sha512", salt=salt) == six
    assert hash_password("pw", iterations=5, salt=salt) == seven


@needs_mosquitto_passwd
def test_mosquitto_passwd_default_is_pbkdf2_with_101_iterations(tmp_path: Path) -> None:
    f = tmp_path / "users.txt"
    mosquitto_passwd("-c", "-b", str(f), "alice", "correct horse")
    assert f.read_text().startswith("alice:$7$101$")
    p = load_password_file(f)
    assert len(p) == 1 and "alice" in p and "bob" not in p
    assert p.check("alice", "correct horse")
    assert p.check("alice", b"correct horse")
    assert not p.check("alice", "correct horse ")
    assert not p.check("alice", "")
    assert not p.check("Alice", "correct horse")  # usernames are exact
    assert not p.check("bob", "correct horse")


@needs_mosquitto_passwd
@pytest.mark.parametrize(
    ("options", "prefix"),
    [
        (["-H", "sha512"], "$6$"),
        (["-H", "sha512-pbkdf2"], "$7$101$"),
        (["-I", "1000"], "$7$1000$"),
        (["-H", "sha512-pbkdf2", "-I", "3"], "$7$3$"),
    ],
)
def test_mosquitto_passwd_hash_options(tmp_path: Path, options: list[str], prefix: str) -> None:
    f = tmp_path / "users.txt"
    mosquitto_passwd(*options, "-c", "-b", str(f), "u", "pass word")
    assert f.read_text().startswith("u:" + prefix)
    p = load_password_file(str(f))
    assert p.check("u", "pass word")
    assert not p.check("u", "pass  word")
    assert not p.check("v", "pass word")


@needs_mosquitto_passwd
def test_mosquitto_passwd_awkward_usernames_and_passwords(tmp_path: Path) -> None:
    f = tmp_path / "users.txt"
    users = {
        "plain": "p",
        "émile": "mot de passe à 🔑",
        "with space": "a:b$c$d:e",
        "empty": "",
        "long": "x" * 1000,
        "dollar$": "$7$101$notahash",
    }
    first = True
    for user, password in users.items():
        mosquitto_passwd(*(["-c"] if first else []), "-b", str(f), user, password)
        first = False
    p = load_password_file(f)
    assert len(p) == len(users)
    for user, password in users.items():
        assert p.check(user, password) is (password != ""), user
        assert not p.check(user, password + "x"), user
    assert not p.check("with", "a:b$c$d:e")


@needs_mosquitto_passwd
def test_mosquitto_passwd_update_and_delete(tmp_path: Path) -> None:
    f = tmp_path / "users.txt"
    mosquitto_passwd("-c", "-b", str(f), "alice", "one")
    mosquitto_passwd("-b", str(f), "bob", "two")
    mosquitto_passwd("-b", str(f), "alice", "three")
    p = load_password_file(f)
    assert not p.check("alice", "one") and p.check("alice", "three") and p.check("bob", "two")
    mosquitto_passwd("-D", str(f), "alice")
    p = load_password_file(f)
    assert "alice" not in p and not p.check("alice", "three") and p.check("bob", "two")


@needs_mosquitto_passwd
def test_plain_text_file_is_refused_then_mosquitto_passwd_U_fixes_it(tmp_path: Path) -> None:
    f = tmp_path / "users.txt"
    # (mosquitto_passwd 2.0.11 calls a file with a comment or blank line "corrupt" when it
    # updates it, so this one has none; the broker and this reader skip them)
    f.write_text("alice:hunter2\nbob:s3cret\n")
    with pytest.raises(PasswordFileError) as caught:
        load_password_file(f)
    message = str(caught.value)
    assert message.startswith(f"{f} line 1: the password is not hashed")
    assert "mosquitto_passwd -U" in message
    assert "hunter2" not in message  # never quote a password
    mosquitto_passwd("-U", str(f))
    p = load_password_file(f)
    assert p.check("alice", "hunter2") and p.check("bob", "s3cret")


def test_comments_blank_lines_crlf_bom_and_blanks_around_fields() -> None:
    line = f"$7$101${SALT_B64}${HASH_B64}"
    text = f"\ufeff# comment\n\n   \r\n  alice  :  {line}  \r\n#bob:{line}\n\tcarol:{line}\n"
    p = parse_password_file(text)
    assert list(p) == ["alice", "carol"]
    assert "bob" not in p


def test_empty_file_has_no_users() -> None:
    p = parse_password_file("")
    assert len(p) == 0 and not p.check("anyone", "x")


GOOD = f"$7$101${SALT_B64}${HASH_B64}"


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("alice", "no ':' between username and password hash"),
        (f":{GOOD}", "empty username"),
        ("alice:", "user 'alice' has no password hash; set a password with mosquitto_passwd"),
        ("alice:   ", "has no password hash"),
        ("alice:hunter2", "the password is not hashed"),
        ("alice:$9$abc$def", "unknown hash format '$9$' for user 'alice'; create the entry with"),
        ("alice:$2b$10$abcdefghijklmnopqrstuv", "unknown hash format '$2b$'"),
        (f"alice:$7${SALT_B64}${HASH_B64}", "malformed '$7$' hash"),
        (f"alice:$7$101${SALT_B64}${HASH_B64}$x", "malformed '$7$' hash"),
        (f"alice:$6$101${SALT_B64}${HASH_B64}", "malformed '$6$' hash"),
        (f"alice:$7$0${SALT_B64}${HASH_B64}", "iteration count is 0"),
        (f"alice:$7$-5${SALT_B64}${HASH_B64}", "is not a number"),
        (f"alice:$7$abc${SALT_B64}${HASH_B64}", "is not a number"),
        (f"alice:$7$10000001${SALT_B64}${HASH_B64}", "above the limit of 10,000,000"),
        (f"alice:$7${'9' * 5000}${SALT_B64}${HASH_B64}", "above the limit of 10,000,000"),
        (f"alice:$7$101$!!!!${HASH_B64}", "salt of the '$7$' hash is not valid base64"),
        (f"alice:$7$101${SALT_B64}$AAA", "hash of the '$7$' hash is not valid base64"),
        (
            f"alice:$7$101${base64.b64encode(bytes(16)).decode()}${HASH_B64}",
            "salt of the '$7$' hash is 16 bytes, not 12",
        ),
        (
            f"alice:$6${SALT_B64}${base64.b64encode(bytes(32)).decode()}",
            "hash of the '$6$' hash is 32 bytes, not 64",
        ),
        (f"alice:{GOOD}:extra", "unexpected ':' after the password hash"),
        (f"first:{GOOD}", "user 'first' is listed twice (first on line 1)"),
        (f"{'u' * 65536}:{GOOD}", "username longer than 65535 bytes"),
    ],
)
def test_malformed_lines_name_the_file_line_problem_and_fix(bad_line: str, expected: str) -> None:
    text = f"first:{GOOD}\n# a comment\n{bad_line}\nlast:{GOOD}\n"
    with pytest.raises(PasswordFileError) as caught:
        parse_password_file(text, "users.txt")
    error = caught.value
    assert str(error).startswith("users.txt line 3: ")
    assert expected in str(error)
    assert error.line == 3 and error.name == "users.txt"
    assert "; " in str(error)  # a fix follows the problem
    assert isinstance(error, ValueError)
    assert HASH_B64 not in str(error)


def test_unknown_format_message_matches_the_brief() -> None:
    with pytest.raises(PasswordFileError, match=r"^users\.txt line 1: unknown hash format "
                       r"'\$9\$' for user 'carol'; create the entry with mosquitto_passwd"):
        parse_password_file("carol:$9$xyz\n", "users.txt")


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(PasswordFileError, match=r"nope\.txt: cannot read the password file"):
        load_password_file(missing)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(f"a:{GOOD}\n".encode() + "é:x\n".encode("latin-1"))
    with pytest.raises(PasswordFileError, match=r"latin1\.txt line 2: the line is not valid UTF-8"):
        load_password_file(bad)


@pytest.fixture
def pbkdf2_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The iteration counts of every PBKDF2 computed while the test runs."""
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def spy(name: str, password: bytes, salt: bytes, iterations: int, dklen: int) -> bytes:
        calls.append(iterations)
        return real(name, password, salt, iterations, dklen)

    monkeypatch.setattr(passwords_module.hashlib, "pbkdf2_hmac", spy)
    return calls


def test_unknown_user_costs_a_hash_like_a_known_one(pbkdf2_calls: list[int]) -> None:
    text = "\n".join(
        [f"a:{hash_password('x', iterations=50)}"]
        + [f"u{i}:{hash_password('x', iterations=101)}" for i in range(3)]
        + [f"big:{hash_password('x', iterations=2000)}"]
    )
    p = parse_password_file(text)
    pbkdf2_calls.clear()
    assert not p.check("nobody", "x")
    assert pbkdf2_calls == [101]  # the count most entries use
    assert p.check("u1", "x") and not p.check("u1", "y")
    assert pbkdf2_calls == [101, 101, 101]


def test_unknown_user_in_a_sha512_file_uses_sha512(pbkdf2_calls: list[int]) -> None:
    p = parse_password_file(f"a:{hash_password('x', scheme='sha512')}\n")
    assert not p.check("b", "x")
    assert pbkdf2_calls == []
    assert p._dummy.scheme == "sha512"


def test_absurd_input_is_refused_without_hashing(pbkdf2_calls: list[int]) -> None:
    p = parse_password_file(f"alice:{hash_password('x')}\n")
    pbkdf2_calls.clear()
    assert not p.check("alice", b"x" * 65536)
    assert not p.check("a" * 65536, "x")
    assert not p.check("é" * 40000, "x")  # 80,000 bytes
    assert not p.check("alice", "\ud800")  # not encodable
    assert not p.check("\udfff", "x")
    assert pbkdf2_calls == []
    assert not p.check("alice", b"x" * 65535)  # at the limit: hashed, wrong
    assert pbkdf2_calls == [101]


def test_a_password_with_nul_is_refused() -> None:
    """mosquitto hashes up to the NUL (C string), so b"x\\0junk" would pass as b"x"."""
    six = hash_password("x", scheme="sha512")
    p = parse_password_file(f"alice:{hash_password('x')}\nbob:{six}")
    assert p.check("alice", b"x") and p.check("bob", b"x")
    assert not p.check("alice", b"x\0junk") and not p.check("bob", b"x\0")
    with pytest.raises(ValueError, match="NUL"):
        hash_password(b"x\0y")


def test_hash_password_and_encode_round_trip() -> None:
    text = hash_password("pw")
    assert text.startswith("$7$101$") and len(text.split("$")[3]) == 16
    entry = PasswordHash.parse(text)
    assert entry.encode() == text and entry.matches(b"pw") and not entry.matches(b"pW")
    six = hash_password(b"pw", scheme="sha512")
    assert six.startswith("$6$") and PasswordHash.parse(six).matches(b"pw")
    assert hash_password("pw") != hash_password("pw")  # fresh salts
    for bad in ({"iterations": 0}, {"iterations": 10_000_001}, {"salt": b"short"}):
        with pytest.raises(ValueError):
            hash_password("pw", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        hash_password("pw", scheme="md5")  # type: ignore[arg-type]


def test_nothing_secret_in_reprs() -> None:
    text = hash_password("pw")
    digest_b64 = text.split("$")[4]
    entry = PasswordHash.parse(text)
    assert digest_b64 not in repr(entry) and "digest" not in repr(entry)
    p = parse_password_file(f"alice:{text}", "users.txt")
    assert repr(p) == "Passwords('users.txt', 1 users)"


@settings(max_examples=40, deadline=None)
@given(
    password=st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b),
    scheme=st.sampled_from(["sha512", "sha512-pbkdf2"]),
    iterations=st.integers(1, 20),
    flip=st.integers(0, 1000),
)
def test_property_hash_then_check(password: bytes, scheme: Any, iterations: int, flip: int) -> None:
    p = parse_password_file(f"u:{hash_password(password, scheme=scheme, iterations=iterations)}")
    assert p.check("u", password)
    other = bytearray(password)
    other[flip % len(other)] ^= 0x20
    assert not p.check("u", bytes(other)) or bytes(other) == password
    assert not p.check("v", password)


# ============================================================================ ACL: parsing


def test_access_types_and_default_readwrite() -> None:
    acl = parse_acl(
        "topic read r\ntopic write w\ntopic readwrite rw\ntopic plain\ntopic deny d\n"
    )
    table = {
        "r": (True, False), "w": (False, True), "rw": (True, True), "plain": (True, True),
        "d": (False, False), "other": (False, False),
    }
    for topic, (read, write) in table.items():
        assert acl.may_read(None, "c", topic) is read, topic
        assert acl.may_publish(None, "c", topic) is write, topic


def test_topics_may_contain_spaces_and_tabs_separate_words() -> None:
    acl = parse_acl("topic read a b/c d\ntopic\twrite\tx y\nuser  john smith \ntopic t\n")
    assert acl.may_read(None, "c", "a b/c d") and not acl.may_read(None, "c", "a")
    assert acl.may_publish(None, "c", "x y")
    assert acl.users == {"john smith"}
    assert acl.may_read("john smith", "c", "t")


def test_comments_blank_lines_crlf_and_bom() -> None:
    acl = parse_acl(
        "\ufeff# c\r\n\r\n   # indented comment\r\ntopic read a\r\n  topic read b  \r\n"
    )
    assert len(acl) == 2
    assert acl.may_read(None, "c", "a") and acl.may_read(None, "c", "b")
    assert [r.line for r in acl.rules] == [4, 5]


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        ("topics read a", "unknown keyword 'topics'"),
        ("READ a", "unknown keyword 'READ'"),
        ("topic", "'topic' without a topic"),
        ("pattern   ", "'pattern' without a topic"),
        ("topic READ a", "unknown access type 'READ'; use read, write, readwrite or deny"),
        ("topic reed a/b", "unknown access type 'reed'"),
        ("topic a b", "unknown access type 'a'"),
        ("topic read", "'topic read' has an access type but no topic"),
        ("pattern deny", "'pattern deny' has an access type but no topic"),
        ("topic read a/#/b", "'#' is not the last level"),
        ("topic read a/b#", "must each be a whole topic level"),
        ("topic a+", "must each be a whole topic level"),
        ("pattern read a/+x/%u", "must each be a whole topic level"),
        ("user", "'user' without a username"),
        ("user    ", "'user' without a username"),
        ("pattern read users/x%u/#", "only as a whole topic level, not inside 'x%u'"),
        ("pattern read users/%c%u", "not inside '%c%u'"),
        (f"topic read {'a' * 65536}", "longer than 65535 bytes"),
    ],
)
def test_malformed_acl_lines_name_the_file_line_problem_and_fix(
    bad_line: str, expected: str
) -> None:
    text = f"topic read ok\n# comment\n{bad_line}\ntopic read later\n"
    with pytest.raises(AclFileError) as caught:
        parse_acl(text, "acl.conf")
    error = caught.value
    assert str(error).startswith("acl.conf line 3: "), str(error)
    assert expected in str(error)
    assert error.line == 3 and error.name == "acl.conf" and isinstance(error, ValueError)
    assert "; " in str(error)


def test_load_acl_file(tmp_path: Path) -> None:
    f = tmp_path / "acl.conf"
    f.write_text("user alice\ntopic read a/#\n")
    acl = load_acl_file(f)
    assert acl.name == str(f) and acl.may_read("alice", "c", "a/b")
    with pytest.raises(AclFileError, match=r"missing\.conf: cannot read the ACL file"):
        load_acl_file(tmp_path / "missing.conf")
    f.write_bytes(b"topic read a\ntopic read \xe9\n")
    with pytest.raises(AclFileError, match=r"acl\.conf line 2: the line is not valid UTF-8"):
        load_acl_file(str(f))


def test_warnings_for_patterns_without_substitution_and_topics_with_it() -> None:
    acl = parse_acl("pattern read all/#\ntopic read x/%u\npattern read y/%u\n", "acl.conf")
    assert len(acl.warnings) == 2
    assert acl.warnings[0].startswith("acl.conf line 1: pattern 'all/#' has no %u or %c")
    assert acl.warnings[1].startswith("acl.conf line 2: 'topic' lines do not substitute")
    # and the topic line is literal
    assert acl.may_read(None, "c", "x/%u") and not acl.may_read("u", "c", "x/u")


def test_empty_file_refuses_everything() -> None:
    """mosquitto since CVE-2018-12550: an empty ACL file is not 'no ACL'."""
    for text in ("", "# only a comment\n\n"):
        acl = parse_acl(text)
        assert len(acl) == 0
        assert not acl.may_read(None, "c", "a") and not acl.may_publish("u", "c", "a")
        assert not acl.may_subscribe(None, "c", "#")


# ============================================================================ ACL: semantics


def _variants_acl(global_en: bool, user_en: bool, pattern_en: bool) -> Acl:
    """The ACL of mosquitto's test/broker/09-acl-access-variants.py (v2.0.11)."""
    lines = []
    if global_en:
        lines += ["topic readwrite topic/global/#", "topic deny      topic/global/except"]
    if user_en:
        lines += ["user username", "topic readwrite topic/username/#",
                  "topic deny      topic/username/except"]
    if pattern_en:
        lines += ["pattern readwrite pattern/%u/#", "pattern deny      pattern/%u/except"]
    return parse_acl("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("global_en", "user_en", "pattern_en"),
    [(False, False, True), (False, True, False), (True, False, False), (False, True, True),
     (True, False, True), (True, True, True)],
)
def test_mosquitto_acl_access_variants(global_en: bool, user_en: bool, pattern_en: bool) -> None:
    """Ported from mosquitto's 09-acl-access-variants.py: (username, topic, expect_deny); the
    client publishes and subscribes to the same topic, so both accesses are checked."""
    acl = _variants_acl(global_en, user_en, pattern_en)
    cases: list[tuple[str | None, str, bool]] = []
    if global_en:
        cases += [(None, "topic/global", False), ("username", "topic/global", True),
                  (None, "topic/global/except", True)]
    if user_en:
        cases += [(None, "topic/username", True), ("username", "topic/username", False),
                  ("username", "topic/username/except", True)]
    if pattern_en:
        cases += [(None, "pattern/username", True), ("username", "pattern/username", False),
                  ("username", "pattern/username/except", True)]
    for username, topic, expect_deny in cases:
        allowed = acl.may_publish(username, "acl-check", topic) and acl.may_read(
            username, "acl-check", topic
        )
        assert allowed is not expect_deny, (username, topic)


SEMANTICS_ACL = """\
# anonymous clients
topic read pub/#
topic deny pub/secret
user alice
topic readwrite alice/#
topic read users/alice/private
user bob
topic deny pub/#
user alice
topic deny alice/locked/#
topic write pub/news
pattern readwrite users/%u/#
pattern deny users/%u/private
pattern read clients/%c/#
pattern read everyone/#
pattern deny everyone/private
"""


@pytest.fixture(scope="module")
def sem() -> Acl:
    return parse_acl(SEMANTICS_ACL, "semantics.acl")


def test_anonymous_section_is_for_clients_without_username(sem: Acl) -> None:
    assert sem.may_read(None, "c", "pub/a") and not sem.may_read(None, "c", "pub/secret")
    assert not sem.may_publish(None, "c", "pub/a")
    # a client with a username never falls back to the anonymous rules
    assert not sem.may_read("carol", "c", "pub/a")
    assert not sem.may_read("alice", "c", "pub/a")
    # mosquitto reads an empty username as none: anonymous
    assert sem.may_read("", "c", "pub/a") and not sem.may_read("", "c", "pub/secret")


def test_user_sections_merge_and_deny_comes_first_whatever_the_order(sem: Acl) -> None:
    assert sem.may_publish("alice", "c", "alice/x") and sem.may_read("alice", "c", "alice/x")
    assert sem.may_read("alice", "c", "alice")  # 'alice/#' matches its parent
    # 'topic deny alice/locked/#' comes after the grant, in a second 'user alice' section
    assert not sem.may_read("alice", "c", "alice/locked")
    assert not sem.may_publish("alice", "c", "alice/locked/x")
    assert sem.may_publish("alice", "c", "pub/news") and not sem.may_read("alice", "c", "pub/news")
    assert not sem.may_read("bob", "c", "pub/x")


def test_section_rules_come_before_patterns(sem: Acl) -> None:
    # a section grant wins over a pattern deny (mosquitto consults the section first)...
    assert sem.may_read("alice", "c", "users/alice/private")
    assert not sem.may_read("dave", "c", "users/dave/private")
    assert sem.may_read("dave", "c", "users/dave/other")
    # ...and a section deny over a pattern grant
    assert not sem.may_read("bob", "c", "pub/x")
    acl = parse_acl("user bob\ntopic deny users/bob/x\npattern readwrite users/%u/#\n")
    assert not acl.may_read("bob", "c", "users/bob/x") and acl.may_read("bob", "c", "users/bob/y")
    # a section rule that grants only the other access is passed over, patterns decide
    acl = parse_acl("user bob\ntopic write a\npattern read a\n")
    assert acl.may_read("bob", "c", "a") and acl.may_publish("bob", "c", "a")


def test_pattern_substitution(sem: Acl) -> None:
    assert sem.may_publish("carol", "c", "users/carol/x")
    assert sem.may_publish("carol", "c", "users/carol")
    assert not sem.may_publish("carol", "c", "users/dave/x")
    assert not sem.may_publish("carol", "c", "users/%u/x")
    assert sem.may_read("carol", "c9", "clients/c9/a")
    assert not sem.may_read("carol", "c9", "clients/c8")
    assert not sem.may_publish("carol", "c9", "clients/c9/a")
    # anonymous: %u patterns are skipped, %c ones apply
    assert sem.may_read(None, "c9", "clients/c9/a")
    assert not sem.may_read(None, "c9", "users/None/x")
    # the username is not the client id
    assert not sem.may_read("c9", "zz", "clients/c9/a")


def test_patterns_without_substitution_apply_to_everyone(sem: Acl) -> None:
    for username in (None, "alice", "carol"):
        assert sem.may_read(username, "c", "everyone/x")
        assert not sem.may_read(username, "c", "everyone/private")


@pytest.mark.parametrize("username, client_id", [("mal+", "c"), ("m#", "c"), ("ok", "c+"),
                                                 ("ok", "#"), (None, "+")])
def test_plus_or_hash_in_username_or_client_id_disables_every_pattern(
    username: str | None, client_id: str
) -> None:
    """mosquitto's CVE-2017-7650 fix: no pattern applies, not even one without %u/%c; the
    client's section still does."""
    acl = parse_acl(
        "topic read anon\nuser mal+\ntopic read own\nuser ok\ntopic read own\nuser m#\n"
        "topic read own\npattern read everyone/#\npattern read u/%u/#\npattern read c/%c/#\n"
    )
    assert not acl.may_read(username, client_id, "everyone/x")
    assert not acl.may_read(username, client_id, f"u/{username}/x")
    assert not acl.may_read(username, client_id, f"c/{client_id}")
    if username is not None:
        assert acl.may_read(username, client_id, "own")
    assert not acl.may_subscribe(username, client_id, "everyone/#")
    assert "patterns skipped" in acl.rules_for(username, client_id)[-1]
    assert acl.explain(username, client_id, "everyone/x")[1].startswith("refused: the ")


def test_slash_empty_or_dollar_values_match_nothing() -> None:
    """A %u / %c level matches one topic level equal to the value: 'a/b' can never widen
    'users/%u/#' into user 'a''s tree; '' and a leading '$' match nothing."""
    acl = parse_acl("pattern readwrite users/%u/#\npattern readwrite %c/#\npattern read all/#\n")
    assert acl.may_publish("a", "c", "users/a/b/x")
    assert not acl.may_publish("a/b", "c", "users/a/b/x")
    assert not acl.may_publish("a/b", "c", "users/a/b")
    assert not acl.may_publish("", "c", "users//x")  # '' is anonymous
    assert acl.may_publish("a/b", "cid", "cid/x")  # other patterns still apply
    assert not acl.may_publish("u", "x/y", "x/y/z")
    assert not acl.may_publish("u", "", "/z")
    assert not acl.may_publish("u", "$SYS", "$SYS/x")
    assert acl.may_read("a/b", "x/y", "all/1")
    assert not acl.may_subscribe("a/b", "c", "users/a/b/#")
    assert not acl.may_subscribe("u", "$SYS", "$SYS/#")
    assert any("cannot be a topic level" in line for line in acl.rules_for("a/b", "c"))


@pytest.mark.parametrize(
    ("rule", "topic", "expected"),
    [
        ("a/+/c", "a/b/c", True),
        ("a/+/c", "a//c", True),
        ("a/+/c", "a/b/c/d", False),
        ("a/+", "a", False),
        ("a/+", "a/", True),
        ("+/+", "/", True),
        ("+", "a", True),
        ("+", "a/b", False),
        ("a/#", "a", True),
        ("a/#", "a/b/c", True),
        ("a/#", "ab", False),
        ("#", "a/b", True),
        ("#", "/", True),
        ("#", "$SYS/x", False),
        ("+/x", "$SYS/x", False),
        ("+/#", "$SYS", False),
        ("$SYS/#", "$SYS/broker/load", True),
        ("$SYS/+/load", "$SYS/broker/load", True),
        ("$SYS", "$SYS", True),
        ("a/$b", "a/$b", True),
        ("a/+", "a/$b", True),  # the '$' rule is about the first level only
        ("A", "a", False),
        ("a/b", "a/b/", False),
    ],
)
def test_topic_matching(rule: str, topic: str, expected: bool) -> None:
    for text, user in ((f"topic read {rule}\n", None), (f"user u\ntopic read {rule}\n", "u"),
                       (f"pattern read {rule}\n", "u")):
        acl = parse_acl(text)
        assert acl.may_read(user, "c", topic) is expected, (text, topic)
    assert paho.topic_matches_sub(rule, topic) is expected


def test_topics_with_wildcards_or_nothing_match_nothing() -> None:
    acl = parse_acl("topic readwrite #\npattern readwrite #\n")
    assert acl.may_publish(None, "c", "a/b")
    for topic in ("", "a/+", "#", "a/#", "a+b", "x#"):
        assert not acl.may_publish(None, "c", topic) and not acl.may_read(None, "c", topic)
    big = "a/" * 40000
    assert not acl.may_read(None, "c", big)  # over 65535 bytes
    assert acl.may_read(None, "c", "a/" * 300 + "b")  # long, not cached, allowed


def test_sys_topics_need_a_rule_that_names_them() -> None:
    acl = parse_acl(
        "topic read #\nuser admin\ntopic read $SYS/#\n"
        "pattern write $SYS/broker/connection/%c/state\n"
    )
    assert acl.may_read(None, "c", "a") and not acl.may_read(None, "c", "$SYS/broker/uptime")
    assert acl.may_read("admin", "c", "$SYS/broker/uptime")
    assert acl.may_publish("x", "bridge1", "$SYS/broker/connection/bridge1/state")
    assert not acl.may_publish("x", "bridge1", "$SYS/broker/connection/bridge2/state")
    assert not acl.may_subscribe(None, "c", "$SYS/#")
    assert acl.may_subscribe("admin", "c", "$SYS/#")


def test_may_subscribe() -> None:
    acl = parse_acl(
        "user u\ntopic read a/b/c\ntopic write w/#\ntopic deny d/#\ntopic read d/x\n"
        "topic read e/#\ntopic deny e/+\ntopic deny e/#\n"
        "pattern read p/%u/#\npattern deny p/%u/no/#\npattern deny a/b/#\n"
    )
    can = [
        "a/b/c", "a/+/c", "a/#", "#", "+/+/+", "+/b/#", "p/u", "p/u/x", "p/+/x", "p/#",
        "p/u/no2/#", "+/+",  # '+/+' reaches 'p/u' ('p/%u/#' matches its parent)
    ]
    cannot = [
        "a/b", "a/b/c/d", "a/+", "w/#", "w/x", "d/x", "d/#", "e/#", "e/x", "e",
        "p/v/#", "p/u/no/#", "p/u/no", "x/#", "$SYS/#", "+", "a/#/b", "a/b+", "",
    ]
    for f in can:
        assert acl.may_subscribe("u", "c", f), f
    for f in cannot:
        assert not acl.may_subscribe("u", "c", f), f
    # a section grant is not taken back by a pattern deny (a/b/c), a pattern grant is
    assert acl.may_read("u", "c", "a/b/c")
    # anonymous / unknown users have no section here
    assert not acl.may_subscribe(None, "c", "#") and acl.may_subscribe("v", "c", "p/v/#")


def test_may_subscribe_may_accept_what_several_denies_refuse_together() -> None:
    """Documented approximation: only single denies are tested for covering the grant."""
    acl = parse_acl("topic read a/+\ntopic deny a/x\ntopic deny a/+\n")
    assert not acl.may_subscribe(None, "c", "a/#")  # one deny covers it
    acl = parse_acl("topic read a/#\ntopic deny a\ntopic deny a/+/#\n")
    assert acl.may_subscribe(None, "c", "a/#")  # the two together cover it...
    assert not any(acl.may_read(None, "c", t) for t in ("a", "a/b", "a/b/c"))  # ...reads don't


def test_rules_for_and_explain(sem: Acl) -> None:
    lines = sem.rules_for("alice", "cl")
    assert lines[0].startswith("line 10 (user 'alice', topic): deny alice/locked/#")
    assert lines[1].startswith("line 5 (user 'alice', topic): readwrite alice/#")
    assert "line 13 (pattern): deny users/%u/private  -> users/alice/private" in lines
    assert "line 12 (pattern): readwrite users/%u/#  -> users/alice/#" in lines
    assert sem.rules_for(None)[0].startswith("line 3 (anonymous, topic): deny pub/secret")
    assert any("matches nothing: no username" in line for line in sem.rules_for(None, "c"))
    assert sem.explain("alice", "c", "alice/locked/x") == (
        False, "refused by line 10 (user 'alice', topic): deny alice/locked/#"
    )
    allowed, why = sem.explain("carol", "c", "users/carol/x", write=True)
    assert allowed and why == "allowed by line 12 (pattern): readwrite users/%u/#"
    assert sem.explain("carol", "c", "nope") == (
        False, "refused: no rule grants read access (default deny)"
    )
    assert sem.explain("carol", "c", "a/+") == (False, "refused: not a valid topic name")
    assert repr(sem) == "Acl('semantics.acl', 12 rules)"


def test_answers_are_cached_and_stay_right(sem: Acl) -> None:
    for _ in range(3):
        assert sem.may_read("alice", "c", "alice/x")
        assert not sem.may_read("alice", "c", "alice/locked/x")
        assert sem.may_publish("alice", "c", "alice/x")
        assert not sem.may_publish("alice", "c", "pub/x")
    info = sem._answers.cache_info()
    assert info.hits >= 8


# ============================================================================ ACL: properties

FILTER_LEVELS = ["a", "b", "$x", "u1", "+"]


def _filters(
    base: list[str] = FILTER_LEVELS, extra: list[str] | None = None
) -> st.SearchStrategy[str]:
    level = st.sampled_from(base + (extra or []))
    return st.builds(
        lambda levels, hash_: "/".join(levels + (["#"] if hash_ else [])),
        st.lists(level, min_size=0, max_size=3),
        st.booleans(),
    ).filter(lambda f: f != "" and len(f.split("/")) <= 3)


@functools.cache
def _universe(levels: tuple[str, ...], longest: int) -> list[list[str]]:
    """Every topic of 1 to `longest` levels drawn from `levels`."""
    out: list[list[str]] = []
    for n in range(1, longest + 1):
        out += [list(t) for t in itertools.product(levels, repeat=n)]
    return out


def _acl_universe(*values: str | None) -> list[list[str]]:
    """Topics of up to 3 levels made of every level the rules, the username and the client
    id can name (and 'c', which none does)."""
    levels = ["a", "b", "$x", "u1", "%u", "%c", "c"]
    levels += [v for v in values if v and "/" not in v and v not in levels]
    return _universe(tuple(levels), 3)


UNIVERSE3 = _acl_universe()
# filters of up to 3 levels from SMALL_FILTER_LEVELS: a topic of up to 4 levels from these
# levels (with 'c', which no filter names) tells apart any two that differ
SMALL_FILTER_LEVELS = ["a", "b", "$x", "+"]
UNIVERSE4 = _universe(("a", "b", "$x", "c"), 4)

_rule = st.tuples(
    st.sampled_from(["topic", "pattern"]),
    st.sampled_from(["read", "write", "readwrite", "deny", ""]),
    _filters(extra=["%u", "%c"]),
    st.sampled_from([None, "u1", "u2", "a"]),
)
_users = st.sampled_from([None, "u1", "u2", "a", "", "u1/x", "x+", "$x", "c1"])
_clients = st.sampled_from(["c1", "a", "", "c1/a", "c#", "$x", "u1"])


def _acl_text(rules: list[tuple[str, str, str, str | None]]) -> str:
    anonymous = [r for r in rules if r[0] == "topic" and r[3] is None]
    others = [r for r in rules if r not in anonymous]
    lines = [f"topic {access} {topic}".replace("  ", " ") for _, access, topic, _ in anonymous]
    for kind, access, topic, user in others:
        if kind == "topic":
            lines.append(f"user {user}")
        lines.append(f"{kind} {access} {topic}".replace("  ", " "))
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(_rule, max_size=12), username=_users, client_id=_clients,
       topics=st.lists(st.sampled_from(UNIVERSE3), min_size=1, max_size=20))
def test_property_trie_agrees_with_the_rule_by_rule_walk(
    rules: list[tuple[str, str, str, str | None]], username: str | None, client_id: str,
    topics: list[list[str]],
) -> None:
    acl = parse_acl(_acl_text(rules))
    for levels in topics:
        topic = "/".join(levels)
        for write in (False, True):
            expected, why = acl.explain(username, client_id, topic, write=write)
            check = acl.may_publish if write else acl.may_read
            assert check(username, client_id, topic) is expected, (topic, write, why)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rules=st.lists(_rule, max_size=8), username=_users, client_id=_clients,
       topic_filter=_filters())
def test_property_may_subscribe_never_refuses_a_readable_topic(
    rules: list[tuple[str, str, str, str | None]], username: str | None, client_id: str,
    topic_filter: str,
) -> None:
    acl = parse_acl(_acl_text(rules))
    flevels = topic_filter.split("/")
    readable = [
        t for t in _acl_universe(username, client_id)
        if acl_module._matches(flevels, t) and acl.may_read(username, client_id, "/".join(t))
    ]
    allowed = acl.may_subscribe(username, client_id, topic_filter)
    if readable:
        assert allowed, (topic_filter, readable[:3])
    if not any(access == "deny" for _, access, _, _ in rules):
        # without denies the answer is exact: a grant that intersects gives a readable topic
        assert allowed is bool(readable), topic_filter


@settings(max_examples=300, deadline=None)
@given(a=_filters(SMALL_FILTER_LEVELS), b=_filters(SMALL_FILTER_LEVELS))
def test_property_intersection_is_exact(a: str, b: str) -> None:
    al, bl = a.split("/"), b.split("/")
    common = acl_module._intersect(al, bl)
    for t in UNIVERSE4:
        both = acl_module._matches(al, t) and acl_module._matches(bl, t)
        assert both is (common is not None and acl_module._matches(common, t)), (a, b, t, common)


@settings(max_examples=300, deadline=None)
@given(d=_filters(SMALL_FILTER_LEVELS), h=_filters(SMALL_FILTER_LEVELS))
def test_property_covering_is_exact(d: str, h: str) -> None:
    dl, hl = d.split("/"), h.split("/")
    covered = all(acl_module._matches(dl, t) for t in UNIVERSE4 if acl_module._matches(hl, t))
    assert acl_module._covers(dl, hl) is covered, (d, h)


@settings(max_examples=300, deadline=None)
@given(f=_filters(), t=st.lists(st.sampled_from(["a", "b", "$x", "", "+x"]), min_size=1,
                                max_size=4))
def test_property_matching_agrees_with_paho(f: str, t: list[str]) -> None:
    topic = "/".join(t)
    if "+" in topic or not topic:
        return
    assert acl_module._matches(f.split("/"), t) is paho.topic_matches_sub(f, topic), (f, topic)
    assert parse_acl(f"topic read {f}\n").may_read(None, "c", topic) is paho.topic_matches_sub(
        f, topic
    )


# ============================================================================ benchmark


def test_micro_benchmark_1000_rules() -> None:
    """Prints µs per check for an ACL of 1,000 rules (run with -s); asserts only answers."""
    lines = [f"topic read public/{i}/+" for i in range(200)]
    for i in range(300):
        lines += [f"user user{i}", f"topic readwrite devices/{i}/#", f"topic deny devices/{i}/key"]
    lines += [f"pattern read tenants/%u/{i}/#" for i in range(150)]
    lines += [f"pattern readwrite clients/%c/{i}/+" for i in range(50)]
    acl = parse_acl("\n".join(lines))
    assert len(acl) == 1000
    n = 20_000
    topics = [f"devices/{i % 300}/sensor/{i}" for i in range(n)]
    started = time.perf_counter()
    allowed = sum(acl.may_read(f"user{i % 300}", f"c{i}", t) for i, t in enumerate(topics))
    fresh = (time.perf_counter() - started) / n * 1e6
    assert allowed == n
    started = time.perf_counter()
    for _ in range(n // 100):
        for i in range(100):
            acl.may_read("user7", "c7", topics[i])
    cached = (time.perf_counter() - started) / n * 1e6
    pattern_topics = [f"tenants/user{i % 300}/{i % 150}/x/{i}" for i in range(n // 4)]
    started = time.perf_counter()
    assert all(acl._decide(f"user{i % 300}", "c", t, 0) for i, t in enumerate(pattern_topics))
    patterns = (time.perf_counter() - started) / len(pattern_topics) * 1e6
    print(
        f"\nACL of 1,000 rules: may_read {fresh:.2f} µs uncached (section rules), "
        f"{patterns:.2f} µs uncached (through 200 patterns), {cached:.2f} µs cached"
    )


# ============================================================================ the real broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _broker(tmp_path: Path, *conf: str) -> Iterator[int]:
    port = _free_port()
    config = tmp_path / "mosquitto.conf"
    lines = [f"listener {port} 127.0.0.1", "persistence false", *conf]
    if os.geteuid() == 0:
        lines.append("user root")  # else mosquitto drops to 'mosquitto', who cannot read tmp
    config.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen(
        [MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    _, err = proc.communicate()
                    pytest.fail(f"mosquitto did not start: {err.decode(errors='replace')}")
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class _Client:
    """A paho client, connected (or refused) on construction."""

    def __init__(self, port: int, client_id: str, username: str | None,
                 password: str | None = None) -> None:
        self.received: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.subscribed = threading.Event()
        self.refused = False
        c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                        protocol=paho.MQTTv311, reconnect_on_failure=False)
        if username is not None:
            c.username_pw_set(username, password)
        c.on_connect = self._on_connect
        c.on_message = self._on_message
        c.on_subscribe = lambda *args: self.subscribed.set()
        self.client = c
        c.connect("127.0.0.1", port)
        c.loop_start()
        assert self.connected.wait(10), "no CONNACK"

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.refused = reason.is_failure
        self.connected.set()

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        with self.lock:
            self.received.append((message.topic, message.payload))

    def subscribe_all(self) -> None:
        self.client.subscribe([("#", 1), ("$foo/#", 1)])
        assert self.subscribed.wait(10), "no SUBACK"

    def publish(self, topic: str, payload: bytes) -> paho.MQTTMessageInfo:
        return self.client.publish(topic, payload, qos=1)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


BROKER_ACL = """\
# anonymous clients
topic read pub/#
topic deny pub/secret
topic write anon/in
topic read $foo/#
user admin
topic readwrite #
topic readwrite $foo/#
user alice
topic readwrite alice/#
topic deny alice/locked/#
topic read shared/+/news
topic read users/alice/private
topic write pub/alice
user bob
topic read pub/#
topic write alice/fromBob
user dave
topic read pub/#
user alice
topic read other/#
pattern readwrite users/%u/#
pattern deny users/%u/private
pattern read clients/%c/#
pattern write $foo/%c
pattern read everyone/#
pattern write drop/%c/%u
"""
BROKER_TOPICS = [
    "pub/x", "pub/secret", "pub/alice", "pub", "anon/in", "alice", "alice/x", "alice/locked/y",
    "alice/fromBob", "shared/1/news", "shared/1/2/news", "other/z", "users/alice/x",
    "users/alice/private", "users/bob/x", "users/bob/private", "users/carol", "users/carol/x",
    "clients/a1/x", "clients/b1", "clients/m1/x", "clients/c1/y", "clients/anon1",
    "$foo/a1", "$foo/b1", "$foo/anon1", "$foo/x", "everyone/x", "everyone",
    "drop/b1/bob", "drop/c1/carol", "drop/a1/bob", "a", "x/y/z",
]
BROKER_CLIENTS: list[tuple[str | None, str]] = [
    (None, "anon1"), ("alice", "a1"), ("bob", "b1"), ("carol", "c1"), ("mal+", "m1"),
    ("dave", "d#"), ("carol", "c+1"),
]


def _wait_all(infos: list[paho.MQTTMessageInfo]) -> None:
    for info in infos:
        info.wait_for_publish(10)
        assert info.is_published()


@needs_mosquitto
def test_acl_agrees_with_mosquitto_2_broker(tmp_path: Path) -> None:
    """Every (client, topic) of a mixed ACL, read and write, against mosquitto on loopback."""
    (tmp_path / "acl").write_text(BROKER_ACL)
    acl = parse_acl(BROKER_ACL)
    assert all(acl.may_read("admin", "admin", t) for t in BROKER_TOPICS)
    with _broker(tmp_path, "allow_anonymous true", f"acl_file {tmp_path / 'acl'}") as port:
        admin = _Client(port, "admin", "admin")
        clients = [_Client(port, cid, user) for user, cid in BROKER_CLIENTS]
        stoppers: list[Callable[[], None]] = [c.stop for c in [admin, *clients]]
        try:
            for c in [admin, *clients]:
                c.subscribe_all()
            infos = [admin.publish(t, b"r") for t in BROKER_TOPICS]
            for (_, cid), c in zip(BROKER_CLIENTS, clients, strict=True):
                infos += [c.publish(t, b"w:" + cid.encode()) for t in BROKER_TOPICS]
            _wait_all(infos)
            time.sleep(0.5)
        finally:
            for stop in stoppers:
                stop()
    wrong: list[str] = []
    written = {(p.decode()[2:], t) for t, p in admin.received if p.startswith(b"w:")}
    for (user, cid), c in zip(BROKER_CLIENTS, clients, strict=True):
        read = {t for t, p in c.received if p == b"r"}
        for t in BROKER_TOPICS:
            if acl.may_read(user, cid, t) is not (t in read):
                wrong.append(f"read  {user!r:8} {cid!r:7} {t}: mosquitto {t in read}")
            if acl.may_publish(user, cid, t) is not ((cid, t) in written):
                wrong.append(f"write {user!r:8} {cid!r:7} {t}: mosquitto {(cid, t) in written}")
    assert not wrong, "\n".join(wrong)
    # the run exercised both answers
    assert written and any(c.received for c in clients)


@needs_mosquitto
def test_password_entries_are_accepted_by_mosquitto_2_broker(tmp_path: Path) -> None:
    """Entries written by hash_password (both schemes, odd iteration counts) log in to the
    real broker exactly when Passwords.check says so; an empty password never does."""
    users = {"u7": "pw7", "u7b": "pässwörd: $7$ ", "u6": "pw6", "empty": ""}
    text = (
        f"u7:{hash_password(users['u7'])}\n"
        f"u7b:{hash_password(users['u7b'], iterations=3)}\n"
        f"u6:{hash_password(users['u6'], scheme='sha512')}\n"
        f"empty:{hash_password('', iterations=7)}\n"
    )
    (tmp_path / "pw").write_text(text)
    passwords = parse_password_file(text)
    attempts = [(u, p) for u, p in users.items()]
    attempts += [(u, p + "x") for u, p in users.items()] + [("nobody", "pw7"), ("U7", "pw7")]
    with _broker(tmp_path, "allow_anonymous false", f"password_file {tmp_path / 'pw'}") as port:
        for i, (user, password) in enumerate(attempts):
            c = _Client(port, f"c{i}", user, password)
            c.stop()
            assert (not c.refused) is passwords.check(user, password), (user, password)
            assert (not c.refused) is (users.get(user) == password != "")
