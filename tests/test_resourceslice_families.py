"""The ResourceSlice families on shapes the drivers publish: full GPUs, MIG, shared counters."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.dra import wire
from kdraexp.families.options import FamilyOptions
from kdraexp.families.resourceslice import DeviceView
from kdraexp.families.selection import select
from tests.collect import collect, labels, samples, values
from tests.objects import (
    NVIDIA,
    attributes,
    counters,
    device,
    gpu,
    new_claim,
    pool_slice,
    result,
)

D = ("resourceslice_name", "driver", "pool", "device_name", "node_name")


def states(collection: Any) -> dict[str, str]:
    """device -> state."""
    return {
        labels["device_name"]: labels["state"]
        for labels in labels(collection, "kube_resourceslice_device_state")
    }


def dynamic_mig(*allocated: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A GPU in dynamic MIG mode (1.35+ shape): counters in one slice, devices in another.

    The full GPU consumes every counter; two 1g partitions a memory slice each; a 2g partition
    both slices.
    """
    every = counters(multiprocessors="98", memory="80Gi", memory_slice_0="1", memory_slice_1="1")

    def partition(name: str, slices: list[int], sms: str) -> dict[str, Any]:
        needed = counters(multiprocessors=sms, memory="10Gi")
        needed.update(counters(**{f"memory_slice_{i}": "1" for i in slices}))
        return gpu(
            name,
            "mig",
            capacity={"multiprocessors": sms, "memory": "10Gi", "memorySlice0": "1"},
            consumesCounters=[{"counterSet": "gpu-0-set", "counters": needed}],
        )

    full = gpu(
        "gpu-0",
        capacity={"memory": "80Gi"},
        consumesCounters=[{"counterSet": "gpu-0-set", "counters": every}],
    )
    slices = [
        pool_slice(
            "counters",
            pool="node",
            count=2,
            sharedCounters=[{"name": "gpu-0-set", "counters": every}],
        ),
        pool_slice(
            "devices",
            [
                full,
                partition("mig-a", [0], "14"),
                partition("mig-b", [1], "14"),
                partition("mig-ab", [0, 1], "28"),
            ],
            pool="node",
            count=2,
        ),
    ]
    claims = [new_claim(f"claim-{d}", [result(d, "node")]) for d in allocated]
    return slices, claims


def test_full_gpu_rows() -> None:
    """A full GPU: info (model from productName), capacity, state, slice info."""
    collection = collect(slices=[pool_slice("s", [gpu("gpu-0")])])
    (info,) = labels(collection, "kube_resourceslice_device_info")
    assert info == {
        "resourceslice_name": "s",
        "driver": NVIDIA,
        "pool": "pool",
        "device_name": "gpu-0",
        "node_name": "pool",
        "type": "gpu",
        "model": "NVIDIA A100 80GB PCIe",
        "uuid": "GPU-gpu-0",
        "parent_uuid": "",
    }
    assert values(collection, "kube_resourceslice_device_capacity", "device_name", "capacity") == {
        ("gpu-0", "memory"): 80 * 2**30
    }
    assert states(collection) == {"gpu-0": "available"}
    (slice_info,) = labels(collection, "kube_resourceslice_info")
    assert slice_info == {
        "resourceslice_name": "s",
        "driver": NVIDIA,
        "pool": "pool",
        "node_name": "pool",
        "all_nodes": "false",
        "generation": "1",
    }


def test_model_falls_back_to_model_attribute() -> None:
    """Drivers that publish ``model`` (Intel, the example driver) get it as model."""
    example = device("gpu-0", {"memory": "80Gi"}, attributes(model="LATEST-GPU-MODEL"))
    collection = collect(slices=[pool_slice("s", [example], driver="gpu.example.com")])
    assert labels(collection, "kube_resourceslice_device_info")[0]["model"] == "LATEST-GPU-MODEL"


def test_device_attributes_become_labels() -> None:
    """--device-attributes adds attribute_<name>, any kind, bare or qualified names."""
    published = attributes(
        profile="1g.10gb",
        index=3,
        healthy=True,
        resource_dot_kubernetes_dot_io__pciBusID="0000:17:00.0",
    )
    chosen = select(
        options=FamilyOptions.from_flags(
            {"device-attributes": "profile,index,healthy,resource.kubernetes.io/pciBusID,absent"}
        )
    )
    collection = collect(slices=[pool_slice("s", [device("d", {}, published)])], selection=chosen)
    (info,) = labels(collection, "kube_resourceslice_device_info")
    assert {k: v for k, v in info.items() if k.startswith("attribute_")} == {
        "attribute_profile": "1g.10gb",
        "attribute_index": "3",
        "attribute_healthy": "true",
        "attribute_pciBusID": "0000:17:00.0",
        "attribute_absent": "",
    }


def test_capacities_default_and_regex() -> None:
    """Every capacity but memorySlice<N> by default; --device-capacities chooses others."""
    mig = gpu("mig", "mig", capacity={"memory": "10Gi", "decoders": "0", "memorySlice3": "1"})
    default = collect(slices=[pool_slice("s", [mig])])
    written = values(default, "kube_resourceslice_device_capacity", "capacity")
    assert written == {("memory",): 10 * 2**30, ("decoders",): 0}
    only_memory = collect(
        slices=[pool_slice("s", [mig])],
        selection=select(options=FamilyOptions.from_flags({"device-capacities": "memory"})),
    )
    assert list(values(only_memory, "kube_resourceslice_device_capacity", "capacity")) == [
        ("memory",)
    ]


def test_taints_and_tainted_state() -> None:
    """Each taint is a row; NoSchedule/NoExecute make a free device tainted, None does not."""
    devices = [
        gpu("lost", taints=[{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"}]),
        gpu("xid", taints=[{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]),
        gpu("fyi", taints=[{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}]),
        gpu("busy", taints=[{"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoExecute"}]),
    ]
    collection = collect(
        slices=[pool_slice("s", devices)], claims=[new_claim("c", [result("busy")])]
    )
    taints = values(
        collection, "kube_resourceslice_device_taint", "device_name", "key", "value", "effect"
    )
    assert set(taints) == {
        ("lost", "gpu.nvidia.com/gpu-lost", "", "NoExecute"),
        ("xid", "gpu.nvidia.com/xid", "79", "NoSchedule"),
        ("fyi", "gpu.nvidia.com/unmonitored", "", "None"),
        ("busy", "gpu.nvidia.com/xid", "48", "NoExecute"),
    }
    assert states(collection) == {
        "lost": "tainted",
        "xid": "tainted",
        "fyi": "available",
        "busy": "allocated",
    }


def test_partitions_block_each_other() -> None:
    """A MIG partition allocated blocks the full GPU and the partitions sharing its counters."""
    slices, claims = dynamic_mig("mig-a")
    collection = collect(slices=slices, claims=claims)
    assert states(collection) == {
        "gpu-0": "blocked",
        "mig-a": "allocated",
        "mig-b": "available",
        "mig-ab": "blocked",
    }
    shared = values(collection, "kube_resourceslice_shared_quantity", "counter_set", "counter")
    assert shared[("gpu-0-set", "memory-slice-0")] == 1
    assert shared[("gpu-0-set", "multiprocessors")] == 98


def test_full_gpu_allocated_blocks_every_partition() -> None:
    """The full GPU allocated leaves no counter for any partition."""
    slices, claims = dynamic_mig("gpu-0")
    assert states(collect(slices=slices, claims=claims)) == {
        "gpu-0": "allocated",
        "mig-a": "blocked",
        "mig-b": "blocked",
        "mig-ab": "blocked",
    }


def test_admin_access_is_not_use() -> None:
    """A device seen through adminAccess stays available."""
    claim = new_claim("monitor", [result("gpu-0", adminAccess=True)])
    collection = collect(slices=[pool_slice("s", [gpu("gpu-0")])], claims=[claim])
    assert states(collection) == {"gpu-0": "available"}


def test_only_the_current_generation_counts() -> None:
    """Device families read the pool's highest generation; slice info shows every generation."""
    slices = [
        pool_slice("old", [gpu("gpu-0"), gpu("gpu-gone")], generation=3),
        pool_slice("new", [gpu("gpu-0")], generation=4),
    ]
    collection = collect(slices=slices)
    assert {
        found["resourceslice_name"]
        for found in labels(collection, "kube_resourceslice_device_info")
    } == {"new"}
    assert states(collection) == {"gpu-0": "available"}
    assert values(collection, "kube_resourceslice_info", "resourceslice_name", "generation") == {
        ("old", "3"): 1,
        ("new", "4"): 1,
    }
    original = labels(collection, "kube_resourceslice_device_capacity_memory_bytes")
    assert {found["resourceslice_name"] for found in original} == {"old", "new"}, (
        "the original's families report every generation, as the original does"
    )


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        (
            {"taints": [{"key": "k", "effect": "Sometimes"}]},
            "taints",
            "ResourceSlice s device d taint k: unknown effect 'Sometimes'",
        ),
        ({"taints": "NoSchedule"}, "taints", "ResourceSlice s device d taints: expected a list"),
        (
            {"consumesCounters": [{"counterSet": "set", "counters": {"memory": {"value": "x"}}}]},
            "consumesCounters",
            "ResourceSlice s device d consumesCounters set: counter memory: not a Kubernetes "
            "quantity: 'x'",
        ),
        (
            {"consumesCounters": [{"counters": {}}]},
            "consumesCounters",
            "ResourceSlice s device d consumesCounters: an entry has no counterSet",
        ),
        (
            {"capacity": {"memory": {"value": 80}}},
            "capacity",
            "ResourceSlice s device d capacity memory: expected a quantity string, got 80",
        ),
        (
            {"capacity": {"memory": "80Gi"}},
            "capacity",
            "ResourceSlice s device d capacity memory: Expected `object | null`, got `str`",
        ),
        (
            {"capacity": {"memory": {"value": "-5Gi"}}},
            "capacity",
            "ResourceSlice s device d capacity memory: a negative amount: '-5Gi'",
        ),
        (
            {"consumesCounters": [{"counterSet": "set", "counters": {"memory": {"value": "-1"}}}]},
            "consumesCounters",
            "ResourceSlice s device d consumesCounters set: counter memory: a negative amount",
        ),
    ],
    ids=[
        "unknown-effect",
        "taints-not-list",
        "counter-not-quantity",
        "no-set",
        "number",
        "shape",
        "negative-capacity",
        "negative-counter",
    ],
)
def test_bad_values_cost_one_value(bad: dict[str, Any], field: str, message: str) -> None:
    """Each odd value: no row for it, a problem naming it; the device and the rest stay."""
    odd = {**gpu("d"), **bad}
    collection = collect(slices=[pool_slice("s", [odd, gpu("fine")])])
    assert [(p.resource, p.field) for p in collection.problems] == [("resourceslices", field)]
    assert collection.problems[0].message.startswith(message)
    assert set(states(collection)) == {"d", "fine"}
    assert len(labels(collection, "kube_resourceslice_device_info")) == 2


def test_shared_counters_bad_set() -> None:
    """A malformed shared counter set is left out; the other sets stay."""
    shared = [
        {"name": "good", "counters": counters(memory="1Gi")},
        {"name": "bad", "counters": {"memory": "1Gi"}},
    ]
    collection = collect(slices=[pool_slice("s", [], sharedCounters=shared)])
    assert list(values(collection, "kube_resourceslice_shared_quantity", "counter_set")) == [
        ("good",)
    ]
    assert [p.field for p in collection.problems] == ["sharedCounters"]


def test_absent_null_and_empty_gated_fields() -> None:
    """Gated fields absent, null or empty mean none, never a problem (1.34 servers drop them)."""
    devices = [
        {**gpu("a"), "taints": None, "consumesCounters": None, "allowMultipleAllocations": None},
        {**gpu("b"), "taints": [], "consumesCounters": []},
        gpu("c"),
    ]
    collection = collect(slices=[pool_slice("s", devices, sharedCounters=None)])
    assert collection.problems == []
    assert states(collection) == {"a": "available", "b": "available", "c": "available"}


def test_per_device_node_selection() -> None:
    """D's node_name follows the original's rule, per device under perDeviceNodeSelection."""
    devices = [gpu("a", nodeName="node-a"), gpu("b", allNodes=True)]
    spec = pool_slice("s", devices, perDeviceNodeSelection=True)
    del spec["spec"]["nodeName"]
    collection = collect(slices=[spec])
    assert {
        (found["device_name"], found["node_name"])
        for found in labels(collection, "kube_resourceslice_device_state")
    } == {("a", "node-a"), ("b", "")}
    assert samples(collection)["kube_resourceslice_info"][0][0]["node_name"] == ""


def test_taint_rules_taint_the_devices_they_select() -> None:
    """With DeviceTaintRules listed, a NoSchedule/NoExecute rule makes its devices tainted."""
    rules = [
        {
            "metadata": {"name": "drain", "resourceVersion": "1"},
            "spec": {
                "deviceSelector": {"driver": NVIDIA, "pool": "pool", "device": "a"},
                "taint": {"key": "maintenance", "effect": "NoSchedule"},
            },
        },
        {
            "metadata": {"name": "note", "resourceVersion": "1"},
            "spec": {"deviceSelector": {"pool": "pool"}, "taint": {"key": "fyi", "effect": "None"}},
        },
    ]
    written = collect(slices=[pool_slice("s", [gpu("a"), gpu("b")])], rules=rules)
    assert states(written) == {"a": "tainted", "b": "available"}


_NAMES = st.sampled_from(["type", "uuid", "memory"])
_DOMAINS = st.sampled_from([NVIDIA, "resource.kubernetes.io", "example.com"])
_VALUES = st.sampled_from([b'{"string":"a"}', b'{"string":"b"}', b'{"int":1}', b'{"value":"1"}'])


@st.composite
def _devices(draw: Any) -> Any:
    """A device of one of two drivers with attributes and capacities, bare or in a domain."""
    driver = draw(st.sampled_from([NVIDIA, "example.com"]))
    keys = st.one_of(_NAMES, st.builds(lambda d, n: f"{d}/{n}", _DOMAINS, _NAMES))
    raw = st.dictionaries(keys, _VALUES.map(msgspec.Raw), max_size=4)
    made = wire.Device(name="d", attributes=draw(raw), capacity=draw(raw))
    return DeviceView.for_selectors(made, driver)


@given(
    st.lists(_devices(), min_size=2, max_size=6),
    st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["attributes", "capacity"]), _DOMAINS, _NAMES),
            st.tuples(st.sampled_from(["attributes", "capacity"]), _DOMAINS),
            st.just(("driver",)),
        ),
        min_size=1,
        max_size=2,
        unique=True,
    ),
)
def test_reader_tells_devices_apart_as_their_projections_do(devices: Any, paths: Any) -> None:
    """Devices of one driver read alike exactly when their projections at every path are equal.

    Claims' own selectors are evaluated once for each such group (``DeviceView.reader``).
    """
    for driver in {view.driver for view in devices}:
        alike = [view for view in devices if view.driver == driver]
        read = DeviceView.reader(tuple(paths), driver)
        for one in alike:
            for other in alike:
                same = all(one.projection(p) == other.projection(p) for p in paths)
                assert (read(one.wire) == read(other.wire)) is same


def taint_rule(name: str, selector: dict[str, str] | None, **taint: str) -> dict[str, Any]:
    """A DeviceTaintRule; *selector* None leaves out its deviceSelector."""
    spec: dict[str, Any] = {"taint": taint}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def test_device_taints_name_the_rule_that_puts_them() -> None:
    """A device's own taint has devicetaintrule ""; each rule selecting it adds a row.

    Two rules on one device are two rows; a rule without a deviceSelector selects nothing (the
    API's rule), an empty one every device; a None rule is a taint too, allocated devices count.
    """
    own = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    devices = [gpu("a", taints=[own]), gpu("b"), gpu("c")]
    rules = [
        taint_rule(
            "drain-a",
            {"driver": NVIDIA, "pool": "pool", "device": "a"},
            key="m",
            effect="NoExecute",
        ),
        taint_rule("pool-wide", {"pool": "pool"}, key="fyi", value="x", effect="None"),
        taint_rule("other-pool", {"pool": "elsewhere"}, key="m", effect="NoExecute"),
        taint_rule("no-selector", None, key="nothing", effect="NoExecute"),
        taint_rule("everything", {}, key="all", effect="NoSchedule"),
    ]
    written = collect(
        slices=[pool_slice("s", devices)], rules=rules, claims=[new_claim("c", [result("b")])]
    )
    taints = values(
        written,
        "kube_resourceslice_device_taint",
        "device_name",
        "key",
        "value",
        "effect",
        "devicetaintrule",
    )
    assert taints == {
        ("a", "gpu.nvidia.com/xid", "79", "NoSchedule", ""): 1,
        ("a", "m", "", "NoExecute", "drain-a"): 1,
        ("a", "fyi", "x", "None", "pool-wide"): 1,
        ("a", "all", "", "NoSchedule", "everything"): 1,
        ("b", "fyi", "x", "None", "pool-wide"): 1,
        ("b", "all", "", "NoSchedule", "everything"): 1,
        ("c", "fyi", "x", "None", "pool-wide"): 1,
        ("c", "all", "", "NoSchedule", "everything"): 1,
    }
    assert states(written) == {"a": "tainted", "b": "allocated", "c": "tainted"}
    without = collect(
        slices=[pool_slice("s", devices)], rules=rules[3:4], claims=[new_claim("c", [result("b")])]
    )
    assert states(without) == {"a": "tainted", "b": "allocated", "c": "available"}


def test_device_taints_of_the_current_generation_only() -> None:
    """A slice of an older generation of its pool writes no taint rows."""
    old = pool_slice("old", [gpu("a", taints=[{"key": "old", "effect": "NoSchedule"}])])
    new = pool_slice("new", [gpu("a")], generation=2)
    rules = [taint_rule("r", {"device": "a"}, key="m", effect="NoSchedule")]
    written = collect(slices=[old, new], rules=rules)
    assert values(
        written, "kube_resourceslice_device_taint", "resourceslice_name", "key", "devicetaintrule"
    ) == {("new", "m", "r"): 1}
