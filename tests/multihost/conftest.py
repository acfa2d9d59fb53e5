"""The multihost tier's fixtures (the hosts themselves: hosts.py)."""

from __future__ import annotations

import pytest
from hosts import two_hosts as make_two_hosts


@pytest.fixture
def two_hosts():
    with make_two_hosts() as hosts:
        yield hosts
