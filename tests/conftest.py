"""Fixtures: ``shared_data`` skips a test when ../shared/data is absent. Under CI (``CI`` set) hypothesis draws the
same examples every run (``derandomize``), so a landing is not decided by the examples of the day, and skips the
explain phase, which traces every line of every example; run locally, it explores new ones and keeps those that
fail in ``.hypothesis/``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from tests.helpers import SHARED_DATA

settings.register_profile("ci", derandomize=True, database=None,
                          phases=[phase for phase in Phase if phase != Phase.explain])  # (it traces every line)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA
