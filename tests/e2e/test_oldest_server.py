"""The oldest Kubernetes supported: kube-apiserver 1.34, run as a cluster runs it.

A control plane of this module's own, its kube-apiserver built from tools/oldest-server with no
gate beyond its defaults: ``resource.k8s.io/v1``, no DeviceTaintRules, and the fields of its
alpha features (partitions, consumable capacity, device taints, binding conditions) dropped when
written.  On it, the exporter's families say what the objects the server holds say (the same
objects read from a file), the families of the features it lacks write nothing, watch mode
writes what list mode writes and follows a change, and DeviceTaintRules asked for are refused
with the message the README's troubleshooting gives, while the chart's ``deviceTaintRules:
auto`` leaves them out for the APIs this server's discovery lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import tools
from tests.e2e import controlplane, dataset, families
from tests.e2e.controlplane import ADMIN_TOKEN, APIError, ControlPlane, Kube
from tests.e2e.harness import Exporter, ensure_namespace, scrape, wait_until, write_kubeconfig
from tests.e2e.test_watch import dra_lines, ready
from tests.helm import render

pytestmark = pytest.mark.slow
VERSION = "v1.34.4"
"""The release tools/oldest-server builds: the newest 1.34 patch the module proxy serves."""
RESOURCES = "resourceclaims,resourceslices,deviceclasses"
KINDS = {
    "resourceclaims": "ResourceClaim",
    "resourceslices": "ResourceSlice",
    "deviceclasses": "DeviceClass",
}
UNSERVED = (
    "kube_resourceslice_shared_quantity",
    "kube_resourcepool_shared_quantity",
    "kube_resourceslice_device_capacity_available",
    "kube_resourceclaim_allocation_consumed_capacity",
    "kube_resourceslice_device_taint",
    "kube_resourceclaim_allocation_tainted",
    "kube_resourceclaim_status_allocation_timestamp_seconds",
)
"""Families of features alpha and off in 1.34 (docs/compatibility.md): the test's objects ask
for each, the server drops the fields, and the families write nothing."""
REFUSED = {
    "node-c-partitions": "resourceslices",
    "e2e-share": "deviceclasses",
    "e2e-big": "deviceclasses",
}
"""What 1.34 refuses of the datasets: a slice whose devices each name their nodes
(``perDeviceNodeSelection``, alpha with partitionable devices) names none for it, and the
classes whose selectors read ``device.allowMultipleAllocations`` (alpha with consumable
capacity) do not compile.  Claims of those classes stay, their class not found."""


class _Refusals:
    """The server's client for creating the datasets, noting what the server refuses (422)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.refused: dict[str, str] = {}

    def create(self, path: str, obj: dict[str, Any], dry_run: bool = False) -> Any:
        try:
            return self.kube.create(path, obj, dry_run)
        except APIError as error:
            if error.code != 422:
                raise
            self.refused[obj["metadata"]["name"]] = path.rsplit("/", 1)[-1]
            return obj

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kube, name)


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and the oldest kube-apiserver, holding the end-to-end datasets (no taint rule)."""
    apiserver = tools.oldest_server() / "kube-apiserver"
    plane = controlplane.start(tmp_path_factory.mktemp("oldest"), apiserver=apiserver, gates=())
    try:
        ensure_namespace(plane.kube, dataset.NAMESPACE)
        creating = _Refusals(plane.kube)
        dataset.create_all(creating)  # type: ignore[arg-type]
        families.create_all(creating, rules=False)  # type: ignore[arg-type]
        assert creating.refused == REFUSED
        yield plane
    finally:
        plane.stop()


def _exporter(directory: Path, kube: Kube, *args: str) -> Exporter:
    directory.mkdir(parents=True, exist_ok=True)
    config = write_kubeconfig(directory / "kubeconfig", kube, ADMIN_TOKEN)
    return Exporter(directory / "run", list(args), {"KUBECONFIG": str(config)})


def _written(exporter: Exporter) -> set[str]:
    def answered() -> set[str] | None:
        code, text = exporter.scrape()
        return dra_lines(text) if code == 200 else None

    found: set[str] = wait_until(answered, 30, "a scrape answered")
    return found


def _dump(kube: Kube, path: Path) -> None:
    """What the server holds, as ``kubectl get … -A -o json`` writes it (a List)."""
    items: list[dict[str, Any]] = []
    for plural, kind in KINDS.items():
        for item in kube.get(f"{dataset.V1}/{plural}")["items"]:
            items.append({"apiVersion": "resource.k8s.io/v1", "kind": kind, **item})
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def test_the_server_is_the_oldest_supported(oldest: ControlPlane) -> None:
    """It is the release the README says is tested, serving no DeviceTaintRule."""
    assert oldest.kube.get("/version")["gitVersion"] == VERSION
    assert f"kube-apiserver {VERSION[1:]}" in (tools.ROOT / "README.md").read_text()
    served = {group["name"]: group for group in oldest.kube.get("/apis")["groups"]}
    versions = [v["version"] for v in served["resource.k8s.io"]["versions"]]
    assert "v1" in versions
    assert not {"v1beta2"} & set(versions)


def test_families_say_what_the_objects_say(oldest: ControlPlane, tmp_path: Path) -> None:
    """Through the API, every family writes what it writes of the same objects from a file."""
    args = ("--resources", RESOURCES, "--metric-opt-in-list", ".*")
    listing = _exporter(tmp_path / "api", oldest.kube, *args)
    try:
        through_api = _written(listing)
    finally:
        assert listing.stop() == 0
    _dump(oldest.kube, tmp_path / "cluster.json")
    reading = _exporter(
        tmp_path / "file", oldest.kube, "--source", f"file:{tmp_path}/cluster.json", *args
    )
    try:
        from_file = _written(reading)
    finally:
        assert reading.stop() == 0
    assert through_api == from_file
    written = {line.split("{", 1)[0] for line in through_api}
    for family in (
        "kube_resourcepool_state",
        "kube_resourceclaim_status_state",
        "kube_resourceclaim_status_device_condition",  # claim device status: beta, on in 1.34
    ):
        assert family in written
    assert any('pool="e2e-part"' in line for line in through_api)
    assert written.isdisjoint(UNSERVED), written & set(UNSERVED)


def test_watch_writes_what_list_writes(oldest: ControlPlane, tmp_path: Path) -> None:
    """Watch mode on 1.34 synchronises to list mode's samples, then follows a new claim."""
    args = ("--resources", RESOURCES)
    listing = _exporter(tmp_path / "list", oldest.kube, *args)
    watching = _exporter(tmp_path / "watch", oldest.kube, "--mode", "watch", *args)
    try:
        wait_until(lambda: ready(watching), 60, "the watching exporter synchronised")
        assert _written(watching) == _written(listing)
        dataset.create_claim(oldest.kube, "followed", dataset.NAMESPACE, [("node-a", "gpu-1")], [])
        wait_until(
            lambda: any('resourceclaim_name="followed"' in line for line in _written(watching)),
            30,
            "the new claim",
        )
        assert _written(watching) == _written(listing)
    finally:
        assert watching.stop() == 0
        assert listing.stop() == 0


def test_device_taint_rules_are_not_served(
    oldest: ControlPlane, kube: Kube, tmp_path: Path
) -> None:
    """Asked for, they fail as the README says; the chart's ``auto`` does not ask for them here.

    The chart is rendered with the APIs each server's discovery lists: the session's (1.37)
    serves DeviceTaintRules and gets them, this one does not.
    """
    asking = _exporter(tmp_path, oldest.kube, "--resources", f"{RESOURCES},devicetaintrules")
    try:
        code, text = scrape(asking.port)
        assert code == 500
        assert "list devicetaintrules failed: 404" in text
    finally:
        assert asking.stop() == 0
    assert "devicetaintrules" in _chart_resources(kube)
    assert "devicetaintrules" not in _chart_resources(oldest.kube)


def _chart_resources(kube: Kube) -> list[str]:
    """The resources the chart's ClusterRole lists, rendered for the APIs *kube* serves."""
    extra = ["--kube-version", kube.get("/version")["gitVersion"]]
    for group in kube.get("/apis")["groups"]:
        for version in group["versions"]:
            served = kube.get(f"/apis/{version['groupVersion']}")["resources"]
            for kind in {resource["kind"] for resource in served}:
                extra += ["--api-versions", f"{version['groupVersion']}/{kind}"]
    role = next(doc for doc in render(extra=tuple(extra)) if doc["kind"] == "ClusterRole")
    resources: list[str] = role["rules"][0]["resources"]
    return resources
