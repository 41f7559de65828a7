"""Families kept compressed: one valid gzip member from many segments, reused until they change."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from kdraexp.exposition import rendering
from kdraexp.exposition import text as exposition
from kdraexp.exposition.rendering import Renderer, Segment, crc32_combine
from kdraexp.families.deviceclass import class_created, class_hourly_cost
from kdraexp.families.resourceclaim import allocated_device
from kdraexp.families.selection import select
from kdraexp.store.collection import Collection, Store
from tests.collect import collect
from tests.conftest import result_of
from tests.objects import classy, gpu, new_claim, pool_slice, result


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


def test_long_texts_combine() -> None:
    """Both ways of combining: zlib over zeros for a short text, powers of x for a long one."""
    first = bytes(range(256)) * 3
    for length in (1, 65535, 65536, 65537, 300001):
        second = bytes((i * 7) % 251 for i in range(length))
        assert crc32_combine(zlib.crc32(first), zlib.crc32(second), length) == zlib.crc32(
            first + second
        )


Change = tuple[str, int]
changes = st.lists(
    st.tuples(
        st.sampled_from(["toggle", "delete", "add", "slice", "odd", "pod", "node"]),
        st.integers(0, 199),
    ),
    max_size=8,
)
EVERY_KIND = select(resources="resourceclaims,resourceslices,deviceclasses,pods,nodes")
"""Pods and Nodes too: their sets are made again whenever one is, never followed."""


def pod_of(claim: str, bound: bool, step: int) -> dict[str, Any]:
    """A pod of *claim*'s namespace using it, bound to node-1 or waiting."""
    return {
        "metadata": {
            "name": f"{claim}-pod",
            "namespace": "workloads",
            "uid": f"uid-{claim}-pod",
            "resourceVersion": str(step),
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            **({"nodeName": "node-1"} if bound else {}),
        },
        "status": {},
    }


def node_of(index: int, ready: bool, step: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"node-{index}",
            "uid": f"uid-node-{index}",
            "resourceVersion": str(step),
            "labels": {"gpu": "true"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def cluster_of(claims: dict[str, dict[str, Any]], generation: int) -> dict[str, Any]:
    slices = [
        pool_slice(
            f"slice-{p}",
            [gpu(f"gpu-{p}-{d}") for d in range(4)],
            pool=f"node-{p}",
            generation=generation if p == 0 else 1,
        )
        for p in range(10)
    ]
    slices[0]["metadata"]["resourceVersion"] = str(generation)  # a changed object, a new version
    return {"claims": list(claims.values()), "slices": slices}


@settings(max_examples=40, deadline=None)
@given(changes)
def test_kept_blocks_write_what_a_fresh_render_writes(steps: list[Change]) -> None:
    """After any changes, the body kept block by block equals one rendered from nothing.

    Pods using claims and the Nodes the slices are on are listed too, and change.
    """
    classes = [classy("gpu.nvidia.com", cost="2")]
    claims = {}
    for i in range(200):
        name = f"claim-{i:03d}"
        found = [result(f"gpu-{i % 10}-{i % 4}", pool=f"node-{i % 10}")] if i % 3 else None
        claims[name] = new_claim(name, found, reserved=i % 2 == 0)
    pods = {name: pod_of(name, i % 2 == 0, 0) for i, name in enumerate(sorted(claims)[:20])}
    nodes = [node_of(index, True, 0) for index in range(10)]
    generation = 1
    store, renderer = Store(), Renderer(Clock())
    for step, (change, at) in enumerate([("none", 0), *steps]):
        name = sorted(claims)[at % len(claims)]
        if change == "pod":
            was = pods.get(name)
            pods[name] = pod_of(name, was is None or "nodeName" not in was["spec"], step)
        elif change == "node":
            was_ready = nodes[at % 10]["status"]["conditions"][0]["status"] == "True"
            nodes[at % 10] = node_of(at % 10, not was_ready, step)
        elif change == "toggle":
            status = claims[name]["status"]
            claims[name] = new_claim(name, None if status else [result("gpu-1-1", pool="node-1")])
        elif change == "delete" and len(claims) > 1:
            del claims[name]
        elif change in ("add", "odd"):
            added = f"added-{step}" + (' "quoted"' if change == "odd" else "")
            claims[added] = new_claim(added, [result("gpu-2-2", pool="node-2")], reserved=True)
        elif change == "slice":
            generation += 1
        for made in claims.values():
            made["metadata"]["resourceVersion"] = str(step)
        objects = cluster_of(claims, generation)
        listed = {
            "claims": objects["claims"],
            "slices": objects["slices"],
            "classes": classes,
            "pods": [made for key, made in pods.items() if key in claims],
            "nodes": nodes,
            "selection": EVERY_KIND,
        }
        kept = collect(**listed, store=store)
        fresh = collect(**listed)
        zipped, text = bodies(renderer, kept, b"")
        assert text == bodies(Renderer(Clock()), fresh, b"")[1]
        assert text == b"".join(exposition.encode_collection(fresh))
        assert gzip.decompress(zipped) == text


def test_a_changed_claim_renders_its_blocks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of 2,000 claims one changes: each family renders a block or two, not its 2,000 rows."""
    claims = [new_claim(f"claim-{i:04d}", [result(f"gpu-{i}")], reserved=True) for i in range(2000)]
    classes = [classy("gpu.nvidia.com", cost="1")]
    store, renderer = Store(), Renderer(Clock())
    bodies(renderer, collect(claims=claims, classes=classes, store=store), b"")
    rendered: dict[str, list[int]] = {}
    deflated = rendering.Renderer._deflated

    async def counting(self: Any, block: Any, family: Any) -> Any:
        rows = sum(len(flat) for flat in block) // (len(family.labels) + 1)
        rendered.setdefault(family.name, []).append(rows)
        return await deflated(self, block, family)

    monkeypatch.setattr(rendering.Renderer, "_deflated", counting)
    claims[1234] = new_claim("claim-1234", None)
    claims[1234]["metadata"]["resourceVersion"] = "2"
    changed = collect(claims=claims, classes=classes, store=store)
    text = bodies(renderer, changed, b"")[1]
    assert text == b"".join(exposition.encode_collection(changed))
    assert rendered, "the changed claim's blocks were rendered"
    for name, blocks in rendered.items():
        assert len(blocks) <= 2 and sum(blocks) <= 128, f"{name}: blocks of {blocks} rows"


def test_a_pools_new_generation_beside_its_old_slice_writes_what_fresh_writes() -> None:
    """The device families count a pool's new generation alone, kept as a fresh render writes.

    Of 500 pools one publishes a new generation while its old slice is still listed; then the
    old slice goes.
    """
    slices = [
        pool_slice(f"slice-{p}", [gpu(f"gpu-{p}-{d}") for d in range(4)], pool=f"node-{p}")
        for p in range(500)
    ]
    store, renderer = Store(), Renderer(Clock())
    bodies(renderer, collect(slices=slices, store=store), b"")
    slices.append(pool_slice("slice-new", [gpu("gpu-new")], pool="node-257", generation=2))
    info = b"kube_resourceslice_device_info{resourceslice_name="
    for _ in range(2):
        text = bodies(renderer, collect(slices=slices, store=store), b"")[1]
        assert text == bodies(Renderer(Clock()), collect(slices=slices), b"")[1]
        assert info + b'"slice-new"' in text and info + b'"slice-257"' not in text
        del slices[257]


def test_a_store_starting_again_drops_what_the_renderer_kept_and_writes_as_fresh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the renderer keeps goes with the store's rows: dropped at once, its text unchanged.

    Every claim replaced: the blocks and sorted rows the renderer kept with the store (they hold
    the last collection's rows) are dropped as soon as the list turns out mostly new, and the
    renderer writes what a renderer with nothing kept writes.
    """
    classes = [classy("gpu.nvidia.com", cost="2")]
    store, renderer = Store(), Renderer(Clock())
    kept_then: list[int] = []
    start_again = Store.start_again

    def starting_again(self: Store, plural: str) -> None:
        kept_then.append(len(self.written))
        start_again(self, plural)
        kept_then.append(len(self.written))

    monkeypatch.setattr(Store, "start_again", starting_again)
    slices = cluster_of({}, 1)["slices"]
    for turn in range(3):
        claims = [
            new_claim(f"claim-{turn}-{i}", [result(f"gpu-{i % 10}-{i % 4}", pool=f"node-{i % 10}")])
            for i in range(40)
        ]
        kept = collect(claims=claims, slices=slices, classes=classes, store=store)
        fresh = collect(claims=claims, slices=slices, classes=classes)
        assert bodies(renderer, kept, b"")[1] == bodies(Renderer(Clock()), fresh, b"")[1]
    assert len(kept_then) == 4 and kept_then[0] > 0  # dropped before the list was read through
    assert kept_then[1::2] == [0, 0]
