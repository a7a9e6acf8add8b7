"""WarmUp on virtual time: when joining executors are warmed up, and what a restart waits for."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.events import ExecutorAdded, ExecutorRemoved
from spark_adaptive.core.streaming.warm_up import WarmUp


class FakeLauncher:
    """Records each launch; the test ends a job with :meth:`finish`."""

    def __init__(self, fail: bool = False) -> None:
        self.launched: list[tuple[str, ...]] = []
        self.pending: list[Callable[[], None]] = []
        self.fail = fail

    def __call__(self, ids: Sequence[str], done: Callable[[], None]) -> None:
        if self.fail:
            raise RuntimeError("the SparkContext is stopping")
        self.launched.append(tuple(ids))
        self.pending.append(done)

    def finish(self) -> None:
        self.pending.pop(0)()


def added(executor_id: str, time: float = 0.0) -> ExecutorAdded:
    return ExecutorAdded(time, executor_id, "127.0.0.1", 1)


def make(vt: VirtualTime, launcher: FakeLauncher, managing: list[bool]) -> WarmUp:
    return WarmUp(vt, restartable_streaming=lambda: managing[0], launch=launcher, debounce=1.0)


def limited(vt: VirtualTime, launcher: FakeLauncher, ended: list[float]) -> WarmUp:
    """A WarmUp whose limit is 20 s, appending the instants it unblocks restarts to ``ended``."""
    return WarmUp(vt, restartable_streaming=lambda: True, launch=launcher, debounce=1.0,
                  limit=20.0, on_idle=lambda: ended.append(vt.now()))


def test_executors_joining_together_are_warmed_up_by_one_job(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    w = make(vt, launcher, [True])
    assert not w.in_flight
    w.on_event(added("3"))
    assert w.in_flight and launcher.launched == []  # waits for the rest of the scale-up
    vt.advance(0.6)
    w.on_event(added("4"))
    vt.advance(0.9)
    assert launcher.launched == [], "the debounce restarts at each join"
    vt.advance(0.1)
    assert launcher.launched == [("3", "4")]
    assert w.in_flight and not w.wait(0), "in flight until the job has ended"
    launcher.finish()
    assert not w.in_flight and w.wait(0)


def test_nothing_is_warmed_up_without_a_query_a_restart_can_rescale(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    managing = [False]
    w = make(vt, launcher, managing)
    w.on_event(added("1"))
    w.on_event(ExecutorRemoved(0.0, "1", "lost"))
    vt.advance(5)
    assert launcher.launched == [] and not w.in_flight
    managing[0] = True
    w.on_event(added("2"))
    vt.advance(1)
    assert launcher.launched == [("2",)]


def test_an_executor_joining_during_a_job_gets_a_job_of_its_own(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    w = make(vt, launcher, [True])
    w.on_event(added("3"))
    vt.advance(1)
    w.on_event(added("4"))
    launcher.finish()  # the first job ends while 4's debounce runs: still in flight
    assert w.in_flight
    vt.advance(1)
    assert launcher.launched == [("3",), ("4",)]
    launcher.finish()
    assert not w.in_flight


def test_a_launch_that_fails_is_not_left_in_flight(vt: VirtualTime) -> None:
    w = make(vt, FakeLauncher(fail=True), [True])
    w.on_event(added("3"))
    vt.advance(1)
    assert not w.in_flight and w.wait(0)


def test_close_cancels_a_pending_warm_up(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    w = make(vt, launcher, [True])
    w.on_event(added("3"))
    w.close()
    vt.advance(5)
    assert launcher.launched == [] and not w.in_flight


def test_restarts_are_held_back_until_the_warm_up_ends_and_then_told(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    ended: list[float] = []
    w = WarmUp(vt, restartable_streaming=lambda: True, launch=launcher, debounce=1.0, limit=30.0,
               on_idle=lambda: ended.append(vt.now()))
    assert not w.blocking
    w.on_event(added("3"))
    assert w.blocking, "blocking from the join on, before the job starts"
    vt.advance(5)
    assert w.blocking and ended == []
    launcher.finish()
    assert not w.blocking and ended == [5.0]
    vt.advance(60)
    assert ended == [5.0], "the limit's timer went with the warm-up"


def test_a_warm_up_that_hangs_holds_restarts_back_only_until_its_limit(vt: VirtualTime) -> None:
    launcher = FakeLauncher()
    ended: list[float] = []
    w = limited(vt, launcher, ended)
    w.on_event(added("3"))
    vt.advance(19.9)
    assert w.blocking and ended == []
    vt.advance(0.1)
    assert ended == [20.0] and not w.blocking
    assert w.in_flight, "the job itself still runs; only the restarts stop waiting"
    assert w.wait(0), "a restart already under way does not wait for it either"
    launcher.finish()
    assert ended == [20.0], "told once"
    w.on_event(added("4"))
    assert w.blocking and not w.wait(0), "a later join blocks again"


def test_an_executor_joining_during_a_warm_up_holds_restarts_for_its_own_job(
        vt: VirtualTime) -> None:
    # Executors of a reactive cluster join one by one: the second one's job starts 15 s into
    # the first's, and a restart onto it must not meet it cold 5 s later.
    launcher = FakeLauncher()
    ended: list[float] = []
    w = limited(vt, launcher, ended)
    w.on_event(added("3"))
    vt.advance(15)
    w.on_event(added("4"))
    vt.advance(1)  # 4's job starts at 16 s
    assert launcher.launched == [("3",), ("4",)]
    vt.advance(5)
    assert w.blocking and ended == [], "20 s after the first join, 4's job has run 5 s"
    launcher.finish()
    assert w.blocking, "4's job still runs"
    vt.advance(14.9)
    assert w.blocking and ended == []
    vt.advance(0.1)
    assert ended == [36.0] and not w.blocking, "at most the limit after the last job started"
    launcher.finish()
    assert ended == [36.0]
