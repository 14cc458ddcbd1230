"""spamd: wiring, the startup -> serve -> shutdown phases, signals, the snapshot timer.

Startup opens the Engine (lock, snapshot, journal replay), catches the Maildirs
up with moves made while spamd was down, then listens. Serve waits on an Event
that SIGTERM/SIGINT set; SIGHUP reloads the config. Shutdown stops accepting,
lets messages in flight finish, handles queued Maildir events, writes a
snapshot and releases the state. Business logic lives in the frontends (smtp.py,
milter.py, spamc/, maildir/, control.py) and scoring.py; the model in the Engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import os
import resource
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import structlog

from spamd.config import Config, load_config, metrics_address, web_address
from spamd.config.addresses import parse_host_port
from spamd.engine.analyzers import AnalysisProcesses, default_processes
from spamd.engine.engine import Engine
from spamd.engine.scoring import Metrics, Scorer
from spamd.errors import SpamdError
from spamd.frontends.delivery import DeliveryProcesses, default_delivery_processes
from spamd.frontends.maildir.mailbox import Mailbox, user_of
from spamd.frontends.maildir.seen import export_indexes, load_indexes, save_indexes
from spamd.frontends.maildir.watcher import MaildirWatcher
from spamd.frontends.milter import MilterServer
from spamd.frontends.smtp import FilterSMTP, SmtpHandler
from spamd.frontends.spamc.server import SpamcServer
from spamd.model.bayes import Label
from spamd.runtime.logs import set_level
from spamd.runtime.scheduling import background_executor
from spamd.store import remove_stale_temps

log = structlog.get_logger()

INDEX_FILE = "maildir-index.msgpack"
# Open files wanted: every SMTP session is a socket. systemd's default soft limit of
# 1024 ran out at ~1000 idle sessions ("socket.accept() out of system resource",
# deliveries failing to open files); systemd.exec(5) asks programs that need more to
# raise the soft limit to the hard one themselves.
WANTED_OPEN_FILES = 65536
DRAIN_TIMEOUT_S = 30.0
TIMER_TICK_S = 5.0

# Settings a reload applies at once; every other change is logged as needing a restart.
LIVE_SETTINGS = {
    "parser": {"max_bytes", "max_parts", "max_depth", "max_text_chars"},
    "model": {"alpha", "evidence_prior", "neutral_tokens", "decisive_tokens", "salad_tokens", "ham_threshold", "spam_threshold", "ngram_weight", "osb_weight",
              "class_prior", "train_margin"},
    "store": {"snapshot_interval_s", "journal_max_bytes"},
    "smtp": {
        "mode", "next_hop_host", "next_hop_port", "next_hop_timeout_s", "max_message_bytes",
        "max_recipients", "idle_timeout_s", "data_timeout_s", "allowed_peers",
    },
    "milter": {"reject_at", "max_message_bytes", "idle_timeout_s", "message_timeout_s"},
    "lmtp": {
        "next_hop", "next_hop_timeout_s", "max_message_bytes", "max_recipients", "idle_timeout_s", "data_timeout_s",
        "allowed_peers",
    },
    "spamc": {
        "allow_tell", "allowed_peers", "max_message_bytes", "idle_timeout_s", "data_timeout_s",
        "max_connections", "required_score",
    },
    "maildir": {"watch_inbox", "autolearn", "settle_after", "settle_margin", "fsync"},
    "log": {"level"},
    "web": {"password_hash", "show_subjects"},
}  # fmt: skip


class Overrides(TypedDict):
    """The command line's settings over the config file's: load_config's keywords."""

    data_dir: Path | None
    smtp_listen: str | None
    milter_listen: str | None
    spamc_listen: str | None
    redis_url: str | None
    metrics_listen: str | None
    web_listen: str | None


class Daemon:
    """One running spamd. `engine`, `snapshot()`, `reload()` and `stats()` are what the control socket uses."""

    def __init__(
        self,
        config_path: Path | None = None,
        *,
        data_dir: Path | None = None,
        smtp_listen: str | None = None,
        milter_listen: str | None = None,
        spamc_listen: str | None = None,
        redis_url: str | None = None,
        metrics_listen: str | None = None,
        web_listen: str | None = None,
        config: Config | None = None,
        install_signals: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        self.config_path = config_path
        self.overrides: Overrides = {
            "data_dir": data_dir, "smtp_listen": smtp_listen, "milter_listen": milter_listen, "spamc_listen": spamc_listen,
            "redis_url": redis_url, "metrics_listen": metrics_listen, "web_listen": web_listen,
        }  # fmt: skip
        self.config = config if config is not None else load_config(config_path, **self.overrides)
        self.install_signals = install_signals
        self.clock = clock  # wall time for settled mail (tests give their own)
        self.engine: Engine | None = None
        self.metrics = Metrics()
        self.scorer: Scorer | None = None
        self.mailboxes: list[Mailbox] = []
        self.watcher: MaildirWatcher | None = None
        self.analyzers: AnalysisProcesses | None = None
        self.writers: DeliveryProcesses | None = None
        self.smtp: SmtpHandler | None = None
        self.server: asyncio.AbstractServer | None = None
        self.milter: MilterServer | None = None
        self.milter_server: asyncio.AbstractServer | None = None
        self.milter_address: tuple[str, int] | None = None
        self.spamc: SpamcServer | None = None
        self.lmtp: Any = None  # spamd.frontends.lmtp.LmtpHandler, when [lmtp] listen is set
        self.lmtp_server: asyncio.AbstractServer | None = None
        self.control: Any = None
        self.smtp_address: tuple[str, int] | None = None
        self.metrics_server: Any = None  # spamd.frontends.metrics.MetricsServer, when [metrics] listen is set
        self.web_server: Any = None  # spamd.web.app.Console, when [web] listen is set
        self.history: Any = None  # spamd.web.history.History, the console's recent verdicts
        self.started = False
        self.should_exit: asyncio.Event | None = None
        self._snapshot_lock: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._signals: list[int] = []

    @property
    def index_path(self) -> Path:
        return self.config.data_dir / INDEX_FILE

    # ------------------------------------------------------------ phases

    async def run(self) -> None:
        try:
            await self.startup()
            await self.serve()
        finally:
            await self.shutdown()

    async def startup(self) -> None:
        config = self.config
        asyncio.get_running_loop().set_default_executor(background_executor())
        self.should_exit = asyncio.Event()
        self._snapshot_lock = asyncio.Lock()
        if self.install_signals:
            # First thing: a SIGTERM during a long start-up (a big catch-up) then ends it
            # cleanly at the end of start-up instead of killing it mid-way.
            loop = asyncio.get_running_loop()
            for sig, handler in (
                (signal.SIGTERM, self.request_exit),
                (signal.SIGINT, self.request_exit),
                (signal.SIGHUP, lambda: self._spawn(self.reload(), "reload")),
            ):
                loop.add_signal_handler(sig, handler)
                self._signals.append(sig)
        raise_open_files_limit()
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise SpamdError(f"{config.data_dir}: cannot create the data directory: {e.strerror}") from None
        self.engine = await asyncio.to_thread(Engine.open, config)
        processes = default_processes() if config.parser.processes == -1 else config.parser.processes
        if processes:
            self.analyzers = AnalysisProcesses(config, processes)
            await self.analyzers.start()
        self.scorer = Scorer(self.engine, self.metrics, self.analyzers)
        if config.web.listen:
            self.scorer.history = self.history = self._new_history(config)

        # Under the state lock now: a temp index left by a killed spamd is nobody's.
        remove_stale_temps(config.data_dir, f".{INDEX_FILE}.tmp-*")
        indexes = await asyncio.to_thread(load_indexes, self.index_path)
        for root in config.maildirs():
            if not self._refused_link(root):
                self.mailboxes.append(await self._open_mailbox(root, indexes.get(str(root))))
        self.watcher = MaildirWatcher(
            self.mailboxes,
            config.maildir,
            score=self.scorer.score_beside_the_loop,
            delivered=self.scorer.scored,
            learn=self.scorer.learn,
            ledger_label=self.engine.trainer.ledger.get,  # (an import replaces the ledger in place)
            on_error=self.metrics.error,
            clock=self.clock,
            ignored=self.engine.note_ignored,
        )
        # Watch before the catch-up scan so nothing falls between the two; queued
        # events for files the scan already handled are no-ops (same folder in the index).
        self.watcher.start_watching()
        for mailbox in self.mailboxes:
            await self.watcher.catch_up(mailbox)
        await asyncio.to_thread(save_indexes, self.index_path, export_indexes(self.mailboxes))
        self.watcher.start_consuming()
        # Settled mail next, beside serving: on a first start over existing Maildirs it is
        # what trains the model, message by message, yielding to the loop between batches.
        self.watcher.start_settling()

        loop = asyncio.get_running_loop()
        s = config.smtp
        writers = (
            default_delivery_processes()
            if config.maildir.delivery_processes == -1
            else config.maildir.delivery_processes
        )
        if writers and (s.mode == "deliver" or (config.lmtp.listen and not config.lmtp.next_hop)):
            self.writers = DeliveryProcesses(writers)
            await self.writers.start()
        smtp = self.smtp = SmtpHandler(
            lambda: self.config, self.scorer, self.mailboxes, self.metrics.error, self.writers,
            on_delivered=self.watcher.delivered_by_spamd,
        )  # fmt: skip
        try:
            self.server = await loop.create_server(lambda: FilterSMTP(smtp, self.config.smtp, loop), s.host, s.port)
        except OSError as e:
            raise SpamdError(
                f"cannot listen for SMTP on {s.host}:{s.port}: {e.strerror} (smtp.host / smtp.port, or --smtp)"
            ) from None
        self.smtp_address = self.server.sockets[0].getsockname()[:2]
        if config.milter.listen:
            await self._start_milter(config)
        if config.spamc.listen:
            self.spamc = SpamcServer(lambda: self.config, self.scorer, self.metrics.error)
            await self.spamc.start()
        if config.lmtp.listen:
            await self._start_lmtp()

        if importlib.util.find_spec("spamd.frontends.control") is not None:
            from spamd.frontends.control import ControlServer

            self.control = ControlServer(config.control_socket, self)
            await self.control.start()
        else:
            log.warning("control_socket_unavailable", reason="spamd.frontends.control is not installed")

        if config.metrics.listen:
            await self._start_metrics(config)
        if config.web.listen:
            await self._start_web(config)

        self._spawn(self._snapshot_timer(), "snapshot-timer")
        self.started = True
        log.info(
            "daemon_started",
            pid=os.getpid(),
            smtp_host=self.smtp_address[0],
            smtp_port=self.smtp_address[1],
            mode=s.mode,
            milter_host=None if self.milter_address is None else self.milter_address[0],
            milter_port=None if self.milter_address is None else self.milter_address[1],
            spamc_host=None if self.spamc is None or self.spamc.address is None else self.spamc.address[0],
            spamc_port=None if self.spamc is None or self.spamc.address is None else self.spamc.address[1],
            spamc_allow_tell=config.spamc.allow_tell,
            **({} if self.lmtp is None else self.lmtp.started_fields()),
            **self._metrics_fields(),
            **self._web_fields(),
            maildirs=[str(m.root) for m in self.mailboxes],
            data_dir=str(config.data_dir),
            trained_ham=int(self.engine.model.doc_totals[Label.HAM]),
            trained_spam=int(self.engine.model.doc_totals[Label.SPAM]),
            recovery_problems=list(self.engine.recovery.problems),
        )

    async def serve(self) -> None:
        assert self.should_exit is not None
        await self.should_exit.wait()

    async def shutdown(self) -> None:
        log.info("daemon_stopping")
        if self.server is not None:
            self.server.close()  # stop accepting
        if self.milter_server is not None:
            self.milter_server.close()
        if self.lmtp_server is not None:
            self.lmtp_server.close()
        # Every way in drains at once, within one timeout.
        await asyncio.gather(
            *(d.drain(DRAIN_TIMEOUT_S) for d in (self.smtp, self.milter, self.lmtp) if d is not None),
            *([self.spamc.close(DRAIN_TIMEOUT_S)] if self.spamc is not None else []),  # stops accepting, too
        )
        if self.control is not None:
            await self.control.close()
        if self.metrics_server is not None:
            await self.metrics_server.close()
        if self.web_server is not None:
            await self.web_server.close()
        if self.watcher is not None:
            await self.watcher.stop()
        if self.analyzers is not None:
            await self.analyzers.close()
        if self.writers is not None:
            await self.writers.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.remove_signal_handler(sig)
        self._signals.clear()
        if self.engine is not None:
            try:
                store = self.engine.store
                if self.engine.has_unsaved_state() or (
                    store.keeps_snapshots and self.started and store.last_snapshot_time is None
                ):
                    try:
                        await self.snapshot()
                    except SpamdError as e:  # a full disk: the journal holds every training
                        log.error("snapshot_failed", error=str(e), action="exiting; the journal is replayed at start")
                elif self.mailboxes:
                    try:
                        await asyncio.to_thread(save_indexes, self.index_path, export_indexes(self.mailboxes))
                    except OSError as e:
                        log.warning("maildir_index_not_saved", path=str(self.index_path), error=e.strerror)
            finally:
                self.engine.close()
                self.engine = None
        log.info("daemon_stopped")

    async def _start_milter(self, config: Config) -> None:
        """Listen for milter connections (Postfix smtpd_milters), with the SMTP peer allow-list."""
        assert self.scorer is not None
        host, port = parse_host_port(config.milter.listen, "[milter] listen")
        self.milter = MilterServer(lambda: self.config, self.scorer, self.metrics.error)
        try:
            self.milter_server = await asyncio.start_server(self.milter.handle, host, port)
        except OSError as e:
            raise SpamdError(
                f"cannot listen for milter connections on {host}:{port}: {e.strerror} ([milter] listen, or --milter)"
            ) from None
        self.milter_address = self.milter_server.sockets[0].getsockname()[:2]

    async def _start_lmtp(self) -> None:
        """Listen for LMTP (Postfix virtual_transport = lmtp:inet:HOST:PORT); imported only when asked for."""
        from spamd.frontends.lmtp import LmtpHandler

        assert self.scorer is not None and self.watcher is not None
        self.lmtp = LmtpHandler(
            lambda: self.config, self.scorer, self.mailboxes, self.metrics.error, self.writers,
            on_delivered=self.watcher.delivered_by_spamd,
        )  # fmt: skip
        self.lmtp_server = await self.lmtp.start()

    def request_exit(self) -> None:
        if self.should_exit is not None:
            self.should_exit.set()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ snapshots

    async def snapshot(self) -> Path:
        """Write a snapshot now (the encode on the loop, the fsyncs in a thread); also saves the Maildir index."""
        assert self.engine is not None and self._snapshot_lock is not None
        async with self._snapshot_lock:
            started = time.perf_counter()
            encoded, seq = self.engine.begin_snapshot()
            rows = export_indexes(self.mailboxes)
            path = await asyncio.to_thread(self.engine.finish_snapshot, encoded, seq)
            try:
                await asyncio.to_thread(save_indexes, self.index_path, rows)
            except OSError as e:  # a full disk: the index is a cache, catch-up rebuilds it
                log.warning("maildir_index_not_saved", path=str(self.index_path), error=e.strerror)
            log.info("snapshot_written", path=str(path), seq=seq, bytes=len(encoded),
                     elapsed_ms=round((time.perf_counter() - started) * 1000, 1))  # fmt: skip
            return path

    async def _snapshot_timer(self) -> None:
        tick = min(TIMER_TICK_S, max(0.05, self.config.store.snapshot_interval_s))
        while True:
            await asyncio.sleep(tick)
            if self.engine is not None and self.engine.needs_snapshot():
                try:
                    await self.snapshot()
                except SpamdError as e:  # a full disk, say: retried at the next tick
                    log.error("snapshot_failed", error=str(e), action="the journal holds all training; retrying")
                    self.metrics.error("snapshot_failed", error=str(e))

    # ------------------------------------------------------------ metrics

    async def _start_metrics(self, config: Config) -> None:
        """Serve /metrics on this loop (spamd/frontends/metrics.py); imported only when asked for."""
        from spamd.frontends.metrics import MetricsServer, metrics_registry

        host, port = metrics_address(config)
        self.metrics_server = MetricsServer(metrics_registry(self), config.metrics.allowed_peers, self.metrics.error)
        await self.metrics_server.start(host, port)

    def _metrics_fields(self) -> dict[str, Any]:
        """metrics_host / metrics_port for the daemon_started line (the bound port when 0 was asked)."""
        if self.metrics_server is None or self.metrics_server.address is None:
            return {}
        host, port = self.metrics_server.address
        return {"metrics_host": host, "metrics_port": port}

    # ------------------------------------------------------------ web console

    def _new_history(self, config: Config) -> Any:
        """The ring of recent verdicts the console lists (spamd/web/history.py), fed by the Scorer."""
        from spamd.web.history import History, HistorySettings

        w = config.web
        settings = HistorySettings(w.history_entries, w.history_message_bytes, config.parser.max_bytes)
        return History(settings, show_subjects=lambda: self.config.web.show_subjects)

    async def _start_web(self, config: Config) -> None:
        """Serve the web console on this loop (spamd/web/app.py); aiohttp and jinja2 imported only when asked for."""
        from spamd.web.app import Console

        host, port = web_address(config)
        self.web_server = Console(self, self.history)
        await self.web_server.start(host, port)

    def _web_fields(self) -> dict[str, Any]:
        if self.web_server is None or self.web_server.address is None:
            return {}
        host, port = self.web_server.address
        return {"web_host": host, "web_port": port}

    def _refused_link(self, root: Path) -> bool:
        """A user's Maildir under `maildir.root` that is a symbolic link: not served (logged).

        The user may point it anywhere (another user's home, /etc): spamd, perhaps root,
        would make folders and deliver there. Links in `maildir.paths` are the admin's own.
        """
        if not self.config.maildir.root or str(root) in self.config.maildir.paths or not root.is_symlink():
            return False
        reason = "a symbolic link under maildir.root: its user could point it anywhere"
        action = f"make {root} a directory, or list it in maildir.paths"
        log.error("maildir_not_served", maildir=str(root), reason=reason, action=action)
        self.metrics.error("maildir_not_served", path=str(root), error=reason)
        return True

    async def _open_mailbox(self, root: Path, index: Any) -> Mailbox:
        """A Maildir ready to serve (at start, or on reload for a new user): layout made, stale tmp/ files gone."""
        mailbox = Mailbox(root, self.config.maildir, user_of(root), index)
        if self.config.maildir.root or len(self.config.maildirs()) > 1:
            assert self.engine is not None  # opened before any Maildir is served
            mailbox.layer_user = self.engine.layer_user(mailbox.user)
        problem = await asyncio.to_thread(mailbox.ensure_layout)
        if problem:
            # Served all the same: refusing would bounce the user's mail; the admin must act.
            log.error("maildir_ownership_not_mirrored", maildir=str(root), problem=problem)
            self.metrics.error("maildir_ownership_not_mirrored", path=str(root), error=problem)
        if mailbox.repaired:
            owner = mailbox.ownership
            assert owner is not None
            chown = f"chown -R {owner.uid}:{owner.gid} {root}"
            log.warning(
                "maildir_ownership_repaired",
                maildir=str(root),
                folders=mailbox.repaired,
                action=f"messages an older spamd delivered as root may still be root's: {chown}",
            )
        stale = await asyncio.to_thread(mailbox.remove_stale_tmp)
        if stale:
            log.info("maildir_stale_tmp_removed", maildir=str(root), files=stale)
        return mailbox

    # ------------------------------------------------------------ reload

    async def _serve_new_users(self) -> list[str]:
        """Users' Maildirs that appeared under `maildir.root` since start: served from now on.

        The SMTP handler and the watcher share `self.mailboxes`, so mail for the new
        user is delivered (no longer refused) and their moves are learned at once.
        """
        if not self.config.maildir.root or self.watcher is None:
            return []
        served = {mailbox.root for mailbox in self.mailboxes}
        added = []
        for root in await asyncio.to_thread(self.config.maildirs):
            if root in served or self._refused_link(root):
                continue
            mailbox = await self._open_mailbox(root, None)
            self.mailboxes.append(mailbox)
            await self.watcher.watch_added(mailbox)
            added.append(str(root))
        if added:
            await asyncio.to_thread(save_indexes, self.index_path, export_indexes(self.mailboxes))
            log.info("maildirs_added", maildirs=added)
        return added

    async def reload(self) -> dict[str, Any]:
        """Re-read the config file; apply what can change live, report what needs a restart."""
        try:
            new = await asyncio.to_thread(load_config, self.config_path, **self.overrides)
        except SpamdError as e:
            log.error("config_reload_failed", error=str(e), action="keeping the running config")
            self.metrics.error("config_reload_failed", error=str(e))
            return {"ok": False, "error": str(e), "applied": {}, "needs_restart": []}
        old = self.config
        applied: dict[str, list[Any]] = {}
        needs_restart: list[str] = []
        sections: dict[str, Any] = {}
        for f in dataclasses.fields(Config):
            before, after = getattr(old, f.name), getattr(new, f.name)
            if f.name == "data_dir":
                if before != after:
                    needs_restart.append("data_dir")
                continue
            live = LIVE_SETTINGS.get(f.name, set())
            keep: dict[str, Any] = {}
            for item in dataclasses.fields(before):
                a, b = getattr(before, item.name), getattr(after, item.name)
                if a == b:
                    continue
                if item.name in live:
                    applied[f"{f.name}.{item.name}"] = [a, b]
                else:
                    needs_restart.append(f"{f.name}.{item.name}")
                    keep[item.name] = a
            sections[f.name] = dataclasses.replace(after, **keep)
        self.config = dataclasses.replace(old, **sections)
        if self.engine is not None:
            self.engine.reconfigure(self.config)
        if self.analyzers is not None:
            self.analyzers.reconfigure(self.config)
        if self.watcher is not None:
            self.watcher.reconfigure(self.config.maildir)
        for mailbox in self.mailboxes:
            mailbox.config = self.config.maildir
        # Logged before the new level applies, so raising the level does not hide its own record.
        log.info("config_reloaded", source=str(self.config_path or "embedded defaults"), applied=applied)
        if needs_restart:
            log.warning("config_change_needs_restart", keys=needs_restart)
        set_level(self.config.log.level)
        added = await self._serve_new_users()
        return {"ok": True, "applied": applied, "needs_restart": needs_restart, "maildirs_added": added}

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, Any]:
        """Engine.stats() plus a "daemon" section: throughput, latency, errors, sessions, Maildirs."""
        assert self.engine is not None
        stats: dict[str, Any] = dict(self.engine.stats())
        stats["daemon"] = self.daemon_stats()
        return stats

    def daemon_stats(self) -> dict[str, Any]:
        """stats()'s "daemon" section alone: the process's own figures, nothing read from the store."""
        daemon: dict[str, Any] = self.metrics.snapshot()
        daemon.update(
            pid=os.getpid(),
            smtp_listen=None if self.smtp_address is None else f"{self.smtp_address[0]}:{self.smtp_address[1]}",
            smtp_mode=self.config.smtp.mode,
            metrics_listen=None if self.metrics_server is None else "{}:{}".format(*self.metrics_server.address),
            web_listen=None
            if self.web_server is None or self.web_server.address is None
            else "{}:{}".format(*self.web_server.address),
            smtp_sessions=0 if self.smtp is None else len(self.smtp.sessions),
            smtp_in_flight=0 if self.smtp is None else self.smtp.in_flight,
            smtp_accepted=0 if self.smtp is None else self.smtp.accepted,
            milter_listen=None if self.milter_address is None else f"{self.milter_address[0]}:{self.milter_address[1]}",
            milter_sessions=0 if self.milter is None else len(self.milter.sessions),
            milter_in_flight=0 if self.milter is None else self.milter.in_flight,
            spamc_listen=None
            if self.spamc is None or self.spamc.address is None
            else f"{self.spamc.address[0]}:{self.spamc.address[1]}",
            spamc_connections=0 if self.spamc is None else len(self.spamc.connections),
            spamc_in_flight=0 if self.spamc is None else self.spamc.in_flight,
            spamc_answered=0 if self.spamc is None else self.spamc.answered,
            **({"lmtp_listen": None} if self.lmtp is None else self.lmtp.stats()),
            maildirs=[
                {
                    "path": str(m.root),
                    "user": m.user,
                    "indexed_messages": len(m.index),
                    "settled_messages": len(m.index.settled),
                }
                for m in self.mailboxes
            ],
            maildir_events_queued=0 if self.watcher is None else self.watcher.queue.qsize(),
            maildir_events_handled=0 if self.watcher is None else self.watcher.handled,
            maildir_settle_queued=0 if self.watcher is None else len(self.watcher.settler.queue),
        )
        return daemon


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE towards the hard one (at most WANTED_OPEN_FILES); the limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = WANTED_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (OSError, ValueError) as e:  # a seccomp filter without @resources, say
            log.warning("open_files_limit_kept", soft=soft, hard=hard, error=str(e))
    return soft
