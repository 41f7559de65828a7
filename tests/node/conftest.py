"""The node for the session: started once, stopped and undone whatever the tests did.

Its binaries and images are built while the tests are collected (tests/tools.py); a host that
cannot run a node (not root, no memory cgroup) skips these tests with one line saying why, and
fails them in CI.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import tools
from tests.node import host
from tests.node.cluster import Node, start_node


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    """The cluster of one node; the host as it was once the session ends."""
    binaries, images = tools.node_binaries(), tools.node_images()
    with host.exclusive():
        host.prepare()
        try:
            started = start_node(binaries, images)
            try:
                yield started
            finally:
                started.stop()
        finally:
            host.restore()
