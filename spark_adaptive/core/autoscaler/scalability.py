"""Observed scalability: how a query's rate per slot changes with its slot count.

Adding slots rarely adds capacity linearly: more slots mean more shuffle
blocks, more state-store instances to commit, more contention for the
source. A policy that assumes linear scaling under-shoots a scale-up and
needs another step (Flink's operator assumes linearity unless
``observed-scalability`` is on; DS2's model needs up to three steps).

Model
-----
Time per row on one slot grows linearly with the slots in use::

    1 / r(s) = a + b * s          (b >= 0)

This is the contention term of the Universal Scalability Law with its
crosstalk term left out; ``b = 0`` is linear scaling. It is fitted by least
squares to the window-averaged rate per slot at each slot count the query ran
on at its current partition count (the latest average per slot count, the
eight most recent slot counts; a restart at another partition count starts
over, since tasks per slot change the rate per slot too). The
fit is used only for its *shape*: predictions are anchored at the rate
measured now, so a drift of the absolute rate (the data changed) costs
nothing, and an old observation only bends the curve.

The fit is used once ``min_observations`` distinct slot counts, spanning at
least :data:`MIN_SPREAD` (largest / smallest), have been seen. The predicted
ratio ``r(new) / r(now)`` is kept within ``[coefficient_min, 1 /
coefficient_min]`` (Flink's ``observed-scalability.coefficient-min``), so a
bad fit can never promise or fear more than that.
"""

from __future__ import annotations

import math

MAX_POINTS = 8
"""Slot counts remembered (the most recently observed)."""

REFIT_CHANGE = 0.01
"""A slot count's rate must move by this fraction before the fit is computed again."""

MIN_SPREAD = 1.25
"""Largest over smallest observed slot count before the fit's slope is trusted."""


class ScalabilityModel:
    """Per-query observations of rate per slot by slot count, and the fit over them."""

    def __init__(self, min_observations: int, coefficient_min: float, enabled: bool = True):
        self.enabled = enabled
        self.min_observations = min_observations
        self.coefficient_min = coefficient_min
        self._points: dict[float, tuple[float, float]] = {}  # slots -> (rate, time)
        self._partitions = 0
        self._fit: tuple[float, float] | None = None
        self._dirty = False

    def record(self, slots: float, rate_per_slot: float, time: float,
               partitions: int = 0) -> None:
        """The window-averaged rate per slot while the query ran on ``slots`` effective slots
        with ``partitions`` partitions. Observations at another partition count are dropped:
        the rate per slot also depends on the tasks each slot runs per batch (per-task costs),
        which a restart changes, and mixing them would read that as scaling."""
        if not (slots > 0 and rate_per_slot > 0 and math.isfinite(rate_per_slot)):
            return
        if partitions != self._partitions:
            self._points.clear()
            self._partitions = partitions
            self._dirty = True
        key = round(slots, 3)
        old = self._points.get(key)
        self._points[key] = (rate_per_slot, time)
        if old is None:
            if len(self._points) > MAX_POINTS:
                oldest = min(self._points, key=lambda k: self._points[k][1])
                del self._points[oldest]
            self._dirty = True
        elif abs(rate_per_slot - old[0]) > REFIT_CHANGE * old[0]:
            self._dirty = True  # smaller changes would move the fit by less than its noise

    @property
    def observations(self) -> int:
        return len(self._points)

    def fit(self) -> tuple[float, float] | None:
        """``(a, b)`` of ``1/r(s) = a + b s``, or None while it is not to be used."""
        if not self.enabled:
            return None
        if self._dirty:
            self._fit = self._compute()
            self._dirty = False
        return self._fit

    def _compute(self) -> tuple[float, float] | None:
        pts = self._points
        if len(pts) < self.min_observations:
            return None
        xs = list(pts)
        if max(xs) / min(xs) < MIN_SPREAD:
            return None
        ys = [1.0 / pts[x][0] for x in xs]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx <= 0:
            return None
        b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        b = max(0.0, b)  # never extrapolate super-linear scaling
        a = max(0.0, my - b * mx)
        if a == 0.0 and b == 0.0:
            return None
        return a, b

    # -- predictions -------------------------------------------------------------------
    def ratio(self, s_now: float, s_new: float) -> float:
        """Predicted ``r(s_new) / r(s_now)``, within the coefficient bounds."""
        f = self.fit()
        if f is None or s_now <= 0 or s_new <= 0:
            return 1.0
        a, b = f
        raw = (a + b * s_now) / (a + b * s_new)
        lo = self.coefficient_min
        return min(max(raw, lo), 1.0 / lo)

    def capacity(self, slots: float, s_now: float, rate_now: float) -> float:
        """Rows per second ``slots`` effective slots would process, anchored at now."""
        return slots * rate_now * self.ratio(s_now, slots)

    def slots_for(self, capacity: float, s_now: float, rate_now: float) -> float:
        """Effective slots (continuous) whose predicted capacity is ``capacity`` rows/s."""
        if capacity <= 0:
            return 0.0
        linear = capacity / rate_now
        f = self.fit()
        if f is None:
            return linear
        a, b = f
        k = rate_now * (a + b * s_now)
        lo = self.coefficient_min
        floor_slots = capacity / (rate_now * lo)  # where the clamp at coefficient_min binds
        if k - capacity * b <= 0:
            return floor_slots
        s = capacity * a / (k - capacity * b)
        if s <= 0:
            # a == 0: the fit's total throughput is flat in slots, so a capacity below the
            # current one is reached only where the clamp at 1 / coefficient_min binds
            # (ratio() cannot be asked about 0 slots).
            return capacity * lo / rate_now
        r = self.ratio(s_now, s)
        # The clamp may bind at s; then the capacity is s * rate_now * r with r fixed.
        return capacity / (rate_now * r) if r in (lo, 1.0 / lo) else s

    def clamp(self, need: float, s_now: float, rate_now: float, lo: float, hi: float) -> float:
        """``need`` (rows/s) limited to what ``lo`` .. ``hi`` effective slots would process."""
        x = self.slots_for(need, s_now, rate_now)
        if x > hi:
            return self.capacity(hi, s_now, rate_now)
        if x < lo:
            return self.capacity(lo, s_now, rate_now)
        return need

    def coefficient(self, s_now: float, s_new: float) -> float:
        """The ratio reported with a decision (1.0 while scaling is assumed linear)."""
        return self.ratio(s_now, s_new)
