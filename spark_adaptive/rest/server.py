"""The REST API's HTTP/1.1 server on the driver: h11's parser under a small threaded socket server.

Why h11: the parser is where requests break servers (a body shorter than its
``Content-Length``, ``Content-Length: +47``, two conflicting lengths, chunked
framing), and h11 is a maintained, strict, pure-Python HTTP/1.1 state machine
(about 1,800 lines, no dependencies, no I/O of its own). It adds nothing to
every Spark driver but itself: no event loop, no framework, no compiled code.
An ASGI stack (uvicorn, hypercorn) would bring an asyncio loop and its thread
into every app for an API that serves a few requests a minute; the standard
library's ``http.server`` is what we replace (its parser is lenient and its
errors are HTML). The sockets, threads and timeouts stay ours, in this module
(``socketserver``, one daemon thread per connection, as ``http.server`` did).

Contract:

* Binds ``rest.host`` (127.0.0.1 by default) on ``rest.port``; when that port
  is taken it tries the next ones, up to :data:`PORT_TRIES` in all, like the
  Spark UI (4040, 4041, ...); port 0 takes any free port. One INFO line gives
  the URL; :attr:`RestServer.url` gives it to tests and tools, and
  :attr:`RestServer.ready` is set once the socket listens (kopf's
  ``ready_flag``, for tests).
* With a token, every request must carry ``Authorization: Bearer <token>``
  (compared in constant time), else 401 with ``WWW-Authenticate: Bearer``.
  This comes before routing, so without the token not even a 404 leaks
  which paths exist; the body of a refused request is not read.
* Framing is h11's: ``Content-Length`` (digits only; two different values are
  refused, identical repeats are one, as RFC 9110 section 8.6 allows) or
  ``Transfer-Encoding: chunked``, never both. A request is dispatched only once
  its body is complete: a client that closes early or stalls gets a 400 or 408
  and nothing is applied. Bodies are at most ``max_body`` bytes (else 413
  without reading the rest), header sections at most :data:`MAX_HEAD` (431).
* Slow clients: a request must arrive whole within ``request_timeout`` seconds
  of its first byte (else 408); a kept-alive connection with no request is
  closed after ``idle_timeout``; at most ``max_connections`` at once (more get
  503 with ``Retry-After``).
* Every answer, errors included, is JSON (``{"errors": [...]}`` for errors)
  with a status line and a ``Content-Length``; connections are kept alive
  unless an error leaves the stream unreadable. Routing, 404, 405 and 415 are
  :class:`~spark_adaptive.rest.api.RestApi`'s.

:func:`serve` is what the runtime calls: it never raises, because an app
must not fail for want of its REST API (several drivers on one host can
use up the ports); it logs an error instead.
"""

from __future__ import annotations

import errno
import hmac
import json
import logging
import socket
import socketserver
import threading
import time
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import h11

from spark_adaptive.rest import openapi
from spark_adaptive.rest.api import ALL_METHODS, Response, RestApi, error
from spark_adaptive.rest.facade import SchedulerFacade
from spark_adaptive.rest.settings import RestSettings

log = logging.getLogger(__name__)

PORT_TRIES = 16
MAX_BODY = 64 * 1024
MAX_HEAD = 16 * 1024
"""Bytes of request line and headers (h11's default limit); more is 431."""
REQUEST_TIMEOUT = 10.0
IDLE_TIMEOUT = 30.0
MAX_CONNECTIONS = 64
_RECV = 16 * 1024
_UNAUTHORIZED = error(
    401, "Missing or wrong bearer token: send the header "
    "'Authorization: Bearer <spark.adaptive.rest.token>'.",
    headers=(("WWW-Authenticate", 'Bearer realm="spark-adaptive"'),))


class _Refused(Exception):
    """A request answered before it reached the API; the connection closes after it."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True  # rebinding after a restart, as http.server does
    allow_reuse_port = False  # two servers must never share a port
    rest: RestServer

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.rest._admit(request):
            _answer_and_close(request, error(503, "Too many connections to the REST API; "
                                                  "retry.", headers=(("Retry-After", "1"),)))
            return
        super().process_request(request, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        # The default prints a traceback to stderr, e.g. for a client that went away.
        log.debug("REST connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(socketserver.BaseRequestHandler):
    """One connection: h11 parses, this reads, dispatches complete requests, writes."""

    server: _Server
    request: socket.socket
    _head = False  # the request being answered is a HEAD: its answer has no body

    def handle(self) -> None:
        rest, sock = self.server.rest, self.request
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                try:
                    got = self._read(conn, rest)
                except _Refused as r:
                    self._send(conn, r.response, close=True)
                    return
                except h11.RemoteProtocolError as e:
                    self._send(conn, _protocol_error(e), close=True)
                    return
                if got is None:
                    return
                req, body = got
                self._send(conn, rest.respond(req, body))
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return  # h11 says this connection cannot carry another request
                conn.start_next_cycle()
        except OSError:  # the client went away, or stalled while reading our answer
            log.debug("REST connection from %s ended", self.client_address, exc_info=True)
        except Exception:  # a bug of ours: say so, and close this connection only
            log.exception("REST connection from %s failed", self.client_address)
        finally:
            _linger_close(sock)
            rest._release(sock)

    def _read(self, conn: h11.Connection, rest: RestServer) -> tuple[h11.Request, bytes] | None:
        """The next complete request and its body; None when the client is done."""
        started = time.monotonic() if conn.trailing_data[0] else None
        self._head = False
        req: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if conn.they_are_waiting_for_100_continue:
                    self._write(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
                if started is None:
                    self.request.settimeout(rest.idle_timeout)
                else:
                    left = started + rest.request_timeout - time.monotonic()
                    if left <= 0:
                        raise _Refused(_slow(rest))
                    self.request.settimeout(left)
                try:
                    data = self.request.recv(_RECV)
                except TimeoutError:
                    if started is None:
                        return None  # an idle kept-alive connection: closed quietly
                    raise _Refused(_slow(rest)) from None
                if started is None and data:
                    started = time.monotonic()
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                req = event
                self._head = req.method == b"HEAD"  # refused too, a HEAD gets no body
                refusal = rest.refusal(req)
                if refusal is not None:
                    raise _Refused(refusal)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > rest.max_body:
                    raise _Refused(_too_large(f"over {rest.max_body}", rest.max_body))
            elif isinstance(event, h11.EndOfMessage):
                assert req is not None
                return req, bytes(body)
            else:  # ConnectionClosed (PAUSED comes only after EndOfMessage)
                return None

    def _send(self, conn: h11.Connection, response: Response, *, close: bool = False) -> None:
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return  # a response is already out (cannot happen; never send two)
        data = (json.dumps(response.body) + "\n").encode("utf-8")
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                   ("Cache-Control", "no-store"), *response.headers]
        if close:
            headers.append(("Connection", "close"))
        out = conn.send(h11.Response(status_code=response.status, headers=headers,
                                     reason=_phrase(response.status)))
        if not self._head:
            out = (out or b"") + (conn.send(h11.Data(data=data)) or b"")
        self._write((out or b"") + (conn.send(h11.EndOfMessage()) or b""))

    def _write(self, data: bytes | None) -> None:
        if data:
            self.request.settimeout(self.server.rest.request_timeout)
            self.request.sendall(data)


class RestServer:
    """The HTTP server around one :class:`RestApi`. :meth:`start` binds, :meth:`stop` ends it."""

    def __init__(self, api: RestApi, *, host: str = "127.0.0.1", port: int = 4050,
                 token: str | None = None, port_tries: int = PORT_TRIES,
                 max_body: int = MAX_BODY, poll_interval: float = 0.5,
                 request_timeout: float = REQUEST_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        """``poll_interval``: how often the serving thread checks for :meth:`stop` (the
        longest a stop waits)."""
        self.api = api
        self._poll = poll_interval
        self.host = host
        self.requested_port = port
        self.max_body = max_body
        self.request_timeout = request_timeout
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self._token = token.encode("utf-8") if token else None
        self._tries = port_tries
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.ready = threading.Event()
        self.port: int | None = None

    @property
    def token_required(self) -> bool:
        return self._token is not None

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound server (IPv6 hosts in brackets)."""
        if self.port is None:
            raise RuntimeError("the REST server is not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        scheme, _, given = (header or "").partition(" ")
        # compare_digest still compares when the scheme is wrong: no timing difference.
        ok = hmac.compare_digest(given.strip().encode("utf-8", "replace"), self._token)
        return ok and scheme.lower() == "bearer"

    # -- one request --------------------------------------------------------------------
    def refusal(self, req: h11.Request) -> Response | None:
        """What to answer a request whose head is in, before its body is read: the bearer
        token, then framing and size. None: read the body and dispatch."""
        auth = [v for n, v in req.headers if n == b"authorization"]
        if not self.authorized(auth[0].decode("latin-1") if len(auth) == 1 else None):
            return _UNAUTHORIZED
        names = {n for n, _ in req.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            return error(400, "A request must not carry both Content-Length and "
                              "Transfer-Encoding.")
        length = next((int(v) for n, v in req.headers if n == b"content-length"), 0)
        if length > self.max_body:
            return _too_large(str(length), self.max_body)
        return None

    def respond(self, req: h11.Request, body: bytes) -> Response:
        """The answer to a complete request (never raises)."""
        method = req.method.decode("latin-1")
        target = req.target.decode("latin-1")
        if not target.startswith("/"):
            try:
                split = urlsplit(target)
            except ValueError:  # e.g. "http://[::1/queries"
                split = urlsplit("")
            if split.scheme in ("http", "https") and split.netloc:  # absolute-form
                target = (split.path or "/") + (f"?{split.query}" if split.query else "")
            elif method in ("CONNECT", "OPTIONS"):  # authority-form, or OPTIONS *
                allowed = ", ".join(ALL_METHODS)
                return error(405, f"Method {method} is not allowed on this server; allowed: "
                             f"{allowed}.", headers=(("Allow", allowed),))
            else:
                return error(400, f"Malformed request target {target!r}: send a path such "
                                  "as /queries.")
        types = [v.decode("latin-1") for n, v in req.headers if n == b"content-type"]
        response = self.api.handle(method, target, body, content_type=", ".join(types) or None)
        log.debug("%s %s -> %d", method, target, response.status)
        return response

    # -- connections --------------------------------------------------------------------
    def _admit(self, sock: socket.socket) -> bool:
        with self._lock:
            if len(self._open) >= self.max_connections:
                return False
            self._open.add(sock)
            return True

    def _release(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)

    def start(self) -> str:
        """Bind (trying the next ports if need be), serve in a daemon thread; the URL.

        Raises ``OSError`` when no port could be bound.
        """
        if self._server is not None:
            return self.url
        cls = _Server6 if ":" in self.host else _Server
        ports = [0] if self.requested_port == 0 else list(
            range(self.requested_port, min(self.requested_port + self._tries, 65536)))
        server = None
        for port in ports:
            try:
                server = cls((self.host, port), _Handler)
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        if server is None:
            raise OSError(errno.EADDRINUSE, f"ports {ports[0]}-{ports[-1]} on {self.host} are "
                                            "all in use")
        server.rest = self
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": self._poll},
            name="spark-adaptive-rest", daemon=True)
        self._thread.start()
        self.ready.set()
        taken = ""
        if self.requested_port not in (0, self.port):
            busy = self.port - 1
            taken = (f" (port {busy} was taken)" if busy == self.requested_port else
                     f" (ports {self.requested_port}-{busy} were taken)")
        log.info("spark-adaptive REST API at %s%s%s", self.url, taken,
                 ", bearer token required" if self._token else "")
        return self.url

    def stop(self) -> None:
        """Stop serving, close the socket and every open connection; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self.ready.clear()
        server.shutdown()
        server.server_close()
        with self._lock:
            open_now = list(self._open)
        for sock in open_now:  # wakes the connection threads blocked in recv
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(5.0)
        log.debug("spark-adaptive REST API at %s stopped", self.url)


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


def _too_large(length: str, limit: int) -> Response:
    return error(413, f"The request body of {length} bytes exceeds the limit of {limit} bytes.")


def _slow(rest: RestServer) -> Response:
    return error(408, f"The request did not arrive whole within {rest.request_timeout:g} "
                      "seconds; nothing was done.")


def _protocol_error(e: h11.RemoteProtocolError) -> Response:
    # h11 hints 501 for a transfer coding other than chunked; this API answers no 5xx for
    # what a client sent, and the request is refused either way.
    status = e.error_status_hint if e.error_status_hint in (400, 431) else 400
    return error(status, f"Malformed HTTP request ({e}); nothing was done.")


def _answer_and_close(sock: socket.socket, response: Response) -> None:
    """Answer on a connection that gets no thread (over the connection limit)."""
    conn = h11.Connection(h11.SERVER)
    data = (json.dumps(response.body) + "\n").encode("utf-8")
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
               ("Connection", "close"), *response.headers]
    try:
        sock.settimeout(1.0)
        sock.sendall((conn.send(h11.Response(status_code=response.status, headers=headers,
                                             reason=_phrase(response.status))) or b"") + data)
    except OSError:
        pass
    _linger_close(sock, 0.2)


def _linger_close(sock: socket.socket, linger: float = 1.0) -> None:
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


def serve(facade: SchedulerFacade, settings: RestSettings) -> RestServer | None:
    """Start the REST API as ``settings`` say; None when disabled or it could not bind."""
    if not settings.enabled:
        return None
    holder: list[RestServer] = []
    api = RestApi(facade, lambda: openapi.document(holder[0].url, holder[0].token_required))
    server = RestServer(api, host=settings.host, port=settings.port,
                        token=settings.token, port_tries=PORT_TRIES)
    holder.append(server)
    try:
        server.start()
    except OSError as e:
        log.error("spark-adaptive REST API not started: cannot bind %s:%d (%s); the scheduler "
                  "runs on without it. Set spark.adaptive.rest.port (0: any free port)",
                  settings.host, settings.port, e)
        return None
    return server
