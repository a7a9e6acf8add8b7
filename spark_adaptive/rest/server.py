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
  which paths exist; the body of a refused request is not read. The one
  exception is a GET of the operators' page and its files (``/``,
  ``/ui/<file>``, :func:`~spark_adaptive.rest.api.is_public`): they hold no data,
  and the page asks for the token itself.
* Framing is h11's: ``Content-Length`` (given once, digits only: ``+47``, ``47, 47``
  or the header twice is 400, as RFC 9110 section 8.6 allows) or
  ``Transfer-Encoding: chunked``, never both; a header line folded onto the one
  before (obs-fold) is 400. A request is dispatched only once its body is
  complete: a client that closes early or stalls gets a 400 or 408 and nothing
  is applied. Bodies are at most ``max_body`` bytes (else 413 without reading
  the rest), header sections about 16 KiB (431); a GET or HEAD has none (else
  400 at its head). Reading, writing and deadlines are
  :mod:`~spark_adaptive.rest.connection`'s.
* Slow clients: a new connection must send its first request's line and
  headers within ``head_timeout`` (:data:`HEAD_TIMEOUT`) of its accept, a body
  must follow its head within as long, and a request must arrive whole within
  ``request_timeout`` of its first byte (else 408, or a quiet close when nothing
  came); a kept-alive connection with no request is closed after
  ``idle_timeout``.
* Floods: at most ``max_connections`` connections are open, so at most as many
  threads serve them (the thread of one closed to make room ends before the new
  one's starts). A connection whose request is not whole yet (a new one, a
  kept-alive one between requests, one whose head is in and its body not) holds
  nobody's request: when all are open, the one that has waited longest for a
  byte is closed to make room for the new one, passing over those whose bytes
  have arrived and are not yet read (a request coming in). Such a connection
  is closed without an answer, maybe with its request sent whole (its last
  bytes just arriving), but nothing of that request was done: retrying is safe.
  A new connection gets 503 with ``Retry-After`` only when every connection has
  a whole request in progress (or bytes just arrived): being dispatched (a call
  to the scheduler gives up after the facade's timeout, 30 s; a PUT also writes
  beside the checkpoint) or its answer being written (at most
  ``request_timeout``, to a client that does not read it). So idle, slow-head or
  slow-body connections (slowloris) cannot keep an operator out, while requests
  in progress are never cut. This is nginx's rule (connections waiting for a
  request are "reusable" and closed when ``worker_connections`` run out), in
  one ordered dict under one lock: no second limit, no reserve to size. The
  price: under a flood of new connections faster than a client sends its
  request, that client may be closed before it is read (``max_connections``
  newer ones must arrive first); it sees the connection close with no answer
  and retries.
* Closing waits for nobody: once a connection's answer is out (a refusal, or an
  answer with ``Connection: close``) its place is free, and the server's one
  :class:`~spark_adaptive.rest.connection.Reaper` thread lets the client read the
  answer and closes the socket; a 503 is sent without blocking, so a burst of
  them does not hold up the accept loop.
* Every answer, errors included, is JSON (``{"errors": [...]}`` for errors)
  with a status line and a ``Content-Length``; connections are kept alive
  unless an error leaves the stream unreadable, and pipelined requests are
  answered in order. ``HEAD`` is served wherever ``GET`` is. Routing, 404, 405
  and 415 are :class:`~spark_adaptive.rest.api.RestApi`'s.

:func:`serve` is what the runtime calls: it never raises, because an app
must not fail for want of its REST API (several drivers on one host can
use up the ports); it logs an error instead.
"""

from __future__ import annotations

import errno
import hmac
import logging
import select
import socket
import socketserver
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import h11

from spark_adaptive.rest import openapi
from spark_adaptive.rest.api import ALL_METHODS, Response, RestApi, error, is_public
from spark_adaptive.rest.connection import Connection, Owner, answer_at_once, too_large
from spark_adaptive.rest.facade import SchedulerFacade
from spark_adaptive.rest.reaper import Reaper
from spark_adaptive.rest.settings import RestSettings

log = logging.getLogger(__name__)

PORT_TRIES = 16
MAX_BODY = 64 * 1024
REQUEST_TIMEOUT = 10.0
"""Seconds from a request's first byte to its end (body included); later: 408."""
IDLE_TIMEOUT = 30.0
"""Seconds a kept-alive connection may wait for its next request; then it is closed."""
HEAD_TIMEOUT = 5.0
"""Seconds a new connection has to send its first request's line and headers whole, from
its accept (a kept-alive connection's later requests: from their first byte); a body has
as long from its head. Then it is closed: quietly when it sent nothing, with 408 when it
sent part of a request. A client sends its head and body at once (a few hundred bytes, at
most 64 KiB); a connection that does not is a client gone wrong or a slowloris."""
MAX_CONNECTIONS = 64
"""Connections open at once (and threads serving them). Beyond, the one that has waited
longest for a request, or the rest of one, is closed for the new one; when each has a whole
request in progress, the new one gets 503."""
LINGERING = 128
"""Sockets whose answer is out that the reaper holds at once, reading what their client
still sends so that it reads the answer (up to a second each); beyond, they are closed
at once."""
BACKLOG = 128
"""Connections the kernel holds until the server accepts them (``listen``); socketserver's
5 would drop a burst's handshakes and leave an operator's connection waiting a second."""
_LEAVE = 1.0
"""Seconds the accept loop waits, at most, for the thread of a connection closed to make
room to end (it ends within milliseconds: its socket is shut, its read returns), so that
the threads serving connections never outnumber their places."""
_UNAUTHORIZED = error(
    401, "Missing or wrong bearer token: send the header "
    "'Authorization: Bearer <spark.adaptive.rest.token>'.",
    headers=(("WWW-Authenticate", 'Bearer realm="spark-adaptive"'),))


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True  # rebinding after a restart, as http.server does
    allow_reuse_port = False  # two servers must never share a port
    rest: RestServer

    request_queue_size = BACKLOG

    def process_request(self, request: Any, client_address: Any) -> None:
        rest = self.rest
        if not rest._admit(request):
            answer_at_once(request, error(
                503, f"All {rest.max_connections} connections to the REST API have a "
                     "request in progress; retry.", headers=(("Retry-After", "1"),)),
                rest._reaper)
            return
        # One daemon thread per connection, as socketserver's ThreadingMixIn starts them,
        # kept by its socket so that closing the connection to make room can wait for it.
        thread = threading.Thread(target=self.process_request_thread,
                                  args=(request, client_address), daemon=True)
        try:
            rest._serving(request, thread)
            thread.start()
        except BaseException:  # no thread to serve it
            rest.release(request, linger=False)
            raise

    def shutdown_request(self, request: Any) -> None:
        """Nothing: a connection's socket is closed by :meth:`RestServer.release` (at once,
        or by the reaper), not by socketserver after the connection's thread ends."""

    def handle_error(self, request: object, client_address: object) -> None:
        # The default prints a traceback to stderr, e.g. for a client that went away.
        log.debug("REST connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class RestServer:
    """The HTTP server around one :class:`RestApi`. :meth:`start` binds, :meth:`stop` ends it."""

    def __init__(self, api: RestApi, *, host: str = "127.0.0.1", port: int = 4050,
                 token: str | None = None, port_tries: int = PORT_TRIES,
                 max_body: int = MAX_BODY, poll_interval: float = 0.5,
                 request_timeout: float = REQUEST_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT,
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
        self.head_timeout = head_timeout
        self.max_connections = max_connections
        self._token = token.encode("utf-8") if token else None
        self._tries = port_tries
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Open connections: those waiting for a request or the rest of one, the longest
        # waiting first (a dict keeps its order) with the time since when, and those with a
        # whole request in progress.
        self._waiting: dict[socket.socket, float] = {}
        self._busy: set[socket.socket] = set()
        self._threads: dict[socket.socket, threading.Thread] = {}  # each open connection's
        self._reaper = Reaper(LINGERING)  # started with the server
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
        token, then framing, a body on GET or HEAD, and size. None: read the body and
        dispatch."""
        auth = [v for n, v in req.headers if n == b"authorization"]
        reads = req.method in (b"GET", b"HEAD")
        public = reads and is_public(req.target.decode("latin-1"))
        if not public and not self.authorized(
                auth[0].decode("latin-1") if len(auth) == 1 else None):
            return _UNAUTHORIZED
        names = {n for n, _ in req.headers}
        if b"transfer-encoding" in names and b"content-length" in names:
            return error(400, "A request must not carry both Content-Length and "
                              "Transfer-Encoding.")
        length = next((int(v) for n, v in req.headers if n == b"content-length"), 0)
        if reads and (length or b"transfer-encoding" in names):
            # Nothing would read it (RFC 9110 section 9.3.1), and waiting for it would
            # hold the connection for a request that needs no body.
            return error(400, f"A {req.method.decode()} request must come without a body: "
                              "no Transfer-Encoding, no Content-Length but 0. Nothing was "
                              "done.")
        if length > self.max_body:
            return too_large(str(length), self.max_body)
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
        accept = [v.decode("latin-1") for n, v in req.headers if n == b"accept"]
        response = self.api.handle(method, target, body, content_type=", ".join(types) or None,
                                   accept=", ".join(accept) or None)
        log.debug("%s %s -> %d", method, target, response.status)
        return response

    # -- connections --------------------------------------------------------------------
    def _admit(self, sock: socket.socket) -> bool:
        """Take a new connection (it waits for its request from now, its accept), closing
        one that waits for a request if all are open (:func:`_victim`); False when none
        can be closed."""
        victim = None
        with self._lock:
            if len(self._waiting) + len(self._busy) >= self.max_connections:
                victim = _victim(self._waiting) if self._waiting else None
                if victim is None:
                    return False
                del self._waiting[victim]
            self._waiting[sock] = time.monotonic()
            leaving = None if victim is None else self._threads.get(victim)
        if victim is not None:
            log.debug("all %d REST connections open: closing one that waits for a request, "
                      "for a new one", self.max_connections)
            _shut(victim)  # its thread wakes from recv and ends
            if leaving is not None:  # at once; then the new one's starts: never one too many
                leaving.join(_LEAVE)
        return True

    def _serving(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self._lock:
            self._threads[sock] = thread

    # The view a connection has of its server (:class:`~spark_adaptive.rest.connection.Owner`).
    def waiting(self, sock: socket.socket) -> float | None:
        """A connection waits for bytes of a request: it may be closed to make room. Since
        when (a new one: its accept); None: it was closed to make room."""
        with self._lock:
            since = self._waiting.get(sock)
            if since is not None:
                return since  # keeps its place: it has waited since then
            if sock not in self._busy:
                return None
            self._busy.discard(sock)
            since = self._waiting[sock] = time.monotonic()
            return since

    def busy(self, sock: socket.socket) -> bool:
        """A connection works on bytes it read, or a whole request: it is not closed to
        make room."""
        with self._lock:
            if sock in self._busy:
                return True
            if sock not in self._waiting:
                return False
            del self._waiting[sock]
            self._busy.add(sock)
            return True

    def release(self, sock: socket.socket, *, linger: bool) -> None:
        """A connection is done: its place is free at once; the reaper closes its socket
        when an answer went out (``linger``), else it is closed now."""
        with self._lock:
            self._waiting.pop(sock, None)
            self._busy.discard(sock)
            self._threads.pop(sock, None)
        if linger:
            self._reaper.close(sock)
        else:
            sock.close()

    def open_connections(self) -> tuple[int, int]:
        """How many connections wait for a request or the rest of one, and how many have a
        whole one in progress (for tests)."""
        with self._lock:
            return len(self._waiting), len(self._busy)

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
                server = cls((self.host, port), Connection)
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        if server is None:
            raise OSError(errno.EADDRINUSE, f"ports {ports[0]}-{ports[-1]} on {self.host} are "
                                            "all in use")
        server.rest = self
        self._server = server
        self._reaper = Reaper(LINGERING)
        self._reaper.start()
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
            open_now = [*self._waiting, *self._busy]
        for sock in open_now:  # wakes the connection threads blocked in recv
            _shut(sock)
        self._reaper.stop()
        if self._thread is not None:
            self._thread.join(5.0)
        log.debug("spark-adaptive REST API at %s stopped", self.url)


def _victim(waiting: dict[socket.socket, float]) -> socket.socket | None:
    """The connection to close for a new one: the one that has waited longest with no
    bytes arrived and unread. One with bytes in is passed over: its thread reads them next,
    and they may end its request; None when every one has some."""
    if not hasattr(select, "poll"):  # Windows: the one that has waited longest
        return next(iter(waiting))
    poll = select.poll()
    for sock in waiting:
        poll.register(sock, select.POLLIN)
    ready = {fd for fd, _ in poll.poll(0)}
    return next((s for s in waiting if s.fileno() not in ready), None)


def _shut(sock: socket.socket) -> None:
    """End a connection from another thread: its thread's ``recv`` returns, and it closes."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # closed already
        pass


if TYPE_CHECKING:
    _OWNER: type[Owner] = RestServer  # mypy checks the view a connection has of its server


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
