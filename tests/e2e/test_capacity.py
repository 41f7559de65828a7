"""Capacity requests as the allocator rounds them: kube-scheduler 1.37 is the judge.

A simulated cluster of its own (tests/e2e/simulated.py), one Node and five NICs shared by
bandwidth (``allowMultipleAllocations``), each alone in its DeviceClass:

- ``range`` and ``min``: 95G, 10G by default, ``validRange`` 10G to 90G by steps of 10G;
- ``values``: 400G, ``validValues`` 60G (the default) and 400G;
- ``plain`` and ``pair``: 100G and no policy.

Claims holding a share of each are allocated first: what the scheduler writes in their
``consumedCapacity`` is the rounded amount.  Then a claim is built for each rule, its pod left
Pending by the scheduler while the exporter names the reason; the shares are released, and the
scheduler binds the pods whose reason said they wait for capacity while those whose reason said
no NIC could ever give them their rounded amount stay Pending.  A watching exporter writes what
a listing one writes throughout.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from kdraexp.dra.gated import quantity
from tests.e2e import simworld as world
from tests.e2e.harness import Exporter, wait_until
from tests.e2e.simulated import Simulated, start_simulated

pytestmark = pytest.mark.slow
NODE = "cap-a"
KIND = f'device.attributes["{world.DRIVER}"].kind'
RANGE = {"default": "10G", "validRange": {"min": "10G", "max": "90G", "step": "10G"}}
NICS: dict[str, dict[str, Any]] = {
    "range": {"value": "95G", "requestPolicy": RANGE},
    "min": {"value": "95G", "requestPolicy": RANGE},
    "values": {
        "value": "400G",
        "requestPolicy": {"default": "60G", "validValues": ["60G", "400G"]},
    },
    "plain": {"value": "100G"},
    "pair": {"value": "100G"},
}
HELD = {"range": ("65G", "70G"), "min": ("85G", "90G"), "values": ("50G", "60G")}
HELD |= {"plain": ("30G", "30G"), "pair": ("30G", "30G")}
"""Per NIC, the share its holder asks for and what the scheduler makes it consume."""
DRA = re.compile(r"^kube_(resourceclaim|resourceslice|resourcepool|deviceclass)_")


def nic(kind: str) -> dict[str, Any]:
    return {
        "name": f"nic-{kind}",
        "attributes": {"kind": {"string": kind}},
        "capacity": {"bandwidth": NICS[kind]},
        "allowMultipleAllocations": True,
    }


def request(kind: str, name: str = "dev", bandwidth: str | None = None, **exactly: Any) -> Any:
    """A request for the NIC of *kind*, for *bandwidth* of it if given."""
    body: dict[str, Any] = {"deviceClassName": f"cap-{kind}", **exactly}
    if bandwidth is not None:
        body.setdefault("capacity", {"requests": {}})["requests"]["bandwidth"] = bandwidth
    return {"name": name, "exactly": body}


def run(cluster: Simulated, made: dict[str, Any], node: str | None = NODE) -> None:
    """The claim, and a pod of its name using it (pinned to *node*)."""
    name = made["metadata"]["name"]
    cluster.kube.create(world.CLAIMS, made)
    cluster.kube.create(world.PODS, world.pod(name, {"resourceClaimName": name}, node))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("capacity"))
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(world.NAMESPACE)
        for kind in NICS:
            simulated.kube.create(
                f"{world.RESOURCE}/deviceclasses",
                world.class_selecting(f"cap-{kind}", f'{KIND} == "{kind}"'),
            )
        simulated.kube.create(
            f"{world.RESOURCE}/resourceslices",
            world.pool_slice(
                "cap-a-nics", NODE, "cap-a-nics", devices=[nic(kind) for kind in NICS]
            ),
        )
        yield simulated
    finally:
        simulated.stop()


@pytest.fixture(scope="module")
def watching(cluster: Simulated, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """An exporter in watch mode, running while the cluster changes."""
    running = world.exporter(cluster, tmp_path_factory.mktemp("capacity-watch"), "watch")
    yield running
    running.stop()


def dra_lines(body: str) -> set[str]:
    return {line for line in body.splitlines() if DRA.match(line)}


def listed_and_watched(cluster: Simulated, watching: Exporter, directory: Path) -> str:
    """What a listing exporter writes now, once the watching one writes the same."""
    body = world.scrape_once(cluster, directory)

    def same() -> bool:
        code, watched = watching.scrape()
        return code == 200 and dra_lines(watched) == dra_lines(body)

    wait_until(same, 30, "the watching exporter writing what the listing one writes")
    return body


def reasons(body: str) -> dict[tuple[str, str], str]:
    return {
        (row["resourceclaim_name"], row["request"]): row["reason"]
        for row in world.samples(body, "kube_resourceclaim_pending_reason")
    }


def consumed(cluster: Simulated, name: str) -> list[float]:
    """The bandwidth the scheduler made each result of claim *name* consume."""
    allocation = cluster.kube.get(f"{world.CLAIMS}/{name}")["status"]["allocation"]
    return [
        quantity(result["consumedCapacity"]["bandwidth"])
        for result in allocation["devices"]["results"]
    ]


WAITING = {
    "w-step": (
        "in_use",
        world.claim_of("w-step", request("range", bandwidth="22G")),
    ),  # 30G of 25G left
    "w-min": ("in_use", world.claim_of("w-min", request("min", bandwidth="3G"))),  # 10G of 5G left
    "w-values": (
        "in_use",
        world.claim_of("w-values", request("values", bandwidth="70G")),
    ),  # 400G of 340G
    "w-whole": ("in_use", world.claim_of("w-whole", request("plain"))),  # all 100G, 70G left
    "w-max": (
        "exceeds_capacity",
        world.claim_of("w-max", request("range", bandwidth="91G")),
    ),  # 100G > max
    "w-above": ("exceeds_capacity", world.claim_of("w-above", request("values", bandwidth="500G"))),
    "w-missing": (  # the NIC has no such capacity
        "exceeds_capacity",
        world.claim_of("w-missing", request("plain", capacity={"requests": {"latency": "1"}})),
    ),
    "w-two": (
        "exceeds_capacity",
        world.claim_of("w-two", request("values", bandwidth="50G", count=2)),
    ),
}
"""Claims whose pods the scheduler must leave Pending while the shares are held, and the reason
the exporter must give; after the release, those in_use are bound, the others stay Pending."""


def test_capacity_requests_as_the_scheduler_rounds_them(
    cluster: Simulated, watching: Exporter, tmp_path: Path
) -> None:
    """Each rule of the rounding, judged by the exporter, decided by the scheduler."""
    holders = [f"hold-{kind}" for kind in HELD]
    for kind, (asked, _) in HELD.items():
        run(cluster, world.claim_of(f"hold-{kind}", request(kind, bandwidth=asked)))
    for name in holders:
        wait_until(partial(world.bound, cluster, name), world.SCHEDULED, f"{name} scheduled")
    assert {kind: consumed(cluster, f"hold-{kind}") for kind in HELD} == {
        kind: [quantity(rounded)] for kind, (_, rounded) in HELD.items()
    }
    pair = world.claim_of("w-pair", request("pair", "a", "40G"), request("pair", "b", "31G"))
    fits = world.claim_of("w-fits", request("range", bandwidth="18G"))  # 20G of the 25G left
    waiting = [*WAITING, "w-pair", "w-fits"]
    try:
        for _, made in WAITING.values():
            run(cluster, made)
        run(cluster, pair)
        run(cluster, fits, node="nowhere")  # waits for a node, not for devices
        for name in waiting:
            wait_until(
                partial(world.unschedulable, cluster, name), world.SCHEDULED, f"{name} left pending"
            )
        held = listed_and_watched(cluster, watching, tmp_path / "held")
        assert reasons(held) == {
            **{(name, "dev"): reason for name, (reason, _) in WAITING.items()},
            ("w-pair", "a"): "not_together",
            ("w-pair", "b"): "not_together",
            ("w-fits", "dev"): "feasible",
        }
        world.remove(cluster, holders)
        released = [name for name, (reason, _) in WAITING.items() if reason == "in_use"]
        for name in [*released, "w-pair"]:
            wait_until(
                partial(world.bound, cluster, name),
                world.SCHEDULED,
                f"{name} bound once released",
            )
        assert consumed(cluster, "w-step") == [30e9]
        assert consumed(cluster, "w-min") == [10e9]
        assert consumed(cluster, "w-values") == [400e9]
        assert consumed(cluster, "w-whole") == [100e9]
        assert sorted(consumed(cluster, "w-pair")) == [31e9, 40e9]
        never = [name for name, (reason, _) in WAITING.items() if reason == "exceeds_capacity"]
        assert not any(world.bound(cluster, name) for name in never)
        free = listed_and_watched(cluster, watching, tmp_path / "released")
        assert reasons(free) == {
            **{(name, "dev"): "exceeds_capacity" for name in never},
            ("w-fits", "dev"): "feasible",
        }
        cluster.delete_pod(world.NAMESPACE, "w-fits")
        cluster.kube.create(world.PODS, world.pod("w-fits", {"resourceClaimName": "w-fits"}, NODE))
        wait_until(
            partial(world.bound, cluster, "w-fits"), world.SCHEDULED, "the feasible claim's new pod"
        )
        assert consumed(cluster, "w-fits") == [20e9]  # beside w-step's 30G
        assert not any(world.bound(cluster, name) for name in never)
    finally:
        world.remove(cluster, [*holders, *waiting])


def test_a_nic_carrying_a_share_has_room_for_more(
    cluster: Simulated, watching: Exporter, tmp_path: Path
) -> None:
    """Headroom by the default share, which the exhaustion alert reads: the scheduler agrees.

    A 50G share of the ``values`` NIC consumes 60G: five more 60G shares fit, and the NIC reads
    ``allocated``.  The ``plain`` NIC has no default: a claim naming no bandwidth takes all of
    it, so a 30G share leaves room for none.
    """

    def ask(kind: str, name: str) -> None:  # a claim naming no bandwidth, and its pod
        run(cluster, world.claim_of(name, request(kind)))

    for kind in ("values", "plain"):
        run(cluster, world.claim_of(f"hold-{kind}", request(kind, bandwidth=HELD[kind][0])))
    try:
        for kind in ("values", "plain"):
            wait_until(
                partial(world.bound, cluster, f"hold-{kind}"), world.SCHEDULED, f"hold-{kind}"
            )
        body = listed_and_watched(cluster, watching, tmp_path / "headroom")
        headroom = {
            row["deviceclass_name"]: value
            for row, value in world.values(body, "kube_resourcepool_allocatable_devices")
        }
        states = {
            row["device_name"]: row["state"]
            for row in world.samples(body, "kube_resourceslice_device_state")
            if row["pool"] == "cap-a-nics"
        }
        assert states["nic-values"] == "allocated"
        assert {kind: headroom[f"cap-{kind}"] for kind in ("values", "plain")} == {
            "values": 5,
            "plain": 0,
        }
        for kind in ("values", "plain"):
            placed = world.placed_one_after_another(cluster, f"fit-{kind}", partial(ask, kind))
            assert placed == headroom[f"cap-{kind}"], kind
    finally:
        world.remove(cluster, ["hold-values", "hold-plain"])
