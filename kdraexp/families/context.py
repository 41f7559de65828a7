"""What the families read besides the object: the options, the classes, where problems go."""

from __future__ import annotations

import attrs
import msgspec

from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra import gated, nodeselector, wire
from kdraexp.dra.nodeselector import NodeSelector
from kdraexp.dra.problems import Problems
from kdraexp.families.options import FamilyOptions


@attrs.define
class Context:
    """The options and classes an object is read with, and what could not be read of it."""

    options: FamilyOptions
    problems: Problems = attrs.Factory(Problems)
    classes: ClassIndex = attrs.Factory(ClassIndex)
    class_errors: list[tuple[str, str]] = attrs.Factory(list)
    """(class, reason) for each device whose match with a class could not be decided."""

    def node_selector(self, raw: msgspec.Raw, resource: str, where: str) -> NodeSelector | None:
        """A node selector, or None: absent, or unreadable (the problem reported)."""
        try:
            return nodeselector.read(raw)
        except gated.Unreadable as error:
            self.problems.add(resource, "nodeSelector", f"{where} nodeSelector: {error}")
            return None

    def created(self, resource: str, meta: wire.ObjectMeta, where: str) -> float | None:
        """The object's creation time in seconds; None, the problem reported, if unreadable."""
        try:
            return gated.timestamp(meta.creation_timestamp)
        except gated.Unreadable as error:
            self.problems.add(
                resource, "metadata.creationTimestamp", f"{where} creationTimestamp: {error}"
            )
            return None
