"""`spamctl config`: the commented config and the systemd unit, printed from the installed package.

Both ship in the wheel as package data of `spamd.config`, so an admin who installed only the
wheel has them; in a checkout they are the same bytes as config/spamd.toml and
config/spamd.service (tests/test_config_files.py). Prints only: where they go is the admin's choice.
"""

from __future__ import annotations

import argparse
import sys
from importlib.resources import files

from spamd.config import Config

# What `spamctl config` prints: --example and --systemd-unit, by the file in spamd/config/.
SHIPPED = {"example": "spamd.toml", "systemd_unit": "spamd.service"}


def shipped_text(what: str) -> str:
    """The shipped file `what` names (a key of SHIPPED), as text."""
    return (files("spamd.config") / SHIPPED[what]).read_text(encoding="utf-8")


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--example", dest="what", action="store_const", const="example",
        help="the config file with every key commented out at its default (for /etc/spamd/spamd.toml)",
    )  # fmt: skip
    which.add_argument(
        "--systemd-unit", dest="what", action="store_const", const="systemd_unit",
        help="the hardened systemd unit (for /etc/systemd/system/spamd.service)",
    )  # fmt: skip


def cmd_config(config: Config, args: argparse.Namespace) -> int:
    sys.stdout.write(shipped_text(args.what))
    return 0
