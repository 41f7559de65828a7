"""Selectors ranging over a domain's attributes or capacities: kube-scheduler is the judge.

``exists``, ``all`` and ``filter`` over ``device.attributes['<domain>']``, and ``exists`` over
``device.capacity['<domain>']``: kube-apiserver accepts each in a DeviceClass and in a claim.
A simulated cluster of its own (tests/e2e/simulated.py), one Node with four devices that differ
in which attributes and capacities they publish.  For each class, a claim for all of its devices
is allocated by the real kube-scheduler: what it is given is what the exporter says the class
selects.  Claims whose own selectors take those forms are allocated, or left Pending, as the
exporter's pending families say.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import simworld as world
from tests.e2e.harness import Exporter, wait_until
from tests.e2e.simulated import Simulated, start_simulated

NODE = "forms-a"
ATTRIBUTES = f'device.attributes["{world.DRIVER}"]'
CAPACITY = f'device.capacity["{world.DRIVER}"]'
FORMS = {
    "forms-exists": f'{ATTRIBUTES}.exists(k, k == "type")',
    "forms-all": f'{ATTRIBUTES}.all(k, k != "type")',
    "forms-filter": f'{ATTRIBUTES}.filter(k, k in ["type", "model"]).size() == 1',
    "forms-capacity": f'{CAPACITY}.exists(k, k == "memory")',
}
"""DeviceClass -> its one selector."""
ANY = "forms-any"
"""A class of every device of the driver, for claims that select with their own selectors."""


MODEL_X = {"model": {"string": "x"}}
DEVICES = [
    world.device(NODE, "d0", "gpu", memory="40Gi"),
    world.device(NODE, "d1", "gpu", attributes=MODEL_X),
    world.device(NODE, "d2", None, attributes=MODEL_X),
    world.device(NODE, "d3", None, memory="40Gi"),
]
"""Each form selects a different two of them (see test_each_form_selects_...)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("forms"))
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(world.NAMESPACE)
        for name, expression in {**FORMS, ANY: f'device.driver == "{world.DRIVER}"'}.items():
            simulated.kube.create(
                f"{world.RESOURCE}/deviceclasses", world.class_selecting(name, expression)
            )
        simulated.kube.create(
            f"{world.RESOURCE}/resourceslices", world.pool_slice(NODE, NODE, NODE, devices=DEVICES)
        )
        yield simulated
    finally:
        simulated.stop()


def scrape(cluster: Simulated, directory: Path) -> tuple[str, str]:
    """One list-mode scrape: (the DRA metrics, the exporter's own)."""
    directory.mkdir()
    running: Exporter = world.exporter(cluster, directory, "list")
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
        return body, running.telemetry()
    finally:
        running.stop()


def run(cluster: Simulated, made: dict[str, Any]) -> str:
    """The claim and a pod of its name that uses it."""
    name: str = made["metadata"]["name"]
    cluster.kube.create(world.CLAIMS, made)
    cluster.kube.create(world.PODS, world.pod(name, {"resourceClaimName": name}))
    return name


def allocated(cluster: Simulated, name: str) -> set[str]:
    """The devices the scheduler gave claim *name*, once its pod is bound."""
    wait_until(partial(world.bound, cluster, name), world.SCHEDULED, f"{name} scheduled")
    results = cluster.kube.get(f"{world.CLAIMS}/{name}")["status"]["allocation"]["devices"][
        "results"
    ]
    assert all(result["pool"] == NODE for result in results), results
    return {result["device"] for result in results}


def test_each_form_selects_what_the_scheduler_allocates(cluster: Simulated, tmp_path: Path) -> None:
    """A claim for All of a class's devices is given exactly the devices the exporter matched.

    Each form selects a different pair of the four devices; none counts a CEL error.  The
    exporter's CEL environment refused every one of these selectors, so each class matched
    nothing.
    """
    body, telemetry = scrape(cluster, tmp_path / "matched")
    matched: dict[str, set[str]] = {name: set() for name in FORMS}
    for row in world.samples(body, "kube_resourceslice_device_class"):
        if row["deviceclass_name"] in FORMS:
            matched[row["deviceclass_name"]].add(row["device_name"])
    given = {}
    for name in FORMS:
        claim_name = run(cluster, world.claim(f"all-{name}", name, allocationMode="All"))
        try:
            given[name] = allocated(cluster, claim_name)
        finally:
            world.remove(cluster, [claim_name])
    assert matched == given
    assert len({frozenset(devices) for devices in given.values()}) == len(FORMS)
    assert all(len(devices) == 2 for devices in given.values()), given
    assert "kube_dra_exporter_cel_errors_total{" not in telemetry


def test_claims_own_selectors_of_each_form(cluster: Simulated, tmp_path: Path) -> None:
    """Own selectors of the forms: allocated where a device fits, else Pending, and why.

    ``filter`` and the capacity's ``exists`` together select d0 alone: the scheduler gives it.
    ``all`` selects two devices, and the claim asks for three: it can never be allocated.
    ``exists`` of an attribute no device has selects none.  The exporter used to answer
    ``selector_error`` for both pending claims.
    """
    both = (FORMS["forms-filter"], FORMS["forms-capacity"])
    fits = run(cluster, world.claim("own-fits", ANY, *both))
    many = run(cluster, world.claim("own-many", ANY, FORMS["forms-all"], count=3))
    none = run(cluster, world.claim("own-none", ANY, f'{ATTRIBUTES}.exists(k, k == "serial")'))
    try:
        assert allocated(cluster, fits) == {"d0"}
        for name in (many, none):
            condition = wait_until(
                partial(world.unschedulable, cluster, name), world.SCHEDULED, f"{name} left pending"
            )
            assert condition["reason"] == "Unschedulable", condition
            assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/{name}").get("status", {})
        body, telemetry = scrape(cluster, tmp_path / "pending")
        reasons = {
            row["resourceclaim_name"]: row["reason"]
            for row in world.samples(body, "kube_resourceclaim_pending_reason")
        }
        assert reasons == {many: "exceeds_capacity", none: "no_matching_device"}
        matching = {
            (row["resourceclaim_name"], row["state"]): value
            for row, value in world.values(body, "kube_resourceclaim_request_matching_devices")
        }
        assert matching == {(many, "available"): 2}
        assert "kube_dra_exporter_cel_errors_total{" not in telemetry
    finally:
        world.remove(cluster, [fits, many, none])
