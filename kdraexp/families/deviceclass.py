"""DeviceClass families: the classes, and what each costs by its ``hourly-cost`` annotation."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

import msgspec

from kdraexp.cel.classindex import ClassEntry
from kdraexp.dra import wire
from kdraexp.dra.listing import DEVICE_CLASSES
from kdraexp.families.context import Context
from kdraexp.families.family import Row, Stability, family
from kdraexp.families.kind import KindSpec
from kdraexp.families.metadata import Named, metadata_families

HOURLY_COST_ANNOTATION = "hourly-cost"

# Go's unicode.IsSpace set, which strings.TrimSpace trims.  Python's str.strip() also trims
# U+001C..U+001F, which Go keeps, so the set is spelled out.
_GO_WHITESPACE = (
    "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
_ANNOTATIONS = msgspec.json.Decoder(wire.ClassAnnotations | None)


class HourlyCostError(ValueError):
    """An ``hourly-cost`` annotation that is not a non-negative decimal."""


def parse_hourly_cost(raw: str) -> float:
    """Parse an ``hourly-cost`` annotation: a non-negative decimal with a dot separator.

    :raises HourlyCostError: with the original's message, for anything else.
    """
    text = raw.strip(_GO_WHITESPACE)
    if not _DECIMAL.fullmatch(text):
        raise HourlyCostError("expected a non-negative decimal with a dot separator")
    cost = float(text)
    if not math.isfinite(cost):
        raise HourlyCostError("hourly cost is outside the finite float64 range")
    return cost


class ClassView:
    """One DeviceClass, read once for all its families and for the other kinds."""

    __slots__ = ("context", "cost", "entry", "meta", "name", "spec")

    def __init__(self, item: wire.DeviceClass, context: Context) -> None:
        self.context = context
        self.meta = item.metadata or wire.ObjectMeta()
        self.spec = item.spec or wire.ClassSpec()
        self.name = self.meta.name or ""
        self.cost = None
        raw = self._hourly_cost(context)
        if raw is not None:
            try:
                self.cost = parse_hourly_cost(raw)
            except HourlyCostError as error:
                context.problems.add(
                    DEVICE_CLASSES.plural,
                    HOURLY_COST_ANNOTATION,
                    f"Error parsing '{HOURLY_COST_ANNOTATION}' ({raw}) on DeviceClass "
                    f"{self.name}: {error}",
                )
        expressions = tuple(
            (selector.cel.expression or "") if selector.cel else ""
            for selector in self.spec.selectors or ()
        )
        extended = self.spec.extended_resource_name
        self.entry = ClassEntry(
            self.name, expressions, self.cost, extended if isinstance(extended, str) else ""
        )

    def _hourly_cost(self, context: Context) -> str | None:
        """The ``hourly-cost`` annotation, the only one decoded; None if absent or unreadable."""
        if not self.meta.annotations:
            return None
        try:
            found = _ANNOTATIONS.decode(self.meta.annotations)
            return found.hourly_cost if found is not None else None
        except msgspec.DecodeError as error:
            context.problems.add(
                DEVICE_CLASSES.plural,
                HOURLY_COST_ANNOTATION,
                f"Error parsing '{HOURLY_COST_ANNOTATION}' on DeviceClass {self.name}: {error}",
            )
            return None


@family(
    "kube_deviceclass_hourly_cost",
    "Hourly cost of the DeviceClass resource from its annotations.",
    ("deviceclass_name",),
    DEVICE_CLASSES,
    "metadata.annotations.hourly-cost",
    stability=Stability.STABLE,
    original=True,
)
def class_hourly_cost(view: ClassView) -> Iterator[Row]:
    """The annotation's value, when it is a valid cost."""
    if view.cost is not None:
        yield (view.name, view.cost)


@family(
    "kube_deviceclass_info",
    "Information about a DeviceClass.",
    ("deviceclass_name", "extended_resource_name"),
    DEVICE_CLASSES,
    "metadata.name, spec.extendedResourceName",
)
def class_info(view: ClassView) -> Iterator[Row]:
    """One row per class."""
    extended = view.spec.extended_resource_name
    yield (view.name, extended if isinstance(extended, str) else "", 1.0)


@family(
    "kube_deviceclass_created",
    "Unix creation timestamp of a DeviceClass.",
    ("deviceclass_name",),
    DEVICE_CLASSES,
    "metadata.creationTimestamp",
)
def class_created(view: ClassView) -> Iterator[Row]:
    """The creation time in seconds."""
    created = view.context.created(DEVICE_CLASSES.plural, view.meta, f"DeviceClass {view.name}")
    if created is None:
        return
    yield (view.name, created)


def _named(view: ClassView) -> Named:
    return (view.name,), view.meta


class_labels, class_annotations = metadata_families(DEVICE_CLASSES, ("deviceclass_name",), _named)

FAMILIES = (class_hourly_cost, class_info, class_created, class_labels, class_annotations)


def _entry(view: ClassView, written: bool) -> ClassEntry:
    return view.entry


KIND = KindSpec(DEVICE_CLASSES, ClassView, _entry, first=True, classes=True)
"""Listed first: devices are matched with the classes, claims priced by them."""
