"""Configuration fuzzing (issue 23, item 6): every ``spark.adaptive.*`` key, fed random
strings, numbers, units and empty values, gives valid settings or a
:class:`ConfigurationError` that names the key; never another exception.

"Valid" is checked, not assumed: every number read is a real number (no NaN; infinity only
for a duration that means forever), within the option's declared bounds, and the settings
read back the same from :meth:`Settings.as_conf`.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark_adaptive.core.options import INT_LIMIT, SIZE_LIMIT, Option, options_of
from spark_adaptive.errors import ConfigurationError
from spark_adaptive.settings import Settings, all_options

OPTIONS = all_options()
KEYS = [o.full_key for o in OPTIONS]
# Reproducible in CI (the same examples every run); new ones on every developer run.
FUZZ = settings(max_examples=60, deadline=None, database=None,
                derandomize=bool(os.environ.get("CI")),
                suppress_health_check=[HealthCheck.too_slow])

UNITS = ["", "us", "ms", "s", "sec", "m", "min", "mins", "h", "d", "b", "k", "kb", "mb", "g",
         "gb", "t", "tb", "K", "MiB", "Ki", "fortnights", "µs", "e3", "%", " s", "s ", ".",
         "ms5", "inf", "nan"]
NUMBERS = st.one_of(
    st.integers(), st.integers(-3, 3), st.integers(2**31 - 2, 2**63 + 2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["9" * 400, "1" + "0" * 5000, "1e400", "-1e400", "1e-400", "0.0000001",
                     "+5", "-0", "00", "1_000", "0x10", "0b1", "1e3", "1.", ".5", "5.5.5",
                     "\u0663", "\uff15", "1\u00a0", "Infinity", "NaN", "-nan", "∞"]),
)


def numbers_with_units() -> st.SearchStrategy[str]:
    return st.builds(lambda n, unit, pad: f"{pad}{n}{unit}{pad}", NUMBERS.map(str),
                     st.sampled_from(UNITS), st.sampled_from(["", " ", "\t", "\n"]))


def values_for(o: Option) -> st.SearchStrategy[str]:
    words = [*o.choices, *(s for s, _ in o.spellings), "true", "false", "TRUE", "yes", "-1",
             "none", "null", "None", "", " ", "\t", "\x00"]
    return st.one_of(numbers_with_units(), st.sampled_from(words), st.text(max_size=30),
                     st.text(alphabet="0123456789.-+e _kmgsbhdin", max_size=12))


def _path_of(key: str) -> tuple[str, ...]:
    return next(path for path, o in options_of(Settings) if o.full_key == key)


def check(conf: dict[str, str]) -> Settings | None:
    """Read ``conf``: valid settings, or an error whose every problem names a key given
    (or, for a rule between keys, the key it concerns); anything else fails the test."""
    try:
        s = Settings.from_conf(conf)
    except ConfigurationError as e:
        assert e.problems, conf
        for problem in e.problems:
            assert any(key in problem for key in conf), (problem, conf)
        if len(conf) == 1:
            assert next(iter(conf)) in str(e)
        return None
    for key in conf:
        opt = next(o for o in OPTIONS if o.full_key == key)
        value: Any = s
        for name in _path_of(key):
            value = getattr(value, name)
        _valid(opt, value, conf[key])
    assert Settings.from_conf(s.as_conf()) == s, conf
    return s


def _valid(o: Option, value: Any, raw: str) -> None:
    if value is None:
        assert o.minus_one_is_default or o.default is None, (o.key, raw)
        return
    if o.type == "bool":
        assert isinstance(value, bool)
    elif o.type in ("int", "size"):
        assert isinstance(value, int) and not isinstance(value, bool), (o.key, raw, value)
        assert abs(value) <= (SIZE_LIMIT if o.type == "size" else INT_LIMIT), (o.key, raw)
    elif o.type in ("float", "duration"):
        assert isinstance(value, (int, float)), (o.key, raw, value)
        assert not math.isnan(value), (o.key, raw)
        assert math.isfinite(value) or (o.type == "duration" and o.forever), (o.key, raw)
    elif o.type == "enum":
        assert value in o.choices, (o.key, raw, value)
    else:
        assert isinstance(value, str)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value != math.inf:
        assert o.minimum is None or value >= o.minimum, (o.key, raw, value)
        assert o.maximum is None or value <= o.maximum, (o.key, raw, value)


@pytest.mark.parametrize("key", KEYS)
@FUZZ
@given(data=st.data())
def test_every_key_with_random_values(key: str, data: st.DataObject) -> None:
    o = next(o for o in OPTIONS if o.full_key == key)
    check({key: data.draw(values_for(o), label="value")})


@settings(FUZZ, max_examples=300)
@given(conf=st.dictionaries(st.sampled_from(KEYS), st.one_of(
    numbers_with_units(), st.text(max_size=20), st.sampled_from(["", "true", "-1", "1s", "0"])),
    max_size=8))
@example(conf={"spark.adaptive.batch.avg-data-volume-per-task": "9" * 400 + "g"})
@example(conf={"spark.adaptive.scheduler.executor-loss-grace": "9" * 400})
def test_several_keys_at_once(conf: dict[str, str]) -> None:
    check(conf)
