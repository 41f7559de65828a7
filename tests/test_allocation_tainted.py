"""Whether a claim keeps a tainted device: the eviction controller's rule, and the allocator's."""

from __future__ import annotations

from typing import Any

import pytest

from tests.collect import collect, values
from tests.objects import NVIDIA, gpu, new_claim, pool_slice, result

TAINTED = "kube_resourceclaim_allocation_tainted"
KEYS = ("resourceclaim_name", "device_name", "key", "effect", "devicetaintrule", "tolerated")


def rule(name: str, selector: dict[str, str], **taint: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"deviceSelector": selector, "taint": taint},
    }


def held(name: str, device: str, *tolerations: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A claim holding *device*, with the tolerations the scheduler copied into its result."""
    return new_claim(name, [result(device, tolerations=list(tolerations), **extra)])


NO_EXECUTE = [
    ("exact", {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}, "true"),
    ("default-operator", {"key": "k", "value": "v", "effect": "NoExecute"}, "true"),
    ("every-key", {"operator": "Exists", "effect": "NoExecute"}, "true"),
    ("no-effect", {"key": "k", "operator": "Exists"}, "false"),
    (
        "seconds",
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        "false",
    ),
    (
        "zero-seconds",
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
        "false",
    ),
    (
        "other-value",
        {"key": "k", "operator": "Equal", "value": "w", "effect": "NoExecute"},
        "false",
    ),
    ("other-key", {"key": "j", "operator": "Exists", "effect": "NoExecute"}, "false"),
    ("other-effect", {"key": "k", "operator": "Exists", "effect": "NoSchedule"}, "false"),
    (
        "unknown-operator",
        {"key": "k", "operator": "Gt", "value": "v", "effect": "NoExecute"},
        "false",
    ),
]


@pytest.mark.parametrize(("name", "toleration", "tolerated"), NO_EXECUTE)
def test_no_execute_as_the_eviction_controller_judges(
    name: str, toleration: dict[str, Any], tolerated: str
) -> None:
    """Kept only by a matching NoExecute toleration without tolerationSeconds.

    A toleration without an effect matches for the allocator, but the eviction controller
    evicts; one with seconds is evicted when they run out.
    """
    own = {"key": "k", "value": "v", "effect": "NoExecute"}
    written = collect(
        slices=[pool_slice("s", [gpu("own", taints=[own]), gpu("ruled")])],
        rules=[rule("evict", {"device": "ruled"}, key="k", value="v", effect="NoExecute")],
        claims=[held(f"{name}-own", "own", toleration), held(f"{name}-ruled", "ruled", toleration)],
    )
    assert values(written, TAINTED, *KEYS) == {
        (f"{name}-own", "own", "k", "NoExecute", "", tolerated): 1,
        (f"{name}-ruled", "ruled", "k", "NoExecute", "evict", tolerated): 1,
    }


NO_SCHEDULE = [
    ("no-effect", {"key": "k", "operator": "Exists"}, "true"),
    (
        "seconds-ignored",
        {"key": "k", "value": "v", "effect": "NoSchedule", "tolerationSeconds": 5},
        "true",
    ),
    ("every-key", {"operator": "Exists"}, "true"),
    ("no-execute-only", {"key": "k", "operator": "Exists", "effect": "NoExecute"}, "false"),
    ("other-value", {"key": "k", "value": "w"}, "false"),
]


@pytest.mark.parametrize(("name", "toleration", "tolerated"), NO_SCHEDULE)
def test_other_effects_as_the_allocator_matches(
    name: str, toleration: dict[str, Any], tolerated: str
) -> None:
    """NoSchedule (and None) as ToleratesTaint matches: an empty effect matches any."""
    taints = [
        {"key": "k", "value": "v", "effect": "NoSchedule"},
        {"key": "k", "value": "v", "effect": "None"},
    ]
    written = collect(
        slices=[pool_slice("s", [gpu("a", taints=taints)])], claims=[held(name, "a", toleration)]
    )
    found = values(written, TAINTED, *KEYS)
    assert found[(name, "a", "k", "NoSchedule", "", tolerated)] == 1
    none_kept = "false" if name in ("no-execute-only", "seconds-ignored", "other-value") else "true"
    assert found[(name, "a", "k", "None", "", none_kept)] == 1
    assert len(found) == 2


def test_every_taint_of_the_device_and_only_held_devices() -> None:
    """Own taint and two rules on one device are three rows; admin and orphaned results none."""
    own = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}
    rules = [
        rule(
            "drain", {"driver": NVIDIA, "pool": "pool", "device": "a"}, key="m", effect="NoExecute"
        ),
        rule("pool-wide", {"pool": "pool"}, key="fyi", effect="None"),
        rule("elsewhere", {"pool": "other"}, key="x", effect="NoExecute"),
    ]
    admin = new_claim(
        "admin",
        [result("a", adminAccess=True)],
        requests=[
            {
                "name": "gpu",
                "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True},
            }
        ],
    )
    written = collect(
        slices=[pool_slice("s", [gpu("a", taints=[own]), gpu("free")])],
        rules=rules,
        claims=[held("user", "a"), admin, held("lost", "gone")],
    )
    rows = values(written, TAINTED, *KEYS, "request", "driver", "pool", "value", "namespace")

    def untolerated(key: str, effect: str, rule: str, value: str = "") -> tuple[str, ...]:
        """A taint's row on device a of the claim user, in its request gpu: not tolerated."""
        return ("user", "a", key, effect, rule, "false", "gpu", NVIDIA, "pool", value, "workloads")

    assert rows == {
        untolerated("gpu.nvidia.com/xid", "NoSchedule", "", "48"): 1,
        untolerated("m", "NoExecute", "drain"): 1,
        untolerated("fyi", "None", "pool-wide"): 1,
    }


def test_unreadable_seconds_are_reported_and_evict() -> None:
    """tolerationSeconds that is not an integer is a problem, read as 0: the device is not kept."""
    toleration = {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "5"}
    written = collect(
        slices=[pool_slice("s", [gpu("a", taints=[{"key": "k", "effect": "NoExecute"}])])],
        claims=[held("c", "a", toleration)],
    )
    assert values(written, TAINTED, "tolerated") == {("false",): 1}
    assert any("tolerationSeconds" in problem.message for problem in written.problems)
