"""Adaptive Batch Scheduler: how many tasks a batch stage gets, from the bytes it reads.

Pure functions returning frozen :class:`ParallelismDecision` values; the Spark
wiring carries them out (AQE confs, RDD partition counts, file split sizes).

Rules, as in Flink's adaptive batch scheduler:

* **Stage with inputs** (:func:`decide_parallelism`): ``p = ceil(B / V)`` where
  ``B`` is the sum of the non-broadcast bytes the stage consumes and ``V`` the
  bytes one task should read (``batch.avg-data-volume-per-task``). ``p`` is
  clamped to ``[min, max]``. A stage's own limit (``vertex_max``, in Spark the
  number of shuffle partitions it reads: a task needs at least one) lowers
  ``max`` to it and, when it is below ``min``, lowers ``min`` to it as well, so
  the bounds never cross. A stage whose inputs are all broadcast (``B = 0``)
  gets ``min``.
* **Broadcast cap** (off by default, as in current Flink, which dropped it in
  FLINK-30670): Flink 1.15 charged each task's budget with the broadcast bytes
  every task reads, counting them only up to ``cap x V`` (the blog's
  ``maxBroadcastRatio``, 0.5), so ``p = ceil(B / (V - min(broadcast, cap x V)))``.
  A task then always reads at least ``(1 - cap) x V`` non-broadcast bytes.
* **Power-of-two normalization** (off by default, Flink 1.15): ``p`` is rounded
  to the closest power of two (a tie such as 3, 6 or 12 rounds up) and the
  bounds are rounded inwards to powers of two, so that ``2^N`` shuffle
  partitions split evenly by count. When no power of two lies within the
  bounds, normalization is skipped and the reason says so.
* **Source** (:func:`infer_source_parallelism`): ``ceil(input bytes / V)``
  within ``[1, upper]`` where ``upper = min(default source parallelism, max)``;
  an input of unknown size gets ``upper`` (the default source parallelism, or
  max when that is unset).

Every decision's ``reason`` is one sentence naming the numbers, for logs and the
REST API.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The blog's ``maxBroadcastRatio`` (Flink 1.15), for callers that turn the cap on.
BLOG_BROADCAST_RATIO_CAP = 0.5
#: Smallest file split :func:`split_bytes_for` returns: below this, scheduling a
#: task costs more than reading its bytes, and Spark's own open cost per file
#: (``spark.sql.files.openCostInBytes``, 4 MiB) makes finer splits meaningless.
MIN_SPLIT_BYTES = 1 << 20


@dataclass(frozen=True)
class ParallelismDecision:
    """A decided parallelism and why.

    ``consumed_bytes`` is what the rule divided: a stage's non-broadcast input
    bytes, or a source's input bytes (``None`` when unknown). ``computed`` is
    the rule's raw value before normalization and clamping (``None`` when no
    rule applied, e.g. a source of unknown size). ``lower``/``upper`` are the
    effective bounds after the stage's own limit and normalization.
    """

    parallelism: int
    consumed_bytes: int | None
    reason: str
    lower: int
    upper: int
    broadcast_bytes: int = 0
    computed: int | None = None


def format_bytes(n: int) -> str:
    """``1288490189`` -> ``"1.2 GiB"``: binary units, at most one decimal."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            text = f"{value:.1f}".removesuffix(".0") if unit != "B" else str(n)
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def decide_parallelism(
    consumed_bytes: int,
    broadcast_bytes: int = 0,
    *,
    avg_bytes_per_task: int,
    min_p: int,
    max_p: int,
    vertex_max: int | None = None,
    broadcast_ratio_cap: float | None = None,
    normalize_power_of_two: bool = False,
) -> ParallelismDecision:
    """The parallelism of a stage that consumes ``consumed_bytes`` non-broadcast bytes.

    ``broadcast_bytes`` only matters with ``broadcast_ratio_cap`` (in ``[0, 1)``).
    The result always lies within the effective bounds ``[lower, upper]`` of
    the returned decision, which are ``[min_p, max_p]`` narrowed by
    ``vertex_max`` (and by normalization). Raises ``ValueError`` on negative
    bytes, ``avg_bytes_per_task < 1``, ``min_p < 1``, ``min_p > max_p``,
    ``vertex_max < 1`` or a cap outside ``[0, 1)``.
    """
    _check_bytes(consumed_bytes, "consumed_bytes")
    _check_bytes(broadcast_bytes, "broadcast_bytes")
    _check_bounds(avg_bytes_per_task, min_p, max_p)
    if vertex_max is not None and vertex_max < 1:
        raise ValueError(f"vertex_max must be >= 1, got {vertex_max}")
    if broadcast_ratio_cap is not None and not 0.0 <= broadcast_ratio_cap < 1.0:
        raise ValueError(f"broadcast_ratio_cap must be in [0, 1), got {broadcast_ratio_cap}")

    lower, upper, notes, normalize_power_of_two = _effective_bounds(
        min_p, max_p, vertex_max, normalize_power_of_two)
    budget, budget_text = _task_budget(avg_bytes_per_task, broadcast_bytes, broadcast_ratio_cap)
    if consumed_bytes == 0:
        computed = 0
        what = (f"only broadcast input ({format_bytes(broadcast_bytes)})" if broadcast_bytes
                else "no input bytes")
        parallelism = lower
        text = f"{what}: min-parallelism {lower}"
    else:
        computed = -(-consumed_bytes // budget)
        text = f"ceil({format_bytes(consumed_bytes)} / {budget_text}) = {computed}"
        value = computed
        if normalize_power_of_two:
            value = _closest_pow2(computed)
            if value != computed:
                text += f", normalized to the power of two {value}"
        if value < lower:
            parallelism = lower
            text += f", raised to min-parallelism {lower}"
        elif value > upper:
            parallelism = upper
            text += f", clamped to max-parallelism {upper}"
        else:
            parallelism = value
            text += f", within [{lower}, {upper}]"
    if notes:
        text += " (" + "; ".join(notes) + ")"
    return ParallelismDecision(
        parallelism=parallelism,
        consumed_bytes=consumed_bytes,
        reason=text,
        broadcast_bytes=broadcast_bytes,
        computed=computed,
        lower=lower,
        upper=upper,
    )


def _effective_bounds(min_p: int, max_p: int, vertex_max: int | None, normalize: bool
                      ) -> tuple[int, int, list[str], bool]:
    """``[min_p, max_p]`` narrowed by the stage's max-parallelism and, if asked, to powers of
    two (when there is one within them: else not normalized), with notes saying so."""
    lower, upper, notes = min_p, max_p, []
    if vertex_max is not None and vertex_max < upper:
        # A stage cannot run more tasks than it has partitions to read.
        upper = vertex_max
        note = f"stage max-parallelism {vertex_max} lowered the upper bound from {max_p}"
        if vertex_max < lower:
            lower = vertex_max
            note += f" and the lower bound from {min_p}"
        notes.append(note)
    if normalize:
        n_lower, n_upper = _round_up_pow2(lower), _round_down_pow2(upper)
        if n_lower <= n_upper:
            lower, upper = n_lower, n_upper
        else:
            notes.append(f"no power of two within [{lower}, {upper}], so not normalized")
            normalize = False
    return lower, upper, notes, normalize


def _task_budget(avg_bytes_per_task: int, broadcast_bytes: int,
                 broadcast_ratio_cap: float | None) -> tuple[int, str]:
    """The bytes of non-broadcast input one task reads, and how it was found."""
    v_text = format_bytes(avg_bytes_per_task)
    if broadcast_ratio_cap is None or broadcast_bytes <= 0:
        return avg_bytes_per_task, v_text
    # Every task reads the whole broadcast input; charge it to the task's budget, but only
    # up to cap x V so that a large broadcast side cannot push the parallelism up without
    # bound.
    cap = math.ceil(avg_bytes_per_task * broadcast_ratio_cap)
    charged = min(broadcast_bytes, cap)
    budget = max(1, avg_bytes_per_task - charged)
    capped = f", capped at {broadcast_ratio_cap:g} x {v_text}" if broadcast_bytes > cap else ""
    return budget, f"({v_text} - {format_bytes(charged)} broadcast{capped})"


def infer_source_parallelism(
    input_bytes: int | None,
    *,
    avg_bytes_per_task: int,
    upper_bound: int,
    default_source_parallelism: int | None,
) -> ParallelismDecision:
    """The parallelism of a source stage (one that reads no shuffle).

    ``upper_bound`` is the stage's max parallelism (``batch.max-parallelism``
    or lower); the effective bound is ``min(default_source_parallelism,
    upper_bound)`` as in Flink's ``getParallelismInferenceUpperBound()``. With
    a known size: ``ceil(input_bytes / V)`` within ``[1, bound]``; unknown
    (``None``): the bound itself. Raises ``ValueError`` on a bound below 1 or
    negative bytes.
    """
    if upper_bound < 1:
        raise ValueError(f"upper_bound must be >= 1, got {upper_bound}")
    if default_source_parallelism is not None and default_source_parallelism < 1:
        raise ValueError(
            f"default_source_parallelism must be >= 1, got {default_source_parallelism}")
    if avg_bytes_per_task < 1:
        raise ValueError(f"avg_bytes_per_task must be >= 1, got {avg_bytes_per_task}")
    if default_source_parallelism is None:
        bound, bound_text = upper_bound, f"max-parallelism {upper_bound}"
    elif default_source_parallelism > upper_bound:
        bound = upper_bound
        bound_text = (f"max-parallelism {upper_bound} (below default source parallelism "
                      f"{default_source_parallelism})")
    else:
        bound = default_source_parallelism
        bound_text = f"default source parallelism {bound}"

    if input_bytes is None:
        return ParallelismDecision(
            parallelism=bound, consumed_bytes=None, lower=1, upper=bound,
            reason=f"source size unknown: {bound_text}")
    _check_bytes(input_bytes, "input_bytes")
    computed = -(-input_bytes // avg_bytes_per_task)
    text = f"source: ceil({format_bytes(input_bytes)} / {format_bytes(avg_bytes_per_task)}) = "
    text += str(computed)
    if computed < 1:
        parallelism, text = 1, text + ", raised to 1"
    elif computed > bound:
        parallelism, text = bound, text + f", capped at {bound_text}"
    else:
        parallelism, text = computed, text + f", within [1, {bound}]"
    return ParallelismDecision(
        parallelism=parallelism, consumed_bytes=input_bytes, reason=text,
        computed=computed, lower=1, upper=bound)


def split_bytes_for(input_bytes: int, parallelism: int) -> int:
    """Bytes per file split so that ``input_bytes`` yields about ``parallelism`` splits.

    ``ceil(input_bytes / parallelism)``, never below :data:`MIN_SPLIT_BYTES`
    (1 MiB): a small input gets fewer splits rather than splits too small to be
    worth a task. Meant for ``spark.sql.files.maxPartitionBytes``. "About",
    because Spark also adds ``spark.sql.files.openCostInBytes`` per file, never
    makes a split span two files when it can avoid it, and caps the split at
    ``max(openCost, total / spark.sql.files.minPartitionNum)``; the wiring
    should set ``minPartitionNum`` to the same parallelism so that the last cap
    does not split finer than asked.
    """
    _check_bytes(input_bytes, "input_bytes")
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    return max(MIN_SPLIT_BYTES, -(-input_bytes // parallelism))


# -- helpers -----------------------------------------------------------------------
def _check_bytes(n: int, name: str) -> None:
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")


def _check_bounds(avg_bytes_per_task: int, min_p: int, max_p: int) -> None:
    if avg_bytes_per_task < 1:
        raise ValueError(f"avg_bytes_per_task must be >= 1, got {avg_bytes_per_task}")
    if min_p < 1:
        raise ValueError(f"min_p must be >= 1, got {min_p}")
    if min_p > max_p:
        raise ValueError(f"min_p ({min_p}) must be <= max_p ({max_p})")


def _round_up_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _round_down_pow2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _closest_pow2(n: int) -> int:
    """The closest power of two; the midpoint between two rounds up (3 -> 4, 6 -> 8)."""
    if n <= 1:
        return 1
    down, up = _round_down_pow2(n), _round_up_pow2(n)
    return down if n < (down + up) // 2 else up
