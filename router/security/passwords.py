"""mosquitto's `password_file`: `username:hash` lines as written by `mosquitto_passwd`.

The format, as mosquitto 2.0 reads it (src/security_default.c `pwfile__parse` and
`unpwd__decode_passwords`, src/password_mosq.c `pw__hash`, tag v2.0.11 of eclipse/mosquitto;
Debian 12 ships 2.0.11):

- one entry a line, `username:hash`; blanks around the username and around the hash are
  trimmed; a line whose first character is `#` is a comment;
- `$7$ITERATIONS$SALT$HASH` (mosquitto_passwd's default since 2.0, `-H sha512-pbkdf2`):
  HASH = PBKDF2-HMAC-SHA512(password, SALT, ITERATIONS, 64 bytes); 101 iterations unless
  `mosquitto_passwd -I N` chose another count;
- `$6$SALT$HASH` (mosquitto 1.x, `-H sha512`): HASH = SHA-512(password + SALT), one pass.
  This is mosquitto's own "$6$", not glibc's SHA-crypt (which shares the prefix);
- SALT is 12 bytes, HASH 64, both in standard base64 with padding;
- the password is a C string (`strlen`), so it cannot contain a NUL byte.

Where this module is stricter than the broker (mosquitto logs and skips, or ignores):

- every malformed line is a `PasswordFileError` naming the file, the line, what is wrong and
  what to do: a line without `:`, an empty username or hash, anything after the hash, an
  unknown or plain-text hash, a salt or hash of the wrong size, bad base64, an iteration
  count below 1 or above `MAX_ITERATIONS`, a username listed twice, a line that is not UTF-8.
  The messages never quote a hash or a (plain-text) password;
- a password that contains a NUL byte is refused (mosquitto would hash only the part before
  it, so `b"secret\\0junk"` would pass as `b"secret"`);
- an empty password is refused, as the broker refuses it: mosquitto 2.0 reads a zero-length
  password field as no password (`packet__read_binary` gives NULL) and then denies a user
  whose entry has a hash, although `mosquitto_passwd -b FILE user ''` writes one;
- usernames and passwords longer than 65535 bytes are refused without hashing.

`Passwords.check` compares with `hmac.compare_digest`, and for an unknown username it hashes
the password with a throw-away entry of the parameters most entries of the file use, so that
the time taken does not tell which usernames exist.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from router.security.lines import file_lines, text_lines

Scheme = Literal["sha512", "sha512-pbkdf2"]

SHA512: Scheme = "sha512"
SHA512_PBKDF2: Scheme = "sha512-pbkdf2"

SALT_LEN = 12
HASH_LEN = 64
DEFAULT_ITERATIONS = 101
MAX_ITERATIONS = 10_000_000
MAX_FIELD_BYTES = 65535

# What mosquitto trims (`isspace` in the C locale).
_BLANKS = " \t\n\r\v\f"
_CREATE_FIX = "create the entry with mosquitto_passwd (mosquitto_passwd FILE USERNAME)"


class PasswordFileError(ValueError):
    """A password file that cannot be used; the message names the file, the line (when there
    is one), what is wrong and what to do."""

    def __init__(self, name: str, line: int | None, problem: str, fix: str) -> None:
        where = f"{name} line {line}" if line is not None else name
        super().__init__(f"{where}: {problem}; {fix}")
        self.name = name
        self.line = line
        self.problem = problem
        self.fix = fix


class _HashProblem(ValueError):
    """What is wrong with one hash field, and what to do about it."""

    def __init__(self, problem: str, fix: str = _CREATE_FIX) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


def _show(text: str, limit: int = 60) -> str:
    """`text` quoted for a message, escapes visible, cut to `limit` characters."""
    if len(text) > limit:
        return repr(text[:limit]) + "..."
    return repr(text)


def _b64(text: str, size: int, what: str, scheme_id: str) -> bytes:
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise _HashProblem(f"the {what} of the '${scheme_id}$' hash is not valid base64") from None
    if len(raw) != size:
        raise _HashProblem(
            f"the {what} of the '${scheme_id}$' hash is {len(raw)} bytes, not {size}"
        )
    return raw


@dataclass(frozen=True, slots=True)
class PasswordHash:
    """One stored password: `scheme`, `salt`, `digest` and, for PBKDF2, `iterations` (1 for
    the single SHA-512 pass of `$6$`)."""

    scheme: Scheme
    salt: bytes
    digest: bytes = field(repr=False)
    iterations: int = 1

    @classmethod
    def parse(cls, text: str) -> PasswordHash:
        """Read mosquitto's text form (`$7$101$SALT$HASH` or `$6$SALT$HASH`). Raises
        `ValueError` saying what is wrong and what to do; the message never quotes `text`
        beyond its `$N$` prefix."""
        if not text.startswith("$"):
            raise _HashProblem(
                "the password is not hashed (hashes start with '$7$' or '$6$')",
                "hash every plain-text password of the file with 'mosquitto_passwd -U FILE'",
            )
        parts = text.split("$")
        scheme_id = parts[1]
        if scheme_id == "7":
            if len(parts) != 5:
                raise _HashProblem("malformed '$7$' hash (expected $7$ITERATIONS$SALT$HASH)")
            count = parts[2]
            if not (count.isascii() and count.isdigit()):
                raise _HashProblem(f"the iteration count {_show(count, 20)} is not a number")
            if len(count) > len(str(MAX_ITERATIONS)) or int(count) > MAX_ITERATIONS:
                raise _HashProblem(
                    f"the iteration count {count[:20]} is above the limit of {MAX_ITERATIONS:,}",
                    f"create the entry with a smaller count (mosquitto_passwd -I N FILE USERNAME;"
                    f" the default is {DEFAULT_ITERATIONS})",
                )
            iterations = int(count)
            if iterations < 1:
                raise _HashProblem("the iteration count is 0; it must be at least 1")
            return cls(
                SHA512_PBKDF2,
                _b64(parts[3], SALT_LEN, "salt", "7"),
                _b64(parts[4], HASH_LEN, "hash", "7"),
                iterations,
            )
        if scheme_id == "6":
            if len(parts) != 4:
                raise _HashProblem("malformed '$6$' hash (expected $6$SALT$HASH)")
            return cls(SHA512, _b64(parts[2], SALT_LEN, "salt", "6"),
                       _b64(parts[3], HASH_LEN, "hash", "6"))
        shown = f"'${scheme_id}$'" if len(scheme_id) <= 10 and scheme_id.isprintable() else ""
        raise _HashProblem(
            f"unknown hash format {shown or '(not $7$ or $6$)'}".rstrip(),
            _CREATE_FIX + "; this reader knows mosquitto's $7$ (PBKDF2-SHA512) and $6$ (SHA-512)",
        )

    def compute(self, password: bytes) -> bytes:
        """The digest of `password` under this entry's scheme, salt and iterations."""
        if self.scheme == SHA512_PBKDF2:
            return hashlib.pbkdf2_hmac("sha512", password, self.salt, self.iterations, HASH_LEN)
        return hashlib.sha512(password + self.salt).digest()

    def matches(self, password: bytes) -> bool:
        """Whether `password` hashes to `digest` (constant-time comparison)."""
        return hmac.compare_digest(self.compute(password), self.digest)

    def encode(self) -> str:
        """mosquitto's text form of this entry."""
        salt = base64.b64encode(self.salt).decode("ascii")
        digest = base64.b64encode(self.digest).decode("ascii")
        if self.scheme == SHA512_PBKDF2:
            return f"$7${self.iterations}${salt}${digest}"
        return f"$6${salt}${digest}"


def _password_bytes(password: bytes | str) -> bytes | None:
    if isinstance(password, str):
        try:
            return password.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            return None
    if isinstance(password, bytes | bytearray | memoryview):
        return bytes(password)
    return None


def hash_password(
    password: bytes | str,
    *,
    scheme: Scheme = SHA512_PBKDF2,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> str:
    """The `$7$...` (or, with `scheme="sha512"`, `$6$...`) text that mosquitto_passwd would
    write for `password`, with a fresh random salt unless `salt` is given."""
    raw = _password_bytes(password)
    if raw is None:
        raise ValueError("the password is not bytes or a UTF-8 encodable str")
    if b"\0" in raw or len(raw) > MAX_FIELD_BYTES:
        raise ValueError("a password must have no NUL byte and at most 65535 bytes")
    if scheme not in (SHA512, SHA512_PBKDF2):
        raise ValueError(f"unknown scheme {scheme!r}; use 'sha512-pbkdf2' or 'sha512'")
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between 1 and {MAX_ITERATIONS:,}")
    salt = secrets.token_bytes(SALT_LEN) if salt is None else salt
    if len(salt) != SALT_LEN:
        raise ValueError(f"the salt must be {SALT_LEN} bytes")
    entry = PasswordHash(scheme, salt, b"", iterations if scheme == SHA512_PBKDF2 else 1)
    return PasswordHash(entry.scheme, salt, entry.compute(raw), entry.iterations).encode()


def _dummy_for(entries: Iterable[PasswordHash]) -> PasswordHash:
    """A throw-away entry with the scheme and iteration count most entries use (the larger
    count on a tie), so that checking an unknown user costs what checking a known one does."""
    counts = collections.Counter((e.scheme, e.iterations) for e in entries)
    if counts:
        (scheme, iterations), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0][1]))
    else:
        scheme, iterations = SHA512_PBKDF2, DEFAULT_ITERATIONS
    return PasswordHash(
        scheme, secrets.token_bytes(SALT_LEN), secrets.token_bytes(HASH_LEN), iterations
    )


class Passwords:
    """The users of a password file. `check(username, password)` is the whole API the edges
    need; `in` and `len` help logging and tests."""

    __slots__ = ("_dummy", "_entries", "name")

    def __init__(self, entries: Mapping[str, PasswordHash], name: str = "<passwords>") -> None:
        self._entries: dict[str, PasswordHash] = dict(entries)
        self.name = name
        self._dummy = _dummy_for(self._entries.values())

    def check(self, username: str, password: bytes | str) -> bool:
        """Whether `password` (bytes as the client sent it, or a str to be UTF-8 encoded) is
        `username`'s. False, without hashing, for a username or password over 65535 bytes
        or not encodable; False for an empty password or one with a NUL byte (as mosquitto);
        an unknown username costs a hash like a known one."""
        raw = _password_bytes(password)
        if not raw or len(raw) > MAX_FIELD_BYTES or not isinstance(username, str):
            return False
        try:
            if len(username.encode("utf-8")) > MAX_FIELD_BYTES:
                return False
        except UnicodeEncodeError:
            return False
        entry = self._entries.get(username)
        if entry is None:
            self._dummy.matches(raw)
            return False
        return entry.matches(raw) and b"\0" not in raw

    def __contains__(self, username: object) -> bool:
        return username in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def entry(self, username: str) -> PasswordHash | None:
        """The stored entry of `username`, if any (for tools and tests)."""
        return self._entries.get(username)

    def __repr__(self) -> str:
        return f"Passwords({self.name!r}, {len(self._entries)} users)"


def _parse_lines(lines: Iterable[tuple[int, str]], name: str) -> Passwords:
    entries: dict[str, PasswordHash] = {}
    first_line: dict[str, int] = {}
    for number, line in lines:
        text = line.strip(_BLANKS)
        if not text or text.startswith("#"):
            continue
        if ":" not in text:
            raise PasswordFileError(
                name, number, "no ':' between username and password hash",
                "lines are 'username:hash' (# starts a comment); " + _CREATE_FIX,
            )
        username, _, hashed = text.partition(":")
        username = username.strip(_BLANKS)
        hashed = hashed.strip(_BLANKS)
        if not username:
            raise PasswordFileError(name, number, "empty username", "put the username before ':'")
        if len(username.encode("utf-8", "surrogatepass")) > MAX_FIELD_BYTES:
            raise PasswordFileError(
                name, number, "username longer than 65535 bytes", "use a shorter username"
            )
        who = f"user {_show(username)}"
        if not hashed:
            raise PasswordFileError(
                name, number, f"{who} has no password hash",
                f"set a password with mosquitto_passwd FILE {username}",
            )
        if ":" in hashed:
            raise PasswordFileError(
                name, number, f"{who}: unexpected ':' after the password hash",
                "lines are 'username:hash' with no further field; " + _CREATE_FIX,
            )
        if username in entries:
            raise PasswordFileError(
                name, number, f"{who} is listed twice (first on line {first_line[username]})",
                "keep one of the two lines",
            )
        try:
            entries[username] = PasswordHash.parse(hashed)
        except _HashProblem as exc:
            raise PasswordFileError(name, number, f"{exc.problem} for {who}", exc.fix) from None
        first_line[username] = number
    return Passwords(entries, name)


def parse_password_file(text: str, name: str = "<password file>") -> Passwords:
    """The users of password-file `text`; `name` (the file's name) goes into error messages."""
    return _parse_lines(text_lines(text), name)


def load_password_file(path: str | os.PathLike[str]) -> Passwords:
    """Read and parse the password file at `path` (UTF-8). Raises `PasswordFileError`."""
    lines = file_lines(path, PasswordFileError, "the password file",
                       "save the file as UTF-8 (usernames are UTF-8 in MQTT)")
    return _parse_lines(lines, os.fspath(path))
