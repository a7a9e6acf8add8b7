"""The configuration reference and the ``spark-defaults.conf`` template, generated.

Both come from the option declarations (:mod:`spark_adaptive.settings` and the
groups it composes), so they cannot drift from the code: a test compares the
committed files with what this module writes. Regenerate them with::

    python -m spark_adaptive.configdocs reference > docs/configuration.md
    python -m spark_adaptive.configdocs template > conf/spark-defaults.conf.template

(``make docs`` runs both).
"""

from __future__ import annotations

import sys

from spark_adaptive.core.options import PREFIX, Option
from spark_adaptive.settings import all_options

#: The sections of the reference: a key belongs to the first whose prefix it has.
SECTIONS = (
    ("Activation and the listener", ("enabled", "listener", "shim.")),
    ("Streaming scheduler", ("scheduler.", "failure-detection.", "parallelism.",
                             "max-parallelism")),
    ("Restart strategies", ("restart-strategy.",)),
    ("Autoscaler", ("autoscaler.",)),
    ("Adaptive Batch Scheduler", ("batch.",)),
    ("REST API", ("rest.",)),
)

INTRO = """# Configuration

Every `spark.adaptive.*` key, generated from the option declarations
(`python -m spark_adaptive.configdocs reference`; a test fails when this page
drifts from the code). Set them like any Spark key: `spark-submit --conf
key=value`, `spark-defaults.conf` (`conf/spark-defaults.conf.template` lists
them all with their defaults), the session builder, or as keyword arguments of
`spark_adaptive.enable(spark, ...)` (with or without the `spark.adaptive.`
prefix; a keyword without a dot has its underscores read as dashes, and a key
with dots is passed as a dict: `enable(spark, **{{"rest.port": "0"}})`).
Durations and sizes are written as in Spark (`500ms`, `30s`, `5min`; `16m`,
`1g`).
{bare}
An unknown key or a bad value stops the app at start with an error naming the
key and what it accepts.
"""

_UNIT_NAMES = {"ms": "milliseconds", "s": "seconds", "min": "minutes", "h": "hours"}


def _unit(o: Option) -> str:
    return o.unit or "s"


def _bare_durations() -> str:
    """What a duration written as a bare number means, from the declarations."""
    units = sorted({_unit(o) for o in all_options() if o.type == "duration"})
    if len(units) == 1:
        name = _UNIT_NAMES.get(units[0], units[0])
        return (f"A bare number is {name} for a duration (`30` is `30{units[0]}`, where Flink "
                "reads milliseconds)\nand bytes for a size.")
    return ("A bare number is in the unit the Type column shows for a duration, and bytes for"
            "\na size.")


def _kind(o: Option) -> str:
    if o.type == "enum":
        return " \\| ".join(o.choices)
    if o.type == "duration":
        return f"duration ({_unit(o)})" + (", -1 = forever" if o.forever else "")
    return o.type


def _section(o: Option) -> str:
    for title, prefixes in SECTIONS:
        if any(o.key == p or o.key.startswith(p) for p in prefixes):
            return title
    return "Other"


def reference() -> str:
    """``docs/configuration.md``: one table per section, every key with its default."""
    out = [INTRO.format(bare=_bare_durations())]
    by_section: dict[str, list[Option]] = {}
    for o in all_options():
        by_section.setdefault(_section(o), []).append(o)
    for title in [t for t, _ in SECTIONS] + ["Other"]:
        options = by_section.get(title)
        if not options:
            continue
        out += [f"## {title}", "", "| Key | Default | Type | Meaning |", "|---|---|---|---|"]
        for o in options:
            doc = o.doc
            if o.aliases:
                doc += " Also accepted: " + ", ".join(f"`{PREFIX}{a}`" for a in o.aliases) + "."
            out.append(f"| `{o.full_key}` | {o.default_for_docs()} | {_kind(o)} | {doc} |")
        out.append("")
    return "\n".join(out)


def template() -> str:
    """``conf/spark-defaults.conf.template``: every key, commented out, with its doc."""
    out = [
        "# spark-adaptive: every option, with its default. Generated from the option",
        "# declarations (python -m spark_adaptive.configdocs template).",
        "# Copy the lines you need into $SPARK_HOME/conf/spark-defaults.conf and uncomment them.",
        *(f"# {line}" for line in _bare_durations().replace("`", "").splitlines()),
        "",
    ]
    for o in all_options():
        for line in _wrap(o.doc, 86):
            out.append(f"# {line}")
        value = o.format(o.default) if o.default is not None else ""
        shown = value or f"<{o.default_for_docs()}>"
        out.append(f"# {o.full_key:<64} {shown}")
        out.append("")
    return "\n".join(out)


def _wrap(text: str, width: int) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "reference"
    if what not in ("reference", "template"):
        sys.stderr.write("usage: python -m spark_adaptive.configdocs reference|template\n")
        return 2
    sys.stdout.write(reference() if what == "reference" else template())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
