"""Rescale history records, counters and the decision log."""

from __future__ import annotations

import json
import logging

import pytest

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.history import (
    LOGGER_NAME,
    Counters,
    DecisionLog,
    RescaleHistory,
    Trigger,
)
from spark_adaptive.rest.wire import counters_json, decision_json, record_json


def open_record(h: RescaleHistory, trigger: Trigger = Trigger.NEW_RESOURCES,
                kind: str = "restart") -> None:
    h.open(trigger, kind, from_parallelism=2, to_parallelism=4, from_slots=2, to_slots=4,  # type: ignore[arg-type]
           reason="more slots")


def test_record_lifecycle_and_duration() -> None:
    vt = VirtualTime(start=100.0, epoch=1_000.0)
    h = RescaleHistory(vt)
    open_record(h)
    vt.advance(3)
    h.update_pending(to_parallelism=4, timings=(("stop", 0.5),))
    h.update_pending(timings=(("repartition", 2.0), ("start", 0.5)))
    vt.advance(2)
    done = h.complete_pending()
    assert done is not None and h.pending is None
    assert record_json(done) == {
        "id": 1, "time": 1_100.0, "trigger": "NEW_RESOURCES", "kind": "restart",
        "fromParallelism": 2, "toParallelism": 4, "fromSlots": 2, "toSlots": 4,
        "duration": 5.0, "outcome": "completed",
        "timings": {"stop": 0.5, "repartition": 2.0, "start": 0.5}, "reason": "more slots",
    }
    json.dumps(record_json(done))  # JSON-able


def test_a_new_record_supersedes_the_pending_one() -> None:
    h = RescaleHistory(VirtualTime())
    open_record(h)
    open_record(h, Trigger.RESOURCES_LOST)
    first, second = h.records()
    assert (first.outcome, second.outcome) == ("superseded", "pending")
    assert second.id == 2


def test_fail_and_supersede_without_pending_do_nothing() -> None:
    h = RescaleHistory(VirtualTime())
    assert h.fail_pending() is None and h.supersede_pending() is None
    open_record(h)
    h.fail_pending()
    assert h.records()[0].outcome == "failed"


@pytest.mark.parametrize(("trigger", "kind", "expected"), [
    (Trigger.INITIAL_SCHEDULE, "initial", Counters()),
    (Trigger.NEW_RESOURCES, "restart", Counters(restarts=1, rescales=1)),
    (Trigger.REQUIREMENTS_CHANGED, "restart", Counters(restarts=1, rescales=1)),
    (Trigger.FAILURE, "restart", Counters(restarts=1)),
    (Trigger.RESOURCES_LOST, "live", Counters(rescales=1, live_rescales=1)),
])
def test_counters_follow_flink(trigger: Trigger, kind: str, expected: Counters) -> None:
    h = RescaleHistory(VirtualTime())
    open_record(h, trigger, kind)
    assert h.counters == expected


def test_failures_are_counted_separately() -> None:
    h = RescaleHistory(VirtualTime())
    h.count_failure()
    assert counters_json(h.counters) == {"restarts": 0, "rescales": 0, "liveRescales": 0,
                                    "failures": 1}


def test_history_is_bounded() -> None:
    h = RescaleHistory(VirtualTime(), limit=3)
    for _ in range(5):
        open_record(h)
    assert [r.id for r in h.records()] == [3, 4, 5]
    assert h.counters.rescales == 5


def test_every_decision_is_one_info_line_with_its_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    vt = VirtualTime(epoch=50.0)
    log = DecisionLog(vt, lambda: "orders")
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        d = log.decide("live rescale", "4 partitions run balanced on 2 slots")
    assert log.last == d
    assert decision_json(d) == {"time": 50.0, "action": "live rescale",
                           "reason": "4 partitions run balanced on 2 slots"}
    records = [r for r in caplog.records if r.name == LOGGER_NAME]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert records[0].getMessage() == \
        "query orders: live rescale: 4 partitions run balanced on 2 slots"
