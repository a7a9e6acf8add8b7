"""One HTTP/1.1 connection of the REST server: h11 parses, this reads, dispatches, writes.

Contract (the server's, :mod:`~spark_adaptive.rest.server`, in detail):

* Bytes go into an ``h11.Connection``; events come out. A request is handed to
  :meth:`Owner.respond` only at h11's ``EndOfMessage``, so a body shorter than its
  ``Content-Length`` (the client closes: h11 raises; it stalls: the deadline
  passes) is never dispatched.
* :meth:`Owner.refusal` sees each request's head before its body is read (the bearer
  token, framing, the size limit); a refused request is answered and the
  connection closed, the body unread.
* Framing is h11's, and stricter on one point: ``Content-Length`` must be one
  run of digits given once (h11 takes ``47, 47`` and two identical headers as
  one value; RFC 9110 section 8.6 lets a recipient refuse them, and a length
  read two ways is how requests are smuggled past proxies): else 400.
* Deadlines: a new connection's first request head (request line and headers)
  must be in within ``head_timeout`` of its accept; a kept-alive connection
  may idle ``idle_timeout`` between requests, then each head must be in within
  ``head_timeout`` of its first byte. Each request must be whole within
  ``request_timeout`` of its first byte. A connection that sent nothing is
  closed quietly (nothing was asked); one that sent part of a request gets 408.
* While it waits for a request head (:meth:`Owner.waiting`) a connection may be
  closed by its server to make room for a new one; from the head's arrival to
  the end of its answer (:meth:`Owner.busy`) it is not.
* Requests pipelined on a kept-alive connection are answered one after the
  other, in order: the bytes already in are parsed before the next ``recv``.
  HTTP/1.1 connections are kept alive unless the client says ``Connection:
  close``; HTTP/1.0 ones when the client says ``Connection: keep-alive`` (as
  ``http.server`` did; h11 itself closes every HTTP/1.0 exchange, so such an
  answer is framed by a throwaway h11 connection and the next request read by
  a new one).
* Every answer is JSON with a ``Content-Length``; a HEAD's has no body, refused
  or not. A connection that an error leaves unreadable is closed after its
  answer, by :func:`linger_close` so that the client reads that answer.
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

    def waiting(self, sock: socket.socket) -> bool:
        """The connection waits for a request head: the server may close it to make room.
        False: it was closed already; stop."""
        ...

    def busy(self, sock: socket.socket) -> bool:
        """A request head is in: the server leaves the connection open until it waits
        again. False: it was closed already (just before); stop."""
        ...

    def release(self, sock: socket.socket) -> None:
        """The connection is closed."""
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

    def handle(self) -> None:
        owner: Owner = self.server.rest  # type: ignore[attr-defined]
        conn = _parser()
        opened: float | None = time.monotonic()  # the first head is due head_timeout after
        try:
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
            linger_close(self.request)
            owner.release(self.request)

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
        self._head = False
        req: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if req is None and not owner.waiting(self.request):
                    return None
                if conn.they_are_waiting_for_100_continue:
                    self._write(owner, conn.send(
                        h11.InformationalResponse(status_code=100, headers=[])))
                due, late = (first_byte_due, None) if started is None else _deadline(
                    owner, started, opened, req is None)
                left = due - time.monotonic()
                try:
                    if left <= 0:
                        raise TimeoutError
                    self.request.settimeout(left)
                    data = self.request.recv(_RECV)
                except TimeoutError:
                    if late is None:
                        return None  # nothing was asked: closed quietly
                    raise _Refused(late) from None
                if started is None and data:
                    started = time.monotonic()
                if req is None:
                    head += data
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                req = event
                self._head = req.method == b"HEAD"  # refused too, a HEAD gets no body
                if not owner.busy(self.request):
                    return None
                refusal = content_length_problem(head) or owner.refusal(req)
                if refusal is not None:
                    raise _Refused(refusal)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > owner.max_body:
                    raise _Refused(too_large(f"over {owner.max_body}", owner.max_body))
            elif isinstance(event, h11.EndOfMessage):
                assert req is not None
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
    """An HTTP/1.0 request whose ``Connection`` header says ``keep-alive`` (not ``close``)."""
    if req.http_version != b"1.0":
        return False
    tokens = {t.strip().lower() for n, v in req.headers if n == b"connection"
              for t in v.split(b",")}
    return b"keep-alive" in tokens and b"close" not in tokens


def _deadline(owner: Owner, started: float, opened: float | None,
              in_head: bool) -> tuple[float, Response]:
    """When the request begun at ``started`` is late, and what it then gets (408)."""
    whole = started + owner.request_timeout
    if in_head:
        head = (started if opened is None else opened) + owner.head_timeout
        if head < whole:
            return head, _slow(owner.head_timeout, "request line and headers")
    return whole, _slow(owner.request_timeout, "request")


def _headers(response: Response, data: bytes) -> list[tuple[str, str]]:
    return [("Content-Type", response.content_type), ("Content-Length", str(len(data))),
            ("Cache-Control", "no-store"), *response.headers]


# A Content-Length field line of a request head (h11 allows no space before the colon, and
# has read the request line, whose method cannot contain one).
_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*([^\r\n]*?)[ \t]*\r?$",
                             re.IGNORECASE | re.MULTILINE)
_HEAD_END = re.compile(rb"\n\r?\n")  # h11's end of a head


def content_length_problem(head: bytes | bytearray) -> Response | None:
    """400 when the head (the bytes h11 read a request from, the request line first) gives
    ``Content-Length`` other than once as one run of digits. h11 has already refused
    everything else that is not digits (``+47``, ``4_7``, ``47, 48``)."""
    end = _HEAD_END.search(head)
    values = _CONTENT_LENGTH.findall(head[:end.start() if end else len(head)])
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


def answer_and_close(sock: socket.socket, response: Response) -> None:
    """Answer on a connection that gets no thread (over the connection limit)."""
    data = encode(response)
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
               ("Connection", "close"), *response.headers]
    head = h11.Connection(h11.SERVER).send(h11.Response(
        status_code=response.status, headers=headers, reason=_phrase(response.status)))
    try:
        sock.settimeout(1.0)
        sock.sendall((head or b"") + data)
    except OSError:
        pass
    linger_close(sock, 0.2)


def linger_close(sock: socket.socket, linger: float = 1.0) -> None:
    """Close so that the client reads our answer: closing with unread input would reset the
    connection (RST) and could discard the answer in flight; so shut our side, then read
    and drop what the client still sends, briefly."""
    try:
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + linger
        drained = 0
        while drained < 1 << 20:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            chunk = sock.recv(_RECV)
            if not chunk:
                break
            drained += len(chunk)
    except OSError:
        pass
    finally:
        sock.close()


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _slow(seconds: float, what: str) -> Response:
    return error(408, f"The {what} did not arrive whole within {seconds:g} seconds; nothing "
                      "was done.")


def _protocol_error(e: h11.RemoteProtocolError) -> Response:
    # h11 hints 501 for a transfer coding other than chunked; this API answers no 5xx for
    # what a client sent, and the request is refused either way.
    status = e.error_status_hint if e.error_status_hint in (400, 431) else 400
    return error(status, f"Malformed HTTP request ({e}); nothing was done.")
