"""How spamctl reaches the model (the running daemon, or the state directory, locked) and what fits in a request."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spamd import __version__
from spamd.cli.output import logs_to_stderr
from spamd.config import Config
from spamd.errors import SpamdError, StateLockedError
from spamd.frontends.control_protocol import MAX_FRAME_BYTES, ControlClient, DaemonNotRunning

if TYPE_CHECKING:  # the model and the mail parser are imported only where spamctl opens the state itself
    from spamd.engine.engine import Engine

# Training requests carry a few messages each: small enough that the daemon's
# loop is never held long (each training is an fsync), large enough to amortize
# the round trip.
BATCH_MESSAGES = 16
BATCH_BYTES = 4 * 1024 * 1024
# A message must fit in one control frame with room for the request around it.
MAX_MESSAGE_BYTES = MAX_FRAME_BYTES - 64 * 1024


class Backend(Protocol):
    mode: str

    def request(self, command: str, **args: Any) -> Any: ...
    def export_bytes(self) -> bytes: ...
    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


class DaemonBackend:
    """A running spamd, through its control socket."""

    mode = "daemon"

    def __init__(self, client: ControlClient):
        self.client = client

    def request(self, command: str, **args: Any) -> Any:
        return self.client.request(command, **args)

    def export_bytes(self) -> bytes:
        return self.client.export_bytes()

    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        return self.client.import_bytes(data, name)

    def close(self) -> None:
        self.client.close()


class OfflineBackend:
    """No daemon: the state directory, opened and locked by this process."""

    mode = "offline"

    def __init__(self, engine: Engine, socket_path: Path):
        self.engine = engine
        self.socket_path = socket_path

    def request(self, command: str, **args: Any) -> Any:
        from spamd.frontends.control import ENGINE_OPERATIONS

        operation = ENGINE_OPERATIONS.get(command)
        if operation is not None:
            return operation(self.engine, args)
        if command == "stats":
            # Nothing has been up: uptime and throughput belong to a daemon.
            state_dir = str(self.engine.store.state_dir)
            return {**self.engine.stats(), "mode": "offline", "uptime_s": None, "state_dir": state_dir,
                    "version": __version__}  # fmt: skip
        if command == "snapshot":
            return {"path": str(self.engine.snapshot())}
        raise DaemonNotRunning(
            f"no spamd is running (nothing answers on {self.socket_path}); '{command}' needs the daemon"
        )

    def export_bytes(self) -> bytes:
        return self.engine.export_snapshot()

    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        return self.engine.import_snapshot(data, name)

    def close(self) -> None:
        try:
            # Training done offline is in the journal already; fold it into a snapshot
            # when the daemon itself would have, so the journal does not grow unbounded.
            if self.engine.needs_snapshot():
                self.engine.snapshot()
        finally:
            self.engine.close()


def open_backend(config: Config, daemon_only: bool = False) -> Backend:
    """The daemon if one answers on the socket; else the state directory, locked."""
    client = ControlClient(config.control_socket)
    try:
        client.connect()
        return DaemonBackend(client)
    except DaemonNotRunning:
        if daemon_only:
            raise
    from spamd.engine.engine import Engine  # a third of a second: not paid where a daemon answers

    logs_to_stderr()

    try:
        engine = Engine.open(config)
    except StateLockedError:
        raise SpamdError(
            f"{config.state_dir}: the model state is locked by a running spamd or another spamctl, but "
            f"nothing answers on {config.control_socket}; wait for the other spamctl to finish, or check "
            "that daemon (stuck, or started with another config or --data-dir?)"
        ) from None
    return OfflineBackend(engine, config.control_socket)
