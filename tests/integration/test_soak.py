"""The chaos soak's short version: under three minutes of faults, both modes, a fixed seed.

``make soak`` runs the long one (see spark_adaptive/testing/soak.py); this is the same
code on a shorter clock: an unmodified stateful app under seeded faults on the real
local cluster, checked key by key at the end.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_adaptive.testing.soak import Soak

pytestmark = pytest.mark.timeout(900)


@pytest.mark.parametrize("mode", ["adaptive", "reactive"])
def test_three_minutes_of_faults_lose_and_duplicate_nothing(mode: str, tmp_path: Path) -> None:
    result = Soak(mode, 80.0, seed=11, out=tmp_path, max_workers=3).run()
    summary = f"{result} (see {tmp_path / mode / 'soak.json'})"
    assert result.values > 0 and result.keys == 50, summary
    assert (result.lost, result.duplicated) == (0, 0), summary
    assert result.failed_states == 0 and result.app_exit == 0, summary
    assert result.drivers_ended == [], summary
    assert result.rest_errors == 0 and result.rest_requests > 30, summary
    assert sum(result.actions.values()) >= 3 and result.faults >= 1, summary
    # Whether a rescale also completes within 80 s depends on how the faults race (a new
    # executor warms up before a rescale uses it, and may be killed or its driver restarted
    # meanwhile): the rescale counts are the long run's figures (make soak). This run's
    # point is exactly-once, no failure and an API that answers, under real faults.
