"""Slices read again for claims' own selectors: decoded in part, read as when decoded whole."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import example, given
from hypothesis import strategies as st

from kdraexp.allocator.selectorread import SliceReader
from kdraexp.cel.device import SelectorView
from kdraexp.dra import wire
from kdraexp.util.packed import pack

NVIDIA = "gpu.nvidia.com"
_NAMES = st.sampled_from(["type", "uuid", "memory"])
_DOMAINS = st.sampled_from([NVIDIA, "resource.kubernetes.io", "example.com"])
_VALUES = st.sampled_from([b'{"string":"a"}', b'{"string":"b"}', b'{"int":1}', b'{"value":"1"}'])
_KEYS = st.one_of(_NAMES, st.builds(lambda d, n: f"{d}/{n}", _DOMAINS, _NAMES))
_RAW = st.one_of(st.none(), st.dictionaries(_KEYS, _VALUES.map(msgspec.Raw), max_size=4))
_DEVICES = st.lists(
    st.builds(
        lambda n, a, c: wire.Device(name=f"d{n}", attributes=a, capacity=c),
        st.integers(0, 99),
        _RAW,
        _RAW,
    ),
    max_size=6,
    unique_by=lambda device: device.name,
)
_ONE = st.tuples(st.sampled_from(["attributes", "capacity"]), _DOMAINS, _NAMES)
_PATHS = st.one_of(
    st.none(),
    st.lists(_ONE, min_size=1, max_size=2, unique=True).map(tuple),
    st.lists(
        st.one_of(_ONE, st.tuples(st.sampled_from(["attributes", "capacity"]), _DOMAINS)),
        min_size=1,
        max_size=2,
        unique=True,
    ).map(tuple),
)


def _source(driver: str, devices: list[wire.Device]) -> bytes:
    """The compressed JSON of a slice of *driver*'s *devices*, as the collection keeps it."""
    listed: list[dict[str, Any]] = [
        {"name": d.name, "attributes": d.attributes, "capacity": d.capacity, "taints": []}
        for d in devices
    ]
    spec = {"driver": driver, "pool": {"name": "p"}, "devices": listed}
    return pack(msgspec.json.encode({"metadata": {"name": "s"}, "spec": spec}))


_BOTH = {"type": msgspec.Raw(b'{"string":"a"}'), f"{NVIDIA}/type": msgspec.Raw(b'{"int":1}')}
"""A value under the bare name and another under the driver's domain: the bare one is read."""


@given(st.sampled_from([NVIDIA, "example.com"]), _DEVICES, st.lists(_PATHS, min_size=1, max_size=3))
@example(NVIDIA, [wire.Device(name="d", attributes=_BOTH)], [(("attributes", NVIDIA, "type"),)])
def test_a_device_reads_what_it_reads_decoded_whole(
    driver: str, devices: list[wire.Device], asked: list[Any]
) -> None:
    """Each device reads what :meth:`.SelectorView.reader` reads of it decoded whole.

    So for every set of paths asked; its view is the one made of it decoded whole.  A set of
    paths None (the whole device) reads each device apart from every other.
    """
    read = SliceReader().read(_source(driver, devices), driver, tuple(asked))
    assert [device.name for device in read.devices] == [device.name for device in devices]
    for paths, reads in zip(asked, read.readers, strict=True):
        got = reads(read.devices)
        if paths is None:
            assert len({id(value) for value in got}) == len(got)
            continue
        whole = SelectorView.reader(paths, driver)
        assert got == [whole(device) for device in devices]
    for device, made in zip(read.devices, devices, strict=True):
        view = read.view(device)
        assert (view.name, view.driver, view.attributes, view.capacity_raw) == (
            made.name,
            driver,
            made.attributes or {},
            made.capacity or {},
        )


def test_shapes_are_bounded() -> None:
    """Decoders are kept per set of paths and driver, at most SHAPES of them."""
    from kdraexp.allocator import selectorread

    reader = SliceReader()
    source = _source(NVIDIA, [wire.Device(name="a", attributes={"type": msgspec.Raw(b"1")})])
    for n in range(selectorread.SHAPES + 10):
        read = reader.read(source, NVIDIA, ((("attributes", NVIDIA, f"a{n}"),),))
        assert read.readers[0](read.devices) == [None]
    assert len(reader._shapes) == selectorread.SHAPES
