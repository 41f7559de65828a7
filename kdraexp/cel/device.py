"""A device of a slice as selectors read it: its driver, attributes and capacities in CEL values.

Implements :class:`kdraexp.cel.matching.DeviceFields` over the decoded wire device.  The values
stay undecoded JSON until a selector reads them; equal JSON is one cached CEL value, since
devices of one model repeat the same attributes.  The families' device view extends it with
what they read besides.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from kdraexp.cel.values import ABSENT, attribute_value, quantity_value
from kdraexp.dra.wire import Device, Wire


class CapacityValue(Wire):
    """A device capacity: a Kubernetes quantity, and how requests consume it."""

    value: Any = None
    request_policy: Any = msgspec.field(default=None, name="requestPolicy")


CAPACITY_JSON = msgspec.json.Decoder(CapacityValue | None)
_ATTRIBUTE_JSON = msgspec.json.Decoder(dict[str, Any] | None)


@functools.lru_cache(maxsize=4096)
def attribute_json(raw: bytes) -> dict[str, Any] | None:
    """An attribute's ``{"<kind>": value}`` map (cached: values repeat across devices)."""
    try:
        return _ATTRIBUTE_JSON.decode(raw)
    except msgspec.DecodeError:
        return None


class SelectorView:
    """One device with only what selectors read."""

    __slots__ = (
        "allow_multiple_allocations",
        "attributes",
        "capacity_raw",
        "driver",
        "name",
        "wire",
    )

    wire: Device
    name: str
    driver: str
    attributes: dict[str, msgspec.Raw]
    capacity_raw: dict[str, msgspec.Raw]
    allow_multiple_allocations: bool

    @classmethod
    def for_selectors(cls, device: Device, driver: str) -> SelectorView:
        """The device with only what selectors read.

        For claims' own selectors, evaluated on devices read again from their slice's JSON: a
        whole view would cost twice the decoding.
        """
        made = cls.__new__(cls)
        made.wire = device
        made.name = device.name or ""
        made.driver = driver
        made.attributes = device.attributes or {}
        made.capacity_raw = device.capacity or {}
        made.allow_multiple_allocations = device.allow_multiple_allocations is True
        return made

    def _key(self, domain: str, name: str) -> tuple[str, ...]:
        return keys_of(self.driver, domain, name)

    def attribute(self, domain: str, name: str) -> Any:
        """The attribute as a CEL value, or ABSENT."""
        return self._one(self.attributes, domain, name, _cel_attribute)

    def capacity(self, domain: str, name: str) -> Any:
        """The capacity as a CEL quantity, or ABSENT."""
        return self._one(self.capacity_raw, domain, name, _cel_capacity)

    def _one(self, values: dict[str, msgspec.Raw], domain: str, name: str, read: Any) -> Any:
        for key in self._key(domain, name):
            raw = values.get(key)
            if raw is not None:
                return read(bytes(raw))
        return ABSENT

    def attribute_domain(self, domain: str) -> dict[str, Any]:
        """Every attribute of *domain*, by name."""
        return self._domain(self.attributes, domain, _cel_attribute)

    def capacity_domain(self, domain: str) -> dict[str, Any]:
        """Every capacity of *domain*, by name."""
        return self._domain(self.capacity_raw, domain, _cel_capacity)

    def _domain(self, values: dict[str, msgspec.Raw], domain: str, read: Any) -> dict[str, Any]:
        found = {}
        for key, raw in values.items():
            key_domain, _, name = key.rpartition("/")
            if (key_domain or self.driver) == domain:
                value = read(bytes(raw))
                if value is not ABSENT:
                    found[name] = value
        return found

    def domains(self) -> set[str]:
        """The domains of the device's attributes and capacities."""
        keys = [*self.attributes, *self.capacity_raw]
        return {key.rpartition("/")[0] or self.driver for key in keys} | {self.driver}

    def projection(self, path: tuple[str, ...]) -> Any:
        """The undecoded value at *path*: equal JSON, equal value."""
        if len(path) == 1:
            return self.driver if path[0] == "driver" else self.allow_multiple_allocations
        values = self.attributes if path[0] == "attributes" else self.capacity_raw
        if len(path) == 3:
            for key in self._key(path[1], path[2]):
                raw = values.get(key)
                if raw is not None:
                    return bytes(raw)
            return None
        return tuple(
            sorted(
                (key, bytes(raw))
                for key, raw in values.items()
                if (key.rpartition("/")[0] or self.driver) == path[1]
            )
        )

    @staticmethod
    def reader(paths: tuple[tuple[str, ...], ...], driver: str) -> Callable[[Device], Any]:
        """What a device of *driver*, as decoded, reads at *paths*: equal for devices alike.

        Made once for many devices of one driver, read without a view each.  A single attribute
        or capacity (what most selectors read) is looked up directly, its keys worked out once;
        else the projections of a view.
        """
        if len(paths) == 1 and len(paths[0]) == 3:
            kind, domain, name = paths[0]
            keys = keys_of(driver, domain, name)
            attributes = kind == "attributes"

            def one(device: Device) -> Any:
                values = (device.attributes if attributes else device.capacity) or _NO_VALUES
                for key in keys:
                    raw = values.get(key)
                    if raw is not None:
                        return bytes(raw)
                return None

            return one

        def projections(device: Device) -> Any:
            view = SelectorView.for_selectors(device, driver)
            return tuple([view.projection(path) for path in paths])

        return projections


_NO_VALUES: Mapping[str, msgspec.Raw] = MappingProxyType({})
"""A device without attributes or capacities (one read-only mapping for all)."""


def keys_of(driver: str, domain: str, name: str) -> tuple[str, ...]:
    """Where a device of *driver* keeps *domain*'s *name*: bare too in the driver's own domain."""
    return (name, f"{domain}/{name}") if domain == driver else (f"{domain}/{name}",)


@functools.lru_cache(maxsize=4096)
def _cel_attribute(raw: bytes) -> Any:
    value = attribute_json(raw)
    if not value or len(value) != 1:
        return ABSENT
    ((kind, inner),) = value.items()
    return attribute_value(kind, inner)


@functools.lru_cache(maxsize=1024)
def _cel_capacity(raw: bytes) -> Any:
    try:
        capacity = CAPACITY_JSON.decode(raw)
    except msgspec.ValidationError:
        return ABSENT
    value = capacity.value if capacity else None
    if not isinstance(value, str):
        return ABSENT
    try:
        return quantity_value(value)
    except ValueError:
        return ABSENT
