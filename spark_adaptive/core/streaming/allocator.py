"""Who gets which slots, and whether a running query must change to use them.

Four pure functions:

* :func:`share_slots` says on how many of the application's task slots each managed
  query runs. Spark queries are not Flink jobs: the queries of one app interleave their
  micro-batches on the same executors, and a micro-batch uses every free slot while it
  runs. So each query runs on all the app's slots, within its bounds: with partitions a
  whole multiple of the slots, every wave of tasks is full whichever queries' batches
  run together (two queries of 3 partitions on 3 slots: 3 tasks in one wave each alone,
  6 in two full waves together). More queries than slots is a normal state: each query
  whose lower bound the slots cover has a share.
* :func:`reserve_slots` shares them exclusively where slots are reserved: the
  autoscaler asks for executors for each query's target (the total sums them), so each
  query's share is the part of the slots asked for it, by Flink's
  ``SlotSharingSlotAllocator`` rule (:func:`determine_parallelism`, each query one
  slot-sharing group with bounds ``[lower, upper]``); when the slots cannot cover every
  lower bound, each query whose lower bound fits runs on its lower bound, in time with
  the others, rather than on nothing.
* :func:`decide_rescale` compares a running query with its share and returns a
  :class:`RescaleDecision`: nothing to do, a *live* rescale, or a *restart*
  rescale, always with the reason.

Why Spark has two kinds of rescale (Flink has only restarts): a Spark query's
parallelism is its partition count P, fixed while it runs, but its tasks run
on whatever executors exist. When P is a whole multiple of the query's slots
the tasks run in balanced waves, so a query keeping its partitions on more or
fewer slots is rescaled *live*, with no restart at all (4 partitions on 2
slots after executors were lost, then again on 4). Only a partition count
that must change needs a *restart* rescale: stop between micro-batches,
repartition the state, start again from the same checkpoint.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from spark_adaptive.core.ports import RepartitionSupport
from spark_adaptive.core.streaming.requirements import ResourceRequirements

K = TypeVar("K", bound=Hashable)

RescaleKind = Literal["none", "live", "restart"]


def share_slots(slots: int, requirements: Mapping[K, ResourceRequirements]) -> dict[K, int]:
    """The slots each query runs on: all of the app's, within its bounds; none (no key) for
    a query whose lower bound is above them (it keeps running: Spark queues its tasks).
    Example: 5 queries [1..4] on 3 slots -> 3 each; one [4..8] on 3 slots -> none."""
    return {key: min(r.upper, slots) for key, r in requirements.items() if slots >= r.lower}


def reserve_slots(slots: int, requirements: Mapping[K, ResourceRequirements]) -> dict[K, int]:
    """Each query's exclusive share (:func:`determine_parallelism`); when the slots cannot
    cover every lower bound, each query's lower bound (if the slots reach it), shared in
    time. Example: 5 queries [1..4] on 3 slots -> 1 each."""
    shares = determine_parallelism(slots, requirements)
    if shares is not None:
        return shares
    return {key: r.lower for key, r in requirements.items() if slots >= r.lower}


def determine_parallelism(
    slots: int, requirements: Mapping[K, ResourceRequirements]
) -> dict[K, int] | None:
    """Each query's slot share, or None when the slots cannot cover every lower bound.

    Queries with the narrowest range ``upper - lower`` are served first (ties in
    the mapping's order). Each gets its lower bound plus an even part of the
    slots the remaining queries' lower bounds leave over, never above its upper
    bound. Integer division can leave slots unused, as in Flink. Example:
    A[1..4], B[2..10] on 9 slots -> A=4, B=5.
    """
    required = sum(r.lower for r in requirements.values())
    if required > slots:
        return None
    available = slots
    ordered = sorted(requirements.items(), key=lambda kv: kv[1].upper - kv[1].lower)
    shares: dict[K, int] = {}
    for index, (key, req) in enumerate(ordered):
        remaining = len(ordered) - index
        optional = (available - required) // remaining
        share = req.lower + min(req.upper - req.lower, optional)
        shares[key] = share
        required -= req.lower
        available -= share
    return shares


@dataclass(frozen=True)
class FirstStart:
    """How a query's first run starts: at ``parallelism`` partitions on ``slots`` slots
    (0 while no executor is known), and why."""

    parallelism: int
    slots: int
    reason: str
    support: RepartitionSupport | None = None
    """Whether its partition count can change, as the plan found it (None: not asked)."""


def first_start(
    *,
    configured_partitions: int,
    state_partitions: int | None,
    share: int | None,
    requirements: ResourceRequirements,
    repartition: RepartitionSupport,
    app_slots: int = 0,
) -> FirstStart:
    """The partitions a query's first run starts with, decided at once, without waiting.

    The app's ``start()`` starts the query in Spark right away, so that Spark analyses it
    and raises its own errors at once, as it does without spark-adaptive. The partition
    count is decided from what is known at that moment; the rescale rule takes over from
    there (within the submission timing, see ``Executing``). In order:

    1. State already in the checkpoint: its partitions (Spark restores them anyway).
    2. A partition count that cannot change (``repartition.possible`` false: no
       checkpoint, a source that cannot replay, local mode, ...): the configured
       partitions within the bounds, as the app would run without spark-adaptive.
    3. A slot share exists: the share (the allocator keeps it within the bounds).
    4. No executor yet (an application's executors register seconds after it starts),
       or fewer slots (``app_slots``) than the lower bound: the configured partitions
       within the bounds.
    """
    r = requirements
    configured = min(max(configured_partitions, r.lower), r.upper)
    slots = share or 0
    if state_partitions is not None:
        plan = FirstStart(state_partitions, slots,
                          f"its checkpoint holds state in {state_partitions} partitions")
    elif not repartition.possible:
        plan = FirstStart(configured, slots, f"starts at its configured {configured} "
                                             f"partitions: {repartition.reason}")
    elif share:
        plan = FirstStart(share, share, f"{share} slots available within bounds "
                                        f"[{r.lower}, {r.upper}]")
    else:
        why = ("no task slot is known yet" if not app_slots else
               f"its lower bound {r.lower} is above the app's {app_slots} slots")
        plan = FirstStart(configured, 0, f"{why}; starts at its configured {configured} "
                                         "partitions and rescales once resources settle")
    return dataclasses.replace(plan, support=repartition)


@dataclass(frozen=True)
class RescaleDecision:
    """What to do with a running query, and why.

    ``kind``: ``none`` (keep running as is), ``live`` (keep the partitions, run on
    ``target_slots`` slots from now on) or ``restart`` (restart at
    ``target_parallelism`` partitions). ``held_back`` marks a scale-up that
    ``min-parallelism-increase`` keeps from happening (yet); ``forced`` one that
    it held back until ``scaling-interval.max`` forced it.
    """

    kind: RescaleKind
    current_parallelism: int
    target_parallelism: int
    current_slots: int
    target_slots: int
    reason: str
    held_back: bool = False
    forced: bool = False

    @property
    def is_scale_up(self) -> bool:
        return self.target_parallelism > self.current_parallelism


def decide_rescale(
    *,
    parallelism: int,
    slots: int,
    share: int | None,
    requirements: ResourceRequirements,
    repartition: RepartitionSupport,
    min_parallelism_increase: int = 1,
    held_back_since: float | None = None,
    now: float = 0.0,
    scaling_interval_max: float | None = None,
    target_partitions: int | None = None,
) -> RescaleDecision:
    """The rescale rule for a query running ``parallelism`` partitions on ``slots`` slots.

    ``share`` is the slots the query runs on now (None: fewer than its lower bound). The
    target is the share, which :func:`share_slots` already keeps within the bounds. Rules,
    in order:

    1. No share: nothing to do; the query keeps running (Spark queues its tasks).
    2. Partitions within the bounds and a whole multiple of the share: the query
       runs balanced; a changed share is a live rescale, an unchanged one nothing.
    3. Otherwise the partition count must become the share: a restart rescale.
       Bounds always win: a count outside the bounds is restarted even if balanced.
    4. A scale-up within the bounds smaller than ``min_parallelism_increase`` is
       held back, unless it has been held back (since ``held_back_since``) for
       ``scaling_interval_max`` seconds already, or the query cannot restart (rule 5:
       it follows its share live, which costs no restart).
    5. A query whose partition count cannot change (``repartition.possible`` is
       false) never restarts: it keeps its partitions and follows its share live.
    6. ``target_partitions`` (the autoscaler's, within the bounds) overrides the
       partitions of a restart: a query that does not run them is restarted at them;
       one that does is never restarted away from them, it follows its share live
       (unbalanced only while the slots it asked for are coming).
    """
    p, s = parallelism, slots
    if share is None:
        return RescaleDecision("none", p, p, s, s,
                               f"its lower bound {requirements.lower} is above the app's slots; "
                               f"keeps running {p} partitions")
    if target_partitions is not None and repartition.possible:
        return _toward_target(p, s, share, requirements, target_partitions)
    in_bounds = requirements.lower <= p <= requirements.upper
    if in_bounds and p % share == 0:
        if share == s:
            return RescaleDecision("none", p, p, s, s,
                                   f"runs balanced: {p} partitions on {s} slots")
        return RescaleDecision("live", p, p, s, share,
                               f"{p} partitions run balanced on {share} slots (was {s}); no "
                               "restart needed")
    return _restart_or_follow(p, s, share, requirements, repartition, in_bounds,
                              min_parallelism_increase, held_back_since, now,
                              scaling_interval_max)


def _toward_target(p: int, s: int, share: int, requirements: ResourceRequirements,
                   target_partitions: int) -> RescaleDecision:
    """Rule 6: the autoscaler's partitions, restarted at if not running, else followed live."""
    if p != target_partitions:
        lo, hi = requirements.lower, requirements.upper
        why = (f"{p} partitions are outside the bounds [{lo}, {hi}]"
               if not lo <= p <= hi else
               f"the autoscaler asks for {target_partitions} partitions")
        return RescaleDecision(
            "restart", p, target_partitions, s, share,
            f"{why}: restart at {target_partitions} partitions on {share} slots")
    if share == s:
        return RescaleDecision("none", p, p, s, s,
                               f"runs the autoscaler's {p} partitions on {s} slots")
    return RescaleDecision("live", p, p, s, share,
                           f"the autoscaler's {p} partitions run on {share} slots (was {s}); "
                           "no restart needed")


def _restart_or_follow(p: int, s: int, share: int, requirements: ResourceRequirements,
                       repartition: RepartitionSupport, in_bounds: bool,
                       min_parallelism_increase: int, held_back_since: float | None,
                       now: float, scaling_interval_max: float | None) -> RescaleDecision:
    """Rules 3-5: partitions that must change are restarted at the share, unless the
    scale-up is held back or the query cannot restart (it follows its share live)."""
    if not in_bounds:
        why = (f"{p} partitions are outside the bounds [{requirements.lower}, "
               f"{requirements.upper}]")
    else:
        why = f"{p} partitions do not divide evenly over {share} slots"
    forced = False
    # Held back: a restart for a small gain. A query that cannot restart follows its share
    # live at no such cost (a stateless one runs its source's tasks on slots beyond ``p``).
    if (in_bounds and share > p and share - p < min_parallelism_increase
            and repartition.possible):
        waited = None if held_back_since is None else now - held_back_since
        if scaling_interval_max is None or waited is None or waited < scaling_interval_max:
            return RescaleDecision(
                "none", p, share, s, s,
                f"scale-up {p} -> {share} is below min-parallelism-increase "
                f"{min_parallelism_increase}; held back", held_back=True)
        forced = True
        why += (f"; the scale-up held back by min-parallelism-increase is forced after "
                f"scaling-interval.max {scaling_interval_max:g}s")
    if not repartition.possible:
        reason = (f"{why}, but the partition count cannot change ({repartition.reason}); keeps "
                  f"{p} partitions")
        if share == s:
            return RescaleDecision("none", p, p, s, s, reason)
        return RescaleDecision("live", p, p, s, share, f"{reason} on {share} slots")
    return RescaleDecision("restart", p, share, s, share, f"{why}: restart at {share} partitions",
                           forced=forced)
