"""Watch mode and sharding against a real kube-apiserver.

On the session's API server (watch cache on: streaming lists): a watching exporter writes what a
listing one writes, and follows creations, changes and deletions; two shards write together what
one exporter writes. On a second API server of this module's own (watch cache off, so that a
watch from a compacted version gets a 410, and a short etcd compaction interval): a restart of
the API server is survived, a compaction while the exporter is cut off forces a re-list that
loses nothing, and an identity that may list but not watch is told so.
"""

from __future__ import annotations

import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kdraexp.families import FAMILIES
from tests.e2e import controlplane, dataset, stuck
from tests.e2e.controlplane import ADMIN_TOKEN, ControlPlane, Kube
from tests.e2e.harness import (
    CHART_NAMESPACE,
    RESOURCES,
    Exporter,
    bound_account,
    ensure_namespace,
    mint_token,
    scrape,
    wait_until,
    write_kubeconfig,
)
from tests.e2e.proxy import Proxy

pytestmark = pytest.mark.slow
COMPACTION = 3
"""Seconds between etcd compactions on this module's API server."""
DRA = re.compile(r"^kube_(resourceclaim|resourceslice|resourcepool|deviceclass|devicetaintrule)_")
ALLOWLISTS = ("--metric-labels-allowlist", "*=[*]", "--metric-annotations-allowlist", "*=[*]")
"""Every label and annotation of every kind: the objects' own families compared too."""
REFERENCE = ("--resources", ",".join(RESOURCES), *ALLOWLISTS)
"""What the reference exporter lists and writes, and those compared with it."""


def dra_lines(text: str) -> set[str]:
    """The DRA samples of an exposition."""
    return {line for line in text.splitlines() if DRA.match(line)}


def ready(exporter: Exporter) -> bool:
    try:
        return scrape(exporter.port, "/readyz")[0] == 200
    except OSError:
        return False


def metrics(exporter: Exporter) -> set[str] | None:
    code, text = exporter.scrape()
    return dra_lines(text) if code == 200 else None


def start(
    directory: Path, kube: Kube, token: str, *args: str, server: str | None = None
) -> Exporter:
    directory.mkdir(parents=True, exist_ok=True)
    config = write_kubeconfig(directory / "kubeconfig", kube, token)
    if server is not None:
        config.write_text(config.read_text().replace(kube.server, server))
    return Exporter(directory / "run", list(args), {"KUBECONFIG": str(config)})


def watch(directory: Path, kube: Kube) -> Exporter:
    """An exporter in watch mode over the session's cluster, as the reference lists it."""
    return start(directory, kube, ADMIN_TOKEN, "--mode", "watch", *REFERENCE)


def listed(directory: Path, kube: Kube) -> set[str]:
    """The samples an exporter in list mode writes now, started for this and stopped."""
    listing = start(directory, kube, ADMIN_TOKEN)
    try:
        samples: set[str] = wait_until(lambda: metrics(listing), 30)
        return samples
    finally:
        assert listing.stop() == 0


@pytest.fixture(scope="module")
def listing(
    kube: Kube, dra_objects: None, family_claims: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Exporter]:
    """An exporter in list mode over the session's cluster: the reference."""
    exporter = start(tmp_path_factory.mktemp("list"), kube, ADMIN_TOKEN, *REFERENCE)
    yield exporter
    assert exporter.stop() == 0


def test_watch_writes_what_list_writes_and_follows(
    kube: Kube, listing: Exporter, tmp_path: Path
) -> None:
    """Synchronised by streaming lists, it writes the list's samples, then follows changes.

    The objects' own labels and annotations too: a claim relabelled is followed.
    """
    watching = watch(tmp_path, kube)
    relabelled = f"{dataset.V1}/namespaces/{dataset.NAMESPACE}/resourceclaims/train"
    try:
        wait_until(lambda: ready(watching), 60, "the watching exporter synchronised")
        listed_first = metrics(listing)
        assert wait_until(lambda: metrics(watching), 30) == listed_first
        assert listed_first is not None
        for family in ("resourceclaim", "resourceslice", "deviceclass"):
            assert any(
                line.startswith(f"kube_{family}_labels{{") and 'label_team="research"' in line
                for line in listed_first
            ), family
            assert any(
                line.startswith(f"kube_{family}_annotations{{")
                and 'annotation_example_com_owner="research@example.com"' in line
                for line in listed_first
            ), family
        assert "kube_dra_exporter_watch_relists_total{" not in watching.telemetry()
        claim = kube.get(relabelled)
        claim["metadata"]["labels"]["team"] = "moved"
        kube.put(relabelled, claim)
        wait_until(
            lambda: _has(watching, "kube_resourceclaim_labels{", 'label_team="moved"'),
            30,
            "the relabelled claim",
        )
        assert wait_until(lambda: metrics(watching), 30) == metrics(listing)
        ensure_namespace(kube, "watching")
        dataset.create_claim(kube, "followed", "watching", [("node-a", "gpu-1")], [])
        wait_until(
            lambda: _has(watching, 'resourceclaim_name="followed"', 'device_name="gpu-1"'),
            30,
            "the new claim and its allocation",
        )
        kube.delete(f"{dataset.V1}/namespaces/watching/resourceclaims/followed")
        wait_until(lambda: not _has(watching, 'resourceclaim_name="followed"'), 30, "deletion")
        assert wait_until(lambda: metrics(watching), 30) == metrics(listing)
        lists_before = _dra_lists(kube)
        for _ in range(3):
            assert watching.scrape()[0] == 200
        assert _dra_lists(kube) == lists_before  # a scrape costs the API server nothing
    finally:
        claim = kube.get(relabelled)
        claim["metadata"]["labels"] = dataset.LABELS
        kube.put(relabelled, claim)
        assert watching.stop() == 0


POD_VIEW = re.compile(r"^kube_pod_dra_")


def test_the_pod_view_and_stuck_claims_as_list_writes_them(
    kube: Kube, stuck_objects: None, tmp_path: Path
) -> None:
    """With pods listed: devices binding or failing, hidden or gone, pods stuck, watched alike.

    The objects of tests/e2e/stuck.py give every row these families can: the comparison is not
    of empty families.
    """
    args = ["--resources", ",".join([*RESOURCES, "pods"])]
    args += ["--hides-allocated-devices", stuck.NIC_DRIVER]
    listed = start(tmp_path / "list", kube, ADMIN_TOKEN, *args)
    watching = start(tmp_path / "watch", kube, ADMIN_TOKEN, "--mode", "watch", *args)

    def written(exporter: Exporter) -> set[str] | None:
        code, text = exporter.scrape()
        if code != 200:
            return None
        return {line for line in text.splitlines() if DRA.match(line) or POD_VIEW.match(line)}

    try:
        wait_until(lambda: ready(watching), 60, "the watching exporter synchronised")
        reference = wait_until(lambda: written(listed), 30, "a listing scrape")
        followed = wait_until(lambda: written(watching) == reference, 30, "the same samples")
        assert followed
        ours = {line for line in reference if f'namespace="{stuck.NAMESPACE}"' in line}
        for family, labels in (
            ("kube_resourceclaim_allocation_binding", 'condition="attached"'),
            ("kube_resourceclaim_allocation_binding_failed", 'condition="attach-failed"'),
            ("kube_resourceclaim_allocation_orphaned", 'reason="device_gone"'),
            ("kube_resourceclaim_allocation_orphaned", 'reason="hidden_by_driver"'),
            ("kube_pod_dra_unschedulable", 'cause="claim_pending"'),
            ("kube_pod_dra_not_started", f'node_name="{stuck.NODE}"'),
        ):
            assert any(line.startswith(family + "{") and labels in line for line in ours), family
    finally:
        for exporter in (listed, watching):
            assert exporter.stop() == 0


ERRING = "e2e-watch-erring"
"""A DeviceClass whose selector errors on every device (no such key): a CEL error per device."""


def _own(text: str, name: str, **labels: str) -> float | None:
    """One sample of the exporter's own metrics, if it is there."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def _logged(exporter: Exporter, line: str) -> int:
    return exporter.log().count(line)


def test_watch_counts_and_logs_what_list_does(
    kube: Kube, listing: Exporter, tmp_path: Path
) -> None:
    """Side by side: values not read and CEL errors counted and logged alike; objects held.

    A list counts each problem of every object at every scrape; a watch counts each problem of
    every object it applies: all of them when it lists, one object when an event changes it.
    """
    erring = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": ERRING},
        "spec": {"selectors": [{"cel": {"expression": 'device.attributes["e2e.io"].none == 1'}}]},
    }
    kube.create(f"{dataset.V1}/deviceclasses", erring)
    watching = None
    try:
        watching = watch(tmp_path, kube)
        wait_until(lambda: ready(watching), 60, "the watching exporter synchronised")
        wait_until(lambda: metrics(watching) == metrics(listing), 30, "the same samples")
        cost = {"resource": "deviceclasses", "field": "hourly-cost"}
        cel = {"deviceclass_name": ERRING}
        invalid_name, cel_name = (
            "kube_dra_exporter_invalid_values_total",
            "kube_dra_exporter_cel_errors_total",
        )

        def per_scrape(name: str, labels: dict[str, str]) -> float:
            """What one list-mode scrape adds: the problems of every object listed."""
            before = _own(listing.telemetry(), name, **labels) or 0.0
            assert listing.scrape()[0] == 200
            after = _own(listing.telemetry(), name, **labels)
            assert after is not None, listing.log()
            return after - before

        bad_costs, devices = per_scrape(invalid_name, cost), per_scrape(cel_name, cel)
        assert bad_costs >= 1 and devices >= 1
        synced = watching.telemetry()
        # The first list of each resource counted each object's problems once.
        assert _own(synced, invalid_name, **cost) == bad_costs, watching.log()
        assert _own(synced, cel_name, **cel) == devices
        for resource in RESOURCES:
            assert _own(synced, "kube_dra_exporter_list_objects", resource=resource) == _own(
                listing.telemetry(), "kube_dra_exporter_list_objects", resource=resource
            ), resource
        # Each line logged once, the same in both modes.
        for exporter in (listing, watching):
            log = exporter.log()
            assert _logged(exporter, "Error parsing 'hourly-cost' (1,5) on DeviceClass") == 1, log
            assert _logged(exporter, f"DeviceClass {ERRING}: ") == 1, log
            assert f"DeviceClass {ERRING}: " in log and "(logged once while it lasts)" in log

        # A new selector reads the slices again: their CEL errors are counted again.
        changed = kube.get(f"{dataset.V1}/deviceclasses/{ERRING}")
        changed["spec"]["selectors"][0]["cel"]["expression"] = (
            'device.attributes["e2e.io"].none == 2'
        )
        kube.put(f"{dataset.V1}/deviceclasses/{ERRING}", changed)
        wait_until(
            lambda: _own(watching.telemetry(), cel_name, **cel) == 2 * devices,
            30,
            "the slices read again counted",
        )
        assert _logged(watching, f"DeviceClass {ERRING}: ") == 1  # it lasted: not logged again

        # list_objects follows the watch: the objects held now.
        def claims_held(exporter: Exporter) -> float | None:
            telemetry = exporter.telemetry()
            return _own(telemetry, "kube_dra_exporter_list_objects", resource="resourceclaims")

        claims = claims_held(watching)
        assert claims is not None
        ensure_namespace(kube, "held")
        dataset.create_claim(kube, "held", "held", [], [])
        try:
            wait_until(lambda: claims_held(watching) == claims + 1, 30, "the new claim counted")
            assert listing.scrape()[0] == 200
            assert claims_held(listing) == claims + 1
        finally:
            kube.delete(f"{dataset.V1}/namespaces/held/resourceclaims/held")
        wait_until(
            lambda: claims_held(watching) == claims, 30, "the deleted claim no longer counted"
        )
    finally:
        kube.delete(f"{dataset.V1}/deviceclasses/{ERRING}")
        if watching is not None:
            assert watching.stop() == 0


def test_two_shards_write_what_one_writes(kube: Kube, listing: Exporter, tmp_path: Path) -> None:
    """Two shards (one listing, one watching) write, together, exactly the unsharded samples.

    The objects' own labels and annotations included (each object's by the shard it belongs
    to).  But for the families that judge a pending claim against every pool, which shards
    leave out.
    """
    shards = [
        start(
            tmp_path / "0",
            kube,
            ADMIN_TOKEN,
            "--shard",
            "0",
            "--total-shards",
            "2",
            "--resources",
            ",".join(RESOURCES),
            *ALLOWLISTS,
        ),
        start(
            tmp_path / "1",
            kube,
            ADMIN_TOKEN,
            "--shard",
            "1",
            "--total-shards",
            "2",
            "--mode",
            "watch",
            "--resources",
            ",".join(RESOURCES),
            *ALLOWLISTS,
        ),
    ]
    try:
        wait_until(lambda: all(ready(s) for s in shards), 60, "both shards ready")
        parts = [wait_until(lambda s=s: metrics(s), 30) for s in shards]  # type: ignore[misc]
        every_pool = tuple(f"{family.name}{{" for family in FAMILIES if family.whole_cluster)
        unsharded = metrics(listing)
        assert unsharded is not None
        whole = {line for line in unsharded if not line.startswith(every_pool)}
        assert len(whole) < len(unsharded), "the dataset has pending claims"
        assert parts[0] and parts[1] and not parts[0] & parts[1]
        assert parts[0] | parts[1] == whole
        assert "kube_dra_exporter_total_shards 2.0" in shards[1].telemetry()
    finally:
        for shard in shards:
            assert shard.stop() == 0


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of this module's own: no watch cache, etcd compacted every few seconds."""
    started = controlplane.start(
        tmp_path_factory.mktemp("watch-plane"),
        ("--watch-cache=false", f"--etcd-compaction-interval={COMPACTION}s"),
    )
    try:
        ensure_namespace(started.kube, dataset.NAMESPACE)
        dataset.create_all(started.kube)
        yield started
    finally:
        started.stop()


def test_restart_of_the_api_server(plane: ControlPlane, tmp_path: Path) -> None:
    """The API server restarts: the watches come back and changes after it show."""
    kube = plane.kube
    watching = start(tmp_path / "watch", kube, ADMIN_TOKEN, "--mode", "watch")
    try:
        wait_until(lambda: ready(watching), 60, "synchronised (by list and watch: no cache)")
        plane.restart_apiserver()
        ensure_namespace(kube, "after-restart")
        dataset.create_claim(kube, "after", "after-restart", [("node-b", "gpu-0")], ["p"])
        wait_until(lambda: _has(watching, 'resourceclaim_name="after"'), 60, "the new claim")
        assert listed(tmp_path / "list", kube) == metrics(watching)
    finally:
        assert watching.stop() == 0


def test_compaction_relists_without_loss(plane: ControlPlane, tmp_path: Path) -> None:
    """Cut off while objects change and etcd compacts: a 410, a re-list, nothing lost."""
    kube = plane.kube
    proxy = Proxy(plane.port)
    watching = start(
        tmp_path / "watch",
        kube,
        ADMIN_TOKEN,
        "--mode",
        "watch",
        server=f"https://127.0.0.1:{proxy.port}",
    )
    try:
        wait_until(lambda: ready(watching), 60, "synchronised")
        version = kube.get(f"{dataset.V1}/resourceclaims")["metadata"]["resourceVersion"]
        proxy.cut()
        ensure_namespace(kube, "compacted")
        dataset.create_claim(kube, "while-cut", "compacted", [("node-a", "gpu-0")], [])
        kube.delete(f"{dataset.V1}/namespaces/compacted/resourceclaims/while-cut")
        dataset.create_claim(kube, "kept", "compacted", [], [])
        wait_until(lambda: _compacted(kube, version), 60, "etcd compacting the changes away")
        proxy.restore()
        wait_until(
            lambda: _has(watching, 'resourceclaim_name="kept"'), 90, "the change after a re-list"
        )
        telemetry = watching.telemetry()
        assert (
            'kube_dra_exporter_watch_relists_total{cause="expired",resource="resourceclaims"}'
            in telemetry
        )
        assert listed(tmp_path / "list", kube) == metrics(watching)
    finally:
        assert watching.stop() == 0
        proxy.close()


def test_identity_without_watch(plane: ControlPlane, tmp_path: Path) -> None:
    """An identity that may list but not watch: 503 saying watch is refused, and the log too."""
    kube = plane.kube
    ensure_namespace(kube, CHART_NAMESPACE)
    listing = {"apiGroups": ["resource.k8s.io"], "resources": ["*"], "verbs": ["list"]}
    bound_account(kube, "list-only", CHART_NAMESPACE, [listing])
    watching = start(tmp_path, kube, mint_token(kube, "list-only"), "--mode", "watch")
    try:

        def refused() -> str | None:
            code, text = watching.scrape()
            return text if code == 503 and "403 Forbidden" in text else None

        text = wait_until(refused, 30, "a 503 naming the refusal")
        assert (
            "deviceclasses not synchronised yet (watch deviceclasses failed: 403 Forbidden)" in text
        )
        assert "Error watching deviceclasses: watch deviceclasses: 403 Forbidden" in watching.log()
    finally:
        assert watching.stop() == 0


def _has(exporter: Exporter, *fragments: str) -> bool:
    code, text = exporter.scrape()
    return code == 200 and any(all(f in line for f in fragments) for line in text.splitlines())


def _dra_lists(kube: Kube) -> float:
    """LIST requests for resource.k8s.io the API server has answered so far."""
    total = 0.0
    for family in text_string_to_metric_families(kube.get("/metrics")):
        for sample in family.samples:
            if (
                sample.name == "apiserver_request_total"
                and sample.labels.get("verb") == "LIST"
                and sample.labels.get("group") == "resource.k8s.io"
            ):
                total += sample.value
    return total


def _compacted(kube: Kube, version: str) -> bool:
    """Whether a watch of resourceclaims from *version* is refused as compacted (410)."""
    request = urllib.request.Request(
        f"{kube.server}{dataset.V1}/resourceclaims?watch=1&timeoutSeconds=1"
        f"&resourceVersion={version}",
        headers={"Authorization": f"Bearer {kube.token}"},
    )
    context = ssl.create_default_context(cadata=kube.ca_pem.decode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        return bool(error.code == 410)
    return b'"code":410' in body
