"""The Node view: multi-host pools placed on the nodes they serve, node state, missing pools."""

from __future__ import annotations

from typing import Any

from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from tests.collect import collect, values
from tests.objects import NVIDIA, classy, gpu, pool_slice

VIEW = select(
    resources="resourceclaims,resourceslices,deviceclasses,nodes",
    options=FamilyOptions.from_flags({"expect-pools": (f"{NVIDIA}=gpu=true",)}),
)
CLIQUE = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "clique", "operator": "In", "values": ["a"]}]}
    ]
}


def node(name: str, ready: str = "True", cordoned: bool = False, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def channels() -> dict[str, Any]:
    made = pool_slice("channels", [gpu("ch-0"), gpu("ch-1")], pool="channels", nodeSelector=CLIQUE)
    del made["spec"]["nodeName"]
    return made


NODES = [
    node("n1", gpu="true", clique="a"),
    node("n2", gpu="true", clique="a", cordoned=True),
    node("n3", ready="False", gpu="true"),
    node("n4", gpu="true", clique="b"),
]
SLICES = [pool_slice(f"s-{n}", [gpu("g0")], pool=n) for n in ("n1", "n2", "n3", "gone")]
CLASSES = [classy(NVIDIA, f'device.driver == "{NVIDIA}"')]


def test_a_multi_host_pool_is_placed_on_the_nodes_it_serves() -> None:
    """Its fit is written on each node its selector matches, not on "" as without Nodes."""
    slices = [*SLICES, channels()]
    viewed = collect(slices=slices, classes=CLASSES, nodes=NODES, selection=VIEW)
    plain = collect(slices=slices, classes=CLASSES)
    fit = "kube_resourcepool_allocatable_devices"
    assert values(plain, fit, "pool", "node_name") == {
        ("n1", "n1"): 1.0,
        ("n2", "n2"): 1.0,
        ("n3", "n3"): 1.0,
        ("gone", "gone"): 1.0,
        ("channels", ""): 2.0,
    }
    assert values(viewed, fit, "pool", "node_name") == {
        ("n1", "n1"): 1.0,
        ("n2", "n2"): 1.0,
        ("n3", "n3"): 1.0,
        ("gone", "gone"): 1.0,
        ("channels", "n1"): 2.0,
        ("channels", "n2"): 2.0,
    }


def test_node_local_pools_say_how_their_node_is() -> None:
    viewed = collect(slices=[*SLICES, channels()], classes=CLASSES, nodes=NODES, selection=VIEW)
    assert values(viewed, "kube_resourcepool_node_state", "pool", "node_name", "state") == {
        ("n1", "n1", "ready"): 1.0,
        ("n2", "n2", "unschedulable"): 1.0,
        ("n3", "n3", "not_ready"): 1.0,
        ("gone", "gone", "absent"): 1.0,
    }


def test_a_node_no_pool_of_an_expected_driver_serves_is_missing_one() -> None:
    """n4 is a GPU node (gpu=true) that no pool of the driver serves; the channels serve n1, n2.

    With the channels' driver expected on the clique a nodes too, none is missing for it.
    """
    viewed = collect(slices=[*SLICES, channels()], classes=CLASSES, nodes=NODES, selection=VIEW)
    assert values(viewed, "kube_node_dra_pool_missing", "node_name", "driver") == {
        ("n4", NVIDIA): 1.0
    }
    alone = collect(slices=[channels()], classes=CLASSES, nodes=NODES, selection=VIEW)
    assert values(alone, "kube_node_dra_pool_missing", "node_name") == {
        ("n3",): 1.0,
        ("n4",): 1.0,
    }


def test_nodes_that_read_alike_keep_the_index() -> None:
    """A Node written again (its heartbeat) with nothing the view reads changed: no new join."""
    from kdraexp.store.collection import Store

    store = Store()
    collect(slices=SLICES, classes=CLASSES, nodes=NODES, selection=VIEW, store=store)
    index = store.cluster._index
    again = [dict(n, metadata=dict(n["metadata"])) for n in NODES]
    again[0]["metadata"]["resourceVersion"] = "2"  # heartbeats come one node at a time
    collect(slices=SLICES, classes=CLASSES, nodes=again, selection=VIEW, store=store)
    assert store.cluster._index is index
    again[0] = dict(again[0], spec={"unschedulable": True})
    again[0]["metadata"]["resourceVersion"] = "3"
    changed = collect(slices=SLICES, classes=CLASSES, nodes=again, selection=VIEW, store=store)
    assert store.cluster._index is not index
    assert values(changed, "kube_resourcepool_node_state", "pool", "state")[("n1", "unschedulable")]


def _pod(name: str, claim: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "workloads", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": "dev", "resourceClaimName": claim}], **spec},
    }


def test_a_feasible_request_no_node_its_pods_may_use_can_meet_is_unreachable() -> None:
    """A channel claim whose pod is pinned outside clique a waits for ever: ``unreachable``.

    Pinned inside (by nodeSelector, by required node affinity), or without the Node view, it
    reads ``feasible``.
    """
    from tests.objects import new_claim

    channel = classy("channel", f'device.driver == "{NVIDIA}"')
    request = [{"name": "dev", "exactly": {"deviceClassName": "channel"}}]
    claims = [new_claim(name, None, requests=request) for name in ("out", "in", "affine")]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": CLIQUE}}
    pods = [
        _pod("out", "out", nodeSelector={"clique": "b"}),
        _pod("in", "in", nodeSelector={"clique": "a"}),
        _pod("affine", "affine", affinity=affinity),
    ]
    both = select(
        resources="resourceclaims,resourceslices,deviceclasses,nodes,pods",
    )
    objects: dict[str, Any] = {"slices": [channels()], "classes": [channel], "claims": claims}
    viewed = collect(**objects, nodes=NODES, pods=pods, selection=both)
    assert values(viewed, "kube_resourceclaim_pending_reason", "resourceclaim_name", "reason") == {
        ("out", "unreachable"): 1.0,
        ("in", "feasible"): 1.0,
        ("affine", "feasible"): 1.0,
    }
    without = select(resources="resourceclaims,resourceslices,deviceclasses,pods")
    plain = collect(**objects, pods=pods, selection=without)
    assert {
        reason for (reason,) in values(plain, "kube_resourceclaim_pending_reason", "reason")
    } == {"feasible"}


GB200 = [
    node("gb-0", gpu="true", clique="gb"),
    node("gb-1", gpu="true", clique="gb"),
    node("gb-2", gpu="true", clique="gb"),
    node("other", gpu="true", clique="b"),
]
GB_CLIQUE = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "clique", "operator": "In", "values": ["gb"]}]}
    ]
}


def gb200() -> dict[str, Any]:
    """A pool with a GPU bound to each of gb-0 and gb-1 and one device for the whole clique.

    gb-2 is in the clique with no GPU of its own: the clique's device alone serves it.
    """
    made = pool_slice(
        "gb",
        [
            gpu("gpu-0", nodeName="gb-0"),
            gpu("gpu-1", nodeName="gb-1"),
            gpu("imex", nodeSelector=GB_CLIQUE),
        ],
        pool="gb",
        perDeviceNodeSelection=True,
    )
    del made["spec"]["nodeName"]
    return made


def test_a_device_placed_by_its_own_selector_counts_beside_the_nodes_own() -> None:
    """The clique's device fits on each node it matches, with that node's GPU: 2 on gb-0.

    As the allocator selects devices under ``perDeviceNodeSelection``, one by one: a pod pinned
    to gb-1 may take gpu-1 and the clique's device.  Without the Node view the clique's device
    stays on "".
    """
    fit = "kube_resourcepool_allocatable_devices"
    viewed = collect(slices=[gb200()], classes=CLASSES, nodes=GB200, selection=VIEW)
    assert values(viewed, fit, "node_name") == {("gb-0",): 2.0, ("gb-1",): 2.0, ("gb-2",): 1.0}
    plain = collect(slices=[gb200()], classes=CLASSES)
    assert values(plain, fit, "node_name") == {("gb-0",): 1.0, ("gb-1",): 1.0, ("",): 1.0}


def test_devices_placed_by_different_selectors_count_where_each_serves() -> None:
    """Two devices of one pool, each its own clique's: each node counts its clique's only."""
    other = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "clique", "operator": "In", "values": ["b"]}]}
        ]
    }
    made = gb200()
    made["spec"]["devices"].append(gpu("imex-b", nodeSelector=other))
    viewed = collect(slices=[made], classes=CLASSES, nodes=GB200, selection=VIEW)
    assert values(viewed, "kube_resourcepool_allocatable_devices", "node_name") == {
        ("gb-0",): 2.0,
        ("gb-1",): 2.0,
        ("gb-2",): 1.0,
        ("other",): 1.0,
    }


def test_a_node_only_a_device_selector_serves_misses_no_pool() -> None:
    """gb-2 is served by the clique's device alone; other, in no clique of the pool, is not."""
    viewed = collect(slices=[gb200()], classes=CLASSES, nodes=GB200, selection=VIEW)
    assert values(viewed, "kube_node_dra_pool_missing", "node_name") == {("other",): 1.0}
    assert values(viewed, "kube_resourcepool_node_state", "pool", "node_name") == {
        ("gb", "gb-0"): 1.0,
        ("gb", "gb-1"): 1.0,
    }


def _pinned(name: str) -> dict[str, Any]:
    """Required node affinity for the node *name* alone (a pod not bound yet)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def test_a_pod_pinned_to_a_node_may_take_its_gpu_and_the_clique_device() -> None:
    """Two devices for a pod pinned to gb-1 are feasible: gpu-1 and the clique's device.

    Pinned to other, which the clique's device does not serve, they are unreachable.
    """
    from tests.objects import new_claim

    request = [{"name": "dev", "exactly": {"deviceClassName": NVIDIA, "count": 2}}]
    claims = [new_claim(name, None, requests=request) for name in ("gb-1", "other")]
    pods = [_pod(name, name, affinity=_pinned(name)) for name in ("gb-1", "other")]
    both = select(resources="resourceclaims,resourceslices,deviceclasses,nodes,pods")
    viewed = collect(
        slices=[gb200()], classes=CLASSES, claims=claims, nodes=GB200, pods=pods, selection=both
    )
    assert values(viewed, "kube_resourceclaim_pending_reason", "resourceclaim_name", "reason") == {
        ("gb-1", "feasible"): 1.0,
        ("other", "unreachable"): 1.0,
    }
