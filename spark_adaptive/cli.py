"""The ``spark-adaptive`` command.

Over a driver's REST API (``--url``, default ``http://127.0.0.1:4050`` or
``$SPARK_ADAPTIVE_URL``; ``--token`` or ``$SPARK_ADAPTIVE_TOKEN``)::

    spark-adaptive status                                  the managed queries
    spark-adaptive requirements get QUERY                  a query's bounds
    spark-adaptive requirements set QUERY --lower L --upper U
    spark-adaptive history QUERY                           its rescales and restarts
    spark-adaptive autoscaler QUERY                        its autoscaler: rates, decision

``QUERY`` is a Spark query id (or a unique prefix of one, as ``status``
shows it), a query name or a spark-adaptive key. Each command takes
``--json`` to print the server's JSON instead of a table; ``requirements set``
prints ``{"requirements": <the bounds read back, or null>, "persisted": <bool>}``.

Exit status: 0 done; 2 the server refused the request (its reasons are
printed; also for a bad command line: an empty QUERY, a URL or token that
cannot be sent); 1 no answer, an answer that is not the API's (not JSON, JSON
of another shape, an error without the API's ``{"errors": [...]}``: another
server, such as the Spark UI, at the URL), or the server failed. An update the
server accepted exits 0 even if reading the bounds back after it fails (that
failure is printed).

``spark-adaptive install-hook`` places ``spark_adaptive_startup.pth`` in this
interpreter's site-packages (``--remove`` deletes it). A regular ``pip install``
does that by itself; an editable install (``pip install -e``) does not, so the
set-up runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from spark_adaptive.rest import tables
from spark_adaptive.rest.api import PERSISTED_HEADER
from spark_adaptive.rest.client import (
    DEFAULT_URL,
    ApiError,
    ConnectionProblem,
    RestClient,
    UsageProblem,
    not_the_api,
)

PTH_NAME = "spark_adaptive_startup.pth"
#: The line Python's site module runs at every start (a .pth line that begins with
#: ``import``). It tolerates the module's absence: ``pip uninstall`` of an editable install
#: leaves a .pth that ``install-hook`` wrote, which must not break every later start.
PTH_LINE = ('import sys; exec("try:\\n import _spark_adaptive_startup\\n'
            'except ModuleNotFoundError:\\n pass")\n')
T = TypeVar("T")
#: What reading JSON of another shape than the API's raises in the tables.
_NOT_ITS_SHAPE = (TypeError, ValueError, KeyError, AttributeError, IndexError)


def install_hook(site_packages: str | None = None, remove: bool = False) -> Path:
    """Write (or with ``remove``, delete) the start-up hook's .pth in ``site_packages``
    (default: this interpreter's). Raises OSError when the directory cannot be written."""
    target = Path(site_packages or sysconfig.get_paths()["purelib"]) / PTH_NAME
    if remove:
        target.unlink(missing_ok=True)
    elif not target.exists() or target.read_text() != PTH_LINE:
        target.write_text(PTH_LINE)
    return target


def _install_hook_command(site_packages: str | None, remove: bool) -> int:
    try:
        target = install_hook(site_packages, remove)
    except OSError as e:
        print(f"spark-adaptive: cannot {'remove' if remove else 'write'} the start-up hook "
              f"in {site_packages or 'site-packages'}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"{'removed' if remove else 'installed'} {target}")
    if not remove and str(target.parent.resolve()) not in {
            str(Path(p).resolve()) for p in sys.path if p}:
        print(f"spark-adaptive: warning: {target.parent} is not on this interpreter's "
              "sys.path; Python runs the hook only from a site-packages directory it reads",
              file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    # --url/--token are accepted before and after the command; SUPPRESS keeps a later
    # (sub-command) default from overwriting a value given first.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS,
                        help="the driver's REST API "
                             f"(default $SPARK_ADAPTIVE_URL or {DEFAULT_URL})")
    common.add_argument("--token", default=argparse.SUPPRESS,
                        help="bearer token (default $SPARK_ADAPTIVE_TOKEN)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print the server's JSON ('requirements set': the bounds read "
                             "back and whether they were persisted)")
    ap = argparse.ArgumentParser(prog="spark-adaptive", parents=[common],
                                 description="Elastic scaling for Apache Spark.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    hook = sub.add_parser("install-hook", help="enable zero-code activation in this environment")
    hook.add_argument("--site-packages", default=None)
    hook.add_argument("--remove", action="store_true",
                      help="delete the hook (before 'pip uninstall' of an editable install)")
    sub.add_parser("status", parents=[common], help="the managed queries, as a table")
    history = sub.add_parser("history", parents=[common],
                             help="a query's rescales and restarts")
    history.add_argument("query")
    autoscaler = sub.add_parser("autoscaler", parents=[common],
                                help="a query's autoscaler: window, rates, last decision")
    autoscaler.add_argument("query")
    reqs = sub.add_parser("requirements", help="a query's parallelism bounds")
    rsub = reqs.add_subparsers(dest="action", required=True)
    get = rsub.add_parser("get", parents=[common], help="show the bounds")
    get.add_argument("query")
    put = rsub.add_parser("set", parents=[common],
                          help="declare new bounds (-1: the default), applied by the scheduler "
                               "within its rescale timing rules")
    put.add_argument("query")
    put.add_argument("--lower", type=int, required=True, help="lower bound (-1: 1)")
    put.add_argument("--upper", type=int, required=True,
                     help="upper bound (-1: the query's configured partitions)")
    return ap


def _width() -> int | None:
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _shaped(client: RestClient, path: str, read: Callable[[], T]) -> T:
    """``read()`` of an answer of ``path``; JSON of another shape than the API's (another
    server that answers JSON) is a :class:`ConnectionProblem`, not a traceback."""
    try:
        return read()
    except _NOT_ITS_SHAPE as e:
        raise not_the_api(f"{client.url}{path}", "answered JSON that is not the API's answer "
                          f"({type(e).__name__}: {str(e)[:80]})") from None


def _resolving(client: RestClient, ident: str, fn: Callable[[str], T]) -> T:
    """``fn(ident)``; if the server knows no such query, try ``ident`` as a unique prefix of
    a query id (``status`` shows ids cut to 8 characters)."""
    try:
        return fn(ident)
    except ApiError as e:
        if e.status != 404:
            raise
        queries = client.get("/queries")
        matches = _shaped(client, "/queries", lambda: [
            q["id"] for q in tables.listed(queries) if str(q.get("id", "")).startswith(ident)])
        if not ident or len(matches) != 1:  # "" is a prefix of every id
            raise
        return fn(matches[0])


def _status(client: RestClient, args: argparse.Namespace) -> int:
    queries = client.get("/queries")
    if args.json:
        _print_json(queries)
    else:
        print("\n".join(_shaped(client, "/queries",
                                lambda: tables.status_lines(queries, _width()))))
    return 0


def _history(client: RestClient, args: argparse.Namespace) -> int:
    ident, history = _resolving(client, args.query,
                                lambda i: (i, client.get(client.query_path(i, "rescales"))))
    if args.json:
        _print_json(history)
    else:
        print("\n".join(_shaped(client, client.query_path(ident, "rescales"),
                                lambda: tables.history_lines(history, _width()))))
    return 0


def _autoscaler(client: RestClient, args: argparse.Namespace) -> int:
    ident, status = _resolving(client, args.query,
                               lambda i: (i, client.get(client.query_path(i, "autoscaler"))))
    if args.json:
        _print_json(status)
    else:
        print("\n".join(_shaped(client, client.query_path(ident, "autoscaler"),
                                lambda: tables.autoscaler_lines(status))))
    return 0


def _requirements(client: RestClient, args: argparse.Namespace) -> int:
    def read(ident: str) -> tuple[str, Any]:
        return ident, client.get(client.query_path(ident, "resource-requirements"))

    if args.action == "get":
        ident, body = _resolving(client, args.query, read)
        if args.json:
            _print_json(body)
        else:
            print(_shaped(client, client.query_path(ident, "resource-requirements"),
                          lambda: tables.requirements_line(ident, body)))
        return 0
    new = {"parallelism": {"lowerBound": args.lower, "upperBound": args.upper}}

    def write(ident: str) -> tuple[str, dict[str, str]]:
        return ident, client.put(client.query_path(ident, "resource-requirements"), new)[1]

    ident, headers = _resolving(client, args.query, write)
    persisted = headers.get(PERSISTED_HEADER.lower()) == "true"
    # Accepted: whatever happens to the read-back below, the update stands (exit 0).
    read_back: Any = None
    line = f"query {ident}: new bounds accepted (--lower {args.lower} --upper {args.upper})"
    try:
        read_back = read(ident)[1]
        if not args.json:
            line = _shaped(client, client.query_path(ident, "resource-requirements"),
                           lambda: tables.requirements_line(ident, read_back))
    except (ApiError, ConnectionProblem) as e:
        print(f"spark-adaptive: the new bounds were accepted, but reading them back failed "
              f"({e})", file=sys.stderr)
    if args.json:
        _print_json({"requirements": read_back, "persisted": persisted})
        return 0
    print(line)
    print("persisted beside the query's checkpoint" if persisted else
          "not persisted: the query has no checkpoint location, so these bounds last until "
          "the driver stops")
    print("the scheduler applies them within its rescale timing rules "
          "(see 'spark-adaptive status')")
    return 0


_COMMANDS: dict[str, Callable[[RestClient, argparse.Namespace], int]] = {
    "status": _status, "history": _history, "requirements": _requirements,
    "autoscaler": _autoscaler}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "install-hook":
        return _install_hook_command(args.site_packages, args.remove)
    url = getattr(args, "url", None) or os.environ.get("SPARK_ADAPTIVE_URL") or DEFAULT_URL
    token = getattr(args, "token", None) or os.environ.get("SPARK_ADAPTIVE_TOKEN") or None
    args.json = getattr(args, "json", False)
    if getattr(args, "query", None) == "":  # would match every query id as a prefix
        print("spark-adaptive: QUERY is empty: give a query id (or a unique prefix of one), "
              "a query name or a key, as 'spark-adaptive status' shows them", file=sys.stderr)
        return 2
    try:
        client = RestClient(url, token)
    except UsageProblem as e:
        print(f"spark-adaptive: {e}", file=sys.stderr)
        return 2
    try:
        return _COMMANDS[args.cmd](client, args)
    except ApiError as e:
        refused = 400 <= e.status < 500
        print(f"spark-adaptive: {'refused' if refused else 'server error'} (HTTP {e.status}):",
              file=sys.stderr)
        for reason in e.reasons:
            print(f"  - {reason}", file=sys.stderr)
        return 2 if refused else 1
    except ConnectionProblem as e:
        print(f"spark-adaptive: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
