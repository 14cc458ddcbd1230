"""Helpers for driving spamctl as a subprocess and the control socket from tests.

Real parts only: spamctl runs as its own process, the state is a real directory.
Paths are kept short (a Unix socket path is limited to 107 bytes).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SPAMCTL = [sys.executable, "-c", "from spamd.cli import main; main()"]

# 2**16 buckets: the same code paths as the default, a small fraction of the memory and time.
SMALL_CONFIG = """\
[model]
hash_bits = 16
"""

SPAM = [
    b"From: winner@lottery.example\nSubject: you won a prize\n\nclaim your cash prize now, click here, free money\n",
    b"From: pharmacy@cheap.example\nSubject: cheap pills\n\nbuy cheap pills online, no prescription, free shipping\n",
    b"From: offers@deals.example\nSubject: free offer\n\nlimited offer: free money, click now, act fast\n",
]
HAM = [
    b"From: alice@work.example\nSubject: meeting notes\n\nhere are the notes from the project meeting on tuesday\n",
    b"From: bob@home.example\nSubject: lunch tomorrow\n\nshall we have lunch tomorrow at noon near the office\n",
    b"From: carol@work.example\nSubject: quarterly report\n\nthe quarterly report draft is attached for review\n",
]

# A deadline only bounds a wait for something that is going to happen: a test passes
# as soon as its condition holds. With both cores busy (the suite beside other work),
# what takes 1 s alone was seen to take 5-10 s, so every wait's deadline is stretched
# by this factor (SPAMD_TEST_DEADLINE_SLACK overrides it).
DEADLINE_SLACK = float(os.environ.get("SPAMD_TEST_DEADLINE_SLACK", "6"))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def spamctl_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SPAMD_CONFIG", None)
    return env


def run_spamctl(*args: str | Path, input: bytes | None = None, timeout: float = 60.0) -> Result:
    """Run spamctl to completion (bounded); stdout/stderr as text."""
    done = subprocess.run(
        [*SPAMCTL, *map(str, args)],
        input=input if input is not None else b"",
        capture_output=True,
        timeout=timeout,
        env=spamctl_env(),
    )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


async def run_spamctl_async(*args: str | Path, input: bytes | None = None, timeout: float = 60.0) -> Result:  # noqa: ASYNC109  the same signature as run_spamctl; on timeout the process is killed
    """The same, without blocking the event loop (for tests that serve the socket on it)."""
    process = await asyncio.create_subprocess_exec(
        *SPAMCTL,
        *map(str, args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=spamctl_env(),
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(input or b""), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return Result(process.returncode, stdout.decode(), stderr.decode())


def train_examples(tmp_path: Path, config: Path, data: Path) -> None:
    """Train SPAM and HAM with `spamctl train` into `data` under `config`, each message a file of its own."""
    for label, messages in (("spam", SPAM), ("ham", HAM)):
        files = []
        for i, raw in enumerate(messages):
            files.append(tmp_path / f"{label}{i}.eml")
            files[-1].write_bytes(raw)
        done = run_spamctl("--config", config, "--data-dir", data, "train", f"--{label}", *files)
        assert done.returncode == 0, done.stderr


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.02) -> None:
    """Poll `predicate` until true; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout * DEADLINE_SLACK
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout * DEADLINE_SLACK} s: {predicate}")
        time.sleep(interval)


def write_maildir(folder: Path, messages: list[bytes]) -> Path:
    """A Maildir folder with messages split between new/ and cur/, as a mail client leaves it."""
    for sub in ("tmp", "new", "cur"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    for i, raw in enumerate(messages):
        if i % 2:
            (folder / "cur" / f"{1700000000 + i}.M{i}P1.host:2,S").write_bytes(raw)
        else:
            (folder / "new" / f"{1700000000 + i}.M{i}P1.host").write_bytes(raw)
    return folder


def write_mbox(path: Path, messages: list[bytes]) -> Path:
    with open(path, "wb") as f:
        for raw in messages:
            f.write(b"From sender@example Mon Jan  1 00:00:00 2024\n")
            f.write(raw.rstrip(b"\n") + b"\n\n")
    return path


def classify_inputs(home: Path) -> tuple[list[Path], list[str], Path]:
    """Files, an mbox of two and a message too large for a control frame, in the order `spamctl classify` takes them.

    Returns the paths, the names of the lines it prints for them (in order), and the large one.
    """
    first, last, big = home / "first.eml", home / "last.eml", home / "big.eml"
    first.write_bytes(SPAM[0])
    last.write_bytes(HAM[0])
    big.write_bytes(b"Subject: big\n\n" + b"x" * (64 << 20))
    box = write_mbox(home / "both.mbox", [SPAM[1], HAM[1]])
    return [first, big, box, last], [str(first), f"{box} message 1", f"{box} message 2", str(last)], big


@pytest.fixture
def home() -> Iterator[Path]:
    """A short private directory (socket paths are limited to 107 bytes) with a small-model config."""
    path = Path(tempfile.mkdtemp(prefix="spamctl-", dir="/tmp"))
    (path / "spamd.toml").write_text(SMALL_CONFIG)
    yield path
    shutil.rmtree(path, ignore_errors=True)
