"""Collections: each object read once as its page arrives, its rows kept until it changes.

A collection lists every object, as the original does, but an object whose ``resourceVersion``
has not changed since the last collection keeps the rows it gave then: in a cluster where little
changes between scrapes, a scrape costs the lists and their decoding, not the families.  Rows are
kept per object (kube-state-metrics' model, read by :mod:`kdraexp.store.reader`); the families
that need every object at once (pools, device states, cost) are made again for what changed
(:mod:`kdraexp.store.clusterrows`).

Each family's output has a *key*, the versions of the lists it reads: equal keys, equal rows, so
a writer may reuse what it wrote for that key; and its rows come in blocks
(:mod:`kdraexp.store.rows`), so a writer may reuse what it wrote for the blocks a change did not
touch (:mod:`kdraexp.exposition.rendering` keeps both compressed, in :attr:`Collection.written`).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Collection as Keys
from typing import Any

import attrs

from kdraexp.allocator import CLUSTER_NEEDS, current, join_inputs
from kdraexp.cel.classindex import ClassEntry, ClassIndex
from kdraexp.cel.matching import Matcher
from kdraexp.dra.listing import DEFAULT_MAX_RESPONSE_BYTES, Kind
from kdraexp.dra.problems import Problem
from kdraexp.families import KINDS
from kdraexp.families.family import CLUSTER, Family, Row
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import Selection
from kdraexp.store.budget import MatcherBudget
from kdraexp.store.changes import Change, Everything, Made, change, many, touched_between
from kdraexp.store.clusterrows import ClusterRows, Laid
from kdraexp.store.keptblocks import KindBlocks
from kdraexp.store.reader import Entry, KindReader, row_families
from kdraexp.store.rows import BLOCK_OBJECTS, Block, Flat, expand, flatten
from kdraexp.store.sharding import Shard
from kdraexp.util.turns import Turns

_FACTS = operator.attrgetter("facts")
_PROBLEMS = operator.attrgetter("problems")
_CLASS_ERRORS = operator.attrgetter("class_errors")
_Problems = tuple[list[Problem], list[tuple[str, str]]]


@attrs.define(eq=False)
class KindState:
    """What the store keeps of one kind that was made of its last list: forgotten in one step.

    A memo added here is forgotten with the rest when the store starts again
    (:meth:`Store.start_again`).
    """

    entries: dict[str, Entry] = attrs.Factory(dict)
    """Each object's entry, by its key, in the order listed."""
    blocks: KindBlocks = attrs.Factory(KindBlocks)
    """Its families' blocks as last written."""
    changes: Change | None = None
    """The entries before its last change, after it, and the keys touched in between (what a
    watch's events touched, or what a list found changed)."""
    fact_changes: Change | None = None
    """Its facts before the last collection, after it, and what changed."""
    facts: Made | None = None
    """The entries last joined and their facts."""
    having: Made | None = None
    """The entries last looked at and those with problems."""
    problems: Made | None = None
    """Its entries with problems, and their problems."""
    current: Made | None = None
    """Its facts last looked at, and per family counting only the current generation, its
    blocks."""


class Store:
    """What the last successful collection read, kept for the next one."""

    def __init__(self) -> None:
        self.kinds: dict[str, KindState] = {}
        """Per resource, what was made of its last list."""
        self.versions: dict[str, int] = {}
        """Per resource, a number that changes whenever its list does (kept when the store
        starts again: a family's key must never come back to one written before)."""
        self.skipped: dict[str, dict[str, str]] = {}
        """Per resource, the objects other shards write, and those that give nothing, by
        version."""
        self.warm: dict[str, dict[str, Entry]] = {}
        """Per resource, the entries the last list read that its last complete one did not give,
        kept should the collection fail (a deadline cut it short, another list failed): the
        next collection reuses them, so a cluster too big to read at once within the deadline
        is read over a few.  Each list replaces what the one before kept."""
        self.cluster = ClusterRows()
        self.written: dict[Hashable, Any] = {}
        """What writers keep of the families' rows to find them again (the renderer's blocks
        and sorted rows), by family: forgotten with the rows when the store starts again."""
        self.last: Made | None = None
        """The last collection made, with the versions it was made of (its source)."""

    def kind(self, plural: str) -> KindState:
        """What is kept of *plural* (nothing yet: a state of its own, kept from now on)."""
        state = self.kinds.get(plural)
        if state is None:
            state = self.kinds[plural] = KindState()
        return state

    def entries(self, plural: str) -> dict[str, Entry]:
        """The entries of *plural*'s last list (none before its first)."""
        state = self.kinds.get(plural)
        return state.entries if state is not None else {}

    def start_again(self, plural: str) -> None:
        """Forget what was kept of *plural*'s last list and everything made of it.

        Most of its objects are new (a cluster replaced, a re-list after every object changed):
        every follower would make everything again, and what it kept would stay alive beside
        what it makes until the new collection is complete.  At 64,000 devices, the Python
        heap's peak during such a collection went from 338 to 212 MiB (188 held before it),
        with what the renderer kept forgotten too.
        """
        self.kinds.pop(plural, None)
        self.last = None
        self.cluster = ClusterRows()  # its index and rows join this kind's facts with the rest
        self.written = {}

    def problems_of(self, plural: str) -> _Problems:
        """The problems and class errors of the kind's entries, found again where they changed."""
        state = self.kind(plural)
        having, _, _, state.having = _follow(
            state, state.having, lambda entry: entry, lambda e: bool(e.problems or e.class_errors)
        )
        found = state.problems
        if found is None or found.source is not having:
            made = (
                list(itertools.chain.from_iterable(map(_PROBLEMS, having.values()))),
                list(itertools.chain.from_iterable(map(_CLASS_ERRORS, having.values()))),
            )
            found = state.problems = Made(having, made)
        problems: _Problems = found.made
        return problems

    def facts_of(self, plural: str) -> dict[str, Any]:
        """Each entry's facts, by its key, in the entries' order (a new dict when they change)."""
        state = self.kind(plural)
        facts, before, touched, state.facts = _follow(state, state.facts, _FACTS)
        if before is not None:
            state.fact_changes = change(before, facts, touched)
        return facts

    def current_of(self, plural: str, families: list[Family]) -> dict[str, list[Block]]:
        """Per family of *families*, its blocks of the slices of their pools' current generation.

        Made again when the slices' facts are (:meth:`facts_of` follows them), in blocks of
        :data:`BLOCK_OBJECTS` slices: large ones, deflated with more of the text before them.
        """
        state = self.kind(plural)
        facts = self.facts_of(plural)
        found = state.current
        if found is not None and found.source is facts:
            made: dict[str, list[Block]] = found.made
            return made
        flats: dict[str, list[Flat]] = {family.name: [] for family in families}
        for key in current(facts):
            for name, flat in facts[key].rows:
                flats[name].append(flat)
        made = {
            name: [
                tuple(found[at : at + BLOCK_OBJECTS]) for at in range(0, len(found), BLOCK_OBJECTS)
            ]
            for name, found in flats.items()
        }
        state.current = Made(facts, made)
        return made


def _follow(
    state: KindState,
    found: Made | None,
    value: Callable[[Entry], Any],
    wanted: Callable[[Entry], bool] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None, Keys[str], Made]:
    """Per entry of the kind (those *wanted*), its *value*, in the entries' order.

    Made again only for the entries that changed since *found*'s (32,000 claims gathered for
    each collection cost more than the twenty that changed); with the mapping before and the
    keys touched, when it was followed, and what to keep for the next time.
    """
    entries = state.entries
    if found is not None and found.source is entries:
        return found.made, None, (), found
    touched: Keys[str] = (
        touched_between(found.source, entries, state.changes)
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
    return made, found.made if found is not None else None, touched, Made(entries, made)


@attrs.define(eq=False, repr=False)
class Collection:
    """Every family's rows (made when asked for), and what could not be read."""

    selection: Selection
    _entries: dict[str, dict[str, Entry]]
    _keys: dict[str, Hashable]
    _made: Mapping[str, Sequence[Block]]
    """Per family whose blocks were made with the collection, its blocks: the cross-object
    families', and those counting the current generation only."""
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
    written: dict[Hashable, Any] = attrs.field(factory=dict)
    """What a writer keeps of each family's rows to find them again in the next collection of
    the same store (:attr:`Store.written`): dropped with those rows when the store starts
    again, so nothing kept for them holds them alive beside the new ones."""
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
        selection = Selection(frozenset(), families, FamilyOptions())
        made = {family.name: Laid({0: flatten(rows)}, {}).view for family, rows in given}
        keys: dict[str, Hashable] = {name: ("given", id(found)) for name, found in made.items()}
        return cls(selection, {}, keys, made, [], {}, {})

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
        """The rows of one family in blocks: equal blocks, equal rows (see :data:`Block`).

        Made with the collection (a cross-object family's, or one counting the current
        generation only), else cut of each object's kept rows.
        """
        made = self._made.get(family.name)
        if made is not None or family.reads is CLUSTER:
            yield from filter(None, made or ())
            return
        plural = family.reads.plural  # type: ignore[union-attr]
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
        self._budget = MatcherBudget(matcher)
        self._readers: dict[str, KindReader] = {}
        self._generation_families: dict[str, list[Family]] = {}
        """Per kind, the families counting only the current generation (laid when collected)."""
        for family in selection.families:
            if family.current_generation and isinstance(family.reads, Kind):
                self._generation_families.setdefault(family.reads.plural, []).append(family)

    def reader(self, kind: Kind, live: bool = False) -> KindReader:
        """What reads the pages of *kind* (made when its list starts).

        A *live* reader lives on, applying watch events (see :meth:`snapshot`).
        """
        reads_classes = KINDS[kind].reads_classes
        context = self._context if reads_classes else None
        previous = self._store.entries(kind.plural)
        warm = None if live else self._store.warm.get(kind.plural, {})
        skipped = self._store.skipped.get(kind.plural, {})
        reader = KindReader(
            kind,
            self._selection,
            self._classes,
            self._budget,
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
            state = store.kind(plural)
            previous = state.entries
            if reader.changed_from(previous) or plural not in store.versions:
                store.versions[plural] = store.versions.get(plural, 0) + 1
                # Compared once here for the blocks, facts and problems that follow the entries.
                touched = touched_between(previous, reader.entries)
                state.changes = change(previous, reader.entries, touched)
            state.entries = reader.entries
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
            state = store.kind(plural)
            previous = state.entries
            # An event sets changed; only a list made again can drop objects without one.
            moved = reader.changed or (reader.relisted and reader.changed_from(previous))
            if moved or plural not in store.versions:
                store.versions[plural] = store.versions.get(plural, 0) + 1
                state.entries = dict(reader.entries)
                # After a list made again, objects may have gone without an event.
                touched = reader.touched
                state.changes = (
                    None
                    if reader.relisted or isinstance(touched, Everything)
                    else change(previous, state.entries, touched)
                )
            reader.changed = reader.relisted = False
            reader.touched = set()

    async def collection(self, turns: Turns | None = None) -> Collection:
        """The collection of the store's entries, with the cross-object families made."""
        turns = turns or Turns.never()
        self._budget.collected()  # what is read from now on is the next one's
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
        made = {name: laid.view for name, laid in store.cluster.laid.items()}
        for plural, families in self._generation_families.items():
            made.update(store.current_of(plural, families))
        kinds = store.kinds
        collection = Collection(
            self._selection,
            {plural: state.entries for plural, state in kinds.items()},
            keys,
            made,
            problems,
            class_errors,
            messages,
            {plural: state.blocks for plural, state in kinds.items()},
            {plural: state.changes for plural, state in kinds.items() if state.changes},
            cluster_problems,
            store.written,
        )
        store.last = Made(made_of, collection)
        return collection

    async def _cluster(self, keys: dict[str, Hashable], turns: Turns) -> None:
        """Make again the cross-object families' rows that a change touched."""
        store = self._store
        facts = {plural: store.facts_of(plural) for plural in list(store.kinds)}
        changes = {p: state.fact_changes for p, state in store.kinds.items() if state.fact_changes}
        await store.cluster.update(
            [f for f in self._selection.families if f.reads is CLUSTER],
            keys,
            join_inputs(facts, store.versions, changes),
            self._classes,
            self._budget,
            turns,
            self._shard,
            self._selection.options.expected_pools,
        )
