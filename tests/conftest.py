"""The `shared` tier fails, rather than skips, where the full data is missing: a green run must mean it ran."""

from __future__ import annotations

import pytest
from shared_data import SHARED


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("shared") and not SHARED.is_dir():
        pytest.fail(f"this test reads the full data in {SHARED}, which is missing: the project's machines and CI "
                    "lay shared/ beside the repository (the default tier, without -m shared, needs only tests/data)",
                    pytrace=False)
