"""One call at a time: methods of an object that threads share, run under its ``_lock``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")


def serialised(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """Run *method* holding ``self._lock`` (a ``threading.RLock``, so that methods may nest)."""

    @functools.wraps(method)
    def run(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(Callable[Concatenate[Any, P], R], run)
