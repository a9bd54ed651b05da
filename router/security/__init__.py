"""Client authentication and authorisation from mosquitto's file formats.

- `router.security.passwords`: mosquitto's `password_file` (`username:hash` lines, as written by
  `mosquitto_passwd`), checked with `Passwords.check`.
- `router.security.acl`: mosquitto's `acl_file` (`topic`, `user` and `pattern` lines), checked
  with `Acl.may_publish`, `Acl.may_read` and `Acl.may_subscribe`.

Both are leaves: standard library only, nothing from the rest of the project, no IO beyond
reading the file in `load_password_file` / `load_acl_file`.
"""

from __future__ import annotations

from router.security.acl import Acl, AclFileError, AclRule, load_acl_file, parse_acl
from router.security.passwords import (
    PasswordFileError,
    PasswordHash,
    Passwords,
    hash_password,
    load_password_file,
    parse_password_file,
)

__all__ = [
    "Acl",
    "AclFileError",
    "AclRule",
    "PasswordFileError",
    "PasswordHash",
    "Passwords",
    "hash_password",
    "load_acl_file",
    "load_password_file",
    "parse_acl",
    "parse_password_file",
]
