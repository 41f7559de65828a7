"""The Pod view: which pods matter, extended-resource demand, why not scheduled, device health."""

from __future__ import annotations

from typing import Any

import pytest

from kdraexp.families.pod import cause, extended_name
from kdraexp.families.selection import select
from tests.collect import collect, values

EVERYTHING = select(resources="resourceclaims,resourceslices,deviceclasses,pods")
NAMESPACE = "ml"


def pod(name: str, spec: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c"}], **spec},
        "status": status,
    }


def container(name: str = "c", **resources: Any) -> dict[str, Any]:
    return {"name": name, "resources": resources}


def device_class(name: str, extended: str | None = None) -> dict[str, Any]:
    spec = {"extendedResourceName": extended} if extended else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def claim(name: str, *results: tuple[str, str, str, str]) -> dict[str, Any]:
    made: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if results:
        made["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": d, "pool": p, "device": n}
                        for r, d, p, n in results
                    ]
                }
            }
        }
    return made


def scheduled(status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "PodScheduled", "status": status, "reason": reason, "message": message}
        ]
    }


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("nvidia.com/gpu", True),
        ("deviceclass.resource.kubernetes.io/gpu", True),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/batch", False),
        ("example.kubernetes.io/thing", False),
    ],
)
def test_extended_resource_names(name: str, extended: bool) -> None:
    """A domain that is not Kubernetes' (or the implicit DRA one) makes an extended resource."""
    assert extended_name(name) is extended


def test_demand_by_extended_name_and_implicit_name_until_bound() -> None:
    """Containers' asks summed (requests, else limits), an init container's if larger."""
    pods = [
        pod(
            "waits",
            {
                "containers": [
                    container(limits={"nvidia.com/gpu": "2"}),
                    container(
                        "side", requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}
                    ),
                ],
                "initContainers": [container("init", limits={"nvidia.com/gpu": "4"})],
            },
        ),
        pod(
            "implicit",
            {"containers": [container(limits={"deviceclass.resource.kubernetes.io/mig": "1"})]},
        ),
        pod("plugin", {"containers": [container(limits={"vendor.example/fpga": "1"})]}),
        pod("bound", {"nodeName": "n", "containers": [container(limits={"nvidia.com/gpu": "1"})]}),
    ]
    classes = [device_class("gpu", "nvidia.com/gpu"), device_class("mig")]
    collection = collect(classes=classes, pods=pods, selection=EVERYTHING)
    assert values(
        collection, "kube_pod_dra_extended_resource_request", "pod", "resource", "deviceclass_name"
    ) == {
        ("waits", "nvidia.com/gpu", "gpu"): 4.0,
        ("implicit", "deviceclass.resource.kubernetes.io/mig", "mig"): 1.0,
    }


def test_negative_and_fractional_extended_requests_are_not_read() -> None:
    """Kubernetes refuses them; one from a dump counts as a value not read and asks for nothing."""
    pods = [
        pod(
            "odd",
            {
                "containers": [
                    container(limits={"nvidia.com/gpu": "2"}),
                    container("minus", limits={"nvidia.com/gpu": "-5"}),
                    container("half", limits={"nvidia.com/gpu": "500m"}),
                ]
            },
        )
    ]
    collection = collect(
        classes=[device_class("gpu", "nvidia.com/gpu")], pods=pods, selection=EVERYTHING
    )
    assert values(collection, "kube_pod_dra_extended_resource_request", "pod", "resource") == {
        ("odd", "nvidia.com/gpu"): 2.0
    }
    assert sorted(p.message for p in collection.problems if p.field == "resources") == [
        "Pod ml/odd container half nvidia.com/gpu: '500m' is not a whole, non-negative count",
        "Pod ml/odd container minus nvidia.com/gpu: '-5' is not a whole, non-negative count",
    ]


@pytest.mark.parametrize(
    ("reason", "message", "expected"),
    [
        ("Unschedulable", "0/8 nodes are available: 7 cannot allocate all claims.", "claims"),
        (
            "Unschedulable",
            "0/8 nodes: request gpu: device class nope does not exist.",
            "class_missing",
        ),
        (
            "SchedulerError",
            'running "DynamicResources" filter plugin: CEL runtime error',
            "scheduler_error",
        ),
        ("Unschedulable", "0/8 nodes are available: 8 Insufficient cpu.", "other"),
    ],
)
def test_causes_read_from_the_condition(reason: str, message: str, expected: str) -> None:
    assert cause(reason, message) == expected


def test_unschedulable_pods_and_a_missing_claim() -> None:
    """A missing named claim wins over an older condition.

    Bound pods, and pods using no devices, are never unschedulable here.
    """
    claim_ref = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "there"}]}
    missing = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "nowhere"}]}
    pods = [
        pod(
            "held", claim_ref, **scheduled("False", "Unschedulable", "1 cannot allocate all claims")
        ),
        pod("lost", missing, **scheduled("False", "Unschedulable", "1 cannot allocate all claims")),
        pod("fine", {**claim_ref, "nodeName": "n"}, **scheduled("True")),
        pod("cpu-only", {}, **scheduled("False", "Unschedulable", "Insufficient cpu")),
    ]
    collection = collect(claims=[claim("there")], pods=pods, selection=EVERYTHING)
    assert values(collection, "kube_pod_dra_unschedulable", "pod", "cause") == {
        ("held", "claims"): 1.0,
        ("lost", "claim_missing"): 1.0,
    }


def test_device_health_by_device_or_by_cdi_id() -> None:
    """``driver/pool/device`` as it is (a pool may hold a slash), a CDI ID through the claim.

    The claim's one result names the device; with two results nothing can say which, and the
    row keeps what there is.
    """
    entries = [
        {
            "name": "claim:gpu/gpu",
            "resources": [{"resourceID": "d.example/rack/1/gpu-0", "health": "Unhealthy"}],
        },
        {
            "name": "claim:one",
            "resources": [{"resourceID": "vendor.example/gpu=0", "health": "Healthy"}],
        },
        {
            "name": "claim:two",
            "resources": [{"resourceID": "vendor.example/gpu=1", "health": "Sideways"}],
        },
    ]
    spec = {
        "nodeName": "n",
        "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "t"},
            {"name": "one", "resourceClaimName": "single"},
            {"name": "two", "resourceClaimName": "double"},
        ],
    }
    status = {
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "made-gpu"}],
        "containerStatuses": [{"name": "c", "allocatedResourcesStatus": entries}],
    }
    claims = [
        claim("single", ("gpu", "d.example", "p", "dev-1")),
        claim("double", ("gpu", "d.example", "p", "dev-2"), ("gpu", "d.example", "p", "dev-3")),
    ]
    collection = collect(claims=claims, pods=[pod("sick", spec, **status)], selection=EVERYTHING)
    assert values(
        collection,
        "kube_pod_dra_device_health",
        "resourceclaim_name",
        "request",
        "driver",
        "pool",
        "device_name",
        "health",
    ) == {
        ("made-gpu", "gpu", "d.example", "rack/1", "gpu-0", "unhealthy"): 1.0,
        ("single", "", "d.example", "p", "dev-1", "healthy"): 1.0,
        ("double", "", "", "", "", "unknown"): 1.0,
    }


def test_pods_using_nothing_cost_no_entry() -> None:
    """A pod with no claims, no extended resource and no device health keeps no entry."""
    from kdraexp.dra.listing import PODS
    from kdraexp.store.collection import Store

    store = Store()
    pods = [pod("web", {}), pod("gpu", {"containers": [container(limits={"nvidia.com/gpu": "1"})]})]
    collect(pods=pods, selection=EVERYTHING, store=store)
    assert [e.facts.name for e in store.entries(PODS.plural).values()] == ["gpu"]
    assert list(store.skipped[PODS.plural]) == ["uid-web"]  # by its JSON: it has no version
