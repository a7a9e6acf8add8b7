"""What the generated configuration reference says about writing values."""

from __future__ import annotations

from spark_adaptive import configdocs
from spark_adaptive.settings import all_options


def test_the_reference_says_a_bare_duration_is_seconds_and_shows_each_unit() -> None:
    reference = configdocs.reference()
    assert "A bare number is seconds for a duration (`30` is `30s`" in reference
    for o in all_options():
        if o.type == "duration":
            row = next(line for line in reference.splitlines()
                       if line.startswith(f"| `{o.full_key}` |"))
            assert f"| duration ({o.unit or 's'})" in row, row
    assert "# A bare number is seconds for a duration (30 is 30s" in configdocs.template()
