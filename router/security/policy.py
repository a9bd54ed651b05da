"""What a router's client edges ask about security: may this client connect, publish to this
topic, subscribe to this filter, be sent this message (docs/security.md).

One `Policy` per router, made from its configuration (`--password-file`, `--acl-file`,
`--allow-anonymous`) and read again on SIGHUP (`reload`): a file that does not parse is
refused with its error, and the rules in force stay. With neither file every client may do
everything, as before. Counters of refusals by kind go to the health report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from router.security.acl import Acl, AclFileError, load_acl_file
from router.security.passwords import PasswordFileError, Passwords, load_password_file

# Seconds before a refused log-in is answered (and its connection closed): it slows password
# guessing, and costs the router nothing meanwhile (the connection only waits).
FAILED_LOG_IN_DELAY = 1.0

# Why a connection is refused (the MQTT edge maps them to its reason codes).
BAD_CREDENTIALS = "bad user name or password"
NOT_AUTHORIZED = "not authorized"
TOO_MANY = "max-connections-per-user"


SHOWN_MAX = 64  # characters of a client's user name or id a log line quotes


def shown(text: str | None) -> str:
    """A client-chosen name for a log line: quoted, and cut to SHOWN_MAX characters (a
    65,535-byte user name must not make each refusal's line that long)."""
    if text is None or len(text) <= SHOWN_MAX:
        return repr(text)
    return f"{text[:SHOWN_MAX]!r}... ({len(text)} characters)"


class PolicyError(ValueError):
    """A password or ACL file that cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class Refusal:
    kind: str  # BAD_CREDENTIALS, NOT_AUTHORIZED or TOO_MANY
    detail: str  # for the log line: what was wrong (never the password)


class Policy:
    def __init__(self, password_file: str = "", acl_file: str = "",
                 allow_anonymous: bool = False) -> None:
        self.password_file = password_file
        self.acl_file = acl_file
        # mosquitto 2's rule: with a password file or an ACL file, a client without a user
        # name is refused unless allowed.
        self.anonymous_allowed = allow_anonymous or not (password_file or acl_file)
        self.passwords: Passwords | None = None
        self.acl: Acl | None = None
        self.refusals: Counter[str] = Counter()
        self.reload()

    @property
    def open(self) -> bool:
        """No rules at all: every client may do everything (no per-message checks)."""
        return self.passwords is None and self.acl is None

    def reload(self) -> None:
        """Read both files again. Raises `PolicyError` (keeping the rules in force) if either
        cannot be used."""
        try:
            passwords = load_password_file(self.password_file) if self.password_file else None
            acl = load_acl_file(self.acl_file) if self.acl_file else None
        except (PasswordFileError, AclFileError) as err:
            raise PolicyError(str(err)) from None
        self.passwords, self.acl = passwords, acl

    def authenticate(self, username: str | None, password: bytes | None,
                     certified: bool = False) -> Refusal | None:
        """None if a client with these credentials may connect, else why not. `certified`:
        the user name is a verified client certificate's (--tls-identity-as-username), which
        stands for the password."""
        if certified:
            return None
        if username is None:
            if self.anonymous_allowed:
                return None
            return self._refuse(NOT_AUTHORIZED, "no user name, and anonymous clients are not "
                                "allowed (give a user name and password, or start the router "
                                "with --allow-anonymous)")
        if self.passwords is None:
            return None  # a user name without a password file: it names the ACL's user
        if password is None or not self.passwords.check(username, password):
            return self._refuse(BAD_CREDENTIALS, f"user {shown(username)}: unknown user or wrong "
                                "password")
        return None

    def may_publish(self, username: str | None, client_id: str, topic: str) -> bool:
        if self.acl is None or self.acl.may_publish(username, client_id, topic):
            return True
        self.refusals["publish"] += 1
        return False

    def may_subscribe(self, username: str | None, client_id: str, topic_filter: str) -> bool:
        """Whether the ACL lets this client read some topic `topic_filter` matches (see
        `Acl.may_subscribe`). A filter wider than what the client may read is taken, and
        each message is then checked at delivery (`may_read`), as mosquitto does."""
        if self.acl is None or self.acl.may_subscribe(username, client_id, topic_filter):
            return True
        self.refusals["subscribe"] += 1
        return False

    @property
    def checks_reads(self) -> bool:
        """Whether each delivery must be checked with `may_read` (an ACL file is in force)."""
        return self.acl is not None

    def may_read(self, username: str | None, client_id: str, topic: str) -> bool:
        """Whether a message published to `topic` may be sent to this subscriber; one that
        may not is not sent, and counted ("read")."""
        if self.acl is None or self.acl.may_read(username, client_id, topic):
            return True
        self.refusals["read"] += 1
        return False

    def admit(self, peer: str, connections: Iterable[Any], max_total: int,
              max_per_host: int) -> str | None:
        """None if a new connection from `peer` ("host:port") may be served beside the open
        `connections` (each with a `peer`), else why not (counted). 0: no limit."""
        if not (max_total or max_per_host):
            return None
        host = peer.rpartition(":")[0]
        total = same_host = 0
        for conn in connections:
            total += 1
            same_host += conn.peer.rpartition(":")[0] == host
        if max_total and total >= max_total:
            self.refusals["max-connections"] += 1
            return f"the router serves {total} client connections, its --max-connections"
        if max_per_host and same_host >= max_per_host:
            self.refusals["max-connections-per-host"] += 1
            return (f"{same_host} connections from {host} already, the router's "
                    "--max-connections-per-host")
        return None

    def admit_user(self, username: str | None, connections: Iterable[Any],
                   max_per_user: int) -> Refusal | None:
        """None if `username`, just logged in, may have one more connection beside the open
        `connections` (each with a `user`), else why not (counted). 0: no limit; anonymous
        clients are not counted as a user."""
        if not max_per_user or username is None:
            return None
        same = sum(1 for conn in connections if conn.user == username)
        if same < max_per_user:
            return None
        return self._refuse(TOO_MANY, f"user {shown(username)} has {same} connections already, the "
                            "router's --max-connections-per-user")

    def _refuse(self, kind: str, detail: str) -> Refusal:
        self.refusals[kind] += 1
        return Refusal(kind, detail)
