"""What an installed spamd carries for its admin: the version, the commented config and the systemd unit.

`spamctl config --example` and `--systemd-unit` print the files shipped as package data in
spamd/config/, which must be config/spamd.toml and config/spamd.service to the byte (the docs
link those). The version is set once, in spamd/__init__.py, and pyproject.toml reads it from
there; `spamd --version` and `spamctl stats` report it (a running daemon's: tests/test_cli_daemon.py;
the installed wheel's: .ci/smoke-wheel).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from spamd import __version__
from tests.cli_helpers import run_spamctl

REPO = Path(__file__).resolve().parents[1]
SHIPPED = {"--example": "spamd.toml", "--systemd-unit": "spamd.service"}


@pytest.mark.parametrize("name", sorted(SHIPPED.values()))
def test_the_shipped_copy_is_the_checkouts_file_to_the_byte(name: str) -> None:
    shipped, source = REPO / "spamd" / "config" / name, REPO / "config" / name
    assert shipped.read_bytes() == source.read_bytes(), f"cp {source.relative_to(REPO)} {shipped.relative_to(REPO)}"


@pytest.mark.parametrize("option", sorted(SHIPPED))
def test_spamctl_config_prints_the_shipped_file(option: str) -> None:
    done = run_spamctl("config", option)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (REPO / "config" / SHIPPED[option]).read_text(encoding="utf-8")
    assert done.stderr == ""


def test_spamctl_config_says_which_file_to_print_when_asked_for_none() -> None:
    done = run_spamctl("config")
    assert done.returncode == 2 and "one of the arguments --example --systemd-unit is required" in done.stderr
    both = run_spamctl("config", "--example", "--systemd-unit")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_the_version_is_set_in_one_place_and_reported() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "spamd.__version__"}
    done = subprocess.run(
        [sys.executable, "-m", "spamd", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout == f"spamd {__version__}\n", done


def test_spamctl_stats_with_no_daemon_names_the_version_that_read_the_state(tmp_path: Path) -> None:
    stats = run_spamctl("--data-dir", tmp_path / "data", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert stats.json()["version"] == __version__
    table = run_spamctl("--data-dir", tmp_path / "data", "stats")
    assert f"by spamctl {__version__}" in table.stdout.splitlines()[0], table.stdout


def test_spamctl_stats_says_when_the_running_daemon_is_not_the_installed_version() -> None:
    """After an upgrade without a restart the daemon answers with its old version: the first line says so."""
    from spamd.cli.output import format_stats

    running = {"mode": "daemon", "uptime_s": 5, "daemon": {"pid": 1}}
    same = format_stats({**running, "version": __version__}).splitlines()[0]
    assert same == f"spamd running (pid 1), up 5 s, version {__version__}"
    older = format_stats({**running, "version": "0.0.1"}).splitlines()[0]
    assert older.endswith(f"version 0.0.1; this spamctl is {__version__}: restart spamd to run the installed version")
