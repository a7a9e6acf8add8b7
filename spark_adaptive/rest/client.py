"""A small client of the REST API (``urllib`` only), for the ``spark-adaptive`` command.

:class:`RestClient` returns decoded JSON or raises one of two errors, split by
what the user should do:

* :class:`ApiError`: the server answered and refused (4xx) or failed (5xx);
  ``reasons`` are the server's own, from its ``{"errors": [...]}`` body.
* :class:`ConnectionProblem`: no usable answer (nothing listens at the URL, a
  timeout, something that is not HTTP or not JSON, an answer cut short, an
  error status whose body is not the API's ``{"errors": [...]}``, as another
  server such as the Spark UI answers); its message says what was wrong and
  how to find the URL.

A URL or token that cannot be sent at all is :class:`UsageProblem`, raised by the
constructor before anything is sent.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:4050"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ApiError(Exception):
    """The server answered with an error status."""

    def __init__(self, status: int, reasons: list[str]) -> None:
        self.status = status
        self.reasons = reasons
        super().__init__(f"HTTP {status}: " + "; ".join(reasons))


class ConnectionProblem(Exception):
    """No usable answer from the server."""


class UsageProblem(ValueError):
    """The URL or the token cannot be used; nothing was sent."""


NOT_THE_API = "is this the spark-adaptive REST API (not the Spark UI)?"


def not_the_api(where: str, what: str) -> ConnectionProblem:
    """The problem of an answer that is not the API's: ``where`` answered ``what``."""
    return ConnectionProblem(f"{where} {what}: {NOT_THE_API}")


_URL_HINT = ("give the URL the driver logs at start ('spark-adaptive REST API at "
             "http://HOST:PORT') with --url or SPARK_ADAPTIVE_URL")


def check_url(url: str) -> None:
    """:class:`UsageProblem` naming what is wrong with ``url``, if anything."""
    bad = next((c for c in url if not " " < c < "\x7f"), None)
    if bad is not None:
        raise UsageProblem(f"the URL {url!r} has a character a URL cannot hold as it is "
                           f"({bad!r}; percent-encode it): {_URL_HINT}")
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # ValueError: a port that is not a number, or out of range
    except ValueError as e:
        raise UsageProblem(f"the URL {url!r} is malformed ({e}): {_URL_HINT}") from None
    if parts.scheme not in ("http", "https"):
        raise UsageProblem(f"the URL {url!r} does not start with http:// or https://: "
                           f"{_URL_HINT}")
    if not parts.hostname:
        raise UsageProblem(f"the URL {url!r} names no host: {_URL_HINT}")


def check_token(token: str) -> None:
    """:class:`UsageProblem` if ``token`` cannot be sent in an HTTP header (which carries
    Latin-1 text without control characters). The message names the character's position
    and code point, not the token."""
    for i, c in enumerate(token, 1):
        if ord(c) > 0xFF or c < " " or c == "\x7f":
            raise UsageProblem(
                f"the bearer token (--token or SPARK_ADAPTIVE_TOKEN) cannot be sent in an HTTP "
                f"header: its character {i} is U+{ord(c):04X}, and a header carries only "
                "Latin-1 text without control characters")


class RestClient:
    """Talks to one driver's REST API at ``url``, with a bearer ``token`` if given."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None,
                 timeout: float = 10.0) -> None:
        """:class:`UsageProblem` if the URL or the token cannot be used."""
        check_url(url)
        if token:
            check_token(token)
        self.url = url.rstrip("/")
        self._token = token
        self._timeout = timeout
        host = urllib.parse.urlsplit(self.url).hostname or ""
        # A proxy from the environment has no business with the driver on this machine.
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK else []
        self._opener = urllib.request.build_opener(*handlers)

    @staticmethod
    def query_path(ident: str, *rest: str) -> str:
        return "/".join(["/queries", urllib.parse.quote(ident, safe=""), *rest])

    def get(self, path: str) -> Any:
        return self.request("GET", path)[0]

    def put(self, path: str, body: Any) -> tuple[Any, dict[str, str]]:
        return self.request("PUT", path, body)

    def request(self, method: str, path: str, body: Any = None
                ) -> tuple[Any, dict[str, str]]:
        """``(decoded JSON, response headers)``; raises :class:`ApiError` or
        :class:`ConnectionProblem`."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self._token:
            req.add_header("Authorization", f"Bearer {self._token}")
        try:
            with self._opener.open(req, timeout=self._timeout) as resp:
                raw = resp.read()
                headers = {k.lower(): v for k, v in resp.headers.items()}
        except urllib.error.HTTPError as e:
            reasons = _reasons(e)
            if reasons is None:  # another server's error page (the Spark UI's 404, ...)
                raise not_the_api(f"{self.url}{path}", f"answered HTTP {e.code} "
                                  f"({e.reason}) without the API's error JSON") from None
            raise ApiError(e.code, reasons) from None
        except http.client.IncompleteRead as e:
            outcome = ("; the update may or may not have been applied: read the bounds back "
                       "with 'spark-adaptive requirements get QUERY'" if method == "PUT"
                       else "; please retry")
            raise ConnectionProblem(
                f"the answer of {self.url}{path} was cut short ({len(e.partial)} bytes read, "
                f"{e.expected} more expected){outcome}.") from None
        except http.client.HTTPException as e:  # BadStatusLine, LineTooLong, ...
            raise ConnectionProblem(
                f"{self.url} did not answer in HTTP ({type(e).__name__}: {str(e)[:80]!r}): is "
                "this the spark-adaptive REST API? Its driver logs the URL at start "
                "('spark-adaptive REST API at ...'); pass it with --url or "
                "SPARK_ADAPTIVE_URL.") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConnectionProblem(
                f"cannot reach the spark-adaptive REST API at {self.url} ({reason}). Is the "
                "app running with spark.adaptive.enabled=true? Its driver logs the URL at "
                "start ('spark-adaptive REST API at ...'); pass it with --url or "
                "SPARK_ADAPTIVE_URL.") from None
        try:
            return json.loads(raw.decode("utf-8")), headers
        except ValueError:
            raise not_the_api(f"{self.url}{path}", "did not answer JSON") from None


def _reasons(e: urllib.error.HTTPError) -> list[str] | None:
    """The reasons of an error answer of the API (``{"errors": [...]}``); None for a body
    that is not that (another server's error page, or none)."""
    try:
        body = json.loads(e.read().decode("utf-8"))
    except (ValueError, OSError, http.client.HTTPException):
        return None
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list):
        return None
    return [str(r) for r in errors] or [f"{e.code} {e.reason}"]
