"""Reading one kind's objects: each once as it arrives, into the entry all its families share.

A page of a list, or a watch event, hands objects to a :class:`KindReader`: an object whose
version has not changed keeps the :class:`Entry` it gave before (its rows, facts and problems);
a new or changed one is decoded, bounded by the response limit, and read by its kind's view once
for every family.  What was kept between collections is :mod:`kdraexp.store.collection`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import msgspec

from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra import wire
from kdraexp.dra.listing import (
    DEFAULT_MAX_RESPONSE_BYTES,
    Kind,
    ListError,
    Reason,
    ShapeError,
)
from kdraexp.dra.problems import Problem, Problems
from kdraexp.families import KINDS
from kdraexp.families.context import Context
from kdraexp.families.family import Family
from kdraexp.families.selection import Selection
from kdraexp.store.budget import MatcherBudget
from kdraexp.store.changes import EVERYTHING, Everything, many, mostly_new
from kdraexp.store.rows import Flat, flatten
from kdraexp.store.sharding import Part, Shard
from kdraexp.util.packed import pack, unpack
from kdraexp.util.surrogates import Mended, unmended
from kdraexp.util.text import printable
from kdraexp.util.turns import CHUNK


class Entry(msgspec.Struct, gc=False):
    """What one object gave: its rows, its facts for the cross-object families, its problems."""

    version: str | None
    """The object's ``resourceVersion``: the entry is reused while it is the same."""
    context: Hashable
    """What else the rows depend on (the classes, for slices)."""
    rows: tuple[Flat, ...]
    """The rows of each of the kind's families (:func:`row_families` order), flattened."""
    facts: Any
    problems: tuple[Problem, ...]
    class_errors: tuple[tuple[str, str], ...]
    """(class, reason) for each device whose match with a class could not be decided."""
    source: bytes | None = None
    """The object's JSON, deflated, where it must be read again without a list (watch mode,
    kinds read with the classes)."""
    parts: int = 0
    """Its parts (a slice's devices): what it counts against a page's bound, whenever read."""


OBJECT_SHARE = 16
"""One object may be at most this share of ``--max-response-bytes`` (4 MiB by default): read,
an object becomes many times its size, and Kubernetes stores none above 1.5 MiB."""
PART_BYTES = 1024
"""What each part of an object (a slice's device) counts against ``--max-response-bytes`` in
one page: a device becomes about a kilobyte read, however few bytes it is sent in (a page of
256,000 bare devices was 4.2 MB and took 300 MB)."""


OBJECT_BYTES = 4096
"""What each object kept counts against ``--max-response-bytes`` in one response: read, an
object becomes its entry, rows and facts, 2.4 KB for a claim and 3.9 KB for a one-device slice
however few bytes it is sent in (a 50 MB file of one-device slices took 282 MiB)."""


def row_families(selection: Selection, kind: Kind) -> list[Family]:
    """The families whose rows an entry of *kind* keeps, in the order it keeps them.

    By position, not by name: a pair per family and object would take a sixth of the store.
    The families of current slices only are kept with the slice's facts instead.
    """
    return [
        family
        for family in selection.families
        if family.reads is kind and not family.current_generation
    ]


def identity(meta: wire.ObjectMeta | wire.IdentityMeta | None) -> str:
    """An object's identity: its uid, else namespace/name."""
    if meta is None:
        return ""
    return meta.uid or f"{meta.namespace or ''}/{meta.name or ''}"


class KindReader:
    """Reads the pages of one list of one kind, reusing the entries of unchanged objects."""

    def __init__(
        self,
        kind: Kind,
        selection: Selection,
        classes: ClassIndex,
        budget: MatcherBudget,
        context: Hashable,
        previous: Mapping[str, Entry],
        warm: Mapping[str, Entry] | None = None,
        shard: Shard = Shard(),  # noqa: B008 - frozen
        skipped: Mapping[str, str] | None = None,
        keep_sources: bool = False,
        live: bool = False,
        limit: int = DEFAULT_MAX_RESPONSE_BYTES,
        start_again: Callable[[], None] | None = None,
    ) -> None:
        self.kind = kind
        self._limit = limit
        self._start_again = start_again if previous else None
        """Called once most objects of a list turn out new: what was kept of the last one is
        forgotten, and the entries of the last list are no longer looked in.  Not without a
        last list: a first one has nothing to forget, and asks nothing of each object."""
        self._parts = 0
        """The parts (devices) of the objects read from the response at hand."""
        self._kept = 0
        """The objects of the response at hand that keep an entry."""
        self._live = live
        """Whether it applies watch events: its pages are then not read in a thread (events
        come meanwhile), and each object has the matching budget of a collection."""
        self._keep_sources = keep_sources
        """Keep each object's JSON, compressed, so that :meth:`reread` needs no list."""
        self._shard = shard
        self._previous_skipped = skipped or {}
        self._families = row_families(selection, kind)
        self._generation_families = [
            family
            for family in selection.families
            if family.reads is kind and family not in self._families
        ]
        self._options = selection.options
        self._spec = KINDS[kind]
        self._classes = classes
        self._budget = budget
        self._context = context
        self._previous = previous
        self._warm = warm or {}
        self.warming: dict[str, Entry] | None = None if warm is None else {}
        """What this list read that the last one did not give, kept for the next collection
        should this one fail (:attr:`Store.warm`); it replaces what the failed one before
        kept, so lists that keep failing keep one list's objects, not each one's."""
        self._unwritten: tuple[Flat, ...] = ((),) * len(self._families)
        """The rows of an object another shard writes: none in every family."""
        self.restart()

    @property
    def off_reactor(self) -> bool:
        """Whether the rest of the page is read in a thread (see :func:`kdraexp.util.turns.feed`).

        Only when matching devices has been costly: otherwise the thread's hand-offs of the
        interpreter lock cost more than they spare (a calm 64,000-device scrape took 60 % longer).
        """
        return not self._live and self._classes.costly

    @property
    def chunk(self) -> int:
        """Objects read between two looks at the clock (see :func:`kdraexp.util.turns.feed`).

        One slice at a time, since its devices may take a while against many or costly
        DeviceClass selectors; other objects take microseconds each.
        """
        return 1 if self._spec.reads_classes else CHUNK

    @property
    def costly(self) -> bool:
        """Whether reading its objects matches devices, and matching has been costly."""
        return self._spec.reads_classes and self._classes.costly

    def restart(self) -> None:
        """Forget every page read so far."""
        self._new = 0
        """Entries made: of objects new, or changed since the last list."""
        self.entries: dict[str, Entry] = {}
        self.skipped: dict[str, str] = {}
        """Objects of other shards, and objects that give nothing (no rows, no facts), by
        version: not decoded again while unchanged."""
        self.changed = False
        self.relisted = False
        self.touched: set[str] | Everything = set()
        """The objects events touched since the last snapshot (see :meth:`apply`), or
        :data:`EVERYTHING` once they are many (see :meth:`touch`)."""

    def page(self, items: Sequence[msgspec.Raw | Mended]) -> None:
        """Read one page: each new or changed object once, for all the families of its kind.

        :raises ShapeError: for an object not of the kind's shape.
        :raises ListError: ``TooLarge``, for an object or a page that would become more than
            :data:`OBJECT_SHARE` and :data:`PART_BYTES` allow of the response limit.
        """
        for item in items:
            raw, lone = unmended(item)
            known = self._decode(wire.IDENTITY, raw)
            key = identity(known.metadata)
            if self._live:
                self.touch(key)
            if key in self.entries or key in self.skipped:
                continue  # the same object twice in one list: the first one counts
            entry = self.read(raw, known, key, reuse=True, lone=lone)
            if entry is not None:
                self.entries[key] = entry
                self._kept += 1
                if self._kept > self._limit // OBJECT_BYTES:
                    raise page_too_large(self.kind, self._limit, "objects", OBJECT_BYTES)

    def read(
        self, raw: msgspec.Raw, known: wire.Identity, key: str, reuse: bool, lone: int = 0
    ) -> Entry | None:
        """The entry of one object, whose identity *known* and *key* are decoded already.

        *lone* surrogates of its JSON were read as U+FFFD: each costs a value, counted.

        With *reuse*, an object unchanged since the last list keeps the entry it gave then.
        None for an object that gives nothing here (another shard's, or no rows and no facts),
        remembered in :attr:`skipped` by its version.
        """
        if known.kind is not None and known.kind != self.kind.kind:
            raise ShapeError(
                f"a {printable(known.kind, 64)} {_name(raw)} among the {self.kind.plural}"
            )
        meta = known.metadata
        version = (meta.resource_version if meta else None) or _content_version(raw)
        if self._previous_skipped.get(key) == version:
            self.skipped[key] = version
            return None
        if reuse:
            old = self._previous.get(key)
            warm = old is None and self.warming is not None
            if warm:
                old = self._warm.get(key)
            if old is not None and old.version == version and old.context == self._context:
                if old.parts:
                    self._count(old.parts)  # read before or not, the page holds it
                if warm:
                    self.warming[key] = old  # type: ignore[index]
                return old
        if len(raw) > self._limit // OBJECT_SHARE:  # only what is read: a calm list is not
            raise object_too_large(self.kind, _name(raw), len(raw), self._limit)
        item = self._decode(self.kind.decoder, raw)
        parts = self._spec.parts(item) if self._spec.parts is not None else 0
        self._count(parts)
        placed = self._spec.shard_key(item) if self._spec.shard_key else None
        part = self._shard.part(placed)
        if part is Part.SKIP:
            self.skipped[key] = version
            return None
        if item.metadata is not None and item.metadata.uid == key:
            item.metadata.uid = key  # one string for the identity and the rows
        if self._live and self._spec.reads_classes:
            self._budget.event(self._classes)
        entry = self._read(item, version, part is Part.WRITE, lone)
        if entry.facts is None and not (entry.problems or entry.class_errors or any(entry.rows)):
            self.skipped[key] = version  # it gives nothing (a pod using no device)
            return None
        self._new += 1  # of those it keeps: a shard decodes the others' changes too
        if self._start_again is not None and mostly_new(self._new, len(self._previous)):
            self._previous, start_again, self._start_again = {}, self._start_again, None
            start_again()
        if self._keep_sources or self._spec.keeps_source:
            entry.source = pack(raw)
            if self._spec.keeps_source:
                entry.facts.source = entry.source
        entry.parts = parts
        if self.warming is not None:
            self.warming[key] = entry  # kept even if this collection fails (a deadline)
        self.changed = True
        return entry

    def _count(self, parts: int) -> None:
        """Count an object's *parts* against the response's bound (see :data:`PART_BYTES`)."""
        self._parts += parts
        if self._parts > self._limit // PART_BYTES:
            raise page_too_large(self.kind, self._limit, "devices", PART_BYTES)

    def touch(self, key: str) -> None:
        """An event touched *key*: remembered until the next snapshot, unless many were.

        Once :func:`many` of the entries were touched, the snapshot's followers make everything
        again, and stay so however many more come: the keys are no longer kept.  While no
        snapshot is made (a resource never synchronised leaves scrapes at 503), they were all
        kept, 0.33 MiB for each 3,000 claims that came and went.
        """
        touched = self.touched
        if isinstance(touched, Everything):
            return
        touched.add(key)
        if many(len(touched), len(self.entries)):
            self.touched = EVERYTHING

    def resync(self) -> None:
        """Start listing again while keeping what is known: unchanged objects keep their entry."""
        self._previous = self.entries
        self.restart()
        self.relisted = True
        """Objects may have gone without an event: :meth:`CollectionBuilder.snapshot` looks."""

    def response(self) -> None:
        """A new response's objects follow: what they become is bounded per response."""
        self._parts = self._kept = 0

    def apply(self, event: str, item: msgspec.Raw | Mended) -> tuple[str, str | None]:
        """One watch event: ``ADDED`` or ``MODIFIED`` reads the object again, ``DELETED`` drops it.

        Return the object's key and its ``resourceVersion`` (its identity decoded once).

        :raises ShapeError: for an object not of the kind's shape.
        """
        raw, lone = unmended(item)
        known = self._decode(wire.IDENTITY, raw)
        key = identity(known.metadata)
        version = known.metadata.resource_version if known.metadata else None
        self.skipped.pop(key, None)
        self.touch(key)
        if event == "DELETED":
            dropped = self.entries.pop(key, None) is not None  # whatever changed before
            self.changed = self.changed or dropped
            return key, version
        self.response()  # an event is a response of its own
        entry = self.read(raw, known, key, reuse=False, lone=lone)
        if entry is not None:
            self.entries[key] = entry  # a changed object keeps its place (and its block's)
        elif self.entries.pop(key, None) is not None:
            self.changed = True  # it moved to another shard
        return key, version

    def reread(self, key: str) -> None:
        """Read an object again from its kept source, with the classes now configured.

        What a DeviceClass change needs in watch mode: the slices' rows and facts made again
        without listing them (the sources are kept by a live reader only).
        """
        entry = self.entries.get(key)
        if entry is not None and entry.source is not None:
            self.apply("MODIFIED", msgspec.Raw(unpack(entry.source)))
            self.changed = True

    def reconfigure(self, classes: ClassIndex, context: Hashable) -> None:
        """New DeviceClasses: the entries made with the old ones are stale (see :meth:`resync`)."""
        self._classes = classes
        self._context = context

    def _decode(self, decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw) -> Any:
        try:
            return decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError) as error:
            name = _name(raw)
            raise ShapeError(f"{self.kind.kind} {name}: {error}".replace("  ", " ")) from None

    def _read(self, item: Any, version: str | None, write: bool, lone: int = 0) -> Entry:
        """The object's entry; without *write* (another shard writes it) its facts only."""
        problems = Problems()
        if lone:
            meta = item.metadata
            where = (
                f"{meta.namespace}/{meta.name}" if meta and meta.namespace else meta and meta.name
            )
            problems.add(
                self.kind.plural,
                "json",
                f"{self.kind.kind} {printable(where or '(no name)', 253)}: {lone} lone UTF-16 "
                "surrogate escapes in its strings, read as U+FFFD (as the API server reads them)",
            )
        context = Context(self._options, problems, self._classes)
        spec = self._spec
        view = spec.view(item, context)
        facts = spec.facts(view, write)
        if spec.reads_classes and self._classes.unmatched():  # once an object, not a device
            context.class_errors.extend(self._classes.unmatched_errors())
        if not write:
            return Entry(version, self._context, self._unwritten, facts, (), ())
        if self._generation_families:  # a slice's: untracked by the collector, as its facts
            facts.rows = tuple(
                [
                    (family.name, found)
                    for family in self._generation_families
                    if (found := flatten(family.rows(view)))
                ]
            )
        return Entry(
            version,
            self._context,
            tuple([flatten(family.rows(view)) for family in self._families]),
            facts,
            tuple(problems.found),
            tuple(context.class_errors),
        )

    def changed_from(self, previous: Mapping[str, Entry]) -> bool:
        """Whether this list differs from the last one (an object new, changed or gone)."""
        return self.changed or self.entries.keys() != previous.keys()


def object_too_large(kind: Kind, name: str, size: int, limit: int) -> ListError:
    """An object of *size* bytes, past :data:`OBJECT_SHARE` of the response limit *limit*."""
    return ListError(
        kind.plural,
        Reason.TOO_LARGE,
        None,
        f"{kind.kind} {name} is {size} bytes, more than 1/{OBJECT_SHARE} of "
        f"--max-response-bytes={limit} (the API server stores objects of at most 1.5 MiB)",
        public=True,
    )


def page_too_large(kind: Kind, limit: int, what: str, each: int) -> ListError:
    """A response of more of *what* than *each* bytes apiece allow of *limit*.

    Devices (parts) count :data:`PART_BYTES` each; objects, :data:`OBJECT_BYTES`.
    """
    return ListError(
        kind.plural,
        Reason.TOO_LARGE,
        None,
        f"a page of {kind.plural} holds more than {limit // each} {what}, each counted "
        f"as {each} bytes of --max-response-bytes={limit}: read, they would not fit "
        "beside it",
        public=True,
    )


def _content_version(raw: msgspec.Raw) -> str:
    """A version for an object that carries no ``resourceVersion``: a digest of its JSON.

    A file, or an API that does not send one, lists the same objects again alike: their
    entries are kept as a real version keeps them, rather than every object read again (at
    64,000 devices, 5 s and 580 MiB a scrape instead of 0.3 s).  "#" keeps it apart from the
    API server's versions, which are numbers.
    """
    return "#" + hashlib.blake2b(raw, digest_size=16).hexdigest()


def _name(raw: msgspec.Raw) -> str:
    """The object's name, if its metadata can be read at all."""
    try:
        meta = wire.IDENTITY.decode(raw).metadata
    except (msgspec.DecodeError, RecursionError):
        return "(unreadable)"
    return (meta.name if meta else None) or "(no name)"
