"""Kubernetes 1.37's alpha DRA gates on: a real API server holds their fields, the exporter reads.

A control plane of this module's own, kube-apiserver 1.37.2 with every alpha DRA gate on (and
the gates they depend on).  The objects of tests/test_alpha_fields.py, each field of those
gates in it, are written there: the server validates and keeps them (the proof that their
shapes are real), but for the counter snapshots in claims, which 1.37.2's API has not.  The
exporter, listing and watching, writes exactly what it writes of the same objects without
those fields, read from a file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import controlplane
from tests.e2e.controlplane import ADMIN_TOKEN, APIError, ControlPlane, Kube
from tests.e2e.harness import Exporter, ensure_namespace, scrape, wait_until, write_kubeconfig
from tests.test_alpha_fields import (
    DERIVED,
    LIST_ATTRIBUTES,
    PODGROUP,
    SNAPSHOTS,
    cluster,
    with_alpha_fields,
    without_alpha_fields,
)

pytestmark = pytest.mark.slow
GATES = (
    "--feature-gates=DRADeviceCompatibilityGroups=true,DRAPartitionableDevicesType=true,"
    "DRAResourcePoolStatus=true,DRADerivedAttributes=true,DRAListTypeAttributes=true,"
    "DRAOptionalNodeOperations=true,NodeDeclaredFeatures=true,DRANodeAllocatableResources=true,"
    "DRAWorkloadResourceClaims=true,GenericWorkload=true",
    "--runtime-config=resource.k8s.io/v1alpha3=true,scheduling.k8s.io/v1beta1=true",
)
"""1.37's alpha DRA gates, DRAWorkloadResourceClaims (beta, off), and what they depend on."""
V1 = "/apis/resource.k8s.io/v1"
NAMESPACE = "workloads"
NODE = {"name": "node-a"}
"""The node of the test's slices (tests/objects.py names it after the pool)."""
DECLARED = ["DRANodeAllocatableResources", "DRAOptionalNodeOperations"]
"""What the node says it supports (``status.declaredFeatures``), as a 1.37 kubelet says it."""
PLURALS = {
    f"{V1}/resourceslices": ("resource.k8s.io/v1", "ResourceSlice"),
    f"{V1}/deviceclasses": ("resource.k8s.io/v1", "DeviceClass"),
    f"{V1}/namespaces/{NAMESPACE}/resourceclaims": ("resource.k8s.io/v1", "ResourceClaim"),
    f"/api/v1/namespaces/{NAMESPACE}/pods": ("v1", "Pod"),
}
"""Where each kind of the test's objects is, and its apiVersion and kind."""
KEYS = {"slices": 0, "classes": 1, "claims": 2, "pods": 3}
ARGS = (
    "--resources",
    "resourceclaims,resourceslices,deviceclasses,pods",
    "--metric-labels-allowlist",
    "*=[*]",
    "--metric-annotations-allowlist",
    "*=[*]",
)


def writable(made: dict[str, Any]) -> dict[str, Any]:
    """An object as a client writes it: without what the server sets."""
    found = copy.deepcopy(made)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        found["metadata"].pop(key, None)
    found.pop("status", None)
    for container in found.get("spec", {}).get("containers", ()):
        container.setdefault("image", "registry.k8s.io/pause:3.10")
    return found


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The gated API server, holding the objects with every alpha field."""
    plane = controlplane.start(tmp_path_factory.mktemp("alpha-gates"), gates=GATES)
    kube = plane.kube
    try:
        ensure_namespace(kube, NAMESPACE)
        # A device mapping node resources is admitted only for a node that says it can.
        node = kube.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": NODE})
        node["status"] = {"declaredFeatures": DECLARED}
        kube.put(f"/api/v1/nodes/{NODE['name']}/status", node)
        objects = cluster()
        with_alpha_fields(objects)
        for group, path in zip(KEYS, PLURALS, strict=True):
            for made in objects[group]:
                api_version, kind = PLURALS[path]
                body = {**writable(made), "apiVersion": api_version}
                created = wait_until(
                    lambda path=path, body=body: admitted(kube, path, body),  # type: ignore[misc]
                    30,
                    "the node's declared features seen by admission",
                )
                if "status" in made:
                    created["status"] = made["status"]
                    kube.request("PUT", f"{path}/{made['metadata']['name']}/status", created)
                assert created["kind"] == kind
        yield plane
    finally:
        plane.stop()


def admitted(kube: Kube, path: str, body: dict[str, Any]) -> Any:
    """The object created, or None while admission has not seen the node's features."""
    try:
        return kube.create(path, body)
    except APIError as error:
        if error.code == 403 and "does not support" in str(error):
            return None
        raise


def held(kube: Kube) -> dict[str, list[dict[str, Any]]]:
    """What the server holds, by the test's groups."""
    return {group: kube.get(path)["items"] for group, path in zip(KEYS, PLURALS, strict=True)}


def test_the_server_keeps_every_alpha_field(gated: ControlPlane) -> None:
    """Validated and kept; the counter snapshots, which 1.37.2 has not, dropped."""
    objects = held(gated.kube)
    devices = [d for s in objects["slices"] for d in s["spec"].get("devices", ())]
    assert all(s["spec"]["skipNodeOperations"] for s in objects["slices"])
    assert any(s["spec"].get("partitionTypeAttribute") for s in objects["slices"])
    assert all(set(LIST_ATTRIBUTES) <= set(d["attributes"]) for d in devices)
    assert all(d["nodeAllocatableResources"] for d in devices)
    assert any(c.get("compatibilityGroups") for d in devices for c in d.get("consumesCounters", ()))
    requests = [r for c in objects["claims"] for r in c["spec"]["devices"]["requests"]]
    asked = [a for r in requests for a in (r.get("exactly"), *r.get("firstAvailable", ())) if a]
    assert all(a["derivedAttributes"] == DERIVED for a in asked)
    (allocated,) = [c for c in objects["claims"] if c.get("status", {}).get("allocation")]
    results = allocated["status"]["allocation"]["devices"]["results"]
    assert all(r["skipNodeOperations"] for r in results)
    assert not any(field in r for r in results for field in SNAPSHOTS)
    assert PODGROUP in allocated["status"]["reservedFor"]
    (pod,) = objects["pods"]
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g"}
    assert pod["status"]["nodeAllocatableResourceClaimStatuses"]


def dump(objects: dict[str, list[dict[str, Any]]], path: Path) -> Path:
    """*objects* as ``kubectl get … -o json`` writes them: a List."""
    items = [
        {"apiVersion": api_version, "kind": kind, **item}
        for group, (api_version, kind) in zip(KEYS, PLURALS.values(), strict=True)
        for item in objects[group]
    ]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def samples(exporter: Exporter) -> set[str]:
    def answered() -> set[str] | None:
        code, text = exporter.scrape()
        if code != 200:
            return None
        return {line for line in text.splitlines() if line.startswith("kube_")}

    found: set[str] = wait_until(answered, 30, "a scrape answered")
    return found


def test_the_exporter_reads_them_as_absent(gated: ControlPlane, tmp_path: Path) -> None:
    """Through the API, listing and watching: the samples of the objects without them."""
    config = write_kubeconfig(tmp_path / "kubeconfig", gated.kube, ADMIN_TOKEN)
    env = {"KUBECONFIG": str(config)}
    objects = held(gated.kube)
    stripped = copy.deepcopy(objects)
    without_alpha_fields(stripped)
    assert stripped != objects
    files = [dump(objects, tmp_path / "with.json"), dump(stripped, tmp_path / "without.json")]
    exporters = [
        Exporter(tmp_path / "list", list(ARGS), env),
        Exporter(tmp_path / "watch", ["--mode", "watch", *ARGS], env),
        *(
            Exporter(tmp_path / file.stem, ["--source", f"file:{file}", *ARGS], env)
            for file in files
        ),
    ]
    try:
        wait_until(lambda: scrape(exporters[1].port, "/readyz")[0] == 200, 60, "synchronised")
        written = [samples(exporter) for exporter in exporters]
        assert written[0] == written[1] == written[2] == written[3]
        families = {line.split("{", 1)[0] for line in written[0]}
        for family in (
            "kube_resourceslice_device_state",
            "kube_resourcepool_allocatable_devices",
            "kube_resourceclaim_pending_reason",
            "kube_resourceclaim_hourly_cost",
            "kube_resourceclaim_labels",
            "kube_pod_labels",
        ):
            assert family in families, family
        for exporter in exporters:
            assert "kube_dra_exporter_invalid_values_total{" not in exporter.telemetry()
    finally:
        for exporter in exporters:
            assert exporter.stop() == 0
