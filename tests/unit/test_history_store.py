"""Rescale history kept beside the checkpoint: the file format, restore after a driver
restart, bad files, failing stores, and the writer that keeps the scheduler thread free."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from scheduler_fakes import App, FakeDriver, query_info

from spark_adaptive.core.autoscaler.forecast import SavedLoad
from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.streaming.history import (
    DURATION_BUCKETS,
    STOPPED_DRIVER,
    Counters,
    RescaleHistory,
    SavedHistory,
    Trigger,
)
from spark_adaptive.core.streaming.history_store import (
    HISTORY_PATH,
    MemoryHistoryStore,
    UnreadHistory,
    decode,
    encode,
    history_file,
    restore_history,
)
from spark_adaptive.errors import PersistenceError
from spark_adaptive.rest.wire import counters_json, record_json
from spark_adaptive.settings import Settings
from spark_adaptive.spark.history_writer import BackgroundHistoryWriter

CP = "/cp/q1"
FILE = f"{CP}/{HISTORY_PATH}"
EXPONENTIAL = Settings.from_conf({"spark.adaptive.restart-strategy.type": "exponential-delay"})
WRITER_LOG = "spark_adaptive.spark.history_writer"
STORE_LOG = "spark_adaptive.core.streaming.history_store"


class StoreWriter:
    """A :class:`HistoryWriter` that saves at once, on the caller's thread (the scheduler's
    own on virtual time), remembering what it was handed."""

    def __init__(self, store: MemoryHistoryStore) -> None:
        self.store = store
        self.written: list[tuple[str, str, SavedHistory]] = []

    def write(self, checkpoint: str, label: str, history: SavedHistory) -> None:
        self.written.append((checkpoint, label, history))
        self.store.save(checkpoint, history)


def lived_history() -> SavedHistory:
    """A history of every kind and outcome, with phase timings and durations."""
    vt = VirtualTime(start=10.0, epoch=1_700_000_000.0)
    h = RescaleHistory(vt)
    h.open(Trigger.INITIAL_SCHEDULE, "initial", from_parallelism=0, to_parallelism=2,
           from_slots=0, to_slots=2, reason="2 slots available")
    h.update_pending(timings=(("start", 0.5),))
    vt.advance(4)
    h.complete_pending()
    h.open(Trigger.REQUIREMENTS_CHANGED, "restart", from_parallelism=2, to_parallelism=1,
           from_slots=2, to_slots=1, reason="outside the bounds [1, 1]")
    h.update_pending(timings=(("stop", 0.25), ("repartition", 3.0), ("start", 0.5)))
    vt.advance(15.5)
    h.complete_pending()
    h.open(Trigger.NEW_RESOURCES, "live", from_parallelism=4, to_parallelism=4, from_slots=2,
           to_slots=4, reason="balanced")
    h.open(Trigger.RESOURCES_LOST, "live", from_parallelism=4, to_parallelism=4, from_slots=4,
           to_slots=2, reason="lost one")  # supersedes the one before
    h.count_failure()
    h.fail_pending()
    h.open(Trigger.FAILURE, "restart", from_parallelism=4, to_parallelism=4, from_slots=2,
           to_slots=2, reason="boom")  # still pending
    return h.saved()


# -- the file format --------------------------------------------------------------------------
def test_round_trip_keeps_what_the_rest_api_shows() -> None:
    saved = lived_history()
    text = encode(saved, updated=1_700_000_100.0)
    doc = json.loads(text)
    assert (doc["version"], doc["updated"], doc["nextId"]) == (1, 1_700_000_100.0, 6)
    assert doc["counters"] == {"restarts": 2, "rescales": 3, "liveRescales": 2, "failures": 1}
    assert doc["records"][1]["timings"] == [["stop", 0.25], ["repartition", 3.0], ["start", 0.5]]
    back = decode(text)
    assert [record_json(r) for r in back.records] == [record_json(r) for r in saved.records]
    assert [record_json(r)["outcome"] for r in back.records] == [
        "completed", "completed", "superseded", "failed", "pending"]
    assert (back.counters, back.tallies, back.next_id) == (
        saved.counters, saved.tallies, saved.next_id)
    assert dict(back.tallies.durations)["restart"].count == 1
    assert back.tallies.last_duration == 15.5


def test_an_empty_history_round_trips() -> None:
    assert decode(encode(SavedHistory())) == SavedHistory()


def test_durations_counted_in_other_buckets_start_over() -> None:
    doc = json.loads(encode(lived_history()))
    doc["tallies"]["durations"][0]["le"] = [1.0] * len(DURATION_BUCKETS)
    back = decode(json.dumps(doc))
    assert back.tallies.durations == ()
    assert back.tallies.last_duration == 15.5 and back.counters.restarts == 2


def test_the_forecast_s_buckets_round_trip_and_older_three_figure_buckets_read() -> None:
    load = SavedLoad(600.0, 30.0, ((1, 300.0, 30.0, 120.0), (2, 3000.0, 30.0, 0.0)))
    back = decode(encode(SavedHistory(load=load)))
    assert back.load == load
    # a file saved before the rows spread were kept: none were
    doc = json.loads(encode(SavedHistory(load=load)))
    doc["load"]["buckets"] = [[1, 300.0, 30.0], [2, 3000.0, 30.0]]
    assert decode(json.dumps(doc)).load == SavedLoad(
        600.0, 30.0, ((1, 300.0, 30.0, 0.0), (2, 3000.0, 30.0, 0.0)))


def test_unreadable_forecast_buckets_are_left_out_and_the_history_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    doc = json.loads(encode(lived_history()))
    doc["load"] = {"period": 600.0, "bucket": 30.0, "buckets": [[1, 300.0, 30.0, 0.0, 9.0]]}
    with caplog.at_level(logging.WARNING):
        back = decode(json.dumps(doc))
    assert back.load is None and back.counters.restarts == 2
    assert "a bucket is 3 or 4 figures" in caplog.text and "learns them again" in caplog.text


def _doc(**changes: object) -> str:
    doc = json.loads(encode(lived_history()))
    doc.update(changes)
    return json.dumps(doc)


def _record_doc(**changes: object) -> str:
    doc = json.loads(encode(lived_history()))
    doc["records"][0].update(changes)
    return json.dumps(doc)


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ("[]", "not a JSON object"),
    (_doc(version=2), "written in format version 2, newer than the version 1"),
    (_doc(version="1"), "unsupported format version '1'"),
    (_doc(counters=[]), "'counters' is not a JSON object"),
    (_doc(records={}), "'records' is not a JSON array"),
    (_doc(nextId=True), "'nextId' is not an integer"),
    (_doc(nextId=0), "'nextId' must be at least 1"),
    (_doc(tallies={"opened": [], "finished": [], "durations": [], "lastDuration": "NaN"}),
     "'tallies.lastDuration' is not a number"),
    (_record_doc(time=float("inf")), "'records[0].time' is not finite"),
    (_record_doc(trigger="WHIM"), "unknown trigger 'WHIM'"),
    (_record_doc(kind="sideways"), "unknown kind 'sideways'"),
    (_record_doc(outcome="maybe"), "unknown outcome 'maybe'"),
    (_record_doc(toSlots=-1), "'records[0].toSlots' is negative"),
    (_record_doc(duration="5s"), "'records[0].duration' is not a number"),
    (_record_doc(timings={"start": 0.5}), "'records[0].timings' is not a JSON array"),
    (_record_doc(timings=[["start"]]), "not a [name, seconds] pair"),
])
def test_a_bad_file_is_a_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        decode(text)


def test_memory_store_names_the_file_of_a_bad_history() -> None:
    store = MemoryHistoryStore()
    store.files[CP] = "{"
    with pytest.raises(ValueError, match=f"{FILE} is not a rescale history: not JSON"):
        store.load(CP)
    assert history_file(CP + "/") == FILE


# -- restore after a driver restart --------------------------------------------------------
def test_a_restored_history_goes_on_where_the_driver_left_it() -> None:
    saved = lived_history()
    vt = VirtualTime(start=5.0, epoch=1_800_000_000.0)  # another process, another clock
    h = RescaleHistory(vt, saved=saved)
    records = h.records()
    assert [r.id for r in records] == [1, 2, 3, 4, 5]
    failed = records[-1]
    assert failed.outcome == "failed" and failed.duration is None
    assert failed.reason == f"boom ({STOPPED_DRIVER})"
    assert h.pending is None and h.counters == saved.counters
    assert [record_json(r) for r in records[:-1]] == [record_json(r) for r in saved.records[:-1]]
    # Tallied as failed, so every opened record is finished once.
    assert dict(h.tallies.finished)[("restart", "failed")] == 1
    assert sum(dict(h.tallies.opened).values()) == sum(dict(h.tallies.finished).values())
    # Monotonic times are re-based on this clock: the same wall-clock instants.
    assert all(r.started - vt.now() == pytest.approx(r.time - vt.wall()) for r in records)
    nxt = h.open(Trigger.INITIAL_SCHEDULE, "initial", from_parallelism=0, to_parallelism=2,
                 from_slots=0, to_slots=2, reason="again")
    assert nxt.id == 6 and h.saved().next_id == 7


def test_a_restored_history_keeps_its_newest_records_within_the_limit() -> None:
    h = RescaleHistory(VirtualTime(), limit=2, saved=lived_history())
    assert [r.id for r in h.records()] == [4, 5]
    assert h.counters.rescales == 3


def test_history_changes_are_handed_over_when_records_open_finish_and_failures_count() -> None:
    seen: list[SavedHistory] = []
    h = RescaleHistory(VirtualTime(), on_change=seen.append)
    h.open(Trigger.NEW_RESOURCES, "restart", from_parallelism=1, to_parallelism=2,
           from_slots=1, to_slots=2, reason="more")
    h.update_pending(timings=(("stop", 1.0),))  # saved with the record's end
    h.count_failure()
    h.fail_pending()
    h.fail_pending()  # nothing pending: no change
    assert [(len(s.records), s.records[-1].outcome, s.counters.failures) for s in seen] == [
        (1, "pending", 0), (1, "pending", 1), (1, "failed", 1)]
    assert seen[-1].records[-1].timings == (("stop", 1.0),)


def _run_first_driver(store: MemoryHistoryStore) -> tuple[App, FakeDriver, list[dict[str, object]]]:
    """A query that starts, is rescaled by new bounds, then fails and is Restarting when its
    driver goes away."""
    app = App(EXPONENTIAL, history_writer=StoreWriter(store))
    for e in "1234":
        app.add(e)
    driver = FakeDriver(query_info("q1", partitions=4, name="orders"))
    app.register(driver)
    app.event(driver.progress())
    app.advance(40)
    app.scheduler.update_requirements("orders", -1, 2)
    app.vt.run_pending()
    app.stop(driver)
    app.start(driver)
    app.event(driver.progress())
    app.advance(40)
    app.event(driver.terminated("boom"))
    assert app.state("q1") == "Restarting"
    shown = [record_json(r) for r in app.scheduler.history("q1")]
    return app, driver, shown


def test_after_a_driver_restart_records_counters_and_tallies_carry_on(
        caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryHistoryStore()
    first, _, shown = _run_first_driver(store)
    before = first.scheduler.query("q1").snapshot()
    assert counters_json(before.counters) == {"restarts": 2, "rescales": 1, "liveRescales": 0,
                                              "failures": 1}
    assert [r["outcome"] for r in shown] == ["completed", "completed", "pending"]

    # A new driver starts the same query from the same checkpoint.
    info = query_info("q1", partitions=4, name="orders")
    with caplog.at_level(logging.INFO, STORE_LOG):
        saved = restore_history(store, info)
    assert saved is not None
    assert (f"query orders: rescale history restored from {FILE}: 3 records, restarts 2, "
            "rescales 1 (live 0), failures 1; record 3 was under way when the driver "
            "stopped: failed") in caplog.text
    app = App(EXPONENTIAL, history_writer=StoreWriter(store))
    app.add("1")
    app.add("2")
    driver = FakeDriver(info)
    app.register(driver, history=saved)
    records = [record_json(r) for r in app.scheduler.history("q1")]
    assert records[:2] == shown[:2]  # as the REST API showed them before the restart
    assert records[2] == {**shown[2], "outcome": "failed",
                          "reason": f"{shown[2]['reason']} ({STOPPED_DRIVER})"}
    assert (records[3]["id"], records[3]["trigger"], records[3]["outcome"]) == (
        4, "INITIAL_SCHEDULE", "pending")
    snap = app.scheduler.query("q1").snapshot()
    assert snap.counters == before.counters
    assert dict(snap.tallies.opened) == dict(before.tallies.opened)
    assert dict(snap.tallies.finished) == {**dict(before.tallies.finished),
                                           ("restart", "failed"): 1}
    assert snap.tallies.durations == before.tallies.durations
    # What is saved now is the carried-on history, the new initial schedule last.
    assert [r.id for r in decode(store.files[CP]).records] == [1, 2, 3, 4]

    # Counters keep growing from where they were.
    app.event(driver.progress())
    app.advance(40)
    app.scheduler.update_requirements("orders", -1, 1)
    app.vt.run_pending()
    app.stop(driver)
    app.start(driver)
    app.event(driver.progress())
    after = app.scheduler.query("q1").snapshot()
    assert counters_json(after.counters) == {"restarts": 3, "rescales": 2, "liveRescales": 0,
                                             "failures": 1}
    assert dict(after.tallies.opened)[("restart", Trigger.REQUIREMENTS_CHANGED)] == 2
    assert dict(after.tallies.durations)["restart"].count == 2
    on_file = decode(store.files[CP])
    assert on_file.counters == after.counters and on_file.next_id == 6
    assert [r.outcome for r in on_file.records] == [
        "completed", "completed", "failed", "completed", "completed"]


def test_the_same_query_started_again_in_one_driver_continues_its_history() -> None:
    """Its last write may still be on its way to the store: the history in memory wins."""
    app = App()
    app.add("1")
    first = FakeDriver(query_info("q1", partitions=1))
    app.register(first)
    app.event(first.progress())
    app.event(first.terminated(None))
    assert app.state("q1") == "Finished"
    app.register(FakeDriver(query_info("q1", partitions=1)))
    assert [(r.id, r.trigger, r.outcome) for r in app.scheduler.history("q1")] == [
        (1, Trigger.INITIAL_SCHEDULE, "completed"), (2, Trigger.INITIAL_SCHEDULE, "pending")]


def test_a_query_without_a_checkpoint_writes_nothing() -> None:
    store = MemoryHistoryStore()
    writer = StoreWriter(store)
    app = App(history_writer=writer)
    app.add("1")
    driver = FakeDriver(query_info("q1", partitions=1, checkpoint=None))
    app.register(driver)
    app.event(driver.progress())
    assert writer.written == [] and store.files == {}
    assert restore_history(store, driver.info) is None


def test_writes_name_the_query_and_its_checkpoint() -> None:
    writer = StoreWriter(MemoryHistoryStore())
    app = App(history_writer=writer)
    app.add("1")
    driver = FakeDriver(query_info("q1", partitions=1, name="orders"))
    app.register(driver)
    app.event(driver.progress())
    assert [(c, label, [r.outcome for r in h.records]) for c, label, h in writer.written] == [
        (CP, "orders", ["pending"]), (CP, "orders", ["completed"])]


# -- bad files and failing stores -------------------------------------------------------------
class UnreachableStore(MemoryHistoryStore):
    def load(self, checkpoint: str) -> SavedHistory | None:
        raise PersistenceError(f"cannot read {history_file(checkpoint)}: "
                               "java.net.ConnectException: Connection refused")


@pytest.mark.parametrize(("content", "why"), [
    ("{\"version\": 1, \"records\": [", "not JSON"),
    ("", "not JSON"),
    (_doc(version=2), "newer than the version 1"),
    (None, "java.net.ConnectException: Connection refused"),
])
def test_a_bad_or_unreadable_file_never_stops_the_query(
        content: str | None, why: str, caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryHistoryStore() if content is not None else UnreachableStore()
    if content is not None:
        store.files[CP] = content
    info = query_info("q1", partitions=1, name="orders")
    with caplog.at_level(logging.INFO, STORE_LOG):
        saved = restore_history(store, info)
    assert isinstance(saved, UnreadHistory) and saved.records == ()
    assert FILE in saved.problem and why in saved.problem
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert line.startswith("query orders: cannot read the rescale history persisted beside "
                           "its checkpoint (")
    assert FILE in line and why in line and line.endswith(
        "; its history starts empty and is kept in memory only: the file is left as it is "
        "for the query's next start to read")
    app = App(history_writer=StoreWriter(MemoryHistoryStore()))
    app.add("1")
    driver = FakeDriver(info)
    app.register(driver, history=saved)
    app.event(driver.progress())
    assert app.state("q1") == "Executing"
    assert [r.id for r in app.scheduler.history("q1")] == [1]


def test_a_file_that_cannot_be_decoded_is_never_replaced() -> None:
    store = MemoryHistoryStore()
    store.files[CP] = "garbage"
    info = query_info("q1", partitions=1)
    app = App(history_writer=StoreWriter(store))
    app.add("1")
    driver = FakeDriver(info)
    app.register(driver, history=restore_history(store, info))
    app.event(driver.progress())
    assert [r.id for r in app.scheduler.history("q1")] == [1]  # kept in memory
    assert store.files[CP] == "garbage"


class FlakyStore(MemoryHistoryStore):
    """A store whose next load fails as an object store that does not answer."""

    fail_next_load = False

    def load(self, checkpoint: str) -> SavedHistory | None:
        if self.fail_next_load:
            self.fail_next_load = False
            raise PersistenceError(f"cannot read {history_file(checkpoint)}: S3 503 SlowDown")
        return super().load(checkpoint)


def _run_a_driver(store: FlakyStore, *, rescale: bool) -> App:
    """One driver's life of query q1: its history restored from ``store``, one completed
    batch, and, with ``rescale``, a restart rescale onto a second executor."""
    app = App(history_writer=StoreWriter(store))
    app.add("1")
    driver = FakeDriver(query_info("q1", partitions=2))
    app.register(driver, history=restore_history(store, driver.info))
    app.event(driver.progress())
    if rescale:
        app.add("2")
        app.stop(driver)
        app.start(driver)
        app.event(driver.progress())
    return app


def test_a_read_error_at_the_start_does_not_lose_the_saved_history() -> None:
    store = FlakyStore()
    _run_a_driver(store, rescale=True)
    saved = decode(store.files[CP])
    assert saved.counters.restarts == 1 and len(saved.records) == 2
    store.fail_next_load = True  # the store does not answer as the next driver starts
    second = _run_a_driver(store, rescale=False)
    assert len(second.scheduler.query("q1").history.records()) == 1
    assert decode(store.files[CP]) == saved  # its changes stayed in memory
    third = _run_a_driver(store, rescale=False)  # reads the file again
    history = third.scheduler.query("q1").history
    assert history.counters.restarts == 1
    assert [r.id for r in history.records()] == [1, 2, 3]


def test_a_query_started_again_in_the_same_driver_keeps_an_unread_file() -> None:
    store = FlakyStore()
    store.files[CP] = "garbage"
    app = App(history_writer=StoreWriter(store))
    app.add("1")
    driver = FakeDriver(query_info("q1", partitions=2))
    app.register(driver, history=restore_history(store, driver.info))
    app.event(driver.progress())
    app.event(driver.terminated())  # ended by itself; the app starts it again
    app.register(driver, history=restore_history(store, driver.info))
    app.event(driver.progress())
    assert store.files[CP] == "garbage"
    assert len(app.scheduler.query("q1").history.records()) == 2


class FailingStore(MemoryHistoryStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.attempts = 0

    def save(self, checkpoint: str, history: SavedHistory) -> None:
        self.attempts += 1
        if self.error is not None:
            raise self.error
        super().save(checkpoint, history)


@pytest.mark.parametrize(("error", "why"), [
    (PersistenceError(f"cannot write {FILE}: org.apache.hadoop.fs.s3a.AWSBadRequestException: "
                      "bucket gone"), f"cannot write {FILE}: org.apache.hadoop.fs.s3a."
                                      "AWSBadRequestException: bucket gone"),
    (OSError("No space left on device"), f"{FILE}: OSError: No space left on device"),
])
def test_a_failed_write_is_one_warning_and_changes_nothing_else(
        error: Exception, why: str, caplog: pytest.LogCaptureFixture) -> None:
    store = FailingStore(error)
    writer = BackgroundHistoryWriter(store)
    try:
        writer.write(CP, "orders", lived_history())
        assert writer.flush(10)
        warnings = [r for r in caplog.records if r.name == WRITER_LOG]
        assert [r.levelno for r in warnings] == [logging.WARNING]
        assert warnings[0].getMessage() == (
            f"query orders: its rescale history was not saved ({why}); the query goes on")
        # The store is back: the next change is saved, as if nothing had happened.
        store.error = None  # type: ignore[assignment]
        writer.write(CP, "orders", lived_history())
        assert writer.flush(10)
        assert decode(store.files[CP]) == decode(encode(lived_history()))
    finally:
        writer.close()


def test_a_failing_store_never_disturbs_the_scheduler(caplog: pytest.LogCaptureFixture) -> None:
    store = FailingStore(PersistenceError(f"cannot write {FILE}: java.io.IOException: down"))
    writer = BackgroundHistoryWriter(store)
    try:
        app = App(EXPONENTIAL, history_writer=writer)
        for e in "12":
            app.add(e)
        driver = FakeDriver(query_info("q1", partitions=2, name="orders"))
        app.register(driver)
        app.event(driver.progress())
        app.event(driver.terminated("boom"))
        app.advance(1)
        app.start(driver)
        app.event(driver.progress())
        assert writer.flush(10)
    finally:
        writer.close()
    assert app.state("q1") == "Executing"
    assert [r.outcome for r in app.scheduler.history("q1")] == ["completed", "completed"]
    assert app.scheduler.query("q1").snapshot().counters == Counters(restarts=1, failures=1)
    warnings = [r for r in caplog.records if r.name == WRITER_LOG]
    assert 1 <= len(warnings) == store.attempts  # one line for each failed write, no more
    assert all(r.levelno == logging.WARNING and FILE in r.getMessage() for r in warnings)


class BrokenWriter:
    def write(self, checkpoint: str, label: str, history: SavedHistory) -> None:
        raise RuntimeError("a bug")


def test_a_broken_writer_is_logged_and_the_query_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    app = App(history_writer=BrokenWriter())
    app.add("1")
    driver = FakeDriver(query_info("q1", partitions=1))
    app.register(driver)
    app.event(driver.progress())
    assert app.state("q1") == "Executing"
    assert app.scheduler.history("q1")[0].outcome == "completed"
    assert "query q1: handing its rescale history to the writer failed" in caplog.text


# -- the writer thread ---------------------------------------------------------------------
class SlowStore(MemoryHistoryStore):
    """A store that holds every save until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.saved: list[int] = []

    def save(self, checkpoint: str, history: SavedHistory) -> None:
        self.entered.set()
        assert self.release.wait(10), "the test never released the store"
        self.saved.append(history.next_id)
        super().save(checkpoint, history)


def _history(next_id: int) -> SavedHistory:
    return SavedHistory(next_id=next_id)


def test_write_returns_at_once_and_only_the_newest_waiting_history_is_saved() -> None:
    store = SlowStore()
    writer = BackgroundHistoryWriter(store)
    try:
        writer.write(CP, "orders", _history(1))
        assert store.entered.wait(10)
        began = time.monotonic()
        for n in (2, 3, 4):  # the store is stuck: each replaces the one waiting
            writer.write(CP, "orders", _history(n))
        writer.write("/cp/q2", "other", _history(9))
        assert time.monotonic() - began < 1.0
        assert not writer.flush(0.05)
        store.release.set()
        assert writer.flush(10)
        assert store.saved == [1, 4, 9]
        assert decode(store.files[CP]).next_id == 4
    finally:
        store.release.set()
        writer.close()


def test_close_saves_what_waits_then_drops_later_writes() -> None:
    store = MemoryHistoryStore()
    writer = BackgroundHistoryWriter(store)
    writer.write(CP, "orders", _history(3))
    writer.close()
    assert decode(store.files[CP]).next_id == 3
    writer.write(CP, "orders", _history(4))
    writer.close()
    assert decode(store.files[CP]).next_id == 3


def test_close_waits_for_a_stuck_store_only_so_long(caplog: pytest.LogCaptureFixture) -> None:
    store = SlowStore()
    writer = BackgroundHistoryWriter(store)
    try:
        writer.write(CP, "orders", _history(1))
        assert store.entered.wait(10)
        writer.close(timeout=0.1)
        assert f"{FILE} not saved within 0.1s of shutdown" in caplog.text
    finally:
        store.release.set()


def test_a_writer_never_written_to_starts_no_thread() -> None:
    writer = BackgroundHistoryWriter(MemoryHistoryStore())
    writer.close()
    assert writer.flush(0)
