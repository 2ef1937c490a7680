"""Fixtures of the unit tests that check compiled code against its Python twin."""

from __future__ import annotations

import pytest

from core.errors import CapabilityError
from engine.tx import TxLib


@pytest.fixture(scope="module")
def tx_lib() -> TxLib:
    """roce_tx.c's functions (the sender's and DCQCN's C twins), or a skip without clang."""
    try:
        return TxLib()
    except (CapabilityError, OSError) as e:
        pytest.skip(f"no compiler for roce_tx.c: {e}")
