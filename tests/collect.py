"""Collections made in memory from DRA objects, and what they write, for the family tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.defer import Deferred

from kdraexp.cel.matching import Matcher
from kdraexp.cel.process import Evaluator
from kdraexp.dra.listing import Kind, Source
from kdraexp.exposition import text as exposition
from kdraexp.families.selection import Selection, select
from kdraexp.sources.gather import listed_first
from kdraexp.store.collection import Collection, CollectionBuilder, Store
from kdraexp.store.reader import KindReader
from kdraexp.store.sharding import Shard
from kdraexp.util.turns import CHUNK
from tests.conftest import result_of

EVALUATOR = Evaluator()
"""One evaluation process for the collections the tests make (each Matcher could start its own)."""


class Recorder:
    """A Reader that keeps what it is handed."""

    chunk = CHUNK
    off_reactor = False

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.pages = 0
        self.restarts = 0
        self.count: int | None = None
        """What the source said it listed."""

    def response(self) -> None:
        pass

    def page(self, items: Sequence[Any]) -> None:
        self.items.extend(items)
        self.pages += 1

    def restart(self) -> None:
        self.items.clear()
        self.restarts += 1


class Both:
    """Hands each page to a Recorder and to a real reader."""

    chunk = CHUNK
    off_reactor = False

    def __init__(self, recorder: Recorder, reader: KindReader) -> None:
        self._recorder, self._reader = recorder, reader

    def response(self) -> None:
        pass

    def page(self, items: Sequence[Any]) -> None:
        self._recorder.page(items)
        self._reader.page(items)

    def restart(self) -> None:
        self._recorder.restart()
        self._reader.restart()


def fetch(source: Source, kind: Kind, read: bool = False) -> Deferred[Recorder]:
    """List *kind* from *source* into a Recorder; with *read*, also through a real reader."""
    reader = CollectionBuilder(select(), Matcher(EVALUATOR)).reader(kind) if read else None

    async def run() -> Recorder:
        recorder = Recorder()
        recorder.count = await source.fetch(
            kind, recorder if reader is None else Both(recorder, reader)
        )
        return recorder

    return Deferred.fromCoroutine(run())


PAGE = 500
"""Objects a page, as ``--page-size``'s default lists them."""


def collect(
    claims: Iterable[dict[str, Any]] = (),
    slices: Iterable[dict[str, Any]] = (),
    classes: Iterable[dict[str, Any]] = (),
    rules: Iterable[dict[str, Any]] = (),
    pods: Iterable[dict[str, Any]] = (),
    nodes: Iterable[dict[str, Any]] = (),
    selection: Selection | None = None,
    matcher: Matcher | None = None,
    store: Store | None = None,
    shard: Shard = Shard(),  # noqa: B008 - frozen
) -> Collection:
    """The collection these objects make, listed as the gatherer lists them (by *shard*)."""
    chosen = selection or select(
        resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules"
    )
    objects = {
        "resourceclaims": list(claims),
        "resourceslices": list(slices),
        "deviceclasses": list(classes),
        "devicetaintrules": list(rules),
        "pods": list(pods),
        "nodes": list(nodes),
    }
    builder = CollectionBuilder(chosen, matcher or Matcher(EVALUATOR), store, shard)
    for first in (True, False):
        for kind in chosen.kinds:
            if listed_first(kind) != first:
                continue
            items = [msgspec.Raw(msgspec.json.encode(o)) for o in objects.get(kind.plural, ())]
            reader = builder.reader(kind)
            for start in range(0, max(len(items), 1), PAGE):
                reader.response()
                reader.page(items[start : start + PAGE])
        if first:
            builder.classes_listed()
    return result_of(Deferred.fromCoroutine(builder.finish()))


def by_kind(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The objects of a YAML ``List`` (as examples/cluster.yaml), by their kind."""
    found: dict[str, list[dict[str, Any]]] = {}
    for item in yaml.safe_load(path.read_text())["items"]:
        found.setdefault(str(item["kind"]), []).append(item)
    return found


def collect_kinds(objects: dict[str, list[dict[str, Any]]], selection: Selection) -> Collection:
    """The collection of *objects* by kind (as :func:`by_kind` gives them) by *selection*."""
    return collect(
        claims=objects.get("ResourceClaim", ()),
        slices=objects.get("ResourceSlice", ()),
        classes=objects.get("DeviceClass", ()),
        rules=objects.get("DeviceTaintRule", ()),
        pods=objects.get("Pod", ()),
        nodes=objects.get("Node", ()),
        selection=selection,
    )


def text(collection: Collection) -> str:
    """The exposition of the DRA families."""
    return b"".join(exposition.encode_collection(collection)).decode()


def samples(collection: Collection) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Family name -> (labels, value) of each sample, read back from the exposition."""
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text(collection))
    }


def labels(collection: Collection, family: str) -> list[dict[str, str]]:
    """The label sets of one family's samples."""
    return [labels for labels, _ in samples(collection).get(family, [])]


def values(collection: Collection, family: str, *keys: str) -> dict[tuple[str, ...], float]:
    """One family's values keyed by the named labels."""
    return {
        tuple(sample_labels[key] for key in keys): value
        for sample_labels, value in samples(collection).get(family, [])
    }
