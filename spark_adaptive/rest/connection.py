"""One HTTP/1.1 connection of the REST server: h11 parses, this reads, dispatches, writes.

Contract (the server's, :mod:`~spark_adaptive.rest.server`, in detail):

* Bytes go into an ``h11.Connection``; events come out. A request is handed to
  :meth:`Owner.respond` only at h11's ``EndOfMessage``, so a body shorter than its
  ``Content-Length`` (the client closes: h11 raises; it stalls: the deadline
  passes) is never dispatched.
* :meth:`Owner.refusal` sees each request's head before its body is read (the bearer
  token, framing, the size limit); a refused request is answered and the
  connection closed, the body unread.
* Deadlines: ``idle_timeout`` between requests (closed quietly: nothing was
  asked), ``request_timeout`` from a request's first byte to its end (408).
* Every answer is JSON with a ``Content-Length``; a HEAD's has no body, refused
  or not. A connection that an error leaves unreadable is closed after its
  answer, by :func:`linger_close` so that the client reads that answer.
"""

from __future__ import annotations

import json
import logging
import math
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

    def refusal(self, req: h11.Request) -> Response | None:
        """The answer to a request refused on its head alone; None: read its body."""
        ...

    def respond(self, req: h11.Request, body: bytes) -> Response:
        """The answer to a complete request (never raises)."""
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
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                try:
                    got = self._read(conn, owner)
                except _Refused as r:
                    self._send(conn, owner, r.response, close=True)
                    return
                except h11.RemoteProtocolError as e:
                    self._send(conn, owner, _protocol_error(e), close=True)
                    return
                if got is None:
                    return
                req, body = got
                self._send(conn, owner, owner.respond(req, body))
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # h11 says this connection cannot carry another request
                conn.start_next_cycle()
        except OSError:  # the client went away, or stalled while reading our answer
            log.debug("REST connection from %s ended", self.client_address, exc_info=True)
        except Exception:  # a bug of ours: say so, and close this connection only
            log.exception("REST connection from %s failed", self.client_address)
        finally:
            linger_close(self.request)
            owner.release(self.request)

    def _read(self, conn: h11.Connection, owner: Owner) -> tuple[h11.Request, bytes] | None:
        """The next complete request and its body; None when the client is done."""
        started = time.monotonic() if conn.trailing_data[0] else None
        self._head = False
        req: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    self._write(owner, conn.send(
                        h11.InformationalResponse(status_code=100, headers=[])))
                if started is None:
                    self.request.settimeout(owner.idle_timeout)
                else:
                    left = started + owner.request_timeout - time.monotonic()
                    if left <= 0:
                        raise _Refused(_slow(owner))
                    self.request.settimeout(left)
                try:
                    data = self.request.recv(_RECV)
                except TimeoutError:
                    if started is None:
                        return None  # an idle kept-alive connection: closed quietly
                    raise _Refused(_slow(owner)) from None
                if started is None and data:
                    started = time.monotonic()
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                req = event
                self._head = req.method == b"HEAD"  # refused too, a HEAD gets no body
                refusal = owner.refusal(req)
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
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(data))),
                   ("Cache-Control", "no-store"), *response.headers]
        if close:
            headers.append(("Connection", "close"))
        out = conn.send(h11.Response(status_code=response.status, headers=headers,
                                     reason=_phrase(response.status)))
        if not self._head:
            out = (out or b"") + (conn.send(h11.Data(data=data)) or b"")
        self._write(owner, (out or b"") + (conn.send(h11.EndOfMessage()) or b""))

    def _write(self, owner: Owner, data: bytes | None) -> None:
        if data:
            self.request.settimeout(owner.request_timeout)
            self.request.sendall(data)


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


def _slow(owner: Owner) -> Response:
    return error(408, f"The request did not arrive whole within {owner.request_timeout:g} "
                      "seconds; nothing was done.")


def _protocol_error(e: h11.RemoteProtocolError) -> Response:
    # h11 hints 501 for a transfer coding other than chunked; this API answers no 5xx for
    # what a client sent, and the request is refused either way.
    status = e.error_status_hint if e.error_status_hint in (400, 431) else 400
    return error(status, f"Malformed HTTP request ({e}); nothing was done.")
