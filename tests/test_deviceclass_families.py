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
