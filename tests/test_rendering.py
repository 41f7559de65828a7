"""Families kept compressed: one valid gzip member from many segments, reused until they change."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from kdraexp import exposition, rendering
from kdraexp.collection import Collection, Store
from kdraexp.families.deviceclass import class_created, class_hourly_cost
from kdraexp.families.resourceclaim import allocated_device
from kdraexp.rendering import Renderer, Segment, crc32_combine
from tests.collect import collect
from tests.conftest import result_of
from tests.objects import classy, new_claim, result


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc32_combine(first: bytes, second: bytes) -> None:
    """CRC(A+B) from CRC(A), CRC(B) and len(B), as zlib's crc32_combine."""
    assert crc32_combine(zlib.crc32(first), zlib.crc32(second), len(second)) == zlib.crc32(
        first + second
    )


def bodies(renderer: Renderer, collection: Collection, tail: bytes) -> tuple[bytes, bytes]:
    segments: list[Segment] = result_of(renderer.segments(collection))
    pieces, length = renderer.gzip(segments, tail)
    zipped = b"".join(pieces)
    assert len(zipped) == length
    stream, size = rendering.plain(segments, tail)
    text = b"".join(stream)
    assert len(text) == size
    return zipped, text


def test_one_gzip_member_equal_to_the_text() -> None:
    """Segments, tail and trailer make a single gzip member whose text is the plain body."""
    collection = Collection.of(
        [
            (class_created, [(f"class-{i}", float(i)) for i in range(20000)]),
            (class_hourly_cost, [(f"class-{i}", i / 3) for i in range(5000)]),
        ]
    )
    renderer = Renderer(Clock())
    for tail in (b"# the first scrape's tail\n", b"", b"# EOF\n"):
        zipped, text = bodies(renderer, collection, tail)
        assert text == b"".join(exposition.encode_collection(collection)) + tail
        assert gzip.decompress(zipped) == text
        single = zlib.decompressobj(16 + zlib.MAX_WBITS)
        assert single.decompress(zipped) == text
        assert single.eof and not single.unused_data, "one member, nothing after it"


def test_empty_collection() -> None:
    """No family at all: the body is the tail alone, still valid gzip."""
    zipped, text = bodies(Renderer(Clock()), Collection.of([]), b"tail\n")
    assert text == b"tail\n"
    assert gzip.decompress(zipped) == b"tail\n"


def by_family(renderer: Renderer, collection: Collection) -> dict[str, Segment]:
    segments: list[Segment] = result_of(renderer.segments(collection))
    return dict(zip([f.name for f, _ in collection.families()], segments, strict=True))


def test_unchanged_families_are_not_rendered_again() -> None:
    """A family whose lists did not change keeps its segment; a changed one is rendered anew."""
    renderer, store = Renderer(Clock()), Store()
    claim = new_claim("c", [result("gpu-0")])
    classes = [classy("gpu.nvidia.com", cost="1")]
    first = collect(claims=[claim], classes=classes, store=store)
    before = by_family(renderer, first)
    claim["metadata"]["resourceVersion"] = "2"
    second = collect(claims=[claim], classes=classes, store=store)
    after = by_family(renderer, second)
    assert second.key(class_created) == first.key(class_created)
    assert after[class_created.name] is before[class_created.name], "unchanged: the same bytes"
    assert second.key(allocated_device) != first.key(allocated_device)
    assert after[allocated_device.name] is not before[allocated_device.name]
    assert after[allocated_device.name].data == before[allocated_device.name].data
