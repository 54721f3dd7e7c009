"""Fixtures: ``shared_data`` skips a test when ../shared/data is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
