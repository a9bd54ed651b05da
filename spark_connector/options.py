"""The `exactmesh` data source's options and column mapping, checked with clear errors.

Nothing here imports pyspark: the checks run (and are tested) without a JVM.

    df.writeStream.format("exactmesh")
      .option("url", "amqp://h1:5672,amqp://h2:5672")   # required, failover order
      .option("topic", "orders/eu")       # or a `topic` column (a row's column wins)
      .option("properties", "region,amount")  # columns sent as application properties
      .option("ttl", "60")                # seconds
      .option("checkpointLocation", "/chk/orders")
      .start()

Columns: `value` (or `body`) is the message body (string or binary; other types are sent as
their text); `key`, if present, and the columns named in `properties` become application
properties; `topic`, if present and not null, is the row's topic.

A secured router (docs/security.md, docs/spark.md): TLS and a log-in, as the SDK's `Login`
(amqp_edge.client) does them.

      .option("url", "amqps://h1:5671,amqps://h2:5671")  # TLS: the routers' --amqps ports
      .option("tlsCA", "/etc/exactmesh/ca.pem")  # the CAs to trust (default: the system's)
      .option("user", "ingest")                  # SASL PLAIN, over TLS only unless
      .option("passwordFile", "/etc/exactmesh/ingest.pw")  # plainInClear=true
      .option("tlsCert", "/etc/exactmesh/ingest.crt").option("tlsKey", ".../ingest.key")

- `user` with `passwordFile` (a file whose first line is the password, without its line
  ending; read on the driver when the write or query starts) or `password`. A password
  without a user, a user without a password, or both `password` and `passwordFile`, is an
  error. The password goes only to amqps:// URLs unless `plainInClear=true` (the router must
  allow it: --allow-plain-without-tls).
- `tlsCA`: the PEM CAs to trust; without it, amqps:// trusts the system's CAs (proton's
  default), and either way the router's certificate must name the URL's host unless
  `tlsVerifyName=false` (only with `tlsCA`: Login ignores it otherwise). `tlsCert` and
  `tlsKey` (both or neither): the client certificate and its unencrypted key, for a router
  with --tls-client-cert. TLS files need amqps:// URLs. The driver loads them (an error names
  the option); they must be at the same paths on every executor.
- The password is kept in a `Secret` (its repr is `***`): it is not in `SinkOptions`'s repr,
  in log lines, in error messages or in the stats file. Spark shows a batch write's options
  in its logical plans (`AppendData RelationV2[...] exactmesh, [...]`) with the values of
  keys matching `spark.redaction.regex` (default `(?i)secret|password|token|access[.]?key`)
  replaced by `*********(redacted)`: `password` and `passwordFile` match (`url` is redacted
  too, by `spark.sql.redaction.options.regex`); a streaming write's plans show no options.
  `passwordFile` keeps the password out of the job's code and options altogether.
"""

from __future__ import annotations

import hmac
import os
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from amqp_edge.client import Login, parse_urls
from router.core.topics import TopicError, validate_topic

# Options this data source reads, by their lower-case name (Spark treats option names
# case-insensitively), with what each is for: the unknown-option error lists them.
KNOWN = {
    "url": "routers, amqp://HOST:PORT, comma-separated in failover order (required)",
    "topic": "the topic rows without a `topic` column value go to",
    "properties": "comma-separated columns sent as application properties",
    "ttl": "message time to live, seconds",
    "window": "messages one partition keeps unsettled per topic (1..256, default 256)",
    "timeout": "seconds a partition waits for the mesh's outcomes, or to reach a router "
               "(default 300)",
    "progressdir": "directory of the per-partition progress markers (default "
                   "CHECKPOINTLOCATION/exactmesh-progress; 'none' to keep none)",
    "id": "a stable name for a batch write: rerunning it with the same id and rows resends "
          "instead of duplicating (default: a new name per write)",
    "rowsperlink": "rows per publisher link (its resume declaration must fit one attach "
                   "frame; 1..2500, default 2000)",
    "statsfile": "a local file each partition's write appends one JSON line of counts and "
                 "timings to, per batch (diagnostics; benchmarks/spark.py reads it)",
    # Logging in to a secured router (docs/security.md; amqp_edge.client.Login):
    "user": "log in as this user (SASL PLAIN, over amqps:// unless plainInClear=true); "
            "needs passwordFile or password",
    "password": "the user's password (Spark redacts it in plans and logs; passwordFile keeps "
                "it out of the job's code)",
    "passwordfile": "a file whose first line is the user's password (read on the driver when "
                    "the write starts)",
    "tlsca": "a PEM file of the CAs to trust for amqps:// routers (default: the system's CAs)",
    "tlscert": "a client certificate, PEM chain, for routers that ask for one (with tlsKey)",
    "tlskey": "the client certificate's unencrypted PEM private key (with tlsCert)",
    "plaininclear": "true: send the password over amqp:// without TLS (the router must allow "
                    "it, --allow-plain-without-tls); default false",
    "tlsverifyname": "false: trust a router certificate signed by a tlsCA CA without checking "
                     "that it names the URL's host (default true)",
    # Spark's own, passed to every sink:
    "checkpointlocation": "Spark's checkpoint directory (streaming)",
    "path": "(Spark's; unused)",
}
BODY_COLUMNS = ("value", "body")
KEY_COLUMN = "key"
TOPIC_COLUMN = "topic"
MAX_WINDOW = 256  # a router's default --publisher-window: more would only wait for credit
MAX_ROWS_PER_LINK = 2500  # 2,500 tags of up to 9 digits (11 bytes each) fit a 32 KiB attach
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class OptionError(ValueError):
    """An option or the DataFrame's columns do not fit the data source; says what to do."""


class Secret:
    """A password that does not show: its repr and str are `***`, so that no log line, error
    message, plan or repr of an object holding it contains it. `reveal()` gives it to the one
    place that needs it (the SDK's Login). It pickles (the writer goes to the executors)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(),
                                                                 other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)

    def __reduce__(self) -> tuple:
        return (Secret, (self._value,))


@dataclass(frozen=True)
class SinkOptions:
    urls: list[str]
    topic: str | None
    properties: tuple[str, ...] = ()
    ttl: float | None = None
    window: int = MAX_WINDOW
    timeout: float = 300.0
    progress_dir: str | None = None
    id: str | None = None
    rows_per_link: int = 2000
    extra: dict[str, str] = field(default_factory=dict)
    stats_file: str | None = None
    # Logging in (Login's fields): the password never in a repr.
    user: str | None = None
    password: Secret | None = field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    plain_in_clear: bool = False
    verify_name: bool = True

    def login(self) -> Login | None:
        """The SDK's Login for these options; None when they ask for neither TLS files nor a
        log-in (amqps:// URLs alone use TLS trusting the system's CAs: proton's default)."""
        if self.user is None and self.tls_ca is None and self.tls_cert is None:
            return None
        return Login(self.user, self.password.reveal() if self.password else None,
                     ca=self.tls_ca, cert=self.tls_cert, key=self.tls_key,
                     plain_in_clear=self.plain_in_clear, verify_name=self.verify_name)


def _number(name: str, text: str, kind: type, low: float, high: float | None = None) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise OptionError(f"option {name}={text!r} is not a "
                          f"{'whole number' if kind is int else 'number'}") from None
    if not low <= value or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise OptionError(f"option {name}={text!r} must be {bound}")
    return value


def _flag(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    text = opts.get(key, "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise OptionError(f"option {name}={opts[key]!r} must be true or false")
    return text == "true"


def _read_password(path: str) -> Secret:
    """The first line of the file, without its line ending (spaces are the password's)."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
        raise OptionError(f"option passwordFile: cannot read {path!r} ({why}): give a file "
                          "the driver can read whose first line is the password") from None
    if not first:
        raise OptionError(f"option passwordFile: the first line of {path!r} is empty; it must "
                          "be the password")
    return Secret(first)


def _check_tls_files(ca: str | None, cert: str | None, key: str | None) -> None:
    """Load the TLS files as proton will on the executors, for an error naming the option
    (proton itself says only "SSL failure")."""
    where = "; it must be at this path on the driver and on every executor"
    for name, path in (("tlsCA", ca), ("tlsCert", cert), ("tlsKey", key)):
        if path is not None and not os.access(path, os.R_OK):
            why = "no such file" if not os.path.exists(path) else "not readable"
            raise OptionError(f"option {name}: cannot read {path!r} ({why}){where}")
    if ca is not None:
        try:
            ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, ValueError) as err:
            raise OptionError(f"option tlsCA: {ca!r} is not a PEM file of CA "
                              f"certificates ({err})") from None
    if cert is not None and key is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            context.load_cert_chain(cert, key, password=lambda: b"")
        except (ssl.SSLError, ValueError) as err:
            raise OptionError(f"options tlsCert and tlsKey: {cert!r} and {key!r} are not a PEM "
                              f"certificate chain and its unencrypted private key ({err})"
                              ) from None


def _login_options(opts: Mapping[str, str], urls: list[str]) -> dict:
    """The log-in and TLS options, checked against each other and the URLs."""
    user = opts.get("user") or None
    given, from_file = opts.get("password") or None, opts.get("passwordfile") or None
    if given is not None and from_file is not None:
        raise OptionError("options password and passwordFile both give the password: keep "
                          "one (passwordFile keeps it out of the job's code)")
    if (given is not None or from_file is not None) and user is None:
        raise OptionError(f"option {'password' if given is not None else 'passwordFile'} "
                          "needs option user: the user the password is for")
    if user is not None and given is None and from_file is None:
        raise OptionError(f"option user={user!r} needs a password: set option passwordFile "
                          "(a file whose first line is the password) or option password")
    plain_in_clear = _flag(opts, "plaininclear", "plainInClear", False)
    if plain_in_clear and user is None:
        raise OptionError("option plainInClear=true is about sending the password: it needs "
                          "options user and passwordFile (or password)")
    ca = opts.get("tlsca") or None
    cert, key = opts.get("tlscert") or None, opts.get("tlskey") or None
    if (cert is None) != (key is None):
        raise OptionError("options tlsCert and tlsKey go together: give both (the client "
                          "certificate and its private key) or neither")
    verify_name = _flag(opts, "tlsverifyname", "tlsVerifyName", True)
    if not verify_name and ca is None:
        raise OptionError("option tlsVerifyName=false needs option tlsCA: without it the "
                          "router's certificate is checked against the system's CAs, its "
                          "name included")
    clear = [u for u in urls if not u.startswith("amqps://")]
    if (ca or cert) and clear:
        raise OptionError(f"options tlsCA, tlsCert and tlsKey are for TLS, but {clear[0]} is "
                          "not amqps://: write every router URL as amqps://HOST:PORT (the "
                          "router's --amqps port)")
    if user is not None and not plain_in_clear and clear:
        raise OptionError(f"option user: the password goes only over TLS, and {clear[0]} is "
                          "in clear: write the router URLs as amqps://HOST:PORT (the "
                          "router's --amqps port), or set plainInClear=true if the router "
                          "allows the password in clear (--allow-plain-without-tls)")
    _check_tls_files(ca, cert, key)
    password = Secret(given) if given is not None else \
        _read_password(from_file) if from_file is not None else None
    return dict(user=user, password=password, tls_ca=ca, tls_cert=cert, tls_key=key,
                plain_in_clear=plain_in_clear, verify_name=verify_name)


def _local_dir(location: str, what: str) -> str:
    """A directory the executors' Python processes can write with plain file operations."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return parts.path if parts.scheme else location
    if len(parts.scheme) == 1:  # a Windows drive letter
        return location
    raise OptionError(
        f"{what} {location!r} is not a local or mounted path ({parts.scheme}:// is not "
        "written by plain file operations): set option progressDir to a directory every "
        "executor can write (a shared mount), or progressDir=none to rely on the mesh's "
        "tombstones alone (docs/spark.md)")


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the options given to `.format("exactmesh")`; raises OptionError saying what is
    wrong and what to write instead."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in KNOWN)
    if unknown:
        known = "; ".join(f"{k}: {v}" for k, v in KNOWN.items())
        raise OptionError(f"unknown option(s) {', '.join(unknown)} for format 'exactmesh'; "
                          f"it knows {known}")
    if not opts.get("url"):
        raise OptionError("option url is required: the routers to publish to, "
                          "amqp://HOST:PORT, several separated by commas")
    try:
        urls = parse_urls(opts["url"])
    except ValueError as err:
        raise OptionError(f"option url: {err}") from None
    topic = opts.get("topic") or None
    if topic is not None:
        try:
            validate_topic(topic)
        except TopicError as err:
            raise OptionError(f"option topic={topic!r} is not a topic: {err}") from None
    props = tuple(p.strip() for p in opts.get("properties", "").split(",") if p.strip())
    ttl = _number("ttl", opts["ttl"], float, 0.001) if opts.get("ttl") else None
    window = int(_number("window", opts["window"], int, 1, MAX_WINDOW)) \
        if opts.get("window") else MAX_WINDOW
    timeout = _number("timeout", opts["timeout"], float, 0.1) if opts.get("timeout") else 300.0
    per_link = int(_number("rowsPerLink", opts["rowsperlink"], int, 1, MAX_ROWS_PER_LINK)) \
        if opts.get("rowsperlink") else 2000
    ident = opts.get("id") or None
    if ident is not None and not _NAME.match(ident):
        raise OptionError(f"option id={ident!r} must be 1 to 64 letters, digits or _.:-")
    progress = opts.get("progressdir") or None
    if progress is not None and progress.lower() == "none":
        progress = None
    elif progress is not None:
        progress = _local_dir(progress, "option progressDir")
    elif opts.get("checkpointlocation"):
        base = _local_dir(opts["checkpointlocation"], "checkpointLocation")
        progress = base.rstrip("/") + "/exactmesh-progress"
    extra = {k: v for k, v in opts.items() if k in ("checkpointlocation", "path")}
    stats = _local_dir(opts["statsfile"], "option statsFile") if opts.get("statsfile") else None
    login = _login_options(opts, urls)
    return SinkOptions(urls, topic, props, ttl, window, timeout, progress, ident, per_link,
                       extra, stats, **login)


@dataclass(frozen=True)
class ColumnPlan:
    """Where a row's message parts are: column positions in the DataFrame's schema."""

    body: int
    topic: int | None  # the `topic` column, if any
    properties: tuple[tuple[str, int], ...]  # (property name, column), `key` first


def plan_columns(columns: Sequence[str], options: SinkOptions) -> ColumnPlan:
    """Map the DataFrame's column names to the message; raises OptionError when there is no
    body column, no topic, or a property column that does not exist."""
    index = {name: i for i, name in enumerate(columns)}
    body = next((index[c] for c in BODY_COLUMNS if c in index), None)
    if body is None:
        raise OptionError(f"format 'exactmesh' needs a column named value (or body) for the "
                          f"message body; the columns are {', '.join(columns) or 'none'} "
                          "(e.g. .selectExpr(\"to_json(struct(*)) AS value\"))")
    topic = index.get(TOPIC_COLUMN)
    if topic is None and options.topic is None:
        raise OptionError("format 'exactmesh' needs a topic: set option topic, or give the "
                          "DataFrame a column named topic (one topic per row)")
    props: list[tuple[str, int]] = []
    if KEY_COLUMN in index:
        props.append((KEY_COLUMN, index[KEY_COLUMN]))
    for name in options.properties:
        if name not in index:
            raise OptionError(f"option properties names column {name!r}, which the DataFrame "
                              f"does not have (columns: {', '.join(columns)})")
        if name not in (n for n, _ in props):
            props.append((name, index[name]))
    return ColumnPlan(body, topic, tuple(props))
