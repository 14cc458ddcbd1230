"""Debian's real OpenDKIM and OpenDMARC, or rspamd, as milters on loopback, asking our own DNS zone, for Postfix in front of spamd.

Each runs in the foreground as the test's child (its own session, stopped with
SIGTERM), with a configuration of its own in a private directory: docs/postfix.md's
lines, read from the page, with this instance's port, plus what a test needs and a
server does not:

- OpenDKIM asks our loopback DNS server (tests/dns_helpers.py) through its resolver,
  libunbound, told to forward everything there (`ResolverConfiguration`).
- OpenDMARC asks the system's resolver (libc, port 53 only) and has no setting for a
  nameserver; it is given the zone's DMARC records as they are published, through its
  `TestDNSData` file (made from the same zone when the milter starts), and asks nothing else.
- Neither takes any test client for a local one: by default both take 127.0.0.1 as local
  (OpenDKIM would sign instead of verifying, OpenDMARC skip), and a test's mail may come
  from there (tests/test_milter_auth.py sends through XCLIENT as outside addresses).
- rspamd asks our server through its own resolver (`dns.nameserver`), on a configuration
  of its own rather than Debian's (`rspamd_conf` says why).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import smtplib
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import dns.rdata
import dns.rdataclass
import dns.rdatatype

from tests.daemon_helpers import crlf, wait_until_sync
from tests.dns_helpers import ZoneServer
from tests.doc_snippets import main_cf_settings, snippet, with_placeholders
from tests.postfix_helpers import Postfix, Sink, Spamd, free_port, postfix_directory, postfix_missing

OPENDKIM = Path("/usr/sbin/opendkim")
OPENDMARC = Path("/usr/sbin/opendmarc")
AUTHSERV_ID = "mx.test"  # the tests' own; the docs write mx.example.org
# An address no test client uses: "local" hosts that OpenDKIM would sign for and OpenDMARC skip.
NOT_A_CLIENT = "192.0.2.254"
SHOP_SERVER = "203.0.113.25"  # the shop's outgoing server, in its SPF record
ELSEWHERE = "198.51.100.9"  # a server no record names
# Postfix lets loopback clients say who the client is (XCLIENT), and takes mail for its relay domains from anyone.
OUTSIDE_CLIENTS = {
    "smtpd_authorized_xclient_hosts": "127.0.0.0/8",
    "smtpd_relay_restrictions": "permit_mynetworks, permit_auth_destination, reject",
}


def auth_milters_missing() -> str | None:
    """Why Postfix with OpenDKIM and OpenDMARC cannot run here (a skip reason), or None."""
    for path, package in ((OPENDKIM, "opendkim"), (OPENDMARC, "opendmarc")):
        if not path.exists():
            return f"Debian's {package} is not installed ({path} missing; apt-get install {package})"
    return postfix_missing()


class MilterProgram:
    """One milter daemon in the foreground on 127.0.0.1:`port`, its stderr kept in a file of its directory."""

    def __init__(self, name: str, command: list[str | Path], port: int, directory: Path):
        self.name = name
        self.command = command
        self.port = port
        self.directory = directory
        self.stderr_path = directory / f"{name}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> str:
        """As Postfix's smtpd_milters names it."""
        return f"inet:127.0.0.1:{self.port}"

    def start(self) -> MilterProgram:
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                self.command, start_new_session=True, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr
            )
        wait_until_sync(self._listening, 20)
        return self

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited ({self.proc.returncode}): {self.output()}")
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def output(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def opendkim_conf(directory: Path, port: int, zone: ZoneServer) -> Path:
    """docs/postfix.md's opendkim.conf with our port and authserv-id, asking only `zone`."""
    unbound = directory / "unbound.conf"
    # Unbound refuses to ask a loopback address unless told, and validates nothing without a trust anchor.
    unbound.write_text(
        'server:\n  do-not-query-localhost: no\n  module-config: "iterator"\n'
        f'forward-zone:\n  name: "."\n  forward-addr: 127.0.0.1@{zone.port}\n'
    )
    internal = directory / "opendkim-internal-hosts"
    internal.write_text(NOT_A_CLIENT + "\n")
    text = with_placeholders(
        snippet("opendkim.conf"), {"inet:8891@127.0.0.1": f"inet:{port}@127.0.0.1", "mx.example.org": AUTHSERV_ID}
    )
    path = directory / "opendkim.conf"
    path.write_text(
        text + f"PidFile {directory}/opendkim.pid\nBackground no\nSyslog no\n"
        f"ResolverConfiguration {unbound}\nInternalHosts {internal}\n"
    )
    return path


def dmarc_test_data(zone: ZoneServer) -> str:
    """The zone's DMARC records as OpenDMARC's TestDNSData reads them: `NAME VALUE` a line."""
    lines = []
    for (name, rdtype), values in zone.records.items():
        if rdtype != dns.rdatatype.TXT or not name.startswith("_dmarc."):
            continue
        for value in values:
            rdata = dns.rdata.from_text(dns.rdataclass.IN, dns.rdatatype.TXT, value)
            lines.append(f"{name} {b''.join(rdata.strings).decode()}\n")  # type: ignore[attr-defined]
    return "".join(lines)


def opendmarc_conf(directory: Path, port: int, zone: ZoneServer) -> Path:
    """docs/postfix.md's opendmarc.conf with our port and authserv-id, with the zone's DMARC records."""
    data = directory / "opendmarc-dns"
    data.write_text(dmarc_test_data(zone))
    ignore = directory / "opendmarc-ignore-hosts"
    ignore.write_text(NOT_A_CLIENT + "\n")
    text = with_placeholders(
        snippet("opendmarc.conf"), {"inet:8893@127.0.0.1": f"inet:{port}@127.0.0.1", "mx.example.org": AUTHSERV_ID}
    )
    path = directory / "opendmarc.conf"
    path.write_text(
        text + f"PidFile {directory}/opendmarc.pid\nBackground false\nSyslog false\n"
        f"TestDNSData {data}\nIgnoreHosts {ignore}\n"
    )
    return path


class AuthMilters:
    """OpenDKIM and OpenDMARC, started over `zone` (whose records must be published first)."""

    def __init__(self, zone: ZoneServer):
        self.directory = postfix_directory()
        opendkim_port, opendmarc_port = free_port(), free_port()
        self.opendkim = MilterProgram(
            "opendkim",
            [OPENDKIM, "-f", "-x", opendkim_conf(self.directory, opendkim_port, zone)],
            opendkim_port,
            self.directory,
        )
        self.opendmarc = MilterProgram(
            "opendmarc",
            [OPENDMARC, "-f", "-c", opendmarc_conf(self.directory, opendmarc_port, zone)],
            opendmarc_port,
            self.directory,
        )

    def start(self) -> AuthMilters:
        self.opendkim.start()
        self.opendmarc.start()
        return self

    def stop(self) -> None:
        try:
            self.opendkim.stop()
            self.opendmarc.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def output(self) -> str:
        """Both daemons' stderr, for a failing test's message."""
        return f"opendkim: {self.opendkim.output()}\nopendmarc: {self.opendmarc.output()}"


@contextlib.contextmanager
def running_auth_milters(zone: ZoneServer) -> Iterator[AuthMilters]:
    milters = AuthMilters(zone)
    try:
        yield milters.start()
    finally:
        milters.stop()


def auth_milters_main_cf(milters: AuthMilters, spamd_milter_port: int) -> dict[str, str]:
    """docs/postfix.md's main.cf lines for OpenDKIM, OpenDMARC and spamd, with this instance's ports,
    and its header_checks table (in the milters' directory) with our authserv-id."""
    table = milters.directory / "authres_header_checks"
    table.write_text(with_placeholders(snippet("postfix-authres-header-checks"), {r"mx\.example\.org": r"mx\.test"}))
    text = with_placeholders(
        snippet("postfix-auth-milters-main.cf"),
        {
            "inet:127.0.0.1:8891": milters.opendkim.socket,
            "inet:127.0.0.1:8893": milters.opendmarc.socket,
            "inet:127.0.0.1:10027": f"inet:127.0.0.1:{spamd_milter_port}",
            "/etc/postfix/authres_header_checks": str(table),
        },
    )
    return main_cf_settings(text)


def auth_spamd_toml(zone: ZoneServer) -> str:
    """docs/postfix.md's spamd.toml lines for trusting the milters, with our authserv-id and DNS on loopback."""
    text = with_placeholders(snippet("postfix-auth-spamd.toml"), {"mx.example.org": AUTHSERV_ID})
    return text + f'nameservers = ["{zone.address}"]\n'


# ---------------------------------------------------------------- rspamd as the verifying milter

RSPAMD = Path("/usr/bin/rspamd")


@contextlib.contextmanager
def running_trusting_spamd(directory: Path, zone: ZoneServer) -> Iterator[Spamd]:
    """spamd as a milter behind the verifying milters, trusting their results (`auth_spamd_toml`)."""
    spamd = Spamd(directory, auth_spamd_toml(zone), milter=True).start()
    try:
        yield spamd
    finally:
        spamd.stop()


def rspamd_missing() -> str | None:
    if not RSPAMD.exists():
        return f"Debian's rspamd is not installed ({RSPAMD} missing; apt-get install rspamd)"
    return postfix_missing()


def rspamd_conf(directory: Path, port: int, zone: ZoneServer) -> Path:
    """An rspamd.conf of its own: its milter proxy on `port`, scanning itself, with the DKIM, SPF, DMARC and ARC
    modules and docs/postfix.md's milter_headers lines; asking only `zone`.

    Not Debian's /etc/rspamd: its fuzzy module resolves rspamd.com's servers through the system's
    resolver as it starts, and other modules fetch maps from there; a test touches only loopback."""
    headers = snippet("rspamd-milter-headers.conf")
    # The public suffixes of the test zone's domains alone: DMARC's organizational domains need only
    # these, and compiling Debian's whole list held rspamd's start (and its listener) 9 s.
    suffixes = directory / "public_suffixes.dat"
    suffixes.write_text("example\ntest\n")
    path = directory / "rspamd.conf"
    path.write_text(
        "options {\n"
        f'  pidfile = "{directory}/rspamd.pid";\n'
        '  filters = "dkim";\n'  # the C module; spf, dmarc and arc are Lua plugins, on with a section each
        f'  dns {{ nameserver = ["{zone.address}"]; timeout = 2s; retransmits = 2; }}\n'
        f'  url_tld = "{suffixes}";\n'
        f'  hs_cache_dir = "{directory}";\n'
        "}\n"
        'logging { type = "console"; level = "notice"; }\n'
        'modules { path = "${PLUGINSDIR}"; }\n'
        'worker "rspamd_proxy" {\n'
        f'  bind_socket = "127.0.0.1:{port}";\n'
        "  milter = yes;\n  timeout = 120s;\n  count = 1;\n"
        '  upstream "local" { default = yes; self_scan = yes; }\n'
        "}\n"
        "dkim { }\nspf { }\ndmarc { }\narc { }\n"
        f"milter_headers {{\n{headers}}}\n"
    )
    return path


def rspamd_milter(zone: ZoneServer) -> MilterProgram:
    directory = postfix_directory()
    port = free_port()
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    command: list[str | Path] = [
        RSPAMD, "-f", "-u", user, "-g", group, "-c", rspamd_conf(directory, port, zone),
        "--var", f"DBDIR={directory}", "--var", f"RUNDIR={directory}",
    ]  # fmt: skip
    return MilterProgram("rspamd", command, port, directory)


@contextlib.contextmanager
def running_rspamd(zone: ZoneServer) -> Iterator[MilterProgram]:
    milter = rspamd_milter(zone)
    try:
        yield milter.start()
    finally:
        milter.stop()
        shutil.rmtree(milter.directory, ignore_errors=True)


def rspamd_main_cf(rspamd: MilterProgram, spamd_milter_port: int) -> dict[str, str]:
    """docs/postfix.md's main.cf lines for rspamd and spamd, with this instance's ports, and the header_checks
    table (in rspamd's directory) with our authserv-id."""
    table = rspamd.directory / "authres_header_checks"
    table.write_text(with_placeholders(snippet("postfix-authres-header-checks"), {r"mx\.example\.org": r"mx\.test"}))
    text = with_placeholders(
        snippet("postfix-rspamd-main.cf"),
        {
            "inet:127.0.0.1:11332": rspamd.socket,
            "inet:127.0.0.1:10027": f"inet:127.0.0.1:{spamd_milter_port}",
            "/etc/postfix/authres_header_checks": str(table),
        },
    )
    return main_cf_settings(text)


# ---------------------------------------------------------------- mail through Postfix as if from outside


def send_from(postfix: Postfix, client_ip: str, helo: str, mail_from: str, raw: bytes, port: int = 0) -> None:
    """`raw` through Postfix's smtpd (or its listener on `port`) as if from `client_ip`, which said HELO `helo`."""
    with smtplib.SMTP("127.0.0.1", port or postfix.smtp_port, timeout=60) as client:
        client.ehlo("relay.test")
        code, reply = client.docmd("XCLIENT", f"ADDR={client_ip} NAME=[UNAVAILABLE] HELO={helo}")
        assert code == 220, reply
        client.ehlo_resp = None  # XCLIENT starts the session over: EHLO again
        client.ehlo(helo)
        assert client.sendmail(mail_from, ["user@example.com"], crlf(raw)) == {}


def head_of(data: bytes) -> list[str]:
    """The delivered message's header fields, each unfolded, in order."""
    lines: list[str] = []
    for line in data.split(b"\r\n\r\n", 1)[0].decode().split("\r\n"):
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines


def field(head: list[str], name: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in head if line.lower().startswith(name.lower() + ":")]


def delivered(
    postfix: Postfix,
    sink: Sink,
    milters: AuthMilters | MilterProgram,
    raw: bytes,
    marker: str,
    client: str = ELSEWHERE,
    port: int = 0,
) -> list[str]:
    """The header fields of `raw` as the sink got it, sent through Postfix from `client` (a failure shows the
    verifying milters' output)."""
    send_from(postfix, client, "mail.shop.example", "bounce@shop.example", raw, port)
    try:
        [data] = sink.wait_for(marker, timeout=60)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{postfix.log()}\n{milters.output()}") from e
    return head_of(data)
