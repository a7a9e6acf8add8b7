"""One HTTP/1.1 connection of the REST server: h11 parses, this reads, dispatches, writes.

Contract (the server's, :mod:`~spark_adaptive.rest.server`, in detail):

* Bytes go into an ``h11.Connection``; events come out. A request is handed to
  :meth:`Owner.respond` only at h11's ``EndOfMessage``, so a body shorter than its
  ``Content-Length`` (the client closes: h11 raises; it stalls: the deadline
  passes) is never dispatched.
* :meth:`Owner.refusal` sees each request's head before its body is read (the bearer
  token, framing, the size limit, a body on GET or HEAD); a refused request is
  answered and the connection closed, the body unread.
* Framing is h11's, and stricter on two points, each a 400: ``Content-Length``
  must be one run of digits given once (h11 takes ``47, 47`` and two identical
  headers as one value; RFC 9110 section 8.6 lets a recipient refuse them, and a
  length read two ways is how requests are smuggled past proxies); and no header
  line may continue the one before by starting with a space or tab (obs-fold,
  which h11 joins: ``Content-Length: 47`` then `` , 47`` would be read as one
  list; RFC 9112 section 5.2 lets a server refuse it).
* Deadlines: a new connection's first request head (request line and headers)
  must be in within ``head_timeout`` of its accept; a kept-alive connection
  may idle ``idle_timeout`` between requests, then each head must be in within
  ``head_timeout`` of its first byte. A body (at most 64 KiB) must be in within
  ``head_timeout`` of its head, and each request whole within ``request_timeout``
  of its first byte. A connection that sent nothing is closed quietly (nothing
  was asked); one that sent part of a request gets 408.
* While its thread waits for bytes of a request (:meth:`Owner.waiting`: before
  its head is whole, or its body), a connection may be closed by its server to
  make room for a new one: nothing of that request was done. While the thread
  works on bytes it has read, and from a whole request to the end of its answer
  (:meth:`Owner.busy`), it is not.
* Requests pipelined on a kept-alive connection are answered one after the
  other, in order: the bytes already in are parsed before the next ``recv``.
  HTTP/1.1 connections are kept alive unless the client says ``Connection:
  close``; HTTP/1.0 ones when the client says ``Connection: keep-alive`` and
  sends no ``Transfer-Encoding`` (as ``http.server`` did; RFC 9112 section 6.1
  has an HTTP/1.0 request with one closed after its answer). h11 itself closes
  every HTTP/1.0 exchange, so such an answer is framed by a throwaway h11
  connection and the next request read by a new one.
* Every answer is JSON with a ``Content-Length``; a HEAD's has no body, refused
  or not. When a connection ends its place is free at once
  (:meth:`Owner.release`); once an answer went out, the server's :class:`Reaper`
  closes the socket so that the client reads that answer.
"""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import socketserver
import time
from http import HTTPStatus
from typing import Any, Protocol

import h11

from spark_adaptive.rest.api import Response, error
from spark_adaptive.rest.reaper import Reaper

# The server's logger: the log configuration names it (docs/operations.md, "Logs").
log = logging.getLogger("spark_adaptive.rest.server")

MAX_HEAD = 16 * 1024
"""Bytes of request line and headers in h11's buffer without their end (h11's default);
more is 431. h11 checks as bytes arrive, so a head is refused somewhere past this."""
_RECV = 16 * 1024


class Owner(Protocol):
    """What a connection needs from its server."""

    max_body: int
    request_timeout: float
    idle_timeout: float
    head_timeout: float

    def refusal(self, req: h11.Request) -> Response | None:
        """The answer to a request refused on its head alone; None: read its body."""
        ...

    def respond(self, req: h11.Request, body: bytes) -> Response:
        """The answer to a complete request (never raises)."""
        ...

    def waiting(self, sock: socket.socket) -> float | None:
        """The connection waits for bytes of a request: the server may close it to make
        room. Since when it has waited (a new one: since its accept); None: it was closed
        already; stop."""
        ...

    def busy(self, sock: socket.socket) -> bool:
        """The connection works on bytes it has read, or on a whole request: the server
        leaves it open until it waits again. False: it was closed already; stop."""
        ...

    def release(self, sock: socket.socket, *, linger: bool) -> None:
        """The connection is done: its place is free, and the server closes the socket
        (``linger``: an answer went out; let the client read it first)."""
        ...


class _Refused(Exception):
    """A request answered before it reached the API; the connection closes after it."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class Connection(socketserver.BaseRequestHandler):
    """One connection (``socketserver`` makes one per accepted socket, on its thread)."""

    request: socket.socket
    _head = False  # the request being answered is a HEAD: its answer has no body
    _wrote = False  # something went out: the socket is closed after a linger

    def handle(self) -> None:
        owner: Owner = self.server.rest  # type: ignore[attr-defined]
        conn = _parser()
        opened = owner.waiting(self.request)  # its accept: the first head is due after it
        try:
            if opened is None:
                return  # closed to make room before this thread began
            while True:
                try:
                    got = self._read(conn, owner, opened)
                except _Refused as r:
                    self._send(conn, owner, r.response, close=True)
                    return
                except h11.RemoteProtocolError as e:
                    self._send(conn, owner, _protocol_error(e), close=True)
                    return
                if got is None:
                    return
                req, body = got
                opened = None
                response = owner.respond(req, body)
                if _keep_alive_10(req):
                    self._send_10(owner, response)
                    conn = _parser(conn.trailing_data)
                    continue
                self._send(conn, owner, response)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # h11 says this connection cannot carry another request
                conn.start_next_cycle()  # a pipelined request already in is read next
        except OSError:  # the client went away, or stalled while reading our answer
            log.debug("REST connection from %s ended", self.client_address, exc_info=True)
        except Exception:  # a bug of ours: say so, and close this connection only
            log.exception("REST connection from %s failed", self.client_address)
        finally:
            owner.release(self.request, linger=self._wrote)

    def _read(self, conn: h11.Connection, owner: Owner,
              opened: float | None) -> tuple[h11.Request, bytes] | None:
        """The next complete request and its body; None when the client is done, or the
        connection was closed to make room. ``opened``: when the connection was accepted,
        for its first request (None for the later ones)."""
        now = time.monotonic()
        head = bytearray(conn.trailing_data[0])  # h11 reads the head from here: it is first
        started = now if head else None  # a pipelined request's bytes are in
        # Until its first byte: head_timeout of the accept, or idle_timeout of the last answer.
        first_byte_due = now + owner.idle_timeout if opened is None else (
            opened + owner.head_timeout)
        head_in: float | None = None  # when the head was in
        self._head = False
        req: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if owner.waiting(self.request) is None:  # from here it may be closed
                    return None  # closed to make room; nothing was done
                if conn.they_are_waiting_for_100_continue:
                    self._write(owner, conn.send(
                        h11.InformationalResponse(status_code=100, headers=[])))
                due, late = (first_byte_due, None) if started is None else _deadline(
                    owner, started, opened, head_in)
                try:  # past the deadline, what arrived in time is still read (timeout 0)
                    self.request.settimeout(max(0.0, due - time.monotonic()))
                    data = self.request.recv(_RECV)
                except (TimeoutError, BlockingIOError):
                    if late is None:
                        return None  # nothing was asked: closed quietly
                    raise _Refused(late) from None
                if data and not owner.busy(self.request):  # not closed while we parse it
                    return None  # closed to make room as it came; nothing was done
                if started is None and data:
                    started = time.monotonic()
                if req is None:
                    head += data
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                req = event
                head_in = time.monotonic()
                self._head = req.method == b"HEAD"  # refused too, a HEAD gets no body
                refusal = head_problem(head) or owner.refusal(req)
                if refusal is not None:
                    raise _Refused(refusal)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > owner.max_body:
                    raise _Refused(too_large(f"over {owner.max_body}", owner.max_body))
            elif isinstance(event, h11.EndOfMessage):
                assert req is not None
                if not owner.busy(self.request):  # it is, unless it read nothing for it
                    return None  # closed to make room just before; nothing was done
                return req, bytes(body)
            else:  # ConnectionClosed (PAUSED comes only after EndOfMessage)
                return None

    def _send(self, conn: h11.Connection, owner: Owner, response: Response, *,
              close: bool = False) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return  # a response is already out (cannot happen; never send two)
        data = encode(response)
        headers = _headers(response, data)
        if close:
            headers.append(("Connection", "close"))
        out = conn.send(h11.Response(status_code=response.status, headers=headers,
                                     reason=_phrase(response.status)))
        if not self._head:
            out = (out or b"") + (conn.send(h11.Data(data=data)) or b"")
        self._write(owner, (out or b"") + (conn.send(h11.EndOfMessage()) or b""))

    def _send_10(self, owner: Owner, response: Response) -> None:
        """The answer to an HTTP/1.0 request that asked to keep the connection alive,
        framed by a throwaway h11 connection (which, having read no request, neither adds
        ``Connection: close`` nor knows of a HEAD: its body is left out here)."""
        data = encode(response)
        framer = h11.Connection(h11.SERVER)
        out = framer.send(h11.Response(
            status_code=response.status, reason=_phrase(response.status),
            headers=[*_headers(response, data), ("Connection", "keep-alive")])) or b""
        if not self._head:
            out += (framer.send(h11.Data(data=data)) or b"") + (
                framer.send(h11.EndOfMessage()) or b"")
        self._write(owner, out)

    def _write(self, owner: Owner, data: bytes | None) -> None:
        if data:
            self._wrote = True
            self.request.settimeout(owner.request_timeout)
            self.request.sendall(data)


def _parser(trailing: tuple[bytes, bool] = (b"", False)) -> h11.Connection:
    """A new h11 connection, fed what the one before had received and not read."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    data, closed = trailing
    if data:
        conn.receive_data(data)
    if closed:
        conn.receive_data(b"")
    return conn


def _keep_alive_10(req: h11.Request) -> bool:
    """An HTTP/1.0 request whose ``Connection`` header says ``keep-alive`` (not ``close``)
    and that has no ``Transfer-Encoding`` (RFC 9112 section 6.1: its framing is faulty, and
    the connection is closed after it)."""
    if req.http_version != b"1.0" or any(n == b"transfer-encoding" for n, _ in req.headers):
        return False
    tokens = {t.strip().lower() for n, v in req.headers if n == b"connection"
              for t in v.split(b",")}
    return b"keep-alive" in tokens and b"close" not in tokens


def _deadline(owner: Owner, started: float, opened: float | None,
              head_in: float | None) -> tuple[float, Response]:
    """When the request begun at ``started`` is late, and what it then gets (408): its head
    is due ``head_timeout`` after the accept (a first request) or its first byte, its body
    as long after its head, the whole ``request_timeout`` after its first byte."""
    whole = started + owner.request_timeout
    if head_in is None:
        due = (started if opened is None else opened) + owner.head_timeout
        late = _slow(owner.head_timeout, "request line and headers")
    else:
        due = head_in + owner.head_timeout
        late = _slow(owner.head_timeout, "request body", " of its head")
    if due < whole:
        return due, late
    return whole, _slow(owner.request_timeout, "request")


def _headers(response: Response, data: bytes) -> list[tuple[str, str]]:
    return [("Content-Type", response.content_type), ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"), *response.headers]


# A Content-Length field line of a request head (h11 allows no space before the colon, and
# has read the request line, whose method cannot contain one).
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([^\r\n]*?)[ \t]*\r?$",
                             re.IGNORECASE | re.MULTILINE)
_FOLDED = re.compile(rb"\n[ \t]")  # a line that continues the one before (obs-fold)
_HEAD_END = re.compile(rb"\n\r?\n")  # h11's end of a head


def head_problem(head: bytes | bytearray) -> Response | None:
    """400 when the head (the bytes h11 read a request from, the request line first) folds
    a header line onto the one before, or gives ``Content-Length`` other than once as one
    run of digits. h11 has already refused everything else that is not digits (``+47``,
    ``4_7``, ``47, 48``)."""
    end = _HEAD_END.search(head)
    head = head[:end.start() if end else len(head)]
    if _FOLDED.search(head):
        return error(400, "Malformed HTTP request: a header line starts with a space or tab, "
                          "continuing the line before (obs-fold, RFC 9112 section 5.2); send "
                          "each header on one line. Nothing was done.")
    values = _CONTENT_LENGTH.findall(head)
    if len(values) > 1:
        what = f"is given {len(values)} times"
    elif values and not values[0].isdigit():
        what = f"is {values[0].decode('latin-1')!r}"
    else:
        return None
    return error(400, f"Malformed HTTP request: Content-Length {what}; it must be given once, "
                      "as one number of digits only (RFC 9110 section 8.6). Nothing was done.")


def encode(response: Response) -> bytes:
    if response.raw is not None:
        return response.raw
    return (json.dumps(finite(response.body), allow_nan=False) + "\n").encode("utf-8")


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number as null: JSON has no such numbers, and a
    strict parser (a browser's) refuses Python's ``NaN`` and ``Infinity``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def too_large(length: str, limit: int) -> Response:
    return error(413, f"The request body of {length} bytes exceeds the limit of {limit} bytes.")


def answer_at_once(sock: socket.socket, response: Response, reaper: Reaper) -> None:
    """Answer on a connection that gets no thread (every place has a request in progress)
    without waiting for it: one send that does not block (the answer is a few hundred
    bytes, the new socket's buffer empty), then the reaper closes it."""
    data = encode(response)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
               ("Connection", "close"), *response.headers]
    head = h11.Connection(h11.SERVER).send(h11.Response(
        status_code=response.status, headers=headers, reason=_phrase(response.status)))
    try:
        sock.setblocking(False)
        sock.send((head or b"") + data)
    except OSError:
        pass
    reaper.close(sock)


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _slow(seconds: float, what: str, after: str = "") -> Response:
    return error(408, f"The {what} did not arrive whole within {seconds:g} seconds{after}; "
                      "nothing was done.")


def _protocol_error(e: h11.RemoteProtocolError) -> Response:
    # h11 hints 501 for a transfer coding other than chunked; this API answers no 5xx for
    # what a client sent, and the request is refused either way.
    status = e.error_status_hint if e.error_status_hint in (400, 431) else 400
    return error(status, f"Malformed HTTP request ({e}); nothing was done.")
