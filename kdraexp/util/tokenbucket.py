"""A token bucket: at most so many actions a second, with a burst, on a clock."""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime


class TokenBucket:
    """Holds up to *burst* tokens, refilled at *rate* a second; an action takes one.

    Over any one second at most *burst* plus *rate* actions are allowed.
    """

    def __init__(self, rate: float, burst: int, clock: IReactorTime) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock.seconds()

    def take(self) -> bool:
        """Take a token if there is one: whether the action may go ahead."""
        now = self._clock.seconds()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
