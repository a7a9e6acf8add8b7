"""Plain-text tables for the ``spark-adaptive`` command, from the REST API's JSON.

Pure functions from decoded JSON to lines of text, so they are tested without
a server. Columns are left-aligned and separated by two spaces; the last
column (a reason) is never padded and is cut to ``width`` when one is given
(the terminal's width on a terminal, no limit in a pipe).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

_UUID_LENGTH = 36


def short_id(query_id: str) -> str:
    """The first 8 characters of a Spark query id (a UUID); anything else as it is."""
    if len(query_id) == _UUID_LENGTH and query_id.count("-") == 4:
        return query_id[:8]
    return query_id


def listed(value: Any) -> list[dict[str, Any]]:
    """``value`` as the API's list of objects; :class:`TypeError` for anything else."""
    if not isinstance(value, list):
        raise TypeError(f"expected a list of objects, got {type(value).__name__}")
    bad = next((v for v in value if not isinstance(v, dict)), None)
    if bad is not None:
        raise TypeError(f"expected a list of objects, got one holding {type(bad).__name__}")
    return value


def _object(value: Any) -> dict[str, Any]:
    """``value`` as one of the API's objects; :class:`TypeError` for anything else."""
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def bounds(requirements: dict[str, Any]) -> str:
    p = _object(_object(requirements).get("parallelism", {}))
    return f"[{p.get('lowerBound', '?')}, {p.get('upperBound', '?')}]"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None
          ) -> list[str]:
    """Aligned lines: the header, then one per row."""
    cols = len(header)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(cols - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)]
        line = "  ".join([*cells, row[-1]])
        line = line.rstrip()
        if width is not None and len(line) > width:
            line = line[:max(width - 3, 0)] + "..."
        lines.append(line)
    return lines


def _decision(decision: dict[str, Any] | None) -> str:
    if not decision:
        return "-"
    return f"{decision.get('action', '')}: {decision.get('reason', '')}"


def status_lines(queries: list[dict[str, Any]], width: int | None = None) -> list[str]:
    """``spark-adaptive status``: one row per query."""
    if not listed(queries):
        return ["no streaming query is managed by spark-adaptive on this driver"]
    header = ("ID", "NAME", "STATE", "PARALLELISM", "EXECUTORS", "SLOTS", "BOUNDS",
              "LAST DECISION")
    rows = [(short_id(str(q.get("id", ""))), str(q.get("name") or "-"), _state(q),
             str(q.get("parallelism", "")), str(q.get("executors", "")),
             str(q.get("slots", "")), bounds(q.get("requirements", {})),
             _decision(q.get("lastDecision"))) for q in queries]
    return table(header, rows, width)


def _state(q: dict[str, Any]) -> str:
    state = str(q.get("state", ""))
    return f"{state}({q['status']})" if q.get("status") else state


def requirements_line(ident: str, requirements: dict[str, Any]) -> str:
    p = _object(_object(requirements).get("parallelism", {}))
    return (f"query {ident}: parallelism between {p.get('lowerBound')} and "
            f"{p.get('upperBound')} {bounds(requirements)}")


def clock(epoch: float, now: float | None = None) -> str:
    """Local time of day, with the date when it is not today."""
    t = time.localtime(epoch)
    today = time.localtime(time.time() if now is None else now)
    if t[:3] == today[:3]:
        return time.strftime("%H:%M:%S", t)
    return time.strftime("%Y-%m-%d %H:%M:%S", t)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest:02d}s"


def history_lines(history: dict[str, Any], width: int | None = None,
                  now: float | None = None) -> list[str]:
    """``spark-adaptive history``: one row per rescale or restart, oldest first, then counters."""
    records = listed(_object(history).get("rescales", []))
    lines = [f"query {history.get('id')}"]
    if not records:
        lines.append("no rescale or restart yet")
    else:
        header = ("TIME", "TRIGGER", "KIND", "PARALLELISM", "SLOTS", "DURATION", "OUTCOME",
                  "REASON")
        rows = [(clock(float(r["time"]), now), str(r.get("trigger", "")), str(r.get("kind", "")),
                 f"{r.get('fromParallelism')} -> {r.get('toParallelism')}",
                 f"{r.get('fromSlots')} -> {r.get('toSlots')}", duration(r.get("duration")),
                 str(r.get("outcome", "")), str(r.get("reason", ""))) for r in records]
        lines += table(header, rows, width)
    c = _object(history.get("counters", {}))
    lines.append(f"restarts {c.get('restarts', 0)}, rescales {c.get('rescales', 0)} "
                 f"(live {c.get('liveRescales', 0)}), failures {c.get('failures', 0)}")
    return lines


def _rate(value: float | None, unit: str = "rows/s") -> str:
    return "-" if value is None else f"{value:,.1f} {unit}"


def _changes(rec: dict[str, Any]) -> bool:
    """A recommendation that would rescale (one that holds still is never "applied")."""
    return rec.get("outcome") in ("scale-up", "scale-down")


def autoscaler_lines(status: dict[str, Any]) -> list[str]:
    """``spark-adaptive autoscaler QUERY``: the figures and the last decision, one per line."""
    window = _object(_object(status).get("window") or {})
    rec = status.get("recommendation")
    decision = status.get("lastDecision") or {}
    utilization = status.get("utilization")
    backlog = status.get("backlog")
    lines = [
        f"query {short_id(str(status.get('id', '')))}: autoscaler "
        + ("on" if status.get("scalingEnabled") else "recommending only"),
        f"  window          {duration(window.get('span'))} of {duration(window.get('length'))},"
        f" {window.get('samples') or 0} micro-batches",
        f"  input rate      {_rate(status.get('inputRate'))}",
        "  backlog         " + ("-" if backlog is None else f"{backlog:,.0f} rows"),
        f"  rate per slot   {_rate(status.get('trueRatePerSlot'))}",
        f"  target rate     {_rate(status.get('targetRate'))}",
        "  utilization     " + ("-" if utilization is None else f"{utilization:.0%}"),
    ]
    if rec:
        lines.append(f"  recommendation  {rec['outcome']}: {rec['slots']} slots, "
                     f"{rec['partitions']} partitions ({rec['kind']})"
                     + ("" if rec.get("applied") or not _changes(rec) else ", not applied"))
    if decision:
        lines.append(f"  why             {decision.get('reason', '')}")
    forecast = status.get("forecast")
    if isinstance(forecast, dict):
        use = "in use" if forecast.get("inUse") else "not in use"
        conf = forecast.get("confidence")
        lines.append(f"  forecast        {_rate(forecast.get('rate'))} within "
                     f"{duration(forecast.get('horizon'))}, {use}"
                     + ("" if conf is None else f", confidence {conf:.0%}")
                     + f"; {forecast.get('aheadScaleUps', 0)} scale-ups ahead")
        lines.append(f"                  {forecast.get('reason', '')}")
    if status.get("waitingForResources"):
        lines.append("  waiting for the slots it asked for to come")
    nxt = status.get("nextEvaluation")
    lines.append(f"  next evaluation in {duration(nxt)}")
    return lines
