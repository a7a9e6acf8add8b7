"""How ``spark.adaptive.*`` options are declared, read and validated.

Each option is one field of a frozen settings dataclass, declared with
:func:`option`: key, type, default, unit, doc and aliases. The dataclasses are
grouped by concern and live with what they configure (the streaming scheduler's
in :mod:`spark_adaptive.core.streaming.settings`, the batch wing's in
:mod:`spark_adaptive.core.batch.settings`, ...); :class:`spark_adaptive.settings.Settings`
composes them. :func:`read` walks such a tree once: it reads and validates a
whole Spark configuration and names the key in every error. The configuration
reference (``docs/configuration.md``) and ``conf/spark-defaults.conf.template``
are generated from the same declarations (:mod:`spark_adaptive.configdocs`).

Values are written the way Spark writes them: durations ``500ms``, ``30s``,
``5min``, ``1h`` (a bare number is in the option's unit), sizes ``64m``,
``1g`` (a bare number is bytes), booleans ``true``/``false``.

An option whose default depends on the scheduler mode has a
``reactive_default``: it applies when ``scheduler.mode=reactive`` and the key
is not set.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar

T = TypeVar("T")

PREFIX = "spark.adaptive."
MAX_PARALLELISM_LIMIT = 32768  # 2^15, Flink's UPPER_BOUND_MAX_PARALLELISM
INT_LIMIT = 2**31 - 1
"""The largest int option value (Java's Integer.MAX_VALUE, as Spark's own int options): a
400-digit count would pass every declared bound and overflow later, in float arithmetic."""
SIZE_LIMIT = 2**63 - 1
"""The largest size in bytes (Java's Long.MAX_VALUE, as Spark's byte options)."""


# -- value parsing ----------------------------------------------------------------
_TIME_UNITS = {
    "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
    "mins": 60.0, "h": 3600.0, "d": 86400.0,
}  # fmt: skip
_SIZE_UNITS = {
    "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
}  # fmt: skip
# ASCII digits only (\d would take any script's digits, and float() would read them).
_NUM_UNIT = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*"
                    r"|\s*[+-]?(?:inf|infinity|nan)\s*", re.IGNORECASE)


def parse_duration(text: str, unit: str = "s") -> float:
    """Spark's duration format to seconds; ``-1`` (any negative) is infinity."""
    m = _NUM_UNIT.match(text)
    if not m:
        raise ValueError("not a duration")
    number, suffix = float(m.group(1)), (m.group(2) or unit).lower()
    if suffix not in _TIME_UNITS:
        raise ValueError(f"unknown time unit {suffix!r}")
    if number < 0:
        return math.inf
    seconds = number * _TIME_UNITS[suffix]
    if not math.isfinite(seconds):  # e.g. 400 digits: not "forever", an error
        raise ValueError("too large")
    return seconds


def parse_size(text: str) -> int:
    m = _NUM_UNIT.match(text)
    if not m:
        raise ValueError("not a size")
    number, suffix = float(m.group(1)), (m.group(2) or "b").lower()
    if suffix not in _SIZE_UNITS:
        raise ValueError(f"unknown size unit {suffix!r}")
    if number < 0:
        raise ValueError("negative size")
    size = number * _SIZE_UNITS[suffix]
    if not math.isfinite(size) or size > SIZE_LIMIT:  # int(inf) would raise OverflowError
        raise ValueError("too large")
    return int(size)


def format_duration(seconds: float | None) -> str:
    """Seconds as a user would write them; :func:`parse_duration` reads back the same value."""
    if seconds is None:
        return "(none)"
    if math.isinf(seconds):
        return "-1"
    if seconds == 0:
        return "0ms"
    for suffix in ("h", "min", "s", "ms"):
        size = _TIME_UNITS[suffix]
        n = seconds / size
        if seconds >= size and float(n).is_integer() and float(int(n)) * size == seconds:
            return f"{int(n)}{suffix}"
    # Not a whole number of any unit (1us, 0.0015s): the shortest exact decimal, without the
    # exponent parse_duration does not take.
    return format(Decimal(repr(float(seconds))), "f") + "s"


def format_size(n: int | None) -> str:
    if n is None:
        return "(none)"
    for suffix, size in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


# -- declaration ------------------------------------------------------------------
@dataclass(frozen=True)
class Option:
    """One configuration option. ``key`` is relative to ``spark.adaptive.``."""

    key: str
    type: str  # bool | int | float | duration | size | string | enum
    default: Any
    doc: str
    unit: str = ""
    aliases: tuple[str, ...] = ()
    choices: tuple[str, ...] = ()
    #: accepted spellings -> canonical value, for enums
    spellings: tuple[tuple[str, str], ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    forever: bool = False  # a negative duration means "forever"
    reactive_default: Any = None
    default_text: str = ""  # shown instead of the default where it is computed
    secret: bool = False
    minus_one_is_default: bool = False  # "-1" reads as None: the computed default (Flink's)

    @property
    def full_key(self) -> str:
        return PREFIX + self.key

    def parse(self, raw: str) -> Any:
        """Parse one raw string, raising ``ValueError`` with what is accepted."""
        text = raw.strip()
        if self.minus_one_is_default and text == "-1":
            return None
        if self.type == "bool":
            if text.lower() in ("true", "false"):
                return text.lower() == "true"
            raise ValueError("accepted values: true, false")
        if self.type == "enum":
            canon = dict(self.spellings) or {c: c for c in self.choices}
            if text.lower() in canon:
                return canon[text.lower()]
            raise ValueError("accepted values: " + ", ".join(self.choices))
        if self.type == "string":
            return text
        if self.type == "int":
            try:
                if not _INT.fullmatch(text):  # int() also takes 1_000 and other scripts' digits
                    raise ValueError(text)
                value: float = int(text)
            except ValueError:  # also over 4300 digits
                raise ValueError("expected an integer") from None
            if abs(value) > INT_LIMIT:
                raise ValueError(f"must be between -{INT_LIMIT} and {INT_LIMIT}")
        elif self.type == "float":
            try:
                if not _FLOAT.fullmatch(text):  # float() also takes 1_0 and other scripts' digits
                    raise ValueError(text)
                value = float(text)
            except ValueError:
                raise ValueError("expected a number") from None
            if not math.isfinite(value):  # nan, inf, 1e400: no bound check can hold them
                raise ValueError("expected a finite number")
        elif self.type == "duration":
            try:
                value = parse_duration(text, self.unit or "s")
            except ValueError:
                raise ValueError(
                    "expected a duration such as 500ms, 30s, 5min, 1h"
                    + (" (-1 for forever)" if self.forever else "")
                ) from None
            if math.isinf(value) and not self.forever:
                raise ValueError("expected a duration >= 0 (negative durations are not accepted)")
        elif self.type == "size":
            try:
                value = parse_size(text)
            except ValueError:
                raise ValueError(
                    "expected a size such as 16m, 64m, 1g (a bare number is bytes)") from None
        else:  # pragma: no cover - a declaration bug
            raise AssertionError(self.type)
        # Only a forever duration is infinite (math.isinf of a 400-digit int would overflow).
        forever = isinstance(value, float) and math.isinf(value)
        if self.minimum is not None and value < self.minimum and not forever:
            raise ValueError(f"must be >= {self._fmt(self.minimum)}")
        if self.maximum is not None and value > self.maximum and not forever:
            raise ValueError(f"must be <= {self._fmt(self.maximum)}")
        return value

    def _fmt(self, v: float) -> str:
        if self.type == "duration":
            return format_duration(v)
        if self.type == "size":
            return format_size(int(v))
        return str(int(v)) if float(v).is_integer() else str(v)

    def format(self, value: Any) -> str:
        """A value written back the way a user would write it."""
        if value is None:
            return ""
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "duration":
            return format_duration(value)
        if self.type == "size":
            return format_size(value)
        return str(value)

    def default_for_docs(self) -> str:
        if self.default_text:
            return self.default_text
        text = self.format(self.default) if self.default is not None else "(none)"
        if self.reactive_default is not None:
            text += f" (reactive: {self.format(self.reactive_default)})"
        return text


def option(key: str, type: str, default: Any, doc: str, **kw: Any) -> Any:
    """Declare a settings field and its option in one place."""
    return field(default=default, metadata={"option": Option(key, type, default, doc, **kw)})


def group(cls: type[Any]) -> Any:
    """Declare a field that holds a whole group of options (a settings dataclass)."""
    return field(default_factory=cls, metadata={"group": cls})


def options_of(cls: type[Any]) -> Iterator[tuple[tuple[str, ...], Option]]:
    """Every option of a settings dataclass tree, with the field path that holds it."""
    for f in dataclasses.fields(cls):
        if "option" in f.metadata:
            yield (f.name,), f.metadata["option"]
        elif "group" in f.metadata:
            for path, o in options_of(f.metadata["group"]):
                yield (f.name, *path), o


def read(cls: type[T], conf: Mapping[str, str],
         defaults_for: Callable[[dict[tuple[str, ...], Any]], dict[tuple[str, ...], Any]]
         | None = None) -> tuple[T | None, list[str]]:
    """Read every ``spark.adaptive.*`` key of ``conf`` into ``cls`` (a tree of settings
    dataclasses); returns the settings (None if any key was refused) and the problems,
    each naming its key: unknown keys (with the nearest known one), values that do not
    parse, keys set twice through an alias.

    ``defaults_for(explicit)`` may give defaults that depend on other values (reactive
    mode's), by field path, for the options not set explicitly.
    """
    problems: list[str] = []
    by_key: dict[str, tuple[tuple[str, ...], Option]] = {}
    for path, o in options_of(cls):
        by_key[o.full_key] = (path, o)
        for alias in o.aliases:
            by_key[PREFIX + alias] = (path, o)
    values: dict[tuple[str, ...], Any] = {}
    for key in sorted(conf):
        if not key.startswith(PREFIX):
            continue
        if key not in by_key:
            hint = difflib.get_close_matches(key, list(by_key), n=1, cutoff=0.8)
            problems.append(f"{key} is not a spark-adaptive option"
                            + (f" (did you mean {hint[0]}?)" if hint else "")
                            + "; the keys are listed in docs/configuration.md")
            continue
        path, opt = by_key[key]
        raw = conf[key]
        if path in values:
            problems.append(f"{key}: set twice (also as one of {opt.full_key}, "
                            + ", ".join(PREFIX + a for a in opt.aliases) + ")")
            continue
        try:
            values[path] = opt.parse(raw)
        except ValueError as e:
            shown = "<hidden>" if opt.secret else repr(raw)
            problems.append(f"{key}={shown} is not valid: {e}")
    if problems:
        return None, problems
    extra = defaults_for(values) if defaults_for else {}
    for path, value in extra.items():
        values.setdefault(path, value)
    return _build(cls, (), values), problems


def _build(cls: type[T], prefix: tuple[str, ...], values: dict[tuple[str, ...], Any]) -> T:
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = (*prefix, f.name)
        if "group" in f.metadata:
            kwargs[f.name] = _build(f.metadata["group"], path, values)
        elif path in values:
            kwargs[f.name] = values[path]
    return cls(**kwargs)


def changed_options(settings: Any) -> dict[str, str]:
    """The options of a settings tree that differ from their defaults, as conf entries."""
    out: dict[str, str] = {}
    for path, o in options_of(type(settings)):
        value: Any = settings
        for name in path:
            value = getattr(value, name)
        if value != o.default:
            out[o.full_key] = o.format(value)
    return out


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
