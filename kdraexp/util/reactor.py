"""The reactor the exporter runs on, typed by the interfaces it uses (synapse's ISynapseReactor).

The one object passed down from the app: clocks, TCP and adopted sockets for the listeners and
the API client, processes for exec plugins, threads for file parsing, and the core for startup
and shutdown.
"""

from __future__ import annotations

from typing import Any, cast

from twisted.internet.interfaces import (
    IReactorCore,
    IReactorPluggableNameResolver,
    IReactorProcess,
    IReactorSocket,
    IReactorTCP,
    IReactorThreads,
    IReactorTime,
    IReactorUNIX,
)


class IKdraReactor(
    IReactorCore,
    IReactorTime,
    IReactorTCP,
    IReactorUNIX,
    IReactorSocket,
    IReactorProcess,
    IReactorThreads,
    IReactorPluggableNameResolver,
):
    """Every reactor interface the exporter uses."""


def installed() -> IKdraReactor:
    """The process's reactor (twistd, or the ``kdraexp`` command, installed it already)."""
    from twisted.internet import reactor

    return cast(IKdraReactor, reactor)


def thread_pool(clock: Any) -> Any:
    """``getThreadPool`` of the reactor (the pool made when first asked for), or None.

    None for a clock without threads (a test's ``Clock``): the work is then done where it is.
    """
    return clock.getThreadPool if IReactorThreads.providedBy(clock) else None
