"""The Pod view: which pods matter, extended-resource demand, why not scheduled, device health."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kdraexp.families.pod import CAUSES, cause, extended_name
from kdraexp.families.selection import select
from tests.collect import collect, samples, values

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


def test_the_causes_are_those_the_metrics_reference_lists_in_order() -> None:
    """docs/metrics.md names each cause in backquotes at the head of its bullet, in order."""
    text = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text()
    section = text.split("### `kube_pod_dra_unschedulable`", 1)[1].split("\n### ", 1)[0]
    bullets = "\n".join(line for line in section.splitlines() if line.startswith("- "))
    listed = [a or b for a, b in re.findall(r"^- `(\w+)`:|`(\w+)` \(", bullets, re.MULTILINE)]
    assert tuple(listed) == CAUSES
    assert {
        cause("SchedulerError", ""),
        cause("", "x"),
        cause("", "cannot allocate all claims"),
    } < {*CAUSES}  # what the condition gives is among them


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


def held(name: str, *pods: str) -> dict[str, Any]:
    """A claim allocated one device and reserved for *pods* (by their uids)."""
    made = claim(name, ("gpu", "d.example", "p", f"dev-{name}"))
    made["status"]["reservedFor"] = [
        {"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods
    ]
    return made


def condition(kind: str, status: str, since: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "lastTransitionTime": since}


def test_claims_pending_or_unmade_while_the_scheduler_says_nothing() -> None:
    """A pod whose claim is pending, or whose template's claim is not made, and no verdict.

    Pending with the scheduler's verdict: its cause. Every claim allocated and reserved for it
    (the scheduler waits for its devices' binding conditions, in PreBind): not unschedulable,
    even with the verdict of an attempt that failed before.
    """
    explicit = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "waiting"}]}
    templated = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}
    made = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "made"}]}
    unneeded = {"resourceClaimStatuses": [{"name": "gpu"}]}
    binding = {"resourceClaims": [{"name": "gpu", "resourceClaimName": "attaching"}]}
    pods = [
        pod("unheard", explicit),
        pod("templated", templated, **made),
        pod("unmade", templated),
        pod("unneeded", templated, **unneeded),
        pod(
            "heard", explicit, **scheduled("False", "Unschedulable", "1 cannot allocate all claims")
        ),
        pod("attaching", binding),
        pod(
            "attaching-again",
            {"resourceClaims": [{"name": "gpu", "resourceClaimName": "again"}]},
            **scheduled("False", "SchedulerError", "device binding failed: claim=again"),
        ),
    ]
    claims = [
        claim("waiting"),
        claim("made"),
        held("attaching", "attaching"),
        held("again", "attaching-again"),
    ]
    collection = collect(claims=claims, pods=pods, selection=EVERYTHING)
    assert values(collection, "kube_pod_dra_unschedulable", "pod", "cause") == {
        ("unheard", "claim_pending"): 1.0,
        ("templated", "claim_pending"): 1.0,
        ("unmade", "claim_missing"): 1.0,
        ("heard", "claims"): 1.0,
    }


def test_bound_pods_holding_devices_and_not_started() -> None:
    """Bound, every claim allocated and reserved for it, PodReadyToStartContainers not True.

    Since the condition's lastTransitionTime; a kubelet that writes no such condition: while
    no container runs or ran, since the pod was scheduled (else created).
    """
    uses = {"nodeName": "node-1", "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}

    def using(name: str, **status: Any) -> dict[str, Any]:
        spec = {**uses, "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c-{name}"}]}
        return pod(name, spec, **status)

    scheduled_at = condition("PodScheduled", "True", "2026-11-30T10:00:00Z")
    waiting = [{"name": "c", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    pods = [
        using(
            "creating",
            conditions=[
                condition("PodReadyToStartContainers", "False", "2026-11-30T10:00:05Z"),
                scheduled_at,
            ],
        ),
        using(
            "started",
            conditions=[condition("PodReadyToStartContainers", "True", "2026-11-30T10:00:05Z")],
        ),
        using("old-kubelet", conditions=[scheduled_at], containerStatuses=waiting),
        using(
            "old-running",
            conditions=[scheduled_at],
            containerStatuses=[{"name": "c", "state": {"running": {}}}],
        ),
        using("no-kubelet"),
        using("not-reserved"),
        using("pending"),
        using(
            "done",
            phase="Succeeded",
            conditions=[condition("PodReadyToStartContainers", "False", "2026-11-30T10:00:05Z")],
        ),
        using("unbound"),
        using(
            "odd-time",
            conditions=[condition("PodReadyToStartContainers", "False", "yesterday"), scheduled_at],
        ),
    ]
    pods[-2]["spec"].pop("nodeName")
    terminating = using("terminating")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    pods.append(terminating)
    two = pod(
        "two",
        {
            "nodeName": "node-2",
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "c-two"},
                {"name": "b", "resourceClaimName": "c-other"},
            ],
        },
    )
    extended = pod(
        "extended",
        {"nodeName": "node-3", "containers": [container(limits={"nvidia.com/gpu": "1"})]},
        extendedResourceClaimStatus={"resourceClaimName": "c-extended"},
    )
    pods += [two, extended]
    holders = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != "not-reserved"]
    claims = [held(f"c-{name}", name) for name in holders if name != "pending"]
    claims += [held("c-not-reserved", "someone-else"), claim("c-pending"), claim("c-other")]
    for made in pods:
        made["metadata"]["creationTimestamp"] = "2026-11-30T09:59:00Z"
    collection = collect(
        claims=claims,
        pods=pods,
        classes=[device_class("gpu", "nvidia.com/gpu")],
        selection=EVERYTHING,
    )
    since = values(collection, "kube_pod_dra_not_started", "pod", "uid", "node_name")
    condition_changed, scheduled, created = 1796032805.0, 1796032800.0, 1796032740.0
    assert {pod: (uid, node, at) for (pod, uid, node), at in since.items()} == {
        "creating": ("uid-creating", "node-1", condition_changed),
        "old-kubelet": ("uid-old-kubelet", "node-1", scheduled),
        "no-kubelet": ("uid-no-kubelet", "node-1", created),
        "extended": ("uid-extended", "node-3", created),
        "odd-time": ("uid-odd-time", "node-1", scheduled),
    }
    assert [
        (p.resource, p.field, p.message) for p in collection.problems if p.resource == "pods"
    ] == [
        (
            "pods",
            "status.conditions[PodReadyToStartContainers].lastTransitionTime",
            "Pod ml/odd-time status.conditions[PodReadyToStartContainers].lastTransitionTime: not "
            "an RFC 3339 time: 'yesterday'",
        )
    ]


def test_device_health_past_what_a_node_has_is_cut_and_counted() -> None:
    """A container listing 10,000 devices: the first 1,024 read, the rest counted.

    Each was a row with its resourceID kept: 18 such pods of 3.2 MB, each within the bound of
    one object, took the exporter past its memory limit in 0.6 s.
    """
    resources = [{"resourceID": f"d.example/p/dev-{n}", "health": "Healthy"} for n in range(10_000)]
    status = {
        "containerStatuses": [
            {"name": "c", "allocatedResourcesStatus": [{"name": "claim:x", "resources": resources}]}
        ],
    }
    collection = collect(pods=[pod("many", {"nodeName": "n"}, **status)], selection=EVERYTHING)
    assert len(samples(collection)["kube_pod_dra_device_health"]) == 1024
    assert [(p.resource, p.message) for p in collection.problems if "allocated" in p.field] == [
        (
            "pods",
            "Pod ml/many status.containerStatuses[].allocatedResourcesStatus: more than 1024 "
            "devices, more than a node has: the first 1024 read",
        )
    ]
