"""Run the integration tests in two lanes side by side: ``lanes.py [PYTEST_ARGS]``.

The tests marked ``waiting`` (tests/integration/conftest.py) spend their minutes
waiting on a load profile's or a fault schedule's clock, with little work on the
cores; they run one after another in one lane while every other integration test
runs one after another in the other. The other lane's output is shown as it comes;
the waiting lane's is written to ``LANE_LOG`` and shown when it ends. The exit status is
pytest's: 0 when both lanes passed (a lane a selection left empty counts as passed).

Both lanes get the same arguments; a ``-m EXPR`` among them selects within each lane.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANE_LOG = ROOT / ".pytest_cache" / "waiting-lane.log"
NO_TESTS = 5  # pytest's exit status when a selection has no test


def _lane_args(args: list[str], lane: str) -> list[str]:
    """The arguments with the lane's marker expression in place of, or joined to, ``-m``."""
    out, expr, i = [], None, 0
    while i < len(args):
        if args[i] == "-m" and i + 1 < len(args):
            expr, i = args[i + 1], i + 2
        elif args[i].startswith("-m") and len(args[i]) > 2:
            expr, i = args[i][2:], i + 1
        else:
            out.append(args[i])
            i += 1
    return [*out, "-m", f"{lane} and ({expr})" if expr else lane]


def _status(code: int) -> int:
    return 0 if code == NO_TESTS else code


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", "tests/integration"]
    LANE_LOG.parent.mkdir(exist_ok=True)
    start = time.monotonic()
    with LANE_LOG.open("w") as log:
        waiting = subprocess.Popen([*pytest, *_lane_args(args, "waiting")], cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            print(f"the waiting lane runs beside this one; its output: {LANE_LOG}", flush=True)
            working = subprocess.call([*pytest, *_lane_args(args, "not waiting")], cwd=ROOT)
            if waiting.poll() is None:
                print("this lane has ended; waiting for the waiting lane", flush=True)
            waiting_code = waiting.wait()
        finally:
            if waiting.poll() is None:
                os.killpg(waiting.pid, signal.SIGTERM)
                waiting.wait()
    print(f"\n---- the waiting lane (exit status {waiting_code}) ----", flush=True)
    sys.stdout.write(LANE_LOG.read_text())
    print(f"---- both lanes ended in {time.monotonic() - start:.0f} s ----", flush=True)
    if working == NO_TESTS and waiting_code == NO_TESTS:
        return NO_TESTS
    return _status(working) or _status(waiting_code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
