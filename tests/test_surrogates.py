"""Lone UTF-16 surrogates in JSON, read as Go reads them: one object's value, not the page."""

from __future__ import annotations

import json

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.util.surrogates import Mended, marked, mend


def test_lone_surrogates_become_u_fffd_and_pairs_and_backslashes_stay() -> None:
    assert mend(rb'"a\ud800b"') == (rb'"a\ufffdb"', [2])
    assert mend(rb'"\udc00\ud800\ud800\udc00"') == (rb'"\ufffd\ufffd\ud800\udc00"', [1, 7])
    assert mend(rb'"\ud83d\ude00 \u0041"') == (rb'"\ud83d\ude00 \u0041"', [])
    assert mend(rb'"\\ud800"') == (rb'"\\ud800"', [])  # a backslash, then text


@given(st.text())
def test_any_text_with_surrogates_decodes_as_go_reads_it(text: str) -> None:
    """Whatever Python escapes, mended, decodes; nothing but lone surrogates changes."""
    document = json.dumps(text).encode()
    mended, _ = mend(document)
    expected = "".join(
        c if not 0xD800 <= ord(c) <= 0xDFFF else "\ufffd"
        for c in text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    )
    assert msgspec.json.decode(mended) == expected


def test_each_object_is_marked_with_its_own() -> None:
    document = rb'{"items": [{"a": "\ud800"}, {"b": "ok"},{"c": "\udfff\udfff"}]}'
    mended, found = mend(document)
    items = msgspec.json.decode(mended, type=dict[str, list[msgspec.Raw]])["items"]
    marks = marked(mended, items, found)
    assert [m.count if isinstance(m, Mended) else 0 for m in marks] == [1, 0, 2]
