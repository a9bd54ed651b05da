"""Reading the security files line by line (router/security/passwords.py, acl.py): UTF-8,
an optional byte order mark, errors that name the file and the line."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

# Makes the error of the file's kind: (file name, line number or None, problem, fix).
ErrorFactory = Callable[[str, "int | None", str, str], Exception]


def text_lines(text: str) -> Iterator[tuple[int, str]]:
    """The numbered lines of a file's text (from 1), a leading byte order mark dropped."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return enumerate(text.split("\n"), start=1)


def file_lines(path: str | os.PathLike[str], error: ErrorFactory, what: str,
               utf8_fix: str) -> Iterator[tuple[int, str]]:
    """The numbered lines of the file at `path`; `error` for a file that cannot be read
    (`what` names it: "the password file") or a line that is not UTF-8 (`utf8_fix`)."""
    name = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise error(name, None, f"cannot read {what} ({exc.strerror or exc})",
                    "check the path and the file's permissions") from exc
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]

    def lines() -> Iterator[tuple[int, str]]:
        for number, raw in enumerate(data.split(b"\n"), start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError:
                raise error(name, number, "the line is not valid UTF-8", utf8_fix) from None

    return lines()
