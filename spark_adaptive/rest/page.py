"""The operators' page: static files shipped in the package (``rest/static/``).

The page is plain HTML, CSS and JavaScript with no network dependency (no CDN,
no fonts, nothing fetched but this server's API), so it works on a cluster with
no way out. It holds no data: it reads the API with the bearer token the user
types (kept in the browser session only), which is why ``/`` and ``/ui/*`` are
the only targets served without the token.

Only files that are in the folder, with a name of letters, digits, ``.``, ``_``
and ``-`` and a known suffix, are served: a name can never reach outside it.
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


@cache
def asset(name: str) -> tuple[bytes, str] | None:
    """The file's bytes and content type; None when the page has no such file."""
    if not _NAME.fullmatch(name):
        return None
    suffix = name[name.rfind("."):] if "." in name else ""
    content_type = _TYPES.get(suffix)
    if content_type is None:
        return None
    resource = files(__package__).joinpath("static").joinpath(name)
    if not resource.is_file():
        return None
    return resource.read_bytes(), content_type
