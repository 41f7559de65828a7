"""A slice's devices read again from its JSON for claims' own selectors: only what they read.

Pending requests' selectors are evaluated on slices read again from the JSON the collection
kept.  Most selectors read one or two attributes or capacities, and a device publishes a dozen:
decoding each device whole costs three times decoding those alone.  So where every path asked
names one attribute or capacity, the slice is decoded into a shape made for those paths
(:func:`msgspec.defstruct`, its fields the keys a device may carry them under), and decoded
whole only when a device is to be evaluated, once per slice at most.  Either way a device reads
exactly what :meth:`.DeviceView.reader` reads: devices alike by one are alike by the other.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import attrs
import msgspec

from kdraexp.dra import wire
from kdraexp.dra.devicecel import Path
from kdraexp.families.resourceslice import DeviceView, keys_of

_SLICE = msgspec.json.Decoder(wire.ResourceSlice)
_ABSENT = msgspec.Raw()
SHAPES = 64
"""Decoders kept, one per set of paths and driver: pending selectors are few and kept alike."""


@attrs.frozen
class Read:
    """A slice's devices, what each reads per set of paths asked, and the view of one."""

    devices: Sequence[Any]
    """Each with a ``name``: the slice's devices, decoded whole or in part."""
    readers: list[Callable[[Any], Hashable]]
    """Per set of paths asked, what a device reads there."""
    view: Callable[[Any], DeviceView]
    """The device as selectors are evaluated on it."""


class SliceReader:
    """Reads slices again for sets of paths; the decoders made are kept (:data:`SHAPES`)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, tuple[tuple[Path, ...] | None, ...]], _Shape | None] = {}

    def read(self, source: bytes, driver: str, asked: list[tuple[Path, ...] | None]) -> Read:
        """The slice of *driver* in *source* (compressed JSON), for each set of paths *asked*.

        A set is None when its selectors read the whole device: no device reads alike another.
        """
        key = (driver, tuple(asked))
        if key not in self._shapes:
            while len(self._shapes) >= SHAPES:
                del self._shapes[next(iter(self._shapes))]
            self._shapes[key] = _Shape.make(driver, asked)
        shape = self._shapes[key]
        raw = zlib.decompress(source)
        if shape is None:
            spec = _SLICE.decode(raw).spec or wire.SliceSpec()
            devices = spec.devices or []
            readers = [
                _apart if paths is None else DeviceView.reader(paths, driver) for paths in asked
            ]
            return Read(devices, readers, lambda device: DeviceView.for_selectors(device, driver))
        slim = shape.decoder.decode(raw).spec
        return Read(slim.devices or [] if slim else [], shape.readers, _Whole(raw, driver).view)


def _apart(device: Any) -> Hashable:
    """A device read whole reads alike no other (a new key, kept alive where it is kept)."""
    return object()


@attrs.frozen
class _Shape:
    """A decoder reading only some attributes and capacities, and how a device reads them."""

    decoder: msgspec.json.Decoder[Any]
    readers: list[Callable[[Any], Hashable]]

    @classmethod
    def make(cls, driver: str, asked: list[tuple[Path, ...] | None]) -> _Shape | None:
        """None unless every path asked is one attribute or capacity by domain and name."""
        if any(paths is None or any(len(path) != 3 for path in paths) for paths in asked):
            return None
        fields: dict[str, dict[str, str]] = {"attributes": {}, "capacity": {}}
        """Per field of the device, a field name per key it may carry a value under."""
        for paths in asked:
            assert paths is not None
            for kind, domain, name in paths:
                if kind not in fields:
                    return None
                for key in keys_of(driver, domain, name):
                    fields[kind].setdefault(key, f"f{len(fields[kind])}")
        values = {
            kind: msgspec.defstruct(
                f"Slim{kind.title()}",
                [(field, msgspec.Raw, _ABSENT) for field in names.values()],
                rename={field: key for key, field in names.items()},
                gc=False,
            )
            for kind, names in fields.items()
        }
        device = msgspec.defstruct(
            "SlimDevice",
            [
                ("name", str | None, None),
                ("attributes", values["attributes"] | None, None),
                ("capacity", values["capacity"] | None, None),
            ],
            gc=False,
        )
        spec = msgspec.defstruct(
            "SlimSpec",
            [("devices", list[device] | None, None)],  # type: ignore[valid-type]
            gc=False,
        )
        top = msgspec.defstruct("SlimSlice", [("spec", spec | None, None)], gc=False)
        readers = [_reader(paths, driver, fields) for paths in asked if paths is not None]
        return cls(msgspec.json.Decoder(top), readers)


def _reader(
    paths: tuple[Path, ...], driver: str, fields: dict[str, dict[str, str]]
) -> Callable[[Any], Hashable]:
    """What a device decoded in part reads at *paths*, as :meth:`.DeviceView.reader` reads it."""
    where = [
        (kind == "attributes", tuple(fields[kind][key] for key in keys_of(driver, domain, name)))
        for kind, domain, name in paths
    ]

    def one(device: Any, attributes: bool, names: tuple[str, ...]) -> bytes | None:
        values = device.attributes if attributes else device.capacity
        if values is not None:
            for name in names:
                raw = getattr(values, name)
                if raw:
                    return bytes(raw)
        return None

    if len(where) == 1:
        attributes, names = where[0]
        return lambda device: one(device, attributes, names)
    return lambda device: tuple([one(device, *place) for place in where])


class _Whole:
    """The slice decoded whole, once, when a device of it is to be evaluated."""

    def __init__(self, raw: bytes, driver: str) -> None:
        self._raw: bytes | None = raw
        self._driver = driver
        self._by_name: dict[str, wire.Device] = {}

    def view(self, device: Any) -> DeviceView:
        if self._raw is not None:
            spec = _SLICE.decode(self._raw).spec or wire.SliceSpec()
            self._raw = None
            for whole in reversed(spec.devices or []):  # the first of a name, as the index keeps
                self._by_name[whole.name or ""] = whole
        return DeviceView.for_selectors(self._by_name[device.name or ""], self._driver)
