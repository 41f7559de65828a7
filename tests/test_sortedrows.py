"""Sorted rows following their blocks: the same order as a fresh sort, few chunks made again."""

from __future__ import annotations

import itertools
import operator

from hypothesis import given, settings
from hypothesis import strategies as st

from kdraexp.exposition.sortedrows import LONGEST, SortedRows

KEY = operator.itemgetter(0)


def blocks_of(rows: list[tuple[str, float]], size: int = 8) -> list[tuple[tuple[str, float], ...]]:
    return [tuple(rows[start : start + size]) for start in range(0, len(rows), size)]


def chunks_of(rows: list[tuple[str, float]]) -> list[tuple[tuple[str, float], ...]]:
    return blocks_of(sorted(rows, key=KEY), 16)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text("abc", max_size=4), max_size=300),
    st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), max_size=20),
)
def test_followed_rows_sort_as_a_fresh_sort(
    names: list[str], changes: list[tuple[bool, int]]
) -> None:
    """Rows come and go (equal keys among them); the chunks always hold them sorted."""
    serial = itertools.count()
    rows = [(name, float(next(serial))) for name in names]
    source = blocks_of(rows)
    kept = SortedRows(source, chunks_of(rows), KEY)
    for add, at in changes:
        # A block made again with one row more or less; the other blocks kept as they were.
        if add or not rows:
            rows.insert(at % (len(rows) + 1), (f"n{at % 7}", float(next(serial))))
        else:
            del rows[at % len(rows)]
        fresh = blocks_of(rows)
        source = [
            old if index < len(source) and source[index] == block else block
            for index, (old, block) in enumerate(itertools.zip_longest(source, fresh))
            if block is not None
        ]
        chunks = kept.follow(source, lambda _: True)
        if chunks is None:  # too many came or went for so few rows: sorted again
            kept = SortedRows(source, chunks_of(rows), KEY)
            continue
        flat = list(itertools.chain.from_iterable(chunks))
        assert sorted(map(id, flat)) == sorted(map(id, rows)), "every row once, no other"
        assert [KEY(row) for row in flat] == sorted(map(KEY, rows))
        assert all(0 < len(chunk) <= LONGEST for chunk in chunks)


def test_one_row_changed_makes_one_chunk_again() -> None:
    rows = [(f"claim-{n:05d}", 1.0) for n in range(4000)]
    source = blocks_of(rows, 64)
    kept = SortedRows(source, chunks_of(rows), KEY)
    before = list(kept.chunks)
    changed = list(source)
    block = list(changed[10])
    block[3] = ("claim-00643", 0.0)
    changed[10] = tuple(block)
    chunks = kept.follow(changed, lambda _: True)
    assert chunks is not None
    assert len({id(c) for c in chunks} - {id(c) for c in before}) == 1
    assert ("claim-00643", 0.0) in itertools.chain.from_iterable(chunks)


def test_rows_not_accepted_make_it_sort_again() -> None:
    rows = [(f"claim-{n}", 1.0) for n in range(100)]
    source = blocks_of(rows)
    kept = SortedRows(source, chunks_of(rows), KEY)
    changed = [*source[:-1], (*source[-1], ('odd "quoted"', 1.0))]
    assert kept.follow(changed, lambda added: not added) is None
