"""The REST server's reaper: one thread that closes the sockets whose answer is out.

A connection's place, and the accept loop, are free as soon as an answer is written; what
is left (waiting for the client to close, so that a reset does not discard the answer it
has not read yet) is this thread's.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time

# The server's logger: the log configuration names it (docs/operations.md, "Logs").
log = logging.getLogger("spark_adaptive.rest.server")

LINGER = 1.0
"""Seconds, at most, that a socket whose answer is out is read from (and what comes
dropped) before it is closed: see :class:`Reaper`."""

_RECV = 16 * 1024


class Reaper:
    """Closes the sockets whose answer is out, on one thread for all of them.

    Closing a socket with input unread makes the kernel reset the connection, and a reset
    can discard the answer before the client reads it. So :meth:`close` shuts the sending
    side at once (the client sees the answer end) and hands the socket over; this thread
    reads and drops what the client still sends (up to 1 MiB) until the client closes too,
    or for :data:`LINGER` seconds, then closes it. Neither a connection's thread nor the
    accept loop waits for that, and the connection's place is free before. At most
    ``most`` sockets are held; beyond, one is closed at once (its client may see a reset).
    """

    def __init__(self, most: int, linger: float = LINGER) -> None:
        self.most = most
        self.linger = linger
        self._lock = threading.Lock()
        self._new: list[socket.socket] = []  # handed over, not yet seen by the thread
        self._held = 0  # handed over, not yet closed
        self._stopped = True  # until started: every socket is closed at once
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._wake_in, self._wake_out = socket.socketpair()
        self._wake_out.setblocking(False)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="spark-adaptive-rest-reaper",
                                        daemon=True)
        self._thread.start()

    def close(self, sock: socket.socket) -> None:
        """Shut ``sock``'s sending side; close it once the client has closed, or later."""
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self._lock:
            taken = not self._stopped and self._held < self.most
            if taken:
                self._held += 1
                self._new.append(sock)
        if taken:
            self._wake()
        else:
            sock.close()

    def stop(self) -> None:
        """Close every socket held, and end the thread."""
        with self._lock:
            self._stopped = True
        if self._thread is not None:
            self._wake()
            self._thread.join(5.0)

    def _wake(self) -> None:
        try:
            self._wake_out.send(b"\0")
        except OSError:  # a wake is pending already (buffer full), or the thread is gone
            pass

    def _run(self) -> None:
        held: dict[socket.socket, tuple[float, int]] = {}  # deadline, bytes left to drop
        sel = selectors.DefaultSelector()
        sel.register(self._wake_in, selectors.EVENT_READ)
        try:
            while True:
                due = min((d for d, _ in held.values()), default=None)
                wait = None if due is None else max(0.0, due - time.monotonic())
                for key, _ in sel.select(wait):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._wake_in:
                        self._wake_in.recv(4096)
                        with self._lock:
                            new, self._new, stopped = self._new, [], self._stopped
                        for s in new:
                            s.setblocking(False)
                            sel.register(s, selectors.EVENT_READ)
                            held[s] = (time.monotonic() + self.linger, 1 << 20)
                        if stopped:
                            return
                        continue
                    try:
                        chunk = sock.recv(_RECV)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    deadline, left = held[sock]
                    left -= len(chunk)
                    held[sock] = (deadline if chunk and left > 0 else 0.0, left)
                now = time.monotonic()
                for sock in [s for s, (d, _) in held.items() if d <= now]:
                    sel.unregister(sock)
                    sock.close()
                    del held[sock]
                    with self._lock:
                        self._held -= 1
        except Exception:
            log.exception("the REST server's reaper failed; answered sockets are closed at "
                          "once from now on")
        finally:  # stopped, or failed: from now on each socket is closed at once
            with self._lock:
                self._stopped = True
                held.update(dict.fromkeys(self._new, (0.0, 0)))
                self._new = []
            for sock in held:
                sock.close()
            sel.close()
            self._wake_in.close()
            self._wake_out.close()
