"""DeviceClass selectors evaluated as Kubernetes does: the DRA environment, libraries, caching."""

from __future__ import annotations

import pytest

from kdraexp.cel import matching
from kdraexp.cel.matching import device_paths
from tests.collect import EVALUATOR, collect, values
from tests.objects import attributes, classy, device, gpu, pool_slice

pytestmark = pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL runtime on this platform")


def matches(
    expression: str, *devices: dict[str, object], driver: str = "gpu.nvidia.com"
) -> set[str]:
    """The devices of one slice the expression selects."""
    written = collect(
        slices=[pool_slice("s", list(devices), driver=driver)], classes=[classy("c", expression)]
    )
    assert written.class_errors == {}, written.class_error_messages
    return {d for (d,) in values(written, "kube_resourceslice_device_class", "device_name")}


@pytest.mark.parametrize(
    ("expression", "paths"),
    [
        ("device.driver == 'x'", (("driver",),)),
        (
            "device.attributes['gpu.nvidia.com'].type == 'gpu' && device.driver == \"d\"",
            (("attributes", "gpu.nvidia.com", "type"), ("driver",)),
        ),
        ("has(device.attributes['d'].x)", (("attributes", "d", "x"),)),
        ("device.capacity['d']['memory'].isInteger()", (("capacity", "d", "memory"),)),
        ("device.attributes['d'].exists(k, k == 'x')", (("attributes", "d"),)),
        ("'device.attributes' == device.driver // device.capacity", (("driver",),)),
        ("device.allowMultipleAllocations", (("allowMultipleAllocations",),)),
    ],
)
def test_paths_read(expression: str, paths: tuple[tuple[str, ...], ...]) -> None:
    """The scan finds every device field an expression reads, skipping strings and comments."""
    assert device_paths(expression) == paths


@pytest.mark.parametrize(
    "expression",
    [
        "device.attributes.exists(d, d == 'x')",
        "size(device) > 0",
        "[1].exists(device, device == 1)",
        "device.attributes[device.driver].type == 'gpu'",
        "device.attributes[r'd'].x == 1",
    ],
)
def test_paths_unknown(expression: str) -> None:
    """Anything else reads the whole device."""
    assert device_paths(expression) is None


def test_driver_and_string_attributes() -> None:
    """The NVIDIA chart's classes: by driver and the type attribute, bare or qualified."""
    devices = [
        gpu("full"),
        gpu("part", "mig"),
        device("q", {}, attributes(gpu_dot_nvidia_dot_com__type="gpu")),
    ]
    selector = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    assert matches(selector, *devices) == {"full", "q"}


def test_unknown_domain_is_an_empty_map() -> None:
    """A domain the device does not have reads as an empty map, as in Kubernetes."""
    assert matches("device.attributes['other.example.com'].size() == 0", gpu("a")) == {"a"}
    assert matches("!has(device.attributes['other.example.com'].x)", gpu("a")) == {"a"}


def test_quantity_library() -> None:
    """Capacities are quantities: compareTo, isGreaterThan, asInteger, add, ==, isQuantity."""
    small, big = gpu("small", capacity={"memory": "40Gi"}), gpu("big", capacity={"memory": "141Gi"})
    memory = "device.capacity['gpu.nvidia.com'].memory"
    assert matches(f"{memory}.compareTo(quantity('100Gi')) >= 0", small, big) == {"big"}
    assert matches(f"{memory}.isGreaterThan(quantity('40960Mi'))", small, big) == {"big"}
    assert matches(f"{memory} == quantity('40960Mi')", small, big) == {"small"}
    assert matches(f"{memory}.asInteger() == 42949672960", small, big) == {"small"}
    assert matches(f"{memory}.add(quantity('1Gi')).isLessThan(quantity('42Gi'))", small, big) == {
        "small"
    }
    assert matches("isQuantity('1.5Gi') && !isQuantity('lots')", small) == {"small"}


def test_semver_library() -> None:
    """Version attributes are semvers: isGreaterThan, major, ==; normalised parsing."""
    old = device("old", {}, attributes(driverVersion="v:535.104.5"))
    new = device("new", {}, attributes(driverVersion="v:580.95.5"))
    version = "device.attributes['gpu.nvidia.com'].driverVersion"
    assert matches(f"{version}.isGreaterThan(semver('570.0.0'))", old, new) == {"new"}
    assert matches(f"{version}.major() == 535", old, new) == {"old"}
    assert matches(f"{version} == semver('v580.95.05', true)", old, new) == {"new"}
    assert matches("isSemver('1.2.3') && !isSemver('v1.2')", old) == {"old"}


def test_no_selectors_match_every_device() -> None:
    """A class without selectors selects every device."""
    written = collect(slices=[pool_slice("s", [gpu("a"), gpu("b")])], classes=[classy("all")])
    assert len(values(written, "kube_resourceslice_device_class", "device_name")) == 2


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("device.attributes['gpu.nvidia.com'].type ==", "Syntax error"),
        ("device.attributes['gpu.nvidia.com'].nope == 'x'", "Key not found in map"),
        ("device.driver", "not a bool"),
        ("quantity('lots').sign() == 1", "not a Kubernetes quantity"),
    ],
    ids=["syntax", "missing-attribute", "not-bool", "bad-quantity"],
)
def test_unevaluable_expressions_match_nothing(expression: str, error: str) -> None:
    """An expression that cannot be compiled or evaluated: no match, counted, explained."""
    written = collect(
        slices=[pool_slice("s", [gpu("a"), gpu("b")])],
        classes=[classy("broken", expression), classy("fine", "device.driver == 'gpu.nvidia.com'")],
    )
    assert values(written, "kube_resourceslice_device_class", "deviceclass_name") == {("fine",): 1}
    assert written.class_errors == {"broken": 2}
    assert error in written.class_error_messages["broken"]


def test_devices_that_read_alike_are_evaluated_once() -> None:
    """A thousand GPUs of one type cost one evaluation per class, not a thousand.

    (A selector of the process's: one of the simple form costs none, see test_cel_native.)
    """
    matcher = matching.Matcher(EVALUATOR)
    selector = (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type in ['gpu']"
    )
    devices = [gpu(f"g{i}") for i in range(500)] + [gpu(f"m{i}", "mig") for i in range(500)]
    written = collect(
        slices=[pool_slice("s", devices)], classes=[classy("gpu", selector)], matcher=matcher
    )
    assert len(values(written, "kube_resourceslice_device_class", "device_name")) == 500
    assert matcher.evaluations == 2
