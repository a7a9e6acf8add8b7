"""The executor demand's rules, one row each (docs/design.md, "Executors": the table names
these rows), and the reconciler that sends it.

Each row gives the facts of one moment (:class:`DemandInputs`), the total the app must
declare (None: nothing), whether executors beyond an unchanged total go now, whether
executors beyond what the queries want wait for a boundary, and a piece of the reason the
INFO line prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from spark_adaptive.core.clock import VirtualTime
from spark_adaptive.core.executors import demand as demand_module
from spark_adaptive.core.executors.demand import (
    SURPLUS_WAIT,
    Baseline,
    DemandInputs,
    Pool,
    PoolExecutor,
    QueryDemand,
    executor_demand,
)
from spark_adaptive.core.executors.inventory import ExecutorInventory
from spark_adaptive.core.executors.reconciler import Reconciler
from spark_adaptive.core.ports import ExecutorRelease


def pool(*slots: int, counted: int | None = None, default: int | None = None) -> Pool:
    """Live executors "1", "2", ... (oldest first) of these slots."""
    executors = tuple(PoolExecutor(str(i), s) for i, s in enumerate(slots, 1))
    return Pool(executors, sum(slots) if counted is None else counted, default)


def q(slots: int, *, in_use: int = 0, tasks: int = 0, seen: bool = True,
      source: int | None = None, key: str = "q") -> QueryDemand:
    return QueryDemand(key, slots, in_use, tasks, seen, source)


@dataclass(frozen=True)
class Row:
    rule: str
    inputs: DemandInputs
    total: int | None
    release_surplus: bool = False
    waits: bool = False
    says: str = ""
    source: str = "queries"


FOUR = pool(1, 1, 1, 1)
ROWS = [
    Row("Q1 a fixed pool declares nothing",
        DemandInputs(FOUR, (q(2),), fixed=True), None, source="none"),
    Row("Q2 autoscaled, before its first decision, nothing",
        DemandInputs(FOUR, (q(2),), sizing="undecided"), None, source="none"),
    Row("Q3 the queries want the sum of their slots",
        DemandInputs(pool(1, 1), (q(2, key="a"), q(3, key="b"))), 5, True,
        says="the queries' upper bounds want 5 slots, 1 slots per executor"),
    Row("Q3 capped by max-parallelism",
        DemandInputs(pool(1), (q(8),), max_parallelism=3), 3, True, says="want 3 slots"),
    Row("Q3 the autoscaler's targets",
        DemandInputs(FOUR, (q(2),), sizing="autoscaler", sent=4), 2, True,
        says="the autoscaler's targets want 2 slots"),
    Row("Q3 a stateless query's source tasks beyond its bounds are kept",
        DemandInputs(FOUR, (q(2, source=4),), sent=4), 4, True,
        says="(a query without state that runs its source's partitions as its tasks: "
             "those)"),
    Row("Q4 no release under a running micro-batch: the slots in use stay",
        DemandInputs(FOUR, (q(2, in_use=4),), sent=4), 4, False,
        says="the running queries still use 4 slots, the rest are released when they let go"),
    Row("Q4 the slots in use keep executors counted, never ask for more",
        DemandInputs(pool(1, 1), (q(1, in_use=4),), sent=2), 2, False),
    Row("Q5 executors of mixed sizes: the fewest oldest whose slots reach it",
        DemandInputs(pool(1, 4, 4), (q(8),)), 3, True,
        says="want 8 slots, executors of 1-4 slots (any more at 4)"),
    Row("Q5 beyond those alive, the rest at the most common size",
        DemandInputs(pool(2, 2), (q(9),)), 5, True, says="2 slots per executor"),
    Row("Q5 no size known yet: nothing",
        DemandInputs(pool(), (q(4),)), None, source="none"),
    Row("Q5 until one executor is seen, the configured size",
        DemandInputs(pool(default=2), (q(8),)), 4, True),
    Row("Q6 a wider running stage keeps the executors its tasks may run on",
        DemandInputs(FOUR, (q(1, in_use=2, tasks=4),), sent=4), 4, False, True,
        says="a running micro-batch's stage may use 4 slots, the rest are released once "
             "it has completed"),
    Row("Q6 the hold of a wide stage never raises the total (those that joined wait)",
        DemandInputs(FOUR, (q(2, in_use=2, tasks=4),), sent=2), 2, False, True),
    Row("Q6 a stage's hold ends at its query's boundary",
        DemandInputs(FOUR, (q(1, in_use=1, tasks=0),), sent=4, at_boundary=True), 1, True),
    Row("Q7 nothing is released before every query's first boundary",
        DemandInputs(FOUR, (q(2, seen=False),), first_boundary=True, sent=4), 4, True, True,
        says="nothing is released before each query's first micro-batch has said what it "
             "runs"),
    Row("Q7 once seen, the surplus goes",
        DemandInputs(FOUR, (q(2),), first_boundary=True, sent=4, at_boundary=True), 2, True),
    Row("Q8 a late executor waits for a boundary while a query runs",
        DemandInputs(pool(1, 1, 1), (q(2, in_use=2),), sent=2), 2, False, True),
    Row("Q8 and goes at its query's boundary",
        DemandInputs(pool(1, 1, 1), (q(2, in_use=2),), sent=2, at_boundary=True), 2, True),
    Row("Q8 a boundary while another query's stage runs waits",
        DemandInputs(pool(1, 1, 1), (q(1, in_use=1, key="a"),
                                     q(1, in_use=1, tasks=1, key="b")),
                     sent=2, at_boundary=True), 2, False, True),
    Row("Q8 until the surplus has waited SURPLUS_WAIT",
        DemandInputs(pool(1, 1, 1), (q(1, in_use=1, key="a"),
                                     q(1, in_use=1, tasks=1, key="b")),
                     sent=2, at_boundary=True, surplus_wait_over=True), 2, True),
    Row("Q8 a refused release is retried at a boundary only",
        DemandInputs(pool(1, 1, 1), (q(2),), sent=2, refused=True), 2, False, True),
    Row("Q8 with no run in use and nothing refused, surplus goes at once",
        DemandInputs(pool(1, 1, 1), (q(2),), sent=2), 2, True),
    Row("N2 the start's hold trims to its slots' executors",
        DemandInputs(pool(1, 1, 1), hold_slots=1), 1, True, source="hold",
        says="the app holds the executors of autoscaler.initial-slots=1"),
    Row("N2 the hold never asks for more than Spark gave",
        DemandInputs(pool(1, 1), hold_slots=4), None, source="none"),
    Row("N2 a release refused during the hold is not retried",
        DemandInputs(pool(1, 1), hold_slots=1, sent=1, refused=True), 1, False, source="hold"),
    Row("N1 the batch part's decision, over the start's hold",
        DemandInputs(FOUR, batch=Baseline(2, "batch decided"), baseline=Baseline(4, "idle"),
                     hold_slots=1, sent=2),
        2, False, source="batch", says="batch decided"),
    Row("N1 its idle decision releases beyond it",
        DemandInputs(FOUR, batch=Baseline(1, "idle", release_surplus=True), sent=1), 1, True,
        source="batch"),
    Row("N3 the idle baseline: what is beyond it goes with it",
        DemandInputs(FOUR, baseline=Baseline(2, "no managed query remains"), sent=4), 2,
        True, source="baseline", says="no managed query remains"),
    Row("N3 not later: an executor that joins after it stays",
        DemandInputs(FOUR, baseline=Baseline(2, "no managed query remains"), sent=2), 2,
        False, source="baseline"),
    Row("Q8 beyond a higher total, a late executor waits for a boundary",
        DemandInputs(pool(1, 1, 1, 1, 1), (q(3, in_use=3, key="a"), q(1, in_use=1, key="b")),
                     sent=3), 4, False, True),
    Row("Q7 an executor lost in its grace still counts: the hold does not drop",
        DemandInputs(Pool(FOUR.executors[:3], 4, lost=1), (q(2, seen=False),),
                     first_boundary=True, sent=4), 4, True, True),
    Row("N4 otherwise nothing", DemandInputs(FOUR), None, source="none"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.rule for r in ROWS])
def test_each_rule(row: Row) -> None:
    d = executor_demand(row.inputs)
    assert (d.total, d.source) == (row.total, row.source), d.reason
    if row.total is not None:
        assert (d.release_surplus, d.waits) == (row.release_surplus, row.waits), d
    assert row.says in d.reason


def test_every_row_of_the_module_table_has_a_case() -> None:
    table = demand_module.__doc__ or ""
    rows = {line.split()[0] for line in table.splitlines()
            if line[:1] in "QN" and line[1:2].isdigit()}
    assert rows == {r.rule.split()[0] for r in ROWS}


def test_executors_go_newest_first_by_the_time_spark_added_them() -> None:
    vt = VirtualTime()
    inventory = ExecutorInventory(vt, loss_grace=0, failure_detection_timeout=60)
    for executor_id, added in (("10", 5.0), ("2", 1.0), ("11", 5.0), ("3", 9.0)):
        inventory.executor_added(executor_id, "h", 1, added)
    assert [e.executor_id for e in inventory.pool().executors] == ["2", "10", "11", "3"]
    assert inventory.newest(2) == ["11", "3"]


# -- the reconciler -----------------------------------------------------------------------
@dataclass
class Actuator:
    sent: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    """Each total sent, with the executors released."""
    hung: list[str] = field(default_factory=list)

    def request_total_executors(self, total: int,
                                release: Sequence[ExecutorRelease] = ()) -> list[str]:
        ids = tuple(r.executor_id for r in release)
        self.sent.append((total, ids))
        return list(ids)

    def release_hung_executor(self, executor_id: str, reason: str) -> None:
        self.hung.append(executor_id)


class World:
    """Executors 1-4 of one slot in an inventory; one query of ``slots`` with ``in_use``."""

    def __init__(self, hang_after: float = 3600.0) -> None:
        self.vt = VirtualTime()
        self.actuator = Actuator()
        self.inventory = ExecutorInventory(self.vt, loss_grace=0,
                                           failure_detection_timeout=hang_after,
                                           on_hung=lambda e, s: self.reconciler.hung(e, s))
        self.slots, self.in_use, self.tasks = 4, 0, 0
        self.reconciler = Reconciler(self.actuator, self.inventory, self.vt, self.facts)
        for i in range(1, 5):
            self.inventory.executor_added(str(i), "h", 1, float(i))

    def facts(self) -> DemandInputs:
        return DemandInputs(self.inventory.pool(),
                            (q(self.slots, in_use=self.in_use, tasks=self.tasks),))


def test_the_reconciler_sends_a_changed_total_with_the_newest_executors_beyond_it() -> None:
    w = World()
    w.reconciler.reconcile()
    w.slots = 2
    w.reconciler.reconcile()
    w.reconciler.reconcile()  # nothing changed: nothing sent
    assert w.actuator.sent == [(4, ()), (2, ("3", "4"))]
    assert [e.executor_id for e in w.inventory.executors] == ["1", "2"]
    assert w.reconciler.sent == 2


def test_a_refused_release_counts_again_and_goes_again_at_a_boundary_only() -> None:
    w = World()
    w.reconciler.reconcile()
    w.slots, w.in_use = 2, 2
    w.reconciler.reconcile()
    w.reconciler.release_refused(["4"], "the cluster manager refused")
    assert [e.executor_id for e in w.inventory.executors] == ["1", "2", "4"]
    w.reconciler.reconcile()
    assert w.actuator.sent[-1] == (2, ("3", "4"))  # not again before a boundary
    w.reconciler.reconcile(at_boundary=True)
    assert w.actuator.sent[-1] == (2, ("4",))


def test_a_hung_executor_is_killed_at_once_and_again_with_each_total_once_refused() -> None:
    w = World(hang_after=20)
    w.reconciler.reconcile()
    for e in "234":
        w.vt.call_later(10, lambda e=e: w.inventory.heartbeat(e))  # type: ignore[misc]
    w.vt.advance(21)
    assert w.actuator.hung == ["1"] and len(w.inventory.executors) == 3
    w.reconciler.release_refused(["1"], "refused")  # stays uncounted, killed again
    assert len(w.inventory.executors) == 3
    w.slots = 3
    w.reconciler.reconcile()
    assert w.actuator.sent[-1] == (3, ("1",))  # the healthy three stay
    w.slots = 2
    w.reconciler.reconcile()
    assert w.actuator.sent[-1] == (2, ("4",))  # its kill in flight: not again


def test_the_surplus_wait_is_counted_from_when_executors_began_to_wait() -> None:
    w = World()
    w.reconciler.reconcile()
    w.slots, w.in_use, w.tasks = 3, 3, 3  # another stage runs on the fourth
    w.reconciler.reconcile()
    assert w.actuator.sent == [(4, ()), (3, ("4",))]
    w.inventory.executor_added("5", "h", 1, 9.0)  # late: it waits for a boundary
    w.reconciler.reconcile()
    w.vt.advance(SURPLUS_WAIT - 1)
    w.reconciler.reconcile(at_boundary=True)  # another stage runs: not yet
    assert w.actuator.sent[-1] == (3, ("4",))
    w.vt.advance(1)
    w.reconciler.reconcile(at_boundary=True)
    assert w.actuator.sent[-1] == (3, ("5",))
