"""A slice's devices read again from its JSON for claims' own selectors: only what they read.

Pending requests' selectors are evaluated on slices read again from the JSON the collection
kept.  Most selectors read one or two attributes or capacities, and a device publishes a dozen:
decoding each device whole costs three times decoding those alone.  So where every path asked
names one attribute or capacity, the slice is decoded into a shape made for those paths
(:func:`msgspec.defstruct`, its fields the keys a device may carry them under), and decoded
whole only when a device is to be evaluated, once per slice at most.  Either way a device reads
exactly what :meth:`.SelectorView.reader` reads: devices alike by one are alike by the other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from operator import attrgetter
from typing import Any

import attrs
import msgspec

from kdraexp.cel.device import SelectorView, keys_of
from kdraexp.cel.matching import Path
from kdraexp.dra import wire
from kdraexp.util.packed import unpack

_SLICE = msgspec.json.Decoder(wire.ResourceSlice)
_ABSENT = msgspec.Raw()
_UNKNOWN: Any = object()
SHAPES = 64
"""Decoders kept, one per set of paths and driver: pending selectors are few and kept alike."""


class Read:
    """A slice's devices, what each reads per set of paths asked, and the view of one."""

    __slots__ = ("_by_name", "_driver", "_raw", "devices", "readers")

    def __init__(
        self,
        devices: Sequence[Any],
        readers: Sequence[Callable[[Sequence[Any]], list[Hashable]]],
        driver: str,
        raw: bytes | None,
    ) -> None:
        self.devices = devices
        """Each with a ``name``: the slice's devices, decoded whole or in part."""
        self.readers = readers
        """Per set of paths asked, what devices read there, in their order."""
        self._driver = driver
        self._raw = raw
        """The slice's JSON, while it was decoded in part only."""
        self._by_name: dict[str, wire.Device] = {}

    def view(self, device: Any) -> SelectorView:
        """The device as selectors are evaluated on it (the slice decoded whole, once)."""
        if self._raw is None:
            return SelectorView.for_selectors(device, self._driver)
        if not self._by_name:
            spec = _SLICE.decode(self._raw).spec or wire.SliceSpec()
            for whole in reversed(spec.devices or []):  # the first of a name, as the index keeps
                self._by_name[whole.name or ""] = whole
        return SelectorView.for_selectors(self._by_name[device.name or ""], self._driver)


class SliceReader:
    """Reads slices again for sets of paths; the decoders made are kept (:data:`SHAPES`)."""

    def __init__(self) -> None:
        self._shapes: dict[tuple[str, tuple[tuple[Path, ...] | None, ...]], _Shape | None] = {}

    def read(self, source: bytes, driver: str, asked: tuple[tuple[Path, ...] | None, ...]) -> Read:
        """The slice of *driver* in *source* (compressed JSON), for each set of paths *asked*.

        A set is None when its selectors read the whole device: no device reads alike another.
        """
        key = (driver, asked)
        shape = self._shapes.get(key, _UNKNOWN)
        if shape is _UNKNOWN:
            while len(self._shapes) >= SHAPES:
                del self._shapes[next(iter(self._shapes))]
            shape = self._shapes[key] = _Shape.make(driver, asked)
        raw = unpack(source)
        if shape is None:
            spec = _SLICE.decode(raw).spec or wire.SliceSpec()
            readers = [
                _apart if paths is None else _each(SelectorView.reader(paths, driver))
                for paths in asked
            ]
            return Read(spec.devices or [], readers, driver, None)
        slim = shape.decoder.decode(raw).spec
        return Read(slim.devices or [] if slim else [], shape.readers, driver, raw)


def _apart(devices: Sequence[Any]) -> list[Hashable]:
    """Devices read whole read alike no other (new keys, kept alive where they are kept)."""
    return [object() for _ in devices]


def _each(read: Callable[[Any], Hashable]) -> Callable[[Sequence[Any]], list[Hashable]]:
    return lambda devices: [read(device) for device in devices]


@attrs.frozen
class _Shape:
    """A decoder reading only some attributes and capacities, and how a device reads them."""

    decoder: msgspec.json.Decoder[Any]
    readers: list[Callable[[Sequence[Any]], list[Hashable]]]

    @classmethod
    def make(cls, driver: str, asked: tuple[tuple[Path, ...] | None, ...]) -> _Shape | None:
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
) -> Callable[[Sequence[Any]], list[Hashable]]:
    """What devices decoded in part read at *paths*, as :meth:`.SelectorView.reader` reads them."""
    where = [
        (kind, tuple(fields[kind][key] for key in keys_of(driver, domain, name)))
        for kind, domain, name in paths
    ]
    if len(where) == 1 and len(where[0][1]) == 1:  # one attribute under one key
        values_of, value_at = attrgetter(where[0][0]), attrgetter(where[0][1][0])

        def keyed(devices: Sequence[Any]) -> list[Hashable]:
            found: list[Hashable] = []
            for device in devices:
                values = values_of(device)
                raw = value_at(values) if values is not None else None
                found.append(bytes(raw) if raw else None)
            return found

        return keyed
    if len(where) == 1:  # one attribute under its short and qualified keys: the first given
        values_of = attrgetter(where[0][0])
        short_at, long_at = (attrgetter(name) for name in where[0][1])

        def either(devices: Sequence[Any]) -> list[Hashable]:
            found: list[Hashable] = []
            for device in devices:
                values = values_of(device)
                raw = None if values is None else short_at(values) or long_at(values)
                found.append(bytes(raw) if raw else None)
            return found

        return either

    def one(device: Any, kind: str, names: tuple[str, ...]) -> bytes | None:
        values = getattr(device, kind)
        if values is not None:
            for name in names:
                raw = getattr(values, name)
                if raw:
                    return bytes(raw)
        return None

    return lambda devices: [tuple([one(device, *place) for place in where]) for device in devices]
