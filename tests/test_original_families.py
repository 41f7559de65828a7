"""The original's seven families: its identity cases and our improvements."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdraexp.families.selection import select
from kdraexp.store.collection import Collection
from tests.collect import collect, text
from tests.objects import claim, device, resource_slice

SELECTOR = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["west"]}]}
    ]
}
CAPACITY = {"memory": "1Gi", "multiprocessors": "16", "decoders": "2"}


ORIGINAL = select(
    allowlist=",".join(
        [
            "^kube_resourceclaim_status_allocated_device$",
            "^kube_resourceclaim_status_reserved_for_pod$",
            "^kube_resourceclaim_status_reserved_total$",
            "^kube_resourceslice_device_capacity_(memory_bytes|multiprocessors|decoders)$",
            "^kube_deviceclass_hourly_cost$",
        ]
    )
)
"""The original's seven families and no other."""


def reduce(objects: list[dict[str, Any]], plural: str) -> Collection:
    """The original's families for objects of one kind."""
    return collect(**{plural: objects}, selection=ORIGINAL)  # type: ignore[arg-type]


def parsed(collection: Collection) -> dict[str, list[dict[str, str]]]:
    """Family name -> label sets, read back from the exposition."""
    return {
        f.name: [s.labels for s in f.samples]
        for f in text_string_to_metric_families(text(collection))
    }


@pytest.mark.parametrize(
    ("spec", "device_extra", "node"),
    [
        ({"nodeName": "worker-node"}, {}, "worker-node"),
        ({"allNodes": True}, {}, ""),
        ({"nodeSelector": SELECTOR}, {}, ""),
        ({"perDeviceNodeSelection": True}, {"nodeName": "worker-node"}, "worker-node"),
        ({"perDeviceNodeSelection": True}, {"allNodes": True}, ""),
        ({"perDeviceNodeSelection": True}, {"nodeSelector": SELECTOR}, ""),
        (
            {"nodeName": "slice-node", "perDeviceNodeSelection": False},
            {"nodeName": "device-node"},
            "slice-node",
        ),
    ],
    ids=[
        "slice-node",
        "slice-shared",
        "slice-selector",
        "per-device-node",
        "per-device-shared",
        "per-device-selector",
        "device-node-ignored",
    ],
)
def test_node_name(spec: dict[str, Any], device_extra: dict[str, Any], node: str) -> None:
    """node_name: the slice's, or the device's under perDeviceNodeSelection; never the pool."""
    slices = [
        resource_slice(
            "slice", [device("gpu0", CAPACITY, **device_extra)], pool="pool-is-not-a-node", **spec
        )
    ]
    families = parsed(reduce(slices, "slices"))
    assert sorted(families) == [
        "kube_resourceslice_device_capacity_decoders",
        "kube_resourceslice_device_capacity_memory_bytes",
        "kube_resourceslice_device_capacity_multiprocessors",
    ]
    for samples in families.values():
        assert samples == [
            {
                "resourceslice_name": "slice",
                "device_name": "gpu0",
                "driver": "gpu.example",
                "pool": "pool-is-not-a-node",
                "node_name": node,
                "type": "",
                "product_name": "",
                "parent_uuid": "",
            }
        ]


def test_driver_and_pool_identity() -> None:
    """The same device name under other drivers or pools gives distinct series."""
    slices = [
        resource_slice(name, [device("gpu0", {"memory": "1Gi"})], driver, pool, allNodes=True)
        for name, driver, pool in [
            ("slice-a", "driver-a.example", "pool-a"),
            ("slice-b", "driver-b.example", "pool-a"),
            ("slice-c", "driver-a.example", "pool-b"),
        ]
    ]
    families = parsed(reduce(slices, "slices"))
    assert list(families) == ["kube_resourceslice_device_capacity_memory_bytes"]
    triples = {
        (s["driver"], s["pool"], s["device_name"])
        for s in families["kube_resourceslice_device_capacity_memory_bytes"]
    }
    assert triples == {
        ("driver-a.example", "pool-a", "gpu0"),
        ("driver-b.example", "pool-a", "gpu0"),
        ("driver-a.example", "pool-b", "gpu0"),
    }


def test_attributes_bare_or_qualified() -> None:
    """type/productName/parentUUID: bare or in the driver's domain; only strings count."""
    attributes: dict[str, dict[str, Any]] = {
        "gpu.nvidia.com/type": {"string": "mig"},
        "productName": {"string": "NVIDIA A100 80GB PCIe"},
        "parentUUID": {"int": 7},
        "other.example/parentUUID": {"string": "not ours"},
    }
    slices = [resource_slice("s", [device("d", {"memory": "1Gi"}, attributes)], "gpu.nvidia.com")]
    labels = parsed(reduce(slices, "slices"))["kube_resourceslice_device_capacity_memory_bytes"][0]
    assert (labels["type"], labels["product_name"], labels["parent_uuid"]) == (
        "mig",
        "NVIDIA A100 80GB PCIe",
        "",
    )


def test_only_present_capacities() -> None:
    """Each capacity independently; other capacities and capacity-less devices give nothing."""
    slices = [
        resource_slice(
            "s",
            [
                device("a", {"decoders": "0", "copyEngines": "1"}),
                device("b", {"cores": "8"}, {"type": {"string": "gpu"}}),
                device("c"),
            ],
        ),
        resource_slice("empty", []),
        {"metadata": {"name": "null"}, "spec": {"devices": None}},
    ]
    families = parsed(reduce(slices, "slices"))
    assert families == {
        "kube_resourceslice_device_capacity_decoders": [
            {
                "resourceslice_name": "s",
                "device_name": "a",
                "driver": "gpu.example",
                "pool": "pool",
                "node_name": "",
                "type": "",
                "product_name": "",
                "parent_uuid": "",
            }
        ]
    }


def test_bad_capacity_is_reported_not_fatal() -> None:
    """A capacity that is not a quantity is left out and reported; the others stay."""
    slices = [resource_slice("s", [device("a", {"memory": "lots", "decoders": "2"})])]
    result = reduce(slices, "slices")
    assert list(parsed(result)) == ["kube_resourceslice_device_capacity_decoders"]
    assert [(p.resource, p.field, p.message) for p in result.problems] == [
        (
            "resourceslices",
            "capacity",
            "ResourceSlice s device a capacity memory: not a Kubernetes quantity: 'lots'",
        )
    ]


def test_reserved_for_counts_core_pods_only() -> None:
    """Only resource=pods with an empty apiGroup is a pod; reserved_total is 0 when none."""
    claims = [
        claim(
            "c",
            reserved_for=[
                {"resource": "pods", "name": "p1", "uid": "u1"},
                {"resource": "pods", "name": "p2"},
                {"resource": "Pods", "name": "x", "uid": "x"},
                {"apiGroup": "example.com", "resource": "pods", "name": "y", "uid": "y"},
                {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "j"},
            ],
        ),
        claim("pending"),
        claim("allocated", results=[("d", "p", "dev")]),
    ]
    samples = reduce(claims, "claims")
    written = text(samples)
    assert (
        'kube_resourceclaim_status_reserved_total{namespace="workloads",resourceclaim_name="c"} 2'
        in written
    )
    assert (
        'kube_resourceclaim_status_reserved_total{namespace="workloads",'
        'resourceclaim_name="pending"} 0' in written
    )
    assert (
        'kube_resourceclaim_status_reserved_total{namespace="workloads",'
        'resourceclaim_name="allocated"} 0' in written
    )
    pods = parsed(samples)["kube_resourceclaim_status_reserved_for_pod"]
    assert [(p["pod_name"], p["uid"]) for p in pods] == [("p1", "u1"), ("p2", "")]


def test_duplicate_samples_written_once() -> None:
    """The same device allocated twice to one claim (two requests) is one series, not a failure."""
    claims = [claim("c", results=[("d", "p", "dev"), ("d", "p", "dev"), ("d", "p", "dev2")])]
    written = text(reduce(claims, "claims"))
    allocated = [
        line
        for line in written.splitlines()
        if line.startswith("kube_resourceclaim_status_allocated_device{")
    ]
    assert len(allocated) == 2
    families = list(text_string_to_metric_families(written))
    assert families


def test_label_values_escaped() -> None:
    """Quotes, backslashes and newlines in label values are escaped and read back intact."""
    odd = 'a"b\\c\nd'
    slices = [resource_slice("s", [device("d", {"memory": "1"}, {"productName": {"string": odd}})])]
    labels = parsed(reduce(slices, "slices"))["kube_resourceslice_device_capacity_memory_bytes"][0]
    assert labels["product_name"] == odd
