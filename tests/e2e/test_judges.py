"""Kubernetes' own counters as a second judge of the exporter's counts.

A simulated cluster of its own (tests/e2e/simulated.py): one Node with three GPUs in a pool of two
slices, a DeviceClass for them, one that matches nothing and one serving them as the extended
resource ``example.com/judge-gpu``. The real kube-scheduler allocates every claim; the test writes
no status. The claims: from a template, explicit, made by the scheduler for an extended resource,
with admin access (in a namespace that allows it), each allocated; pending ones of a pod that asks
for the class matching nothing (explicit and from a template), one no pod uses and one with admin
access no pod uses; and a pod naming a claim that does not exist.

Each component counts from its own informers or storage, and the exporter from its lists, so the
test polls (with a bound) until a scrape of the exporter and the three components' ``/metrics``
agree:

- kube-controller-manager's ``dynamic_resource_allocation_resource_claims{allocated,
  admin_access, source}`` against ``kube_resourceclaim_status_state`` (allocated: ``reserved`` or
  ``allocated``; pending: ``pending``), ``kube_resourceclaim_allocation_result_info``
  (``admin_access``) and ``kube_resourceclaim_info`` (``owner_kind="Pod"``: the controller's
  sources ``resource_claim_template`` and ``extended_resource``; no owner: source ``""``);
- kube-scheduler's ``scheduler_unschedulable_pods{plugin="DynamicResources"}`` against
  ``kube_pod_dra_unschedulable`` with cause ``claims``, ``class_missing`` or ``claim_missing``
  (the plugin's rejections at filtering and its gating, counted alike), its
  ``scheduler_pending_pods{queue="gated"}`` against cause ``claim_missing``, and all its pending
  pods against every ``kube_pod_dra_unschedulable`` row;
- kube-apiserver's ``apiserver_resource_objects{group="resource.k8s.io"}`` and the deprecated
  ``apiserver_storage_objects`` (hidden from 1.37 on: shown with
  ``--show-hidden-metrics-for-version=1.36``) for resourceslices, resourceclaims and
  deviceclasses against the rows of ``kube_resourceslice_info``, ``kube_resourceclaim_info`` and
  ``kube_deviceclass_info``.

Where they cannot agree, by design (docs/compatibility.md):

- admin access of a *pending* claim: the controller reads it from the claim's spec, the exporter
  only from allocation results (``admin_access`` of ``kube_resourceclaim_allocation_result_info``);
  the test checks the controller's pending admin-access count against the claims' specs instead;
- the controller tells ``resource_claim_template`` from ``extended_resource`` by annotations; the
  exporter shows both as owned by their Pod (the extended one named
  ``<pod>-extended-resources-<suffix>``), so only their sum is compared;
- a claim being deleted is ``deleting`` to the exporter whatever its allocation, and counted by
  its allocation by the controller: none is deleted here;
- the scheduler counts every pending pod, the exporter only pods that use devices: here every
  pending pod does;
- the API server refreshes its object counts on a period (``--etcd-count-metric-poll-period``,
  a minute by default, one second here), so the two agree only once it has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import pytest

from tests.e2e import simworld as world
from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, ensure, start_simulated

T = TypeVar("T")
pytestmark = pytest.mark.slow
NODE = "judge-a"
NAMESPACE = "judges"
ADMIN = "judges-admin"
EXTENDED = "example.com/judge-gpu"
AGREE = 60.0
"""Seconds for the components and the exporter to agree: the counts settle within seconds."""
APISERVER_ARGS = ("--etcd-count-metric-poll-period=1s", "--show-hidden-metrics-for-version=1.36")


def _claims(namespace: str) -> str:
    return f"{world.RESOURCE}/namespaces/{namespace}/resourceclaims"


def _pods(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


def _admin(spec: dict[str, Any]) -> dict[str, Any]:
    spec["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    return spec


def _phase(simulated: Simulated, namespace: str, name: str) -> str | None:
    """``bound`` or ``unschedulable`` once the scheduler has decided on the pod."""
    got = simulated.kube.get(f"{_pods(namespace)}/{name}")
    if got["spec"].get("nodeName"):
        return "bound"
    for condition in got.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return "unschedulable"
    return None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("judges"), APISERVER_ARGS)
    kube = simulated.kube
    try:
        simulated.add_node(NODE)
        for namespace, labels in (
            (NAMESPACE, {}),
            # DRAAdminAccess: only a namespace so labelled may hold admin-access claims.
            (ADMIN, {"resource.kubernetes.io/admin-access": "true"}),
        ):
            ensure(
                kube,
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": labels},
                },
            )
        kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class("judge-gpu", "gpu"))
        kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class("judge-none", "none"))
        extended = world.device_class("judge-ext", "gpu")
        extended["spec"]["extendedResourceName"] = EXTENDED
        kube.create(f"{world.RESOURCE}/deviceclasses", extended)
        for name, devices in (("judge-a-0", ["gpu-0", "gpu-1"]), ("judge-a-1", ["gpu-2"])):
            kube.create(
                f"{world.RESOURCE}/resourceslices",
                world.pool_slice(
                    name, NODE, NODE, 2, devices=[world.gpu(NODE, d) for d in devices]
                ),
            )
        for template, deviceclass in (
            ("judge-gpu", "judge-gpu"),
            ("judge-none", "judge-none"),
        ):
            kube.create(
                f"{world.RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates",
                world.claim_template(template, deviceclass),
            )
        kube.create(_claims(NAMESPACE), world.claim_of("explicit", **world.claim_spec("judge-gpu")))
        kube.create(_claims(NAMESPACE), world.claim_of("starved", **world.claim_spec("judge-none")))
        kube.create(_claims(NAMESPACE), world.claim_of("unused", **world.claim_spec("judge-gpu")))
        kube.create(
            _claims(ADMIN), world.claim_of("admin", **_admin(world.claim_spec("judge-gpu")))
        )
        kube.create(
            _claims(ADMIN), world.claim_of("admin-idle", **_admin(world.claim_spec("judge-none")))
        )
        expected = {
            (NAMESPACE, "from-template"): "bound",
            (NAMESPACE, "explicit"): "bound",
            (NAMESPACE, "extended"): "bound",
            (ADMIN, "admin"): "bound",
            (NAMESPACE, "starved"): "unschedulable",
            (NAMESPACE, "starved-template"): "unschedulable",
        }
        made = {
            "from-template": world.pod("from-template", {"resourceClaimTemplateName": "judge-gpu"}),
            "explicit": world.pod("explicit", {"resourceClaimName": "explicit"}),
            "extended": world.extended_pod("extended", EXTENDED),
            "admin": world.pod("admin", {"resourceClaimName": "admin"}),
            "starved": world.pod("starved", {"resourceClaimName": "starved"}),
            "starved-template": world.pod(
                "starved-template", {"resourceClaimTemplateName": "judge-none"}
            ),
            # Names a claim that does not exist: the scheduler holds it back (gated).
            "orphan": world.pod("orphan", {"resourceClaimName": "nowhere"}),
        }
        for name, spec in made.items():
            kube.create(_pods(ADMIN if name == "admin" else NAMESPACE), spec)
        for (namespace, name), phase in expected.items():
            got = wait_until(
                partial(_phase, simulated, namespace, name), world.SCHEDULED, f"{name} decided"
            )
            assert got == phase, (name, got)
        yield simulated
    finally:
        simulated.stop()


def controller_claims(simulated: Simulated) -> Counter[tuple[str, str, str]]:
    """kube-controller-manager's claims by (allocated, admin_access, source)."""
    text = simulated.metrics("kube-controller-manager")
    counts: Counter[tuple[str, str, str]] = Counter()
    for labels, value in world.sample_values(text, "dynamic_resource_allocation_resource_claims"):
        counts[labels["allocated"], labels["admin_access"], labels["source"]] += int(value)
    return counts


def exporter_claims(body: str) -> Counter[tuple[str, str, str]]:
    """The exporter's claims by the controller's labels, as far as it can tell them.

    admin_access is ``true`` for an allocated claim with an admin-access result, ``false``
    otherwise (a pending claim's requests are not shown by it); source is ``owned`` for a claim
    its Pod controls (template or extended resource), ``""`` otherwise.
    """
    allocated = {
        (row["namespace"], row["resourceclaim_name"]): row["state"] in ("reserved", "allocated")
        for row in world.samples(body, "kube_resourceclaim_status_state")
    }
    admin = {
        (row["namespace"], row["resourceclaim_name"])
        for row in world.samples(body, "kube_resourceclaim_allocation_result_info")
        if row["admin_access"] == "true"
    }
    owned = {
        (row["namespace"], row["resourceclaim_name"])
        for row in world.samples(body, "kube_resourceclaim_info")
        if row["owner_kind"] == "Pod"
    }
    return Counter(
        (
            str(is_allocated).lower(),
            str(claim in admin).lower(),
            "owned" if claim in owned else "",
        )
        for claim, is_allocated in allocated.items()
    )


def comparable(counts: Counter[tuple[str, str, str]]) -> Counter[tuple[str, str, str]]:
    """The controller's counts as the exporter can tell them (see the module's docstring)."""
    folded: Counter[tuple[str, str, str]] = Counter()
    for (allocated, admin, source), count in counts.items():
        if allocated == "false":
            admin = "false"
        folded[allocated, admin, "owned" if source else ""] += count
    return folded


def scheduler_counts(simulated: Simulated) -> dict[str, int]:
    text = simulated.metrics("kube-scheduler")
    queues = {
        labels["queue"]: int(value)
        for labels, value in world.sample_values(text, "scheduler_pending_pods")
    }
    rejected = sum(
        int(value)
        for labels, value in world.sample_values(text, "scheduler_unschedulable_pods")
        if labels["plugin"] == "DynamicResources"
    )
    return {
        "pending": sum(queues.values()),
        "gated": queues.get("gated", 0),
        "DynamicResources": rejected,
    }


def exporter_pods(body: str) -> dict[str, int]:
    causes = Counter(row["cause"] for row in world.samples(body, "kube_pod_dra_unschedulable"))
    return {
        "pending": sum(causes.values()),
        "gated": causes["claim_missing"],
        "DynamicResources": causes["claims"] + causes["class_missing"] + causes["claim_missing"],
    }


KINDS = {
    "resourceslices": "kube_resourceslice_info",
    "resourceclaims": "kube_resourceclaim_info",
    "deviceclasses": "kube_deviceclass_info",
}


def apiserver_counts(simulated: Simulated) -> dict[str, tuple[int, int]]:
    """kube-apiserver's stored objects per DRA resource: (resource_objects, storage_objects)."""
    text = simulated.metrics("kube-apiserver")
    new = {
        labels["resource"]: int(value)
        for labels, value in world.sample_values(text, "apiserver_resource_objects")
        if labels["group"] == "resource.k8s.io"
    }
    old = {
        labels["resource"]: int(value)
        for labels, value in world.sample_values(text, "apiserver_storage_objects")
        if labels["resource"].endswith(".resource.k8s.io")
    }
    return {kind: (new[kind], old[f"{kind}.resource.k8s.io"]) for kind in KINDS}


def exporter_objects(body: str) -> dict[str, tuple[int, int]]:
    return {kind: (len(world.samples(body, family)),) * 2 for kind, family in KINDS.items()}


@pytest.fixture(scope="module")
def exporter(cluster: Simulated, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    directory = tmp_path_factory.mktemp("judged")
    config = write_kubeconfig(directory / "kubeconfig", cluster.kube, cluster.kube.token)
    running = Exporter(
        directory / "run", ["--resources", f"{world.RESOURCES},pods"], {"KUBECONFIG": str(config)}
    )
    yield running
    assert running.stop() == 0


def _settled(judge: Callable[[], T], ours: Callable[[str], T], exporter: Exporter, what: str) -> T:
    """The judge's count once the exporter's equals it, from a scrape taken after the judge's."""
    seen: list[tuple[T, T]] = []

    def agree() -> T | None:
        theirs = judge()
        code, body = exporter.scrape()
        assert code == 200, body
        seen[:] = [(theirs, ours(body))]
        return theirs if theirs == seen[0][1] else None

    try:
        return wait_until(agree, AGREE, what)
    except AssertionError as error:
        raise AssertionError(f"{error}: (judge, exporter) last {seen}") from None


def test_claims_agree_with_the_controller_manager(cluster: Simulated, exporter: Exporter) -> None:
    """Claims by allocated, admin access and source: the controller's count is the exporter's."""
    judged = _settled(
        lambda: comparable(controller_claims(cluster)),
        exporter_claims,
        exporter,
        "the claims counted alike",
    )
    # Every kind of claim is there to be judged: none of the comparisons is vacuous.
    assert judged == Counter(
        {
            ("true", "false", "owned"): 2,  # from a template; made for the extended resource
            ("true", "false", ""): 1,  # explicit
            ("true", "true", ""): 1,  # admin access
            ("false", "false", "owned"): 1,  # from a template, for the class matching nothing
            ("false", "false", ""): 3,  # starved, unused, admin-idle (admin access not shown)
        }
    )
    raw = controller_claims(cluster)
    sources = {source for _, _, source in raw}
    assert sources == {"", "resource_claim_template", "extended_resource"}
    # What the exporter cannot tell: a pending claim's admin access, read from specs instead.
    pending_admin = [
        claim["metadata"]["name"]
        for namespace in (NAMESPACE, ADMIN)
        for claim in cluster.kube.get(_claims(namespace))["items"]
        if not claim.get("status", {}).get("allocation")
        and any(
            r.get("exactly", {}).get("adminAccess") for r in claim["spec"]["devices"]["requests"]
        )
    ]
    assert pending_admin == ["admin-idle"]
    assert sum(n for (a, admin, _), n in raw.items() if a == "false" and admin == "true") == 1


def test_pending_pods_agree_with_the_scheduler(cluster: Simulated, exporter: Exporter) -> None:
    """Pods waiting, rejected by DynamicResources and gated: the scheduler's are the exporter's."""
    judged = _settled(
        lambda: scheduler_counts(cluster), exporter_pods, exporter, "the pending pods alike"
    )
    assert judged == {"pending": 3, "gated": 1, "DynamicResources": 3}


def test_objects_agree_with_the_api_server(cluster: Simulated, exporter: Exporter) -> None:
    """Slices, claims and classes: the API server's stored objects are the exporter's rows."""
    judged = _settled(
        lambda: apiserver_counts(cluster), exporter_objects, exporter, "the objects alike"
    )
    assert judged == {
        "resourceslices": (2, 2),
        "resourceclaims": (8, 8),
        "deviceclasses": (3, 3),
    }
