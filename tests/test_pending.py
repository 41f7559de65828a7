"""kube_resourceclaim_pending_reason and _request_matching_devices: each reason, in order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.allocator import answers, pending, selectorread, together
from kdraexp.allocator.facts import DeviceFacts
from kdraexp.allocator.index import Pool
from kdraexp.allocator.pending import REASONS
from kdraexp.cel.matching import Matcher
from kdraexp.families.resourceslice import D
from kdraexp.families.selection import select
from kdraexp.store.collection import Collection, Store
from kdraexp.util import packed
from tests.collect import by_kind, collect, collect_kinds, samples, values
from tests.objects import classy, counters, device, gpu, new_claim, pool_slice, result
from tests.test_headroom import MIG, WHOLE, mig_gpu
from tests.test_metrics_reference import REFERENCE

TAINT = [{"key": "xid", "value": "48", "effect": "NoSchedule"}]


def request(deviceclass: str = "gpu", name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": deviceclass, **exactly}}


def reasons(collection: Collection) -> dict[tuple[str, str], str]:
    return {
        (labels["resourceclaim_name"], labels["request"]): labels["reason"]
        for labels, _ in samples(collection).get("kube_resourceclaim_pending_reason", [])
    }


def matching(collection: Collection, claim: str) -> dict[str, float]:
    found = values(
        collection, "kube_resourceclaim_request_matching_devices", "resourceclaim_name", "state"
    )
    return {state: count for (name, state), count in found.items() if name == claim}


def cluster() -> dict[str, Any]:
    """Two nodes of one GPU each, one of them taken; a tainted GPU; an incomplete pool."""
    return {
        "slices": [
            pool_slice("a", [gpu("g0")], pool="n1"),
            pool_slice("b", [gpu("g0")], pool="n2"),
            pool_slice("c", [gpu("g0", taints=TAINT, product="H100")], pool="n3"),
            pool_slice("d", [gpu("g0", product="B200")], pool="n4", count=2),
        ],
        "claims": [new_claim("taken", [result("g0", "n1")])],
        "classes": [WHOLE, classy("broken", "device.attributes['gpu.nvidia.com'].type > 1")],
    }


def judged(*requests: dict[str, Any], **changes: Any) -> dict[tuple[str, str], str]:
    objects = cluster()
    objects["claims"] = [
        *objects["claims"],
        *(new_claim(f"c{i}", None, requests=[r]) for i, r in enumerate(requests)),
    ]
    objects.update(changes)
    return reasons(collect(**objects))


def selected(expression: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": expression}}]


PRODUCT = "device.attributes['gpu.nvidia.com'].productName == '{}'"
UUID = "device.attributes['gpu.nvidia.com'].uuid"


@pytest.mark.parametrize(
    ("ask", "reason"),
    [
        (request("nope"), "class_not_found"),
        (request("broken"), "selector_error"),
        (
            request(selectors=selected("device.attributes['gpu.nvidia.com'].type > 1")),
            "selector_error",
        ),
        (
            request(selectors=selected("device.attributes['gpu.nvidia.com'].type =")),
            "selector_error",
        ),
        (request(selectors=selected(PRODUCT.format("GB300"))), "no_matching_device"),
        (request(selectors=selected(PRODUCT.format("B200"))), "pool_unusable"),
        (request(selectors=selected(PRODUCT.format("H100"))), "tainted"),
        (
            request(
                selectors=selected(PRODUCT.format("H100")),
                tolerations=[{"key": "xid", "operator": "Exists"}],
            ),
            "feasible",
        ),
        (request(count=2), "exceeds_capacity"),
        (request(allocationMode="All"), "insufficient"),
        (request(), "feasible"),
    ],
)
def test_each_reason(ask: dict[str, Any], reason: str) -> None:
    """A claim built for each reason has it."""
    assert judged(ask) == {("c0", "gpu"): reason}


def test_in_use_and_first_available() -> None:
    """Every matching device allocated: in_use; alternatives are judged one by one."""
    claims = [
        new_claim("taken", [result("g0", "n1")]),
        new_claim("taken-2", [result("g0", "n2")]),
        new_claim(
            "alt",
            None,
            requests=[
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "a", "deviceClassName": "gpu"},
                        {"name": "b", "deviceClassName": "nope"},
                    ],
                }
            ],
        ),
    ]
    slices = cluster()["slices"][:2]
    assert judged(claims=claims, slices=slices) == {
        ("alt", "gpu/a"): "in_use",
        ("alt", "gpu/b"): "class_not_found",
    }


def test_matching_devices_by_state() -> None:
    """The devices a request matches, counted by state."""
    objects = cluster()
    objects["claims"].append(new_claim("p", None, requests=[request()]))
    collection = collect(**objects)
    assert matching(collection, "p") == {
        "allocated": 1,
        "available": 1,
        "tainted": 1,
        "unusable": 1,
    }
    assert reasons(collection) == {("p", "gpu"): "feasible"}


def test_counters_make_a_pair_insufficient() -> None:
    """Two 1g partitions on one GPU fit; a whole GPU and its own partition do not make two."""
    slices = mig_gpu()
    claims = [new_claim("two", None, requests=[request("mig", count=2)])]
    assert reasons(collect(slices=slices, claims=claims, classes=[MIG])) == {
        ("two", "gpu"): "feasible"
    }
    both = classy("any", "device.driver == 'gpu.nvidia.com'")
    claims = [
        new_claim("used", [result(f"mig-1g-{i}", "node") for i in (1, 2, 3)]),
        new_claim("two", None, requests=[request("any", count=2)]),
    ]
    written = collect(slices=slices, claims=claims, classes=[both])
    assert reasons(written) == {("two", "gpu"): "insufficient"}
    assert matching(written, "two") == {"allocated": 3, "available": 1, "blocked": 2}


def test_shareable_device_with_room() -> None:
    """A device allowing several allocations is free while what the request asks fits."""
    nic = device("nic", allowMultipleAllocations=True)
    nic["capacity"] = {"bandwidth": {"value": "800G"}}
    slices = [pool_slice("s", [nic], pool="node")]
    shared = classy("nic", "device.allowMultipleAllocations")
    used = new_claim("used", [result("nic", "node", consumedCapacity={"bandwidth": "600G"})])
    ask = [request("nic", capacity={"requests": {"bandwidth": "200G"}})]
    more = [request("nic", capacity={"requests": {"bandwidth": "300G"}})]
    claims = [used, new_claim("fits", None, requests=ask), new_claim("no", None, requests=more)]
    assert reasons(collect(slices=slices, claims=claims, classes=[shared])) == {
        ("fits", "gpu"): "feasible",
        ("no", "gpu"): "in_use",
    }


NIC_DRIVER = "nic.example"


def nic(kind: str, bandwidth: str, **request_policy: Any) -> dict[str, Any]:
    """A NIC shared by bandwidth, alone in pool and class *kind*, with this ``requestPolicy``."""
    capacity: dict[str, Any] = {"value": bandwidth}
    if request_policy:
        capacity["requestPolicy"] = request_policy
    return {
        "name": "nic",
        "attributes": {"kind": {"string": kind}},
        "capacity": {"bandwidth": capacity},
        "allowMultipleAllocations": True,
    }


NICS = {
    # sold in two sizes, 60G by default
    "values": nic("values", "400G", default="60G", validValues=["60G", "400G"]),
    # 10G to 90G by 10G, 10G by default; 95G in all, so what is left need not be a step
    "range": nic(
        "range", "95G", default="10G", validRange={"min": "10G", "max": "90G", "step": "10G"}
    ),
    # no policy: a request naming no bandwidth takes all of it
    "plain": nic("plain", "100G"),
}
HELD = {"values": "60G", "range": "70G", "plain": "30G"}


def nic_world() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The NICs' slices and classes."""
    slices = [pool_slice(kind, [made], pool=kind, driver=NIC_DRIVER) for kind, made in NICS.items()]
    classes = [classy(kind, f"device.attributes['{NIC_DRIVER}'].kind == '{kind}'") for kind in NICS]
    return slices, classes


def share(kind: str, amount: str) -> dict[str, Any]:
    """A share of NIC *kind*, consuming *amount* of its bandwidth."""
    return result(
        "nic", kind, NIC_DRIVER, shareID=f"share-{kind}", consumedCapacity={"bandwidth": amount}
    )


def nic_cluster(held: dict[str, str], *asked: tuple[str, str, dict[str, Any]]) -> Collection:
    """Each NIC in its pool, *held* shares of them allocated, and a pending claim per *asked*.

    *asked* is (claim, NIC kind, request fields).
    """
    slices, classes = nic_world()
    claims = [new_claim(f"held-{kind}", [share(kind, amount)]) for kind, amount in held.items()]
    claims += [
        new_claim(name, None, requests=[request(kind, **fields)]) for name, kind, fields in asked
    ]
    return collect(slices=slices, claims=claims, classes=classes)


def bandwidth(amount: str) -> dict[str, Any]:
    return {"capacity": {"requests": {"bandwidth": amount}}}


@pytest.mark.parametrize(
    ("kind", "fields", "reason"),
    [
        ("values", bandwidth("50G"), "feasible"),  # 60G of the 340G left
        ("values", bandwidth("70G"), "in_use"),  # 400G: only once the 60G share goes
        ("values", bandwidth("500G"), "exceeds_capacity"),  # above every valid value
        ("values", {}, "feasible"),  # the default, 60G
        ("values", {"capacity": {"requests": {"latency": "1"}}}, "exceeds_capacity"),  # none has it
        ("range", bandwidth("18G"), "feasible"),  # 20G of the 25G left
        ("range", bandwidth("22G"), "in_use"),  # 30G
        ("range", bandwidth("3G"), "feasible"),  # up to min, 10G
        ("range", bandwidth("91G"), "exceeds_capacity"),  # 100G, above max
        ("range", bandwidth("95G"), "exceeds_capacity"),  # the whole NIC, but 100G once rounded
        ("plain", bandwidth("70G"), "feasible"),  # what it asks, no more
        ("plain", bandwidth("71G"), "in_use"),
        ("plain", bandwidth("101G"), "exceeds_capacity"),
        ("plain", {}, "in_use"),  # all 100G, of which 30G are taken
        # allocationMode All: the allocator takes every device that could ever give the amount
        ("values", {**bandwidth("70G"), "allocationMode": "All"}, "in_use"),
        ("values", {**bandwidth("500G"), "allocationMode": "All"}, "exceeds_capacity"),
    ],
)
def test_capacity_requests_judged_as_the_allocator_rounds_them(
    kind: str, fields: dict[str, Any], reason: str
) -> None:
    """What a request consumes is rounded by the NIC's policy, then compared with what is left.

    A request no NIC could ever give its rounded amount exceeds the capacity, whatever is held.
    """
    asked = ("asked", kind, fields)
    assert reasons(nic_cluster(HELD, asked)) == {("asked", "gpu"): reason}
    if reason in ("in_use", "feasible"):
        assert reasons(nic_cluster({}, asked)) == {("asked", "gpu"): "feasible"}
    else:
        assert reasons(nic_cluster({}, asked)) == {("asked", "gpu"): reason}


def test_matching_devices_of_a_shared_nic_by_what_the_request_consumes() -> None:
    """A NIC carrying a share is allocated to a request it has no room for, else available."""
    written = nic_cluster(
        HELD,
        ("small", "values", bandwidth("50G")),
        ("large", "values", bandwidth("70G")),
        ("huge", "values", bandwidth("500G")),
    )
    assert matching(written, "small") == {"available": 1}
    assert matching(written, "large") == {"allocated": 1}
    assert matching(written, "huge") == {"allocated": 1}
    fresh = nic_cluster({}, ("huge", "values", bandwidth("500G")))
    assert matching(fresh, "huge") == {"available": 1}


def test_one_request_takes_a_shared_nic_once() -> None:
    """Two devices asked of one NIC: a request takes each device once, however much is left."""
    two = ("two", "values", {**bandwidth("50G"), "count": 2})
    assert reasons(nic_cluster({}, two)) == {("two", "gpu"): "exceeds_capacity"}


def test_requests_of_one_claim_add_up_on_a_shared_nic() -> None:
    """Each request fits the 70G the plain NIC has left alone, not both: 40G and 31G."""
    slices, classes = nic_world()
    pair = [
        request("plain", name=name, **bandwidth(amount))
        for name, amount in (("a", "40G"), ("b", "31G"))
    ]
    fitting = [request("plain", name=name, **bandwidth("35G")) for name in ("a", "b")]
    claims = [
        new_claim("held", [share("plain", "30G")]),
        new_claim("pair", None, requests=pair),
        new_claim("fits", None, requests=fitting),
    ]
    assert reasons(collect(slices=slices, claims=claims, classes=classes)) == {
        ("pair", "a"): "not_together",
        ("pair", "b"): "not_together",
        ("fits", "a"): "feasible",
        ("fits", "b"): "feasible",
    }


def test_reasons_follow_a_share_released() -> None:
    """Followed claim by claim: the 70G request waits for the 60G share, then is feasible."""
    store = Store()
    slices, classes = nic_world()
    pending = new_claim("asked", None, requests=[request("values", **bandwidth("70G"))])
    claims = [new_claim("held", [share("values", "60G")]), pending]
    assert reasons(collect(slices=slices, claims=claims, classes=classes, store=store)) == {
        ("asked", "gpu"): "in_use"
    }
    assert reasons(collect(slices=slices, claims=[pending], classes=classes, store=store)) == {
        ("asked", "gpu"): "feasible"
    }


def test_reasons_follow_allocations() -> None:
    """When another claim takes the last free device, a pending claim's reason follows.

    Only the tainted GPU is left: the claim's reason turns from feasible to tainted.
    """
    objects = cluster()
    objects["claims"].append(new_claim("p", None, requests=[request()]))
    store = Store()
    assert reasons(collect(**objects, store=store)) == {("p", "gpu"): "feasible"}
    objects["claims"].append(new_claim("late", [result("g0", "n2")]))
    assert reasons(collect(**objects, store=store)) == {("p", "gpu"): "tainted"}


def test_every_reason_is_documented() -> None:
    """The reference's table lists each reason in the order they are tried."""
    text = REFERENCE.read_text()
    found = [reason for reason in REASONS if f"| `{reason}` |" in text]
    assert found == list(REASONS)
    assert sorted(found, key=lambda r: text.index(f"| `{r}` |")) == list(REASONS)


def test_own_selectors_within_a_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims each pinning a device by its own selector: evaluated within a budget a collection.

    A request the budget did not reach gets no reason and is reported; one it reached does.
    """
    monkeypatch.setattr(answers, "BUDGET", 4)  # the four GPUs, once
    objects = cluster()
    pins = [
        new_claim(f"pin-{n}", None, requests=[request(selectors=selected(f'{UUID} == "GPU-g{n}"'))])
        for n in range(3)
    ]
    objects["claims"] = [*objects["claims"], *pins]
    collection = collect(**objects)
    judged_now = reasons(collection)
    assert judged_now == {("pin-0", "gpu"): "feasible"}
    messages = [p.message for p in collection.problems if p.field == "selectors"]
    assert len(messages) == 2 and all("not judged in this collection" in m for m in messages)


def test_own_selectors_read_each_slice_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests with different own selectors: each slice is read again once for all of them.

    Their answers are those each would get alone.
    """
    decoded: list[bytes] = []

    def counting(data: bytes) -> bytes:
        decoded.append(data)
        return packed.unpack(data)

    monkeypatch.setattr(selectorread, "unpack", counting)
    asks = [
        request(selectors=selected(f'{UUID} == "GPU-g0"')),
        request(selectors=selected(f'{UUID} != "GPU-g0"')),
        request(selectors=selected("device.attributes['gpu.nvidia.com'].type > 1")),
    ]
    together = judged(*asks)
    assert len(decoded) == 4  # the four slices with a GPU
    assert together == {
        ("c0", "gpu"): "feasible",
        ("c1", "gpu"): "no_matching_device",
        ("c2", "gpu"): "selector_error",
    }
    assert {
        key: judged(ask)[("c0", "gpu")] for key, ask in zip(together, asks, strict=True)
    } == together


def test_plain_requests_judged_from_summaries_as_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain request (a class and a count) is judged from the pools' summaries.

    The answer is the one the device-by-device judgement gives, on the example cluster and on
    hand-made pools.
    """
    from tests.test_file import EXAMPLE

    example = by_kind(EXAMPLE)
    classes = example["DeviceClass"]
    asked = [
        new_claim(
            f"ask-{c['metadata']['name']}-{n}",
            None,
            requests=[request(c["metadata"]["name"], count=n)],
        )
        for c in classes
        for n in (1, 2, 3)
    ]
    clusters = [
        {
            "slices": example["ResourceSlice"],
            "claims": [*example["ResourceClaim"], *asked],
            "classes": classes,
            "rules": example["DeviceTaintRule"],
        },
        {
            **cluster(),
            "claims": [*cluster()["claims"], new_claim("p", None, requests=[request(count=2)])],
        },
        {
            "slices": mig_gpu(),
            "claims": [
                new_claim("used", [result("mig-1g-1", "node")]),
                *(
                    new_claim(f"m{n}", None, requests=[request("mig", count=n)])
                    for n in (1, 3, 4, 5)
                ),
                *(new_claim(f"a{n}", None, requests=[request("any", count=n)]) for n in (3, 4, 5)),
            ],
            "classes": [MIG, WHOLE, classy("any", "device.driver == 'gpu.nvidia.com'")],
        },
    ]
    two = [pool_slice("a", [gpu("g0"), gpu("g1")], pool="n1"), *cluster()["slices"][1:]]
    clusters.append(  # without counters: insufficient from the summaries
        {
            **cluster(),
            "slices": two,
            "claims": [
                *cluster()["claims"],
                *(new_claim(f"n{n}", None, requests=[request(count=n)]) for n in (1, 2, 3)),
            ],
        }
    )
    for objects in clusters:
        fast = reasons(collect(**objects))
        monkeypatch.setattr(pending, "_plain", lambda index, request: None)
        slow = reasons(collect(**objects))
        monkeypatch.undo()
        assert fast == slow
        assert fast


def test_own_selectors_evaluated_once_for_devices_read_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Devices that read alike where a request's own selector reads are evaluated once.

    That holds over every slice; a pool of two slices answers for the devices of both.
    """
    asked: list[int] = []
    match_all = Matcher.match_all

    def counting(self: Any, requests: Any, budgeted: bool = True) -> Any:
        if not budgeted:
            asked.append(len(requests))
        return match_all(self, requests, budgeted)

    monkeypatch.setattr(Matcher, "match_all", counting)
    objects = cluster()
    objects["slices"] = [
        *(
            pool_slice(f"s{n}", [gpu("g0"), gpu("g1", product="H100")], pool=f"p{n}")
            for n in range(6)
        ),
        pool_slice("two-a", [gpu("g0", product="H100")], pool="two", count=2),
        pool_slice("two-b", [gpu("g1", product="H100")], pool="two", count=2),
    ]
    objects["claims"] = [
        new_claim(f"c{n}", None, requests=[request(selectors=selected(PRODUCT.format("H100")))])
        for n in range(2)
    ] + [new_claim("taken", [result(name, pool=f"p{n}") for n in range(6) for name in ("g1",)])]
    collection = collect(**objects)
    assert sum(asked) == 2  # A100 and H100, whatever the slice
    assert matching(collection, "c0") == {"allocated": 6, "available": 2}
    assert reasons(collection)[("c0", "gpu")] == "feasible"


def test_exceeds_capacity_keeps_while_claims_come_and_go() -> None:
    """More GPUs than any node has: exceeds_capacity, whatever is taken or tainted.

    The reason does not follow other claims: with every GPU free, with every one taken, with
    the last free one tainted by a rule.
    """
    objects = cluster()
    objects["claims"] = [new_claim("big", None, requests=[request(count=2)])]
    assert reasons(collect(**objects)) == {("big", "gpu"): "exceeds_capacity"}
    objects["claims"].append(new_claim("taken", [result("g0", "n1")]))
    assert reasons(collect(**objects)) == {("big", "gpu"): "exceeds_capacity"}
    rule = {
        "metadata": {"name": "last"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n2", "device": "g0"},
            "taint": {"key": "k", "effect": "NoSchedule"},
        },
    }
    assert reasons(collect(**objects, rules=[rule])) == {("big", "gpu"): "exceeds_capacity"}
    pinned = request(count=2, selectors=selected(PRODUCT.format("NVIDIA A100 80GB PCIe")))
    objects["claims"].append(new_claim("pinned", None, requests=[pinned]))
    assert reasons(collect(**objects, rules=[rule]))[("pinned", "gpu")] == "exceeds_capacity"


def test_a_whole_gpu_and_its_own_partition_are_one() -> None:
    """A class selecting a GPU and its partitions: never more than the counters allow together.

    One GPU in MIG mode: the whole GPU and four 1g partitions (the 2g overlaps two) make at
    most four devices at once, never six, even with nothing in use.  A GPU with one partition
    as large as itself: one device, not two.
    """
    both = classy("any", "device.driver == 'gpu.nvidia.com'")
    claims = [new_claim(f"c{n}", None, requests=[request("any", count=n)]) for n in (4, 5)]
    assert reasons(collect(slices=mig_gpu(), claims=claims, classes=[both])) == {
        ("c4", "gpu"): "feasible",
        ("c5", "gpu"): "exceeds_capacity",
    }
    everything = counters(memory="8")
    whole = {"counterSet": "set", "counters": everything}
    slices = [
        pool_slice(
            "s",
            [
                gpu("gpu-0", consumesCounters=[whole]),
                gpu("mig-7g", "mig", consumesCounters=[whole]),
            ],
            pool="node",
            sharedCounters=[{"name": "set", "counters": everything}],
        )
    ]
    claims = [new_claim("two", None, requests=[request("any", count=2)])]
    assert reasons(collect(slices=slices, claims=claims, classes=[both])) == {
        ("two", "gpu"): "exceeds_capacity"
    }


def test_network_attached_devices_count_on_every_node() -> None:
    """A node's own GPU and a network-attached one make two on that node: not beyond capacity."""
    objects = cluster()
    shared = pool_slice("net", [gpu("g0")], pool="net")
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    objects["slices"] = [*objects["slices"], shared]
    objects["claims"] = [new_claim("two", None, requests=[request(count=2)])]
    assert reasons(collect(**objects)) == {("two", "gpu"): "feasible"}


def test_not_together() -> None:
    """Two requests, each feasible alone, on no node together: both are not_together.

    One GPU free on each node: two requests of one GPU cannot share a node.  With a second
    GPU on one node they can; a request that is not feasible keeps its own reason.
    """
    objects = cluster()
    pair = [request(name="a"), request(name="b")]
    objects["claims"] = [new_claim("pair", None, requests=pair)]
    assert reasons(collect(**objects)) == {
        ("pair", "a"): "not_together",
        ("pair", "b"): "not_together",
    }
    objects["slices"] = [*objects["slices"], pool_slice("e", [gpu("g1")], pool="n2", count=1)]
    objects["slices"][1] = pool_slice("b", [gpu("g0"), gpu("g1")], pool="n2")
    objects["slices"].pop()
    assert reasons(collect(**objects)) == {("pair", "a"): "feasible", ("pair", "b"): "feasible"}
    objects["claims"] = [
        new_claim("pair", None, requests=[request(name="a"), request("nope", "b")])
    ]
    assert reasons(collect(**objects)) == {
        ("pair", "a"): "feasible",
        ("pair", "b"): "class_not_found",
    }


def test_not_together_counts_shared_counters() -> None:
    """A whole GPU and a 1g partition of the same GPU: each fits alone, not both.

    A search, not first fit: a 1g partition and a 2g one fit together (another 1g is tried
    when the first one taken overlaps the 2g).
    """
    both = classy("any", "device.driver == 'gpu.nvidia.com'")
    two_g = selected("device.attributes['gpu.nvidia.com'].uuid == 'MIG-mig-2g-0'")
    whole = [request(name="whole"), request("mig", "part")]
    claims = [
        new_claim("whole", None, requests=whole),
        new_claim(
            "parts", None, requests=[request("mig", "one"), request("any", "two", selectors=two_g)]
        ),
    ]
    assert reasons(collect(slices=mig_gpu(), claims=claims, classes=[WHOLE, MIG, both])) == {
        ("whole", "whole"): "not_together",
        ("whole", "part"): "not_together",
        ("parts", "one"): "feasible",
        ("parts", "two"): "feasible",
    }


def test_admin_access_must_fit_the_counters() -> None:
    """An adminAccess request for a partition whose counters another claim consumes: in_use.

    Admin access may share an allocated device, but what the partition consumes must still fit
    the counters left: the allocator's check.  A partition whose counters are free is feasible,
    allocated or not, and an allocated admin result consumes no counters.
    """
    pinned = 'device.attributes["gpu.nvidia.com"].uuid == "MIG-{}"'
    admin = [
        request("mig", selectors=selected(pinned.format("mig-1g-1")), adminAccess=True),
        request("mig", selectors=selected(pinned.format("mig-1g-2")), adminAccess=True),
        request("mig", selectors=selected(pinned.format("mig-2g-0")), adminAccess=True),
    ]
    claims = [
        new_claim("used", [result("mig-1g-3", "node")]),
        new_claim("watch", [result("mig-1g-2", "node", adminAccess=True)]),
        *(new_claim(f"admin-{n}", None, requests=[ask]) for n, ask in enumerate(admin)),
    ]
    slices = mig_gpu()
    assert reasons(collect(slices=slices, claims=claims, classes=[MIG])) == {
        ("admin-0", "gpu"): "feasible",
        ("admin-1", "gpu"): "feasible",
        ("admin-2", "gpu"): "feasible",
    }
    claims[0] = new_claim("used", [result("mig-1g-1", "node")])
    assert reasons(collect(slices=slices, claims=claims, classes=[MIG])) == {
        ("admin-0", "gpu"): "in_use",
        ("admin-1", "gpu"): "feasible",
        ("admin-2", "gpu"): "in_use",
    }


@pytest.mark.parametrize("bound", ["STEPS", "DEPTH"])
def test_not_together_only_where_the_search_shows_it(
    monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """A search cut short by its bound, or too deep to make, says nothing: feasible stays."""
    whole = [request(name="whole"), request("mig", "part")]
    claims = [new_claim("whole", None, requests=whole)]
    objects: dict[str, Any] = {"slices": mig_gpu(), "claims": claims, "classes": [WHOLE, MIG]}
    assert set(reasons(collect(**objects)).values()) == {"not_together"}
    monkeypatch.setattr(together, bound, 1)
    assert reasons(collect(**objects)) == {
        ("whole", "whole"): "feasible",
        ("whole", "part"): "feasible",
    }


def test_the_example_cluster_shows_every_reason() -> None:
    """``make demo`` serves a pending claim for each reason."""
    from tests.test_file import EXAMPLE

    every = "resourceclaims,resourceslices,deviceclasses,devicetaintrules,pods,nodes"
    written = collect_kinds(by_kind(EXAMPLE), select(resources=every))
    assert set(reasons(written).values()) == set(REASONS)


_NEEDS = st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), min_size=1, max_size=3)


@given(
    st.lists(st.tuples(_NEEDS, st.booleans()), min_size=1, max_size=6),
    st.sampled_from([0.0, 1.0, 2.0, 4.0]),
)
def test_one_device_reaches_as_the_most_says(needs: list[Any], total: float) -> None:
    """For a request of one device, the early answer is the one the most that fit gives."""
    pool = Pool("d", "p", totals={("set", f"c{i}"): total for i in range(3)})
    pool.consumed = {("set", "c0"): total}  # what is in use does not count here
    usable = []
    for at, (counts, shareable) in enumerate(needs):
        consumes = (("set", {f"c{i}": need for i, need in enumerate(counts)}),)
        facts = DeviceFacts(
            labels=D.values("s", "d", "p", f"g{at}", "n"),
            name=f"g{at}",
            taints=(),
            consumes=consumes,
            share_capacity=None,
            shareable=shareable,
            capacities={"memory": 1.0} if shareable else None,
        )
        usable.append((pool, facts))
    assert pending._reaches(usable, 1) == (pending._most(usable) >= 1)


HOSTILE = {
    # a step of zero: the API refuses it on a new slice, one stored before may keep it
    "zero": nic("zero", "100G", default="10G", validRange={"min": "10G", "step": "0"}),
    # a capacity beyond any step count, no default: a request naming none consumes all of it
    "huge": nic("huge", "1e300", validRange={"min": "0", "step": "1n"}),
    # a default of one nano of 1e300: more shares than a float counts
    "tiny": nic("tiny", "1e300", default="1n", validRange={"min": "1n", "step": "1n"}),
}


@pytest.mark.parametrize("fields", [{}, bandwidth("15G"), bandwidth("1e299")])
def test_a_policy_the_exporter_cannot_judge_costs_its_device_not_the_scrape(
    fields: dict[str, Any],
) -> None:
    """Request policies no arithmetic can judge: the collection is made and written.

    A step of zero, and a capacity too many steps from min without a default, are reported as
    invalid values, and their devices judged without the policy; the tiny default is judged,
    a device holding more shares of it than a float counts.
    """
    slices = [pool_slice(k, [made], pool=k, driver=NIC_DRIVER) for k, made in HOSTILE.items()]
    classes = [classy(k, f"device.attributes['{NIC_DRIVER}'].kind == '{k}'") for k in HOSTILE]
    claims = [new_claim(kind, None, requests=[request(kind, **fields)]) for kind in HOSTILE]
    written = collect(slices=slices, claims=claims, classes=classes)
    assert set(reasons(written)) == {(kind, "gpu") for kind in HOSTILE}
    assert samples(written)["kube_resourcepool_allocatable_devices"]
    zero, huge = written.problems
    assert (zero.resource, zero.field) == ("resourceslices", "capacity")
    assert zero.message.endswith("validRange step: must be greater than zero")
    assert (huge.resource, huge.field) == ("resourceslices", "capacity")
    assert "more steps of 1e-09 from min than can be counted" in huge.message
