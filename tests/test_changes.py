"""What changed is found by identity, and recorded only where a follower would follow it."""

from __future__ import annotations

from kdraexp.store.changes import REBUILT, change, many, touched_between


def test_touched_between_finds_changed_new_and_gone() -> None:
    same, other = object(), object()
    old = {"a": same, "b": object(), "c": object()}
    new = {"a": same, "b": other, "d": object()}
    assert touched_between(old, new) == {"b", "c", "d"}


def test_a_record_is_trusted_only_for_the_mappings_it_is_about() -> None:
    """A record says what changed between its two mappings; between others, compare."""
    old = {key: object() for key in "abcdefghijklmnopqrstuvwxyz"}
    new = {**old, "a": object()}
    record = change(old, new, {"a"})
    assert record is not None and touched_between(old, new, record) == {"a"}
    assert touched_between(dict(old), new, record) == {"a"}  # a copy: looked for
    assert touched_between(old, {**new, "b": object()}, record) == {"a", "b"}


def test_many_changed_makes_no_record() -> None:
    """Past one in REBUILT touched, followers start again: no record keeps the old alive."""
    total = 10 * REBUILT
    old = {n: object() for n in range(total)}
    assert not many(10, total) and many(11, total)
    assert change(old, dict(old), set(range(10))) is not None
    assert change(old, dict(old), set(range(11))) is None
