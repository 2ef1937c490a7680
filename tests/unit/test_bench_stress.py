"""bench.stress's counting: it sees a descendant process and refuses unknown kinds
(the stress run itself takes many minutes and is a benchmark, not a test)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.stress import _descendants, parse_kinds
from core.errors import ParameterError


def test_a_running_descendant_is_counted():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in _descendants(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_kinds_are_checked():
    assert parse_kinds("incast, ecmp") == ["incast", "ecmp"]
    for bad in ("", "incast,nope", ","):
        with pytest.raises(ParameterError):
            parse_kinds(bad)

