"""The REST API's HTTP/1.1 server on the driver: standard library only, one daemon thread.

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
  which paths exist.
* Request bodies need a ``Content-Length`` (chunked bodies get 411) of at
  most ``max_body`` bytes (else 413, and the connection is closed rather
  than reading the rest).
* Every answer is JSON with a ``Content-Length``; connections are kept alive.

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from spark_adaptive.rest import openapi
from spark_adaptive.rest.api import Response, RestApi, error
from spark_adaptive.rest.facade import SchedulerFacade
from spark_adaptive.rest.settings import RestSettings

log = logging.getLogger(__name__)

PORT_TRIES = 16
MAX_BODY = 64 * 1024


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_port = False  # two servers must never share a port
    rest: RestServer

    def handle_error(self, request: object, client_address: object) -> None:
        # The default prints a traceback to stderr, e.g. for a client that went away.
        log.debug("REST request from %s failed", client_address, exc_info=True)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup we do not need.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "spark-adaptive"
    timeout = 60  # seconds a kept-alive or slow connection may hold its thread idle

    def do_GET(self) -> None:  # noqa: N802 - the names http.server dispatches to
        self._handle("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._handle("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._handle("DELETE")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")

    def do_HEAD(self) -> None:  # noqa: N802
        self._handle("HEAD")

    def _handle(self, method: str) -> None:
        rest = self.server.rest
        if not rest.authorized(self.headers.get("Authorization")):
            self._send(error(401, "Missing or wrong bearer token: send the header "
                             "'Authorization: Bearer <spark.adaptive.rest.token>'.",
                             headers=(("WWW-Authenticate", 'Bearer realm="spark-adaptive"'),)),
                       method, close=self._has_body())
            return
        if self.headers.get("Transfer-Encoding"):
            self._send(error(411, "Send the request body with a Content-Length."), method,
                       close=True)
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError(length)
        except ValueError:
            self._send(error(400, "Invalid Content-Length header."), method, close=True)
            return
        if length > rest.max_body:
            self._send(error(413, f"The request body of {length} bytes exceeds the limit of "
                             f"{rest.max_body} bytes."), method, close=True)
            return
        body = self.rfile.read(length) if length else b""
        self._send(rest.api.handle(method, self.path, body), method)

    def _has_body(self) -> bool:
        return bool(self.headers.get("Transfer-Encoding")) or self.headers.get(
            "Content-Length", "0").strip() not in ("", "0")

    def _send(self, response: Response, method: str, close: bool = False) -> None:
        data = (json.dumps(response.body) + "\n").encode("utf-8")
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in response.headers:
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - base signature
        log.debug("%s %s", self.address_string(), format % args)


class RestServer:
    """The HTTP server around one :class:`RestApi`. :meth:`start` binds, :meth:`stop` ends it."""

    def __init__(self, api: RestApi, *, host: str = "127.0.0.1", port: int = 4050,
                 token: str | None = None, port_tries: int = PORT_TRIES,
                 max_body: int = MAX_BODY, poll_interval: float = 0.5) -> None:
        """``poll_interval``: how often the serving thread checks for :meth:`stop` (the
        longest a stop waits)."""
        self.api = api
        self._poll = poll_interval
        self.host = host
        self.requested_port = port
        self.max_body = max_body
        self._token = token.encode("utf-8") if token else None
        self._tries = port_tries
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
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
        ok = hmac.compare_digest(given.strip().encode("utf-8"), self._token)
        return ok and scheme.lower() == "bearer"

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
        """Stop serving and close the socket; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self.ready.clear()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
        log.debug("spark-adaptive REST API at %s stopped", self.url)


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
