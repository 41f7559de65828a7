"""DeviceClass selectors evaluated as Kubernetes does: the DRA environment, libraries, caching."""

from __future__ import annotations

import threading

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


NVIDIA_ATTRIBUTES = "device.attributes['gpu.nvidia.com']"


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        (f"{NVIDIA_ATTRIBUTES}.exists(k, k == 'profile')", {"part"}),
        (f"{NVIDIA_ATTRIBUTES}.all(k, k != 'profile')", {"full", "bare"}),
        (f"{NVIDIA_ATTRIBUTES}.filter(k, k in ['uuid', 'productName']).size() == 1", {"bare"}),
        ("device.capacity['gpu.nvidia.com'].exists(k, k == 'memory')", {"full", "part"}),
        (
            "device.capacity['gpu.nvidia.com'].all(k, device.capacity['gpu.nvidia.com'][k]"
            ".isLessThan(quantity('10'))) && device.capacity['gpu.nvidia.com'].size() > 0",
            {"bare"},
        ),
        ("device.attributes.exists(d, d == 'gpu.nvidia.com')", {"full", "part", "bare"}),
        ("device.attributes['other.example'].exists(k, true)", set()),
    ],
    ids=["exists", "all", "filter", "capacity-exists", "capacity-all", "domains", "no-domain"],
)
def test_macros_over_a_domain(expression: str, selected: set[str]) -> None:
    """A domain's attributes and capacities are maps, as Kubernetes declares them.

    ``exists``, ``all`` and ``filter`` over ``device.attributes['<domain>']`` compile in the
    Kubernetes environment (kube-apiserver accepts them); Google's runtime refused them here
    ("expression of type 'dyn' cannot be the range of a comprehension"), so the class matched
    nothing.
    """
    devices = [
        gpu("full"),
        gpu("part", "mig"),
        device("bare", {"cores": "8"}, attributes(uuid="b")),
    ]
    assert matches(expression, *devices) == selected


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        ("has(device.driver) && has(device.attributes) && has(device.capacity)", {"a", "b"}),
        ("!has(device.allowMultipleAllocations)", set()),
        ("has(device.attributes['gpu.nvidia.com'].profile)", {"b"}),
        (
            "device.driver != 'has(device.allowMultipleAllocations)' // has(device.driver)",
            {"a", "b"},
        ),
    ],
    ids=["fields", "not-multiple", "attribute", "quoted"],
)
def test_a_device_has_its_fields(expression: str, selected: set[str]) -> None:
    """``has()`` of a field of ``device`` is true, as in Kubernetes, whatever the field's value.

    ``!has(device.allowMultipleAllocations)`` must not read the field's value (false).
    """
    assert matches(expression, gpu("a"), gpu("b", "mig")) == selected


def test_a_new_collection_never_waits_for_a_match_in_a_thread() -> None:
    """The next collection, begun on the reactor, counts and forgets without waiting for it.

    A list its scrape abandoned may match in a thread for minutes.  What is forgotten goes at
    the next compile, which waits its turn.
    """
    matcher = matching.Matcher(EVALUATOR)
    old = matcher.compile(("device.driver == 'old'",))
    matching_now, done = threading.Event(), threading.Event()

    def match() -> None:
        with matcher._lock:  # as match_all holds it
            matching_now.set()
            done.wait(30)

    thread = threading.Thread(target=match)
    thread.start()
    try:
        assert matching_now.wait(30)
        began = threading.Event()

        def begin() -> None:
            matcher.collected()
            matcher.new_collection()
            matcher.devices_read(128)
            matcher.forget([("device.driver == 'new'",)])
            began.set()

        threading.Thread(target=begin, daemon=True).start()
        assert began.wait(10), "a new collection waited for the match"
        assert matcher.left == matching.EVALUATIONS + matching.PER_DEVICE * 128
        assert matcher.compiled(("device.driver == 'old'",)) is old  # until the next compile
    finally:
        done.set()
        thread.join()
    matcher.compile(("device.driver == 'new'",))
    assert matcher.compiled(("device.driver == 'old'",)) is None
