"""emu doctor's real-time check agrees with what a fresh process may do."""

from __future__ import annotations

import os
import subprocess
import sys

from emu.capabilities import realtime_check


def test_the_realtime_check_matches_a_fresh_process_and_leaves_this_one_alone():
    before = os.sched_getscheduler(0)
    may = subprocess.run([sys.executable, "-c", "import os; os.sched_setscheduler(0, "
                          "os.SCHED_FIFO, os.sched_param(1))"], capture_output=True,
                         check=False).returncode == 0
    check = realtime_check()
    assert check.ok is may and check.name == "real-time workers"
    assert os.sched_getscheduler(0) == before          # probed in a child only
