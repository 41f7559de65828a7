"""Values left out of the metrics because they could not be read, and values cut short.

A capacity that is not a quantity, a taint with an unknown effect, a DeviceClass selector that is
not CEL: each costs that one value, is counted by resource and field in
``kube_dra_exporter_invalid_values_total`` and logged once while it lasts.  The rest of the scrape
is unaffected.  A label or annotation value written cut short is counted apart, in
``kube_dra_exporter_truncated_values_total``, and logged alike.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Problem:
    """One value that could not be read: where it is and why, in one line."""

    resource: str
    """The list it came from (``resourceslices``...)."""
    field: str
    """The field, as the API names it (``capacity``, ``taints``, ``hourly-cost``...)."""
    message: str
    """Names the object and the value; no API server text, so it is safe to log."""
    cut_short: bool = False
    """Written, but cut short: not a value left out."""
    count: int = 1
    """The values it stands for (an object's labels past the most written are one problem)."""


class Problems:
    """The problems one collection found, in the order found."""

    __slots__ = ("found",)

    def __init__(self) -> None:
        self.found: list[Problem] = []

    def add(self, resource: str, field: str, message: str) -> None:
        """Record one value left out."""
        self.found.append(Problem(resource, field, message))

    def add_cut_short(self, resource: str, field: str, message: str, count: int = 1) -> None:
        """Record one value written cut short (or *count* of them, for one message)."""
        self.found.append(Problem(resource, field, message, cut_short=True, count=count))
