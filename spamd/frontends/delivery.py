"""Maildir deliveries written by a helper process, so that writing mail costs the loop's process no GIL.

An SMTP delivery is some fifteen system calls (open the folders without following
links, an unnamed file, write, fsync, link into new/, fsync new/, close). Run in the
daemon's threads, each call gave the GIL back and took it again against the loop:
about 17 context switches a message, and the delivery threads spent as much CPU
as the loop itself (`perf sched` over scripts/speed/bench_smtp.py: 1,560 against 1,590 ms
in 3 s). In a process of its own, the same calls contend with nobody's GIL; the
loop sends one frame and reads one answer. scripts/speed/bench_smtp.py, interleaved:
see the commit message and README "SMTP throughput".

The helper also turns the message's CRLF line ends into LF (`files.maildir_lines`):
the loop did it before sending, 20 us of its time a message (timeit over 2,000
trec07p-dev messages, 8 KB on average, on a 2-core machine).

Every answer means the file is in new/ and, with fsync on, on disk (as
`maildir.write_file` does it, which is what the helper runs). A write that fails
answers its OSError (errno, text, path), so the SMTP handler answers it as it does
a thread's: 452 for a full disk or quota, 451 otherwise. A process that exits or
hangs hands its deliveries back: `maildir.deliver` then writes them in a thread.

Work frames: flags (1: fsync, 2: ownership given), uid, gid, dir mode, file mode,
then the lengths of the root, the folder and the name, the three, and the message.
Answers: b"D" (delivered), or b"E" + errno + path length + path + the error's text.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import socket
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from spamd.frontends.maildir.files import maildir_lines, write_file
from spamd.frontends.maildir.layout import Ownership
from spamd.learning.classifier import usable_cores
from spamd.runtime.helper_processes import HelperProcesses, HelperUnavailable, frame, frames, ignore_stop_signals
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap

_WORK = struct.Struct("!BIIHHIHH")
_ERROR = struct.Struct("!iH")
_FSYNC, _OWNERSHIP = 1, 2
# Deliveries one helper writes at once, so that one waiting on its fsyncs does not
# hold up the others. scripts/speed/bench_smtp.py, one run, rounds interleaved: 2 threads
# 566/479/590 msgs/s (p99 75-93 ms), 4 threads 640/571/490 (71-88 ms), 8 threads
# 635/701/469 (65-107 ms): the same speed within the noise, the tail longest with 8.
WRITER_THREADS = 4


class DeliveryUnavailable(HelperUnavailable):
    """No delivery process took this message: a thread of the daemon writes it."""


def default_delivery_processes() -> int:
    """One beside the loop when there is a second core; none on one core (the daemon's threads write)."""
    return 1 if usable_cores() > 1 else 0


class DeliveryProcesses(HelperProcesses[None]):
    """Helper processes that write Maildir deliveries; `write` returns once the file is in new/."""

    module = "spamd.frontends.delivery"
    kind = "delivery"
    fallback = "deliveries are written by the daemon's threads"
    unavailable = DeliveryUnavailable
    # A write and two fsyncs: a disk stalled this long gets the helper killed, and its
    # deliveries go to the daemon's threads (the SMTP session's data timeout is longer).
    answer_timeout_s = 60.0

    async def write(
        self, root: Path, ownership: Ownership | None, folder: str, name: str, data: bytes, fsync: bool
    ) -> Path:
        """`maildir.write_file` of `maildir_lines(data)` in a helper; its OSError if it fails there,
        DeliveryUnavailable if no helper answers."""
        await self.request(encode_work(root, ownership, folder, name, data, fsync))
        return (root / folder if folder else root) / "new" / name

    def decode(self, kind: bytes, payload: bytes) -> None | BaseException:
        if kind == b"D":
            return None
        if kind != b"E":
            raise ValueError(f"unknown answer {kind!r}")
        code, path_length = _ERROR.unpack_from(payload)
        path = os.fsdecode(payload[_ERROR.size : _ERROR.size + path_length]) or None
        text = payload[_ERROR.size + path_length :].decode("utf-8", "replace")
        return OSError(code, text, path) if path else OSError(code, text)


def encode_work(root: Path, ownership: Ownership | None, folder: str, name: str, data: bytes, fsync: bool) -> bytes:
    flags = (_FSYNC if fsync else 0) | (_OWNERSHIP if ownership is not None else 0)
    owner = ownership or Ownership(0, 0, 0, 0)
    root_b, folder_b, name_b = os.fsencode(root), os.fsencode(folder), os.fsencode(name)
    head = _WORK.pack(
        flags, owner.uid, owner.gid, owner.dir_mode, owner.file_mode, len(root_b), len(folder_b), len(name_b)
    )
    return b"".join((head, root_b, folder_b, name_b, data))


def decode_work(payload: bytes) -> tuple[Path, Ownership | None, str, str, bytes, bool]:
    flags, uid, gid, dir_mode, file_mode, root_length, folder_length, name_length = _WORK.unpack_from(payload)
    at = _WORK.size
    fields = []
    for length in (root_length, folder_length, name_length):
        fields.append(os.fsdecode(payload[at : at + length]))
        at += length
    root, folder, name = fields
    ownership = Ownership(uid, gid, dir_mode, file_mode) if flags & _OWNERSHIP else None
    return Path(root), ownership, folder, name, payload[at:], bool(flags & _FSYNC)


# ---------------------------------------------------------------- the helper's side


def _deliver_one(sock: socket.socket, sending: threading.Lock, ident: int, payload: bytes) -> None:
    try:
        root, ownership, folder, name, data, fsync = decode_work(payload)
        write_file(root, ownership, folder, name, maildir_lines(data), fsync)
        answer = frame(b"D", ident)
    except OSError as e:
        path = os.fsencode(e.filename) if e.filename is not None else b""
        text = (e.strerror or str(e)).encode("utf-8", "replace")
        answer = frame(b"E", ident, _ERROR.pack(e.errno or errnos.EIO, len(path)) + path + text)
    except Exception as e:  # a bug here: the sender retries (451), as for any failed write
        answer = frame(b"E", ident, _ERROR.pack(errnos.EIO, 0) + f"{type(e).__name__}: {e}".encode())
    # OSError: the daemon is gone; it answered nothing for this message, so its sender retries.
    with sending, contextlib.suppress(OSError):
        sock.sendall(answer)


def serve(sock: socket.socket) -> None:
    """Write the daemon's deliveries, WRITER_THREADS at a time, until its end of the socket closes.

    Then writes already started finish, and those not started are dropped: a daemon
    that went away with them queued answered nothing for them, so their senders send
    them again, and writing them too would only leave a second copy.
    """
    from spamd.runtime.scheduling import yield_to_the_loop

    ignore_stop_signals()
    keep_read_buffers_in_the_heap()
    yield_to_the_loop()  # the writer threads started below inherit it
    sending = threading.Lock()
    writers = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="delivery")
    try:
        for batch in frames(sock):
            for kind, ident, payload in batch:
                if kind == b"C":
                    with sending:
                        sock.sendall(frame(b"R", 0))
                else:
                    writers.submit(_deliver_one, sock, sending, ident, payload)
    finally:
        writers.shutdown(wait=True, cancel_futures=True)


if __name__ == "__main__":
    serve(socket.socket(fileno=int(sys.argv[1])))
