"""An authoritative DNS server of our own on loopback (UDP and TCP), over records the caller writes.

For tests and measurement scripts that verify DKIM, SPF and DMARC without the internet's DNS.
Threads, not an event loop: the resolver it serves is synchronous and may run in the
same process. It answers from a dict, so a caller can change a record, make a name
SERVFAIL or leave a domain's queries unanswered while it runs.
"""

from __future__ import annotations

import socketserver
import struct
import threading
import time

import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

SOA = "ns.test. hostmaster.test. 1 3600 600 86400 60"


def txt_strings(value: str) -> str:
    """A TXT value of any length as quoted strings of at most 255 bytes each, in zone-file text: UTF-8, with
    quotes, backslashes and any byte that is not printable ASCII escaped."""
    raw = value.encode("utf-8")

    def quoted(part: bytes) -> str:
        return '"' + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\{b:03d}" for b in part) + '"'

    return " ".join(quoted(raw[i : i + 255]) for i in range(0, len(raw), 255)) or '""'


class ZoneServer:
    """Answers TXT (and any type it holds) for the names in `records`; NXDOMAIN with a SOA for the rest."""

    def __init__(self, ttl: int = 300, negative_ttl: int = 60):
        self.ttl = ttl
        self.negative_ttl = negative_ttl  # the SOA's TTL and minimum in a negative answer (RFC 2308)
        self.records: dict[tuple[str, int], list[str]] = {}
        self.servfail: set[str] = set()
        self.silent: set[str] = set()  # domains whose names (and their subdomains') get no answer at all
        self.queries = 0
        self.delay = 0.0  # seconds each answer takes (a resolver far away), each query in a thread of its own
        self.in_flight = 0
        self.most_in_flight = 0  # the most queries waiting for their answers at once
        self._lock = threading.Lock()
        self._servers: list[socketserver.BaseServer] = []
        self.port = 0

    def txt(self, name: str, value: str) -> None:
        self.records.setdefault((name.lower().rstrip("."), dns.rdatatype.TXT), []).append(txt_strings(value))

    def record(self, name: str, rdtype: str, value: str) -> None:
        """Any other record: `record("mail.shop.example", "A", "192.0.2.25")`, `("shop.example", "MX", "10 mail.shop.example.")`."""
        self.records.setdefault((name.lower().rstrip("."), dns.rdatatype.from_text(rdtype)), []).append(value)

    def clear(self, name: str) -> None:
        self.records.pop((name.lower().rstrip("."), dns.rdatatype.TXT), None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def answer(self, wire: bytes) -> bytes | None:
        try:
            query = dns.message.from_wire(wire)
        except Exception:
            return None
        with self._lock:
            self.queries += 1
        if self.delay:
            with self._lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            time.sleep(self.delay)
            with self._lock:
                self.in_flight -= 1
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        question = query.question[0]
        name = question.name.to_text().lower().rstrip(".")
        if any(name == domain or name.endswith("." + domain) for domain in self.silent):
            return None
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
            return response.to_wire()
        values = self.records.get((name, question.rdtype))
        if values:
            response.answer.append(
                dns.rrset.from_text_list(question.name, self.ttl, dns.rdataclass.IN, question.rdtype, values)
            )
        else:
            exists = any(key[0] == name for key in self.records)
            if not exists:
                response.set_rcode(dns.rcode.NXDOMAIN)
            soa = SOA if self.negative_ttl == 60 else SOA.rsplit(" ", 1)[0] + f" {self.negative_ttl}"
            response.authority.append(dns.rrset.from_text("test.", self.negative_ttl, "IN", "SOA", soa))
        return response.to_wire()

    def start(self) -> None:
        server = self

        class Udp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                reply = server.answer(data)
                if reply is not None:
                    sock.sendto(reply, self.client_address)

        class Tcp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                head = self.request.recv(2)
                if len(head) < 2:
                    return
                (length,) = struct.unpack("!H", head)
                data = b""
                while len(data) < length:
                    chunk = self.request.recv(length - len(data))
                    if not chunk:
                        return
                    data += chunk
                reply = server.answer(data)
                if reply is not None:
                    self.request.sendall(struct.pack("!H", len(reply)) + reply)

        for _ in range(20):  # the UDP port chosen by the system may be taken for TCP: try another
            udp = socketserver.ThreadingUDPServer(("127.0.0.1", 0), Udp)
            try:
                tcp = socketserver.ThreadingTCPServer(("127.0.0.1", udp.server_address[1]), Tcp)
            except OSError:
                udp.server_close()
                continue
            break
        else:
            raise RuntimeError("no loopback port free for both UDP and TCP")
        udp.daemon_threads = tcp.daemon_threads = True
        self.port = udp.server_address[1]
        self._servers = [udp, tcp]
        for each in self._servers:
            threading.Thread(target=each.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        for each in self._servers:
            each.shutdown()
            each.server_close()


def serve_in_process(
    records: dict[str, list[str]], ttl: int = 300, negative_ttl: int = 60, delay: float = 0.0
) -> tuple[object, str]:
    """A ZoneServer of TXT `records` in a process of its own (its threads then take no GIL from the caller's,
    as a local resolver would not), each answer `delay` seconds late: (the process, its address). Stop it
    with `.terminate()`."""
    import multiprocessing

    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(
        target=_serve, args=(records, ttl, negative_ttl, delay, child), daemon=True
    )
    process.start()
    if not parent.poll(30):
        process.terminate()
        raise RuntimeError("the loopback DNS server did not start within 30 s")
    return process, parent.recv()


def _serve(records: dict[str, list[str]], ttl: int, negative_ttl: int, delay: float, reply: object) -> None:
    server = ZoneServer(ttl, negative_ttl)
    server.delay = delay
    for name, values in records.items():
        for value in values:
            server.txt(name, value)
    server.start()
    reply.send(server.address)  # type: ignore[attr-defined]
    threading.Event().wait()
