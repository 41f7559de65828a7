"""Choosing what is written: kube-state-metrics' flags and meaning."""

from __future__ import annotations

from typing import Any

import pytest

from kdraexp.cel import matching
from kdraexp.dra.listing import DEFAULT_RESOURCES
from kdraexp.families import FAMILIES
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import SelectionError, select


def names(**flags: Any) -> set[str]:
    return {family.name for family in select(**flags).families}


def test_default_writes_every_family_the_default_resources_allow() -> None:
    """By default: every family that is not opt-in and needs only the three default lists.

    Not an object's own labels or annotations: none is written until an allowlist names them.
    """
    expected = {
        f.name
        for f in FAMILIES
        if not f.opt_in
        and f.keyed is None
        and f.needs <= {"resourceclaims", "resourceslices", "deviceclasses"}
        and (matching.AVAILABLE or f.name != "kube_resourceslice_device_class")
    }
    assert names() == expected
    assert "kube_devicetaintrule_info" not in expected


def test_resources_choose_lists_and_families() -> None:
    """Families needing a resource not listed are not written (no lie about a missing list)."""
    only_slices = select(resources="resourceslices")
    assert [kind.plural for kind in only_slices.kinds] == ["resourceslices"]
    written = {f.name for f in only_slices.families}
    assert "kube_resourceslice_device_info" in written
    assert "kube_resourceslice_device_state" not in written, "it needs the claims"
    assert "kube_resourceslice_device_class" not in written, "it needs the classes"
    assert "kube_resourcepool_complete" in written
    with_rules = select(resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules")
    assert [k.plural for k in with_rules.kinds] == [
        "deviceclasses",
        "devicetaintrules",
        "resourceslices",
        "resourceclaims",
    ]


def test_allowlist_and_denylist() -> None:
    """Regexes searched in family names; the allowlist keeps, the denylist drops."""
    listed = set(DEFAULT_RESOURCES)
    assert names(allowlist="kube_resourcepool_") == {
        f.name
        for f in FAMILIES
        if f.name.startswith("kube_resourcepool_") and not f.opt_in and f.needs <= listed
    }
    assert names(allowlist="^kube_resourceclaim_info$,^kube_deviceclass_info$") == {
        "kube_resourceclaim_info",
        "kube_deviceclass_info",
    }
    assert "kube_resourceslice_device_info" not in names(denylist="device_info")
    assert "kube_resourceslice_device_state" in names(denylist="device_info")


def test_opt_in_families() -> None:
    """Opt-in families are written only when --metric-opt-in-list names them."""
    opt_in = [f.name for f in FAMILIES if f.opt_in]
    for name in opt_in:
        assert name not in names()
        assert name in names(opt_in=name)
    assert set(opt_in) <= names(opt_in=".*")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"allowlist": "a", "denylist": "b"}, "mutually exclusive"),
        ({"allowlist": "kube_(unclosed"}, "--metric-allowlist: 'kube_(unclosed' is not a regular"),
        ({"denylist": "*"}, "--metric-denylist: '*' is not a regular expression"),
        ({"opt_in": "["}, "--metric-opt-in-list: '[' is not a regular expression"),
        ({"resources": "namespaces"}, "--resources: expected some of"),
        ({"resources": ""}, "--resources: expected some of"),
        ({"device-capacities": "("}, "--device-capacities: '(' is not a regular expression"),
        ({"device-attributes": "a-b"}, "--device-attributes: 'a-b' is not an attribute name"),
        ({"device-attributes": "a.com/x,b.com/x"}, "both give attribute_x"),
        ({"cost-share-capacity": "mem ory"}, "--cost-share-capacity: 'mem ory' is not a name"),
        ({"claim-device-data": "pci.id,pci_id"}, "--claim-device-data: 'pci_id' and 'pci.id' both"),
        ({"claim-device-data": "k" * 64}, "--claim-device-data: 'kkkk"),
        (
            {"hides-allocated-devices": "net.example,Net_Example"},
            "--hides-allocated-devices: 'Net_Example' is not a driver name",
        ),
        ({"hides-allocated-devices": "n" * 64}, "--hides-allocated-devices: 'nnnn"),
    ],
)
def test_bad_flags(flags: dict[str, Any], message: str) -> None:
    """A bad value is refused with one line naming the flag (family options by their flags)."""
    chosen = {k: v for k, v in flags.items() if "-" not in k}
    given = {k: v for k, v in flags.items() if "-" in k}
    with pytest.raises(
        SelectionError, match=message.replace("(", r"\(").replace("[", r"\[").replace("*", r"\*")
    ):
        select(**chosen, options=FamilyOptions.from_flags(given))


def test_device_attributes_extend_device_info() -> None:
    """--device-attributes adds its labels to the device info family only."""
    chosen = select(
        options=FamilyOptions.from_flags(
            {"device-attributes": "profile,resource.kubernetes.io/pciBusID"}
        )
    )
    (info,) = [f for f in chosen.families if f.name == "kube_resourceslice_device_info"]
    assert info.label_names[-2:] == ("attribute_profile", "attribute_pciBusID")
    assert [(a.domain, a.name) for a in chosen.options.device_attributes] == [
        (None, "profile"),
        ("resource.kubernetes.io", "pciBusID"),
    ]


def test_without_cel_the_class_families_are_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a platform with no CEL runtime, device classes cannot be matched: said, not faked."""
    monkeypatch.setattr(matching, "AVAILABLE", False)
    chosen = select()
    written = {f.name for f in chosen.families}
    for name in (
        "kube_resourceslice_device_class",
        "kube_resourcepool_allocatable_devices",
        "kube_resourcepool_idle_hourly_cost",
        "kube_resourceclaim_pending_reason",
        "kube_resourceclaim_request_matching_devices",
    ):
        assert name not in written
        assert f"{name} is not written: no CEL runtime is available for this platform" in (
            chosen.warnings
        )


def test_drivers_hiding_allocated_devices() -> None:
    """--hides-allocated-devices names drivers, spaces and empty items aside."""
    chosen = select(
        options=FamilyOptions.from_flags({"hides-allocated-devices": " dra.net , ,gpu.example.com"})
    )
    assert chosen.options.hides_allocated_devices == {"dra.net", "gpu.example.com"}
    assert select().options.hides_allocated_devices == frozenset()
