"""spamctl web-token: the web console's login token (made if there is none), a new one, or a password hash.

Needs only the data directory, never the daemon or the model: it works whether spamd
runs or not, with the embedded store or Redis, and for root as for spamd's own user
(a token root makes belongs to the data directory's owner). The token and the hash
are spamd.web.auth's; this module only reads the command line and prints.
"""

from __future__ import annotations

import argparse
import getpass
import sys

from spamd.cli.output import emit_json
from spamd.config import Config
from spamd.errors import SpamdError
from spamd.web.auth import hash_password, load_or_create_token, replace_token, token_path


def add_web_token_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--new", action="store_true", help="replace the token (logins with the old one stop working)")
    which.add_argument(
        "--hash",
        action="store_true",
        help="read a password (terminal, or stdin's first line) and print its [web] password_hash",
    )


def cmd_web_token(config: Config, args: argparse.Namespace) -> int:
    if args.hash:
        encoded = hash_password(_read_password())
        if args.json:
            emit_json({"password_hash": encoded})
        else:
            print(f'password_hash = "{encoded}"')
        return 0
    token = replace_token(config.data_dir) if args.new else load_or_create_token(config.data_dir)
    if args.json:
        emit_json({"token": token, "path": str(token_path(config.data_dir))})
    else:
        print(token)
    return 0


def _read_password() -> str:
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise SpamdError("the two passwords differ; nothing printed")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise SpamdError("an empty password cannot be hashed")
    return password
