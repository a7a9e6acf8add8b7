"""The operators' page: static files shipped in the package (``rest/static/``).

The page is plain HTML, CSS and JavaScript with no network dependency (no CDN,
no fonts, nothing fetched but this server's API), so it works on a cluster with
no way out. It holds no data: it reads the API with the bearer token the user
types (kept in the browser session only), which is why ``/`` and ``/ui/*`` are
the only targets served without the token.

Only files that are in the folder, with a name of letters, digits, ``.``, ``_``
and ``-`` and a known suffix, are served. The folder is listed once; a requested
name is only looked up in that list, so it never reaches the file system.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")

HEADERS = (
    # Everything from this server, nothing inline: a script injected into a query's name
    # or an error message could not run.
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)


def asset(name: str) -> tuple[bytes, str] | None:
    """The file's bytes and content type; None when the page has no such file.

    ``name`` is only ever looked up among the files shipped (listed once, at the first
    request): it never reaches the file system, whatever its length or characters, and
    nothing is kept per name asked for."""
    return _shipped().get(name)


@cache
def _shipped() -> dict[str, tuple[bytes, str]]:
    """Every file of ``static/`` the page may serve, read once: a name of letters, digits,
    ``.``, ``_`` and ``-`` with a known suffix. Called with no argument, so cached once."""
    out: dict[str, tuple[bytes, str]] = {}
    for resource in files(__package__).joinpath("static").iterdir():
        name = resource.name
        content_type = _TYPES.get(name[name.rfind("."):] if "." in name else "")
        if content_type is not None and _NAME.fullmatch(name) and resource.is_file():
            out[name] = (resource.read_bytes(), content_type)
    return out
