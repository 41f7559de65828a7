"""An object's JSON packed and read back whole."""

from __future__ import annotations

import zlib

import pytest

from kdraexp.util.packed import pack, unpack


@pytest.mark.parametrize(
    "raw", [b"", b"{}", b'{"spec":{"devices":[' + b'{"name":"gpu-0"},' * 500 + b"]}}"]
)
def test_what_is_packed_is_read_back(raw: bytes) -> None:
    assert unpack(pack(raw)) == raw


def test_packed_without_zlibs_header_and_checksum() -> None:
    """Raw deflate: what a zlib stream reader refuses, and smaller by the header and checksum."""
    raw = b'{"metadata":{"name":"slice"}}' * 20
    with pytest.raises(zlib.error):
        zlib.decompress(pack(raw))
    assert len(pack(raw)) == len(zlib.compress(raw, 1)) - 6
