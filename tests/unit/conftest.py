from __future__ import annotations

import pytest

from spark_adaptive.core.clock import VirtualTime


@pytest.fixture
def vt() -> VirtualTime:
    return VirtualTime()
