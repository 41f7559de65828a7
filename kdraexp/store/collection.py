"""Collections: each object read once as its page arrives, its rows kept until it changes.

A collection lists every object, as the original does, but an object whose ``resourceVersion``
has not changed since the last collection keeps the rows it gave then: in a cluster where little
changes between scrapes, a scrape costs the lists and their decoding, not the families.  Rows are
kept per object (kube-state-metrics' model); the families that need every object at once (pools,
device states, cost) are made again for what changed (:mod:`kdraexp.store.clusterrows`).

Each family's output has a *key*, the versions of the lists it reads: equal keys, equal rows, so
a writer may reuse what it wrote for that key; and its rows come in blocks
(:mod:`kdraexp.store.rows`), so a writer may reuse what it wrote for the blocks a change did not
touch (:mod:`kdraexp.exposition.rendering` keeps both compressed).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from collections.abc import Collection as Keys
from typing import Any

import attrs
import msgspec

from kdraexp.allocator import CLUSTER_NEEDS, ClusterIndex
from kdraexp.cel.classindex import ClassEntry, ClassIndex
from kdraexp.cel.matching import Matcher
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
from kdraexp.families.context import Context, Options
from kdraexp.families.family import CLUSTER, Family, Row
from kdraexp.families.selection import Selection
from kdraexp.store.changes import Change, Made, change, many, mostly_new, touched_between
from kdraexp.store.clusterrows import ClusterRows, Laid
from kdraexp.store.keptblocks import KindBlocks
from kdraexp.store.rows import BLOCK_OBJECTS, Block, Flat, expand, flatten
from kdraexp.store.sharding import Part, Shard
from kdraexp.util.packed import pack, unpack
from kdraexp.util.text import printable
from kdraexp.util.turns import CHUNK, Turns


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

_FACTS = operator.attrgetter("facts")
_PROBLEMS = operator.attrgetter("problems")
_CLASS_ERRORS = operator.attrgetter("class_errors")


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
        self.touched: set[str] = set()
        """The objects events touched since the last snapshot (see :meth:`apply`)."""

    def page(self, items: list[msgspec.Raw]) -> None:
        """Read one page: each new or changed object once, for all the families of its kind.

        :raises ShapeError: for an object not of the kind's shape.
        :raises ListError: ``TooLarge``, for an object or a page that would become more than
            :data:`OBJECT_SHARE` and :data:`PART_BYTES` allow of the response limit.
        """
        for raw in items:
            self._one(raw, self._decode(wire.IDENTITY, raw))

    def _one(self, raw: msgspec.Raw, known: wire.Identity) -> None:
        """Read one object, whose identity *known* is decoded already."""
        decoder = self.kind.decoder
        if known.kind is not None and known.kind != self.kind.kind:
            raise ShapeError(
                f"a {printable(known.kind, 64)} {_name(raw)} among the {self.kind.plural}"
            )
        meta = known.metadata
        key = identity(meta)
        if self._live:
            self.touched.add(key)
        if key in self.entries or key in self.skipped:
            return  # the same object twice in one list: the first one counts
        version = (meta.resource_version if meta else None) or _content_version(raw)
        if self._previous_skipped.get(key) == version:
            self.skipped[key] = version
            return
        old = self._previous.get(key)
        warm = old is None and self.warming is not None
        if warm:
            old = self._warm.get(key)
        if old is not None and old.version == version and old.context == self._context:
            if old.parts:
                self._count(old.parts)  # read before or not, the page holds it
            self.entries[key] = old
            if warm:
                self.warming[key] = old  # type: ignore[index]
            return
        if len(raw) > self._limit // OBJECT_SHARE:  # only what is read: a calm list is not
            raise self._too_large(
                f"{self.kind.kind} {_name(raw)} is {len(raw)} bytes, more than "
                f"1/{OBJECT_SHARE} of --max-response-bytes={self._limit} (the API server "
                "stores objects of at most 1.5 MiB)"
            )
        item = self._decode(decoder, raw)
        parts = self._spec.parts(item) if self._spec.parts is not None else 0
        self._count(parts)
        placed = self._spec.shard_key(item) if self._spec.shard_key else None
        part = self._shard.part(placed)
        if part is Part.SKIP:
            self.skipped[key] = version
            return
        if item.metadata is not None and item.metadata.uid == key:
            item.metadata.uid = key  # one string for the identity and the rows
        if self._live and self._spec.reads_classes and self._classes.matcher is not None:
            self._classes.matcher.new_collection()  # an event is a collection of its own
        entry = self._read(item, version, part is Part.WRITE)
        if entry.facts is None and not (entry.problems or entry.class_errors or any(entry.rows)):
            self.skipped[key] = version  # it gives nothing (a pod using no device)
            return
        self.entries[key] = entry
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

    def _count(self, parts: int) -> None:
        """Count an object's *parts* against the response's bound (see :data:`PART_BYTES`)."""
        self._parts += parts
        if self._parts > self._limit // PART_BYTES:
            raise self._too_large(
                f"a page of {self.kind.plural} holds more than "
                f"{self._limit // PART_BYTES} devices, each counted as {PART_BYTES} "
                f"bytes of --max-response-bytes={self._limit}: read, they would not fit "
                "beside it"
            )

    def resync(self) -> None:
        """Start listing again while keeping what is known: unchanged objects keep their entry."""
        self._previous = self.entries
        self.restart()
        self.relisted = True
        """Objects may have gone without an event: :meth:`CollectionBuilder.snapshot` looks."""

    def response(self) -> None:
        """A new response's objects follow: what they become is bounded per response."""
        self._parts = 0

    def _too_large(self, why: str) -> ListError:
        return ListError(self.kind.plural, Reason.TOO_LARGE, None, why, public=True)

    def apply(self, event: str, raw: msgspec.Raw) -> tuple[str, str | None]:
        """One watch event: ``ADDED`` or ``MODIFIED`` reads the object again, ``DELETED`` drops it.

        Return the object's key and its ``resourceVersion`` (its identity decoded once).

        :raises ShapeError: for an object not of the kind's shape.
        """
        known = self._decode(wire.IDENTITY, raw)
        key = identity(known.metadata)
        version = known.metadata.resource_version if known.metadata else None
        self.skipped.pop(key, None)
        self.touched.add(key)
        if event == "DELETED":
            dropped = self.entries.pop(key, None) is not None  # whatever changed before
            self.changed = self.changed or dropped
            return key, version
        self._previous = {}
        entries, self.entries = self.entries, {}
        self.response()  # an event is a response of its own
        try:
            self._one(raw, known)
        finally:
            read, self.entries = self.entries, entries
        if key in read:
            entries[key] = read[key]  # a changed object keeps its place (and its block's)
        elif entries.pop(key, None) is not None:
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

    def _read(self, item: Any, version: str | None, write: bool) -> Entry:
        """The object's entry; without *write* (another shard writes it) its facts only."""
        problems = Problems()
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


def _record(changes: dict[str, Change], plural: str, made: Change | None) -> None:
    """Keep *made* as the kind's change, or none (its followers then look for themselves)."""
    if made is None:
        changes.pop(plural, None)
    else:
        changes[plural] = made


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


_Problems = tuple[list[Problem], list[tuple[str, str]]]


class Store:
    """What the last successful collection read, kept for the next one."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[str, Entry]] = {}
        self.versions: dict[str, int] = {}
        """Per resource, a number that changes whenever its list does."""
        self.skipped: dict[str, dict[str, str]] = {}
        """Per resource, the objects other shards write, by version."""
        self.warm: dict[str, dict[str, Entry]] = {}
        """Per resource, the entries the last list read that its last complete one did not give,
        kept should the collection fail (a deadline cut it short, another list failed): the
        next collection reuses them, so a cluster too big to read at once within the deadline
        is read over a few.  Each list replaces what the one before kept."""
        self.cluster = ClusterRows()
        self.kept: dict[str, KindBlocks] = {}
        """Per kind, its families' blocks as last written."""
        self.changes: dict[str, Change] = {}
        """Per kind, the entries before its last change, after it, and the keys touched in
        between (what a watch's events touched, or what a list found changed)."""
        self.fact_changes: dict[str, Change] = {}
        """Per kind, its facts before the last collection, after it, and what changed."""
        self._facts: dict[str, Made] = {}
        """Per kind, the entries last joined and their facts."""
        self._having: dict[str, Made] = {}
        """Per kind, the entries last looked at and those with problems."""
        self._problems: dict[str, Made] = {}
        """Per kind, its entries with problems and their problems."""
        self.last: Made | None = None
        """The last collection made, with the versions it was made of (its source)."""
        self.forgetting: list[Callable[[], None]] = []
        """Called when the store starts again (:meth:`start_again`): whatever else keeps what
        was made of the last collection (the renderer's blocks) forgets it too."""

    def start_again(self, plural: str) -> None:
        """Forget what was kept of *plural*'s last list and everything made of it.

        Most of its objects are new (a cluster replaced, a re-list after every object changed):
        every follower would make everything again, and what it kept would stay alive beside
        what it makes until the new collection is complete.  At 64,000 devices, the Python
        heap's peak during such a collection went from 338 to 212 MiB (188 held before it),
        with the renderer forgetting too.
        """
        self.entries.pop(plural, None)
        self.last = None
        self.kept.pop(plural, None)
        for kept in (self.changes, self.fact_changes, self._facts, self._having, self._problems):
            kept.pop(plural, None)
        self.cluster = ClusterRows()  # its index and rows join this kind's facts with the rest
        for forget in self.forgetting:
            forget()

    def problems_of(self, plural: str) -> _Problems:
        """The problems and class errors of the kind's entries, found again where they changed."""
        having, _, _ = self._follow(
            self._having, plural, lambda entry: entry, lambda e: bool(e.problems or e.class_errors)
        )
        found = self._problems.get(plural)
        if found is None or found.source is not having:
            made = (
                list(itertools.chain.from_iterable(map(_PROBLEMS, having.values()))),
                list(itertools.chain.from_iterable(map(_CLASS_ERRORS, having.values()))),
            )
            found = self._problems[plural] = Made(having, made)
        problems: _Problems = found.made
        return problems

    def facts_of(self, plural: str) -> dict[str, Any]:
        """Each entry's facts, by its key, in the entries' order (a new dict when they change)."""
        facts, before, touched = self._follow(self._facts, plural, _FACTS)
        if before is not None:
            _record(self.fact_changes, plural, change(before, facts, touched))
        return facts

    def _follow(
        self,
        kept: dict[str, Made],
        plural: str,
        value: Callable[[Entry], Any],
        wanted: Callable[[Entry], bool] | None = None,
    ) -> tuple[dict[str, Any], dict[str, Any] | None, Keys[str]]:
        """Per entry of the kind (those *wanted*), its *value*, in the entries' order.

        Made again only for the entries that changed since *kept*'s (32,000 claims gathered for
        each collection cost more than the twenty that changed); with the mapping before and
        the keys touched, when it was followed.
        """
        entries = self.entries.get(plural, {})
        found = kept.get(plural)
        if found is not None and found.source is entries:
            return found.made, None, ()
        touched: Keys[str] = (
            touched_between(found.source, entries, self.changes.get(plural))
            if found is not None
            else entries.keys()
        )
        if (
            found is None
            or many(len(touched), len(entries))
            or any(key in entries and key not in found.source for key in touched)
        ):  # many changed, or new ones (they go where the entries have them)
            if wanted is None:
                made = dict(zip(entries, map(value, entries.values()), strict=True))  # in C
            else:
                made = {key: value(e) for key, e in entries.items() if wanted(e)}
        elif not touched:
            made = found.made
        else:
            made = dict(found.made)
            for key in touched:
                entry = entries.get(key)
                if entry is not None and (wanted is None or wanted(entry)):
                    made[key] = value(entry)
                else:
                    made.pop(key, None)
        kept[plural] = Made(entries, made)
        return made, found.made if found is not None else None, touched


@attrs.define(eq=False, repr=False)
class Collection:
    """Every family's rows (made when asked for), and what could not be read."""

    selection: Selection
    _entries: dict[str, dict[str, Entry]]
    _keys: dict[str, Hashable]
    _cluster: Mapping[str, Laid]
    problems: list[Problem]
    """Every value not read: the objects' and the cross-object families'."""
    class_errors: dict[str, int]
    """Per class, devices whose match could not be decided."""
    class_error_messages: dict[str, str]
    _kept: dict[str, KindBlocks] = attrs.field(factory=dict)
    """Per kind, its families' blocks, kept from one collection to the next."""
    _changes: dict[str, Change] = attrs.field(factory=dict)
    """Per kind, what changed since the entries before (see :class:`KindBlocks`)."""
    cluster_problems: list[Problem] = attrs.field(factory=list)
    """The values the cross-object families could not read (also in :attr:`problems`)."""
    _slots: dict[str, int] = attrs.field(init=False)

    @_slots.default
    def _slots_of_families(self) -> dict[str, int]:
        return {
            family.name: slot
            for kind in {f.reads for f in self.selection.families if isinstance(f.reads, Kind)}
            for slot, family in enumerate(row_families(self.selection, kind))
        }

    @classmethod
    def of(cls, given: list[tuple[Family, list[Row]]]) -> Collection:
        """A collection of the given rows (for code that builds rows itself, and tests)."""
        families = tuple(family for family, _ in given)
        selection = Selection(frozenset(), families, Options())
        laid = {family.name: Laid({0: flatten(rows)}, {}) for family, rows in given}
        keys: dict[str, Hashable] = {name: ("given", id(found)) for name, found in laid.items()}
        return cls(selection, {}, keys, laid, [], {}, {})

    def key(self, family: Family) -> Hashable:
        """Equal for two collections whose rows of *family* are equal."""
        return self._keys[family.name]

    def rows(self, family: Family) -> Iterator[Row]:
        """The rows of one family, made as they are read (a family may have 160,000)."""
        width = len(family.labels) + 1
        for block in self.blocks(family):
            for flat in block:
                yield from expand(flat, width)

    def blocks(self, family: Family) -> Iterator[Block]:
        """The rows of one family in blocks: equal blocks, equal rows (see :data:`Block`)."""
        laid = self._cluster.get(family.name)
        if laid is not None or family.reads is CLUSTER:
            yield from filter(None, laid.view) if laid is not None else ()
            return
        plural = family.reads.plural  # type: ignore[union-attr]
        if family.current_generation:
            entries = self._entries.get(plural, {})
            slices = [entry.facts for entry in entries.values()]
            flats = [
                flat
                for facts in ClusterIndex.current(slices)
                for owner, flat in facts.rows
                if owner == family.name
            ]
            for start in range(0, len(flats), BLOCK_OBJECTS):
                yield tuple(flats[start : start + BLOCK_OBJECTS])
            return
        kept = self._kept.setdefault(plural, KindBlocks())
        entries = self._entries.get(plural, {})
        yield from filter(
            None, kept.blocks(entries, self._slots[family.name], self._changes.get(plural))
        )

    def families(self) -> Iterator[tuple[Family, list[Row]]]:
        """Each family that has rows, with its rows, in the order written."""
        for family in self.selection.families:
            rows = list(self.rows(family))
            if rows:
                yield family, rows


class CollectionBuilder:
    """Reads the lists of one collection into its store's entries; :meth:`finish` ends it."""

    def __init__(
        self,
        selection: Selection,
        matcher: Matcher,
        store: Store | None = None,
        shard: Shard = Shard(),  # noqa: B008 - frozen
        limit: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._selection = selection
        self._matcher = matcher
        self._store = store if store is not None else Store()
        self._shard = shard
        self._limit = limit
        """``--max-response-bytes``: what a page becomes is bounded by it too."""
        self._classes = ClassIndex()
        self._context: Hashable = ()
        matcher.new_collection()
        self._readers: dict[str, KindReader] = {}

    def reader(self, kind: Kind, live: bool = False) -> KindReader:
        """What reads the pages of *kind* (made when its list starts).

        A *live* reader lives on, applying watch events (see :meth:`snapshot`).
        """
        reads_classes = KINDS[kind].reads_classes
        context = self._context if reads_classes else None
        previous = self._store.entries.get(kind.plural, {})
        warm = None if live else self._store.warm.get(kind.plural, {})
        skipped = self._store.skipped.get(kind.plural, {})
        reader = KindReader(
            kind,
            self._selection,
            self._classes,
            context,
            previous,
            warm,
            self._shard,
            skipped,
            keep_sources=live and reads_classes,
            live=live,
            limit=self._limit,
            start_again=None if live else functools.partial(self._store.start_again, kind.plural),
        )
        if reader.warming is not None:
            self._store.warm[kind.plural] = reader.warming
        self._readers[kind.plural] = reader
        return reader

    def classes_listed(self) -> bool:
        """The classes are in: devices are matched and claims priced against them from now on.

        Return whether what devices are matched against changed (then the entries of the kinds
        read with the classes, made with the old ones, must be read again).
        """
        entries: list[ClassEntry] = [
            entry.facts
            for reader in self._readers.values()
            if KINDS[reader.kind].classes
            for entry in reader.entries.values()
        ]
        matcher = self._matcher if self._selection.evaluates_selectors else None
        self._classes = ClassIndex(entries, matcher)
        context = tuple((e.name, e.expressions) for e in entries)
        changed = context != self._context
        self._context = context
        for reader in self._readers.values():
            if KINDS[reader.kind].reads_classes:
                reader.reconfigure(self._classes, context)
        return changed

    async def finish(self, turns: Turns | None = None) -> Collection:
        """The lists are complete: keep them in the store and make the collection.

        *turns* lets the reactor answer meanwhile (a 64,000-device cluster takes a while).
        """
        store = self._store
        for plural, reader in self._readers.items():
            previous = store.entries.get(plural, {})
            if reader.changed_from(previous) or plural not in store.versions:
                store.versions[plural] = store.versions.get(plural, 0) + 1
                # Compared once here for the blocks, facts and problems that follow the entries.
                touched = touched_between(previous, reader.entries)
                _record(store.changes, plural, change(previous, reader.entries, touched))
            store.entries[plural] = reader.entries
            store.skipped[plural] = reader.skipped
            store.warm.pop(plural, None)
        return await self.collection(turns)

    def snapshot(self, plurals: Iterable[str]) -> None:
        """Keep the current entries of the readers of *plurals*, which events keep changing.

        The readers of the other resources (being listed again) keep their last snapshot.
        """
        store = self._store
        for plural in plurals:
            reader = self._readers[plural]
            previous = store.entries.get(plural, {})
            # An event sets changed; only a list made again can drop objects without one.
            moved = reader.changed or (reader.relisted and reader.changed_from(previous))
            if moved or plural not in store.versions:
                store.versions[plural] = store.versions.get(plural, 0) + 1
                store.entries[plural] = dict(reader.entries)
                if reader.relisted:  # objects may have gone without an event
                    store.changes.pop(plural, None)
                else:
                    made = change(previous, store.entries[plural], reader.touched)
                    _record(store.changes, plural, made)
            reader.changed = reader.relisted = False
            reader.touched = set()

    async def collection(self, turns: Turns | None = None) -> Collection:
        """The collection of the store's entries, with the cross-object families made."""
        turns = turns or Turns.never()
        self._matcher.collected()  # the lists of this one are read
        self._matcher.new_collection()  # what is read from now on is the next one's
        store = self._store
        listed = sorted(self._readers)
        made_of = tuple((name, store.versions.get(name, 0)) for name in listed)
        if store.last is not None and store.last.source == made_of:
            kept: Collection = store.last.made
            return kept  # nothing changed: a calm cluster's scrape costs nothing here
        keys: dict[str, Hashable] = {
            family.name: (
                id(store),
                *(
                    store.versions.get(name, 0)
                    for name in sorted(
                        family.needs | CLUSTER_NEEDS if family.reads is CLUSTER else family.needs
                    )
                ),
            )
            for family in self._selection.families
        }
        problems: list[Problem] = []
        class_errors: dict[str, int] = {}
        messages: dict[str, str] = {}
        for plural in listed:
            listed_problems, errors = store.problems_of(plural)
            problems.extend(listed_problems)
            for name, message in errors:
                class_errors[name] = class_errors.get(name, 0) + 1
                messages.setdefault(name, message)
            await turns.take()
        await self._cluster(keys, turns)
        cluster_problems = [
            problem
            for laid in store.cluster.laid.values()
            for found in laid.problems.values()
            for problem in found
        ]
        problems.extend(cluster_problems)
        collection = Collection(
            self._selection,
            dict(store.entries),
            keys,
            dict(store.cluster.laid),
            problems,
            class_errors,
            messages,
            store.kept,
            dict(store.changes),
            cluster_problems,
        )
        store.last = Made(made_of, collection)
        return collection

    async def _cluster(self, keys: dict[str, Hashable], turns: Turns) -> None:
        """Make again the cross-object families' rows that a change touched."""
        store = self._store
        facts = {plural: store.facts_of(plural) for plural in store.entries}
        await store.cluster.update(
            [f for f in self._selection.families if f.reads is CLUSTER],
            keys,
            store.versions,
            facts,
            self._classes,
            turns,
            self._shard,
            store.fact_changes,
        )
