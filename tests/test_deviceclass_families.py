"""DeviceClass and DeviceTaintRule families."""

from __future__ import annotations

from tests.collect import collect, values
from tests.objects import classy


def test_class_info_and_created() -> None:
    """info carries the extended resource name ("" when none); created the creation time."""
    extended = classy("gpu.nvidia.com")
    extended["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    odd = classy("odd")
    odd["spec"]["extendedResourceName"] = 7
    written = collect(classes=[extended, odd, classy("plain")])
    assert values(
        written, "kube_deviceclass_info", "deviceclass_name", "extended_resource_name"
    ) == {
        ("gpu.nvidia.com", "nvidia.com/gpu"): 1,
        ("odd", ""): 1,
        ("plain", ""): 1,
    }
    assert set(values(written, "kube_deviceclass_created", "deviceclass_name").values()) == {
        1793520000
    }


def rule(name: str, effect: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-3"},
            "taint": {"key": "example.com/maintenance", "value": "fw", "effect": effect},
        },
    }


def test_taint_rules() -> None:
    """One row per rule; an unknown effect is left out and reported."""
    written = collect(rules=[rule("drain", "NoExecute"), rule("odd", "Later")])
    assert values(
        written,
        "kube_devicetaintrule_info",
        "devicetaintrule",
        "driver",
        "pool",
        "device_name",
        "key",
        "value",
        "effect",
    ) == {
        (
            "drain",
            "gpu.nvidia.com",
            "node-a",
            "gpu-3",
            "example.com/maintenance",
            "fw",
            "NoExecute",
        ): 1
    }
    assert [(p.resource, p.field) for p in written.problems] == [
        ("devicetaintrules", "spec.taint.effect")
    ]


def test_the_cost_is_the_one_annotation_read() -> None:
    """``hourly-cost`` is the one annotation decoded.

    Another annotation of an odd shape costs nothing, and a cost that is not a string is a value
    not read, not a class (or a list) lost.
    """
    priced = classy("gpu.nvidia.com", cost="2.50")
    priced["metadata"]["annotations"]["note"] = {"not": "a string"}
    odd = classy("odd.example.com", cost="1")
    odd["metadata"]["annotations"]["hourly-cost"] = 1.5
    written = collect(classes=[priced, odd])
    assert values(written, "kube_deviceclass_hourly_cost", "deviceclass_name") == {
        ("gpu.nvidia.com",): 2.5
    }
    assert values(written, "kube_deviceclass_info", "deviceclass_name") == {
        ("gpu.nvidia.com",): 1,
        ("odd.example.com",): 1,
    }
    assert [(p.field, p.message) for p in written.problems] == [
        (
            "hourly-cost",
            "Error parsing 'hourly-cost' on DeviceClass odd.example.com: Expected `str | null`, "
            "got `float` - at `$.hourly-cost`",
        )
    ]
