"""Cost by team, as an operator asks Prometheus for it, on claims the real components made.

A simulated cluster of its own (tests/e2e/simulated.py), one Node with three whole GPUs and four
partitions of one driver; a class for each, priced 2.50 and 0.60.  ResourceClaimTemplates carry
a team in ``spec.metadata.labels`` (ml: a GPU, and three partitions in one request; search: a
GPU) or none (a partition).  A pod uses each template: kube-controller-manager makes its claim,
copying the template's labels, and kube-scheduler allocates it; the test writes no status.

The exporter, with ``--metric-labels-allowlist resourceclaims=[team],pods=[app]``, is scraped by
a real Prometheus, which evaluates the documented join (README, "Chargeback"): ml pays 4.3
(2.50 and three partitions' 1.8), search 2.5, the unlabelled claim's 0.6 falls under
``label_team=""``.  The three partitions' claim costs 1.8, not 1.7999999999999998.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import tools
from tests.e2e import prometheus
from tests.e2e import simworld as world
from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, start_simulated

pytestmark = pytest.mark.slow
NODE = "pay-a"
PRICES = {"pay-gpu": ("gpu", "2.50"), "pay-mig": ("mig", "0.60")}
"""Class -> (device type it selects, hourly cost)."""
TEMPLATES = {
    "ml-gpu": ({"team": "ml"}, "pay-gpu", 1),
    "ml-partitions": ({"team": "ml"}, "pay-mig", 3),
    "search-gpu": ({"team": "search"}, "pay-gpu", 1),
    "plain-partition": ({}, "pay-mig", 1),
}
"""Template -> (the labels of its spec.metadata, the class it asks for, how many devices)."""
USES = {
    "train": "ml-gpu",
    "notebook": "ml-partitions",
    "search": "search-gpu",
    "stray": "plain-partition",
}
"""Pod -> the template its one claim is made from."""
JOIN = """sum by (label_team) (
  kube_resourceclaim_hourly_cost
    * on (namespace, resourceclaim_name) group_left (label_team)
  kube_resourceclaim_labels
)"""
"""The query the README and docs/metrics.md give, as written there."""


def template(name: str) -> dict[str, Any]:
    labels, deviceclass, count = TEMPLATES[name]
    request = {"name": "dev", "exactly": {"deviceClassName": deviceclass, "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"metadata": {"labels": labels}, "spec": {"devices": {"requests": [request]}}},
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("chargeback"))
    try:
        arrange(simulated)
        yield simulated
    finally:
        simulated.stop()


def arrange(simulated: Simulated) -> None:
    """The classes, the node's devices, the templates and a pod on each; the pods bound."""
    simulated.add_namespace(world.NAMESPACE)
    simulated.add_node(NODE)
    kube = simulated.kube
    for name, (kind, cost) in PRICES.items():
        made = world.device_class(name, kind)
        made["metadata"]["annotations"] = {"hourly-cost": cost}
        kube.create(f"{world.RESOURCE}/deviceclasses", made)
    devices = [world.gpu(NODE, f"gpu-{i}") for i in range(3)]
    devices += [world.gpu(NODE, f"mig-{i}", "mig") for i in range(4)]
    kube.create(
        f"{world.RESOURCE}/resourceslices", world.pool_slice(NODE, NODE, NODE, devices=devices)
    )
    for name in TEMPLATES:
        kube.create(
            f"{world.RESOURCE}/namespaces/{world.NAMESPACE}/resourceclaimtemplates", template(name)
        )
    for name in USES:
        made = world.pod(name, {"resourceClaimTemplateName": USES[name]}, labels={"app": name})
        kube.create(world.PODS, made)
    for name in USES:
        wait_until(partial(world.bound, simulated, name), world.SCHEDULED, f"{name} scheduled")


def claim_of(simulated: Simulated, name: str) -> str:
    """The name of the claim the controller manager made for pod *name*."""
    (status,) = simulated.kube.get(f"{world.PODS}/{name}")["status"]["resourceClaimStatuses"]
    claim: str = status["resourceClaimName"]
    return claim


def test_cost_by_team_is_one_join(cluster: Simulated, tmp_path: Path) -> None:
    """The claims carry their templates' teams; Prometheus sums each team's cost."""
    claims = {name: claim_of(cluster, name) for name in USES}
    config = write_kubeconfig(tmp_path / "kubeconfig", cluster.kube, cluster.kube.token)
    running = Exporter(
        tmp_path / "run",
        [
            "--resources",
            "resourceclaims,resourceslices,deviceclasses,pods",
            "--metric-labels-allowlist",
            "resourceclaims=[team],pods=[app]",
            "--metric-annotations-allowlist",
            "resourceclaims=[resource.kubernetes.io/*]",
        ],
        {"KUBECONFIG": str(config)},
    )
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
        lines = set(body.splitlines())
        for name, made in claims.items():
            labels, _, _ = TEMPLATES[USES[name]]
            team = f',label_team="{labels["team"]}"' if labels else ""
            assert (
                f'kube_resourceclaim_labels{{namespace="{world.NAMESPACE}",'
                f'resourceclaim_name="{made}"{team}}} 1'
            ) in lines, body
            assert (
                f'kube_resourceclaim_annotations{{namespace="{world.NAMESPACE}",'
                f'resourceclaim_name="{made}",'
                f'annotation_resource_kubernetes_io_pod_claim_name="gpu"}} 1'
            ) in lines
            uid = cluster.kube.get(f"{world.PODS}/{name}")["metadata"]["uid"]
            assert (
                f'kube_pod_labels{{namespace="{world.NAMESPACE}",pod="{name}",uid="{uid}",'
                f'label_app="{name}"}} 1'
            ) in lines
        assert (
            f'kube_resourceclaim_hourly_cost{{namespace="{world.NAMESPACE}",'
            f'resourceclaim_name="{claims["notebook"]}",deviceclass_name="pay-mig"}} 1.8'
        ) in lines, "three partitions at 0.60"
        scraping = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "kdraexp",
                    "static_configs": [{"targets": [f"127.0.0.1:{running.port}"]}],
                }
            ],
        }
        with prometheus.serve(tools.prometheus(), scraping, tmp_path / "prometheus") as port:

            def by_team() -> dict[str, str] | None:
                try:
                    held = prometheus.query(
                        port,
                        "count(kube_resourceclaim_hourly_cost) + count(kube_resourceclaim_labels)",
                    )
                except OSError:
                    return None
                if not held or held[0]["value"][1] != str(2 * len(USES)):
                    return None
                return {
                    answer["metric"].get("label_team", ""): answer["value"][1]
                    for answer in prometheus.query(port, JOIN)
                }

            teams = wait_until(by_team, 60, "Prometheus holding every claim's cost and labels")
            (partitions,) = prometheus.query(
                port, f'kube_resourceclaim_hourly_cost{{resourceclaim_name="{claims["notebook"]}"}}'
            )
        assert teams == {"ml": "4.3", "search": "2.5", "": "0.6"}
        assert partitions["value"][1] == "1.8"
    finally:
        running.stop()


def test_every_claim_is_made_from_a_labelled_template_as_the_controller_copies_it(
    cluster: Simulated,
) -> None:
    """The join's premise, on the real controller manager: the template's labels, copied."""
    for name in USES:
        made = cluster.kube.get(f"{world.CLAIMS}/{claim_of(cluster, name)}")
        labels, deviceclass, count = TEMPLATES[USES[name]]
        assert made["metadata"].get("labels", {}) == labels
        results = made["status"]["allocation"]["devices"]["results"]
        assert len(results) == count
        assert {result["driver"] for result in results} == {world.DRIVER}
        assert {result["device"].split("-")[0] for result in results} == {PRICES[deviceclass][0]}
