"""The `shared` tier fails, rather than skips, where the full data is missing: a green run must mean it ran.
Also the `one_thread` fixture the tests of tiny models use, and one torch thread per pytest-xdist worker
(the default `-n auto` runs one worker per core: more threads would only contend)."""

from __future__ import annotations

import os

import pytest
from shared_data import SHARED


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("shared") and not SHARED.is_dir():
        pytest.fail(f"this test reads the full data in {SHARED}, which is missing: the project's machines and CI "
                    "lay shared/ beside the repository (the default tier, without -m shared, needs only tests/data)",
                    pytrace=False)


@pytest.fixture
def one_thread():
    """Tiny models on 2 shared cores: a second torch thread only adds spin-waiting, and in-process runs then
    match subprocesses started with OMP_NUM_THREADS=1 bit for bit (same reduction order)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
