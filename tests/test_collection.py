"""The collection core: what a page of objects may become, bounded by the response limit."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kdraexp.cel.matching import Matcher
from kdraexp.dra.listing import RESOURCE_CLAIMS, RESOURCE_SLICES, ListError, Reason
from kdraexp.families.selection import select
from kdraexp.store import collection
from kdraexp.store.collection import CollectionBuilder
from tests.objects import new_claim, pool_slice

LIMIT = 1024 * 1024
"""A response limit of 1 MiB: a page of 1,024 devices at most, objects of 64 KiB."""


def _page(objects: list[dict[str, Any]]) -> list[msgspec.Raw]:
    return [msgspec.Raw(msgspec.json.encode(o)) for o in objects]


def _bare(count: int) -> list[dict[str, Any]]:
    return [{"name": f"d{i}"} for i in range(count)]


def _builder() -> CollectionBuilder:
    return CollectionBuilder(select(), Matcher(), limit=LIMIT)


def test_a_page_of_more_devices_than_the_limit_allows_is_too_large() -> None:
    """Devices sent in a few bytes each still become a kilobyte read: a page holds so many.

    At a 1 MiB limit, 1,024 devices; 1,025 bare ones (16 KB sent) fail the list, in one slice or
    spread over slices, naming what was too large.  Within it, the page is read.
    """
    builder = _builder()
    builder.reader(RESOURCE_SLICES).page(_page([pool_slice("s", _bare(1024))]))
    for objects in (
        [pool_slice("s", _bare(1025))],
        [pool_slice(f"s{i}", _bare(41), pool=f"p{i}") for i in range(25)],
    ):
        with pytest.raises(ListError) as raised:
            _builder().reader(RESOURCE_SLICES).page(_page(objects))
        assert raised.value.reason == Reason.TOO_LARGE and raised.value.public
        assert str(raised.value).endswith(
            "TooLarge: a page of resourceslices holds more than 1024 devices, each counted as "
            "1024 bytes of --max-response-bytes=1048576: read, they would not fit beside it"
        )


def test_an_object_of_more_than_a_share_of_the_limit_is_too_large() -> None:
    """One object may be a sixteenth of the limit: read, it becomes many times its size."""
    reader = _builder().reader(RESOURCE_CLAIMS)
    fine = new_claim("fine", None)
    fine["metadata"]["annotations"] = {"note": "x" * (LIMIT // collection.OBJECT_SHARE - 400)}
    reader.page(_page([fine]))
    fat = new_claim("fat", None)
    fat["metadata"]["annotations"] = {"note": "x" * (LIMIT // collection.OBJECT_SHARE)}
    with pytest.raises(ListError) as raised:
        _builder().reader(RESOURCE_CLAIMS).page(_page([fat]))
    assert raised.value.reason == Reason.TOO_LARGE
    assert "ResourceClaim fat is 65" in str(raised.value)
    assert "more than 1/16 of --max-response-bytes=1048576" in str(raised.value)
