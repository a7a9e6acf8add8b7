"""How many tasks read a file source of an RDD job: Flink's dynamic source parallelism inference.

Flink decides a source's parallelism from the bytes it will read, ``ceil(bytes
/ V)`` within ``min(default source parallelism, max-parallelism)``
(:func:`~.batch_decider.infer_source_parallelism`). Spark's RDD file sources
(``sc.textFile``) instead make one split per file block (32 MiB on the local
file system, 128 MiB on HDFS) and at least one per file: a directory of 200
small files, which is what a Spark job with 200 shuffle partitions writes,
becomes 200 tasks however little it holds, and every shuffle after it
inherits 200 partitions by default.

:func:`decide_source` is the rule, with the same lower bound as the shuffle
side: with ``batch.use-held-slots`` at least one task per held slot as long as
each reads :func:`~.batch_shuffle.min_task_bytes`. :func:`plan_source` then
says how the input format's splits are made into that many tasks: the
splits are asked for with ``minPartitions = p`` (which makes them at most
``bytes / p``, never above a block), and when that still gives more than
``p`` (small files, or blocks smaller than ``bytes / p``) neighbouring splits
are grouped into ``p`` tasks without a shuffle (Spark's ``coalesce``), but only
when no split has preferred locations: Spark's coalescer groups splits in order
only then, and by host otherwise, which would change the order of the lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_adaptive.core.batch.decider import ParallelismDecision, infer_source_parallelism
from spark_adaptive.core.batch.shuffle import slot_floor


@dataclass(frozen=True)
class SourcePlan:
    """What one RDD file source was decided: ``parallelism`` tasks over ``splits`` splits."""

    path: str
    input_bytes: int | None
    parallelism: int
    splits: int
    reason: str

    @property
    def coalesced(self) -> bool:
        """Whether neighbouring splits are grouped (``splits > parallelism``)."""
        return self.splits > self.parallelism

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "inputBytes": self.input_bytes,
                "parallelism": self.parallelism, "splits": self.splits,
                "coalesced": self.coalesced, "reason": self.reason}


def decide_source(input_bytes: int, *, avg_bytes_per_task: int, min_p: int, max_p: int,
                  default_source_parallelism: int | None, slots: int = 1
                  ) -> ParallelismDecision:
    """The tasks of a source that reads ``input_bytes``.

    Flink's inference (:func:`~.batch_decider.infer_source_parallelism`) bounded
    by ``min(default_source_parallelism, max_p)``, then raised to ``min_p`` and
    to :func:`~.batch_shuffle.slot_floor` (held slots, each task reading at
    least ``min_task_bytes``), never above that bound. Raises ``ValueError`` on
    negative bytes or bounds below 1.
    """
    if min_p < 1 or max_p < min_p:
        raise ValueError(f"need 1 <= min_p <= max_p, got [{min_p}, {max_p}]")
    d = infer_source_parallelism(input_bytes, avg_bytes_per_task=avg_bytes_per_task,
                                 upper_bound=max_p,
                                 default_source_parallelism=default_source_parallelism)
    floor = slot_floor(input_bytes, slots, avg_bytes_per_task)
    lower = min(max(min_p, floor), d.upper)
    if d.parallelism >= lower:
        return d
    why = f"{slots} task slots held" if floor > min_p else f"min-parallelism {min_p}"
    return ParallelismDecision(
        parallelism=lower, consumed_bytes=d.consumed_bytes, computed=d.computed,
        lower=lower, upper=d.upper, reason=f"{d.reason}; raised to {lower}: {why}")


def plan_source(path: str, input_bytes: int, decision: ParallelismDecision,
                splits: int, located: bool | None = False) -> SourcePlan:
    """The plan of a source whose input format made ``splits`` splits when asked for
    ``decision.parallelism``: group them into that many tasks if there are more,
    else run one task per split (a split is never cut finer than the format cuts it).

    ``located``: whether a split has preferred locations (HDFS blocks), None when that is
    not known. Spark's ``coalesce`` then groups splits by host, not by position, and the
    lines would not come in ``sc.textFile``'s order, so the splits are kept as they are
    unless ``located`` is False."""
    if splits < 0:
        raise ValueError(f"splits must be >= 0, got {splits}")
    p = decision.parallelism
    if splits > p and located is not False:
        why = ("a split has preferred locations" if located
               else "whether a split has preferred locations is not known")
        how, tasks = (f"{splits} splits kept, one task each: {why}, and grouping them would "
                      f"follow their hosts, not their order, so the lines would not come in "
                      f"sc.textFile's order", splits)
    elif splits > p:
        how, tasks = f"{splits} splits grouped into {p} tasks", p
    elif splits == p:
        how, tasks = f"{splits} splits", p
    else:
        how, tasks = (f"{splits} splits, the fewest the input format makes "
                      f"(it cuts no finer than a block and never joins files)", splits)
    return SourcePlan(path, input_bytes, tasks, splits, f"{decision.reason}; {how}")


def split_paths(text: str) -> list[str]:
    """The paths of a comma-separated path list, as Hadoop's ``FileInputFormat`` reads it:
    a comma inside a glob's braces (``{a,b}``) does not separate paths."""
    paths, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        elif ch == "," and not depth:
            paths.append(text[start:i])
            start = i + 1
    paths.append(text[start:])
    return [p for p in paths if p]
