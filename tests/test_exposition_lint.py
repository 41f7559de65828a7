"""promtool lints what `make demo` serves: the one warning left is the original's name."""

from __future__ import annotations

from pathlib import Path

from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from tests import tools
from tests.collect import by_kind, collect_kinds, text
from tests.test_file import EXAMPLE


def test_demo_exposition_lints_clean_but_for_the_original(prometheus_release: Path) -> None:
    """Every family `make demo` writes, through each release's `promtool check metrics`."""
    chosen = select(
        resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules,pods",
        options=FamilyOptions.from_flags(
            {"device-attributes": "profile", "claim-device-data": "uuid"}
        ),
    )
    exposition = text(collect_kinds(by_kind(EXAMPLE), chosen))
    assert "kube_resourceclaim_pending_reason{" in exposition
    assert "kube_pod_dra_device_health{" in exposition
    found = tools.lint(prometheus_release, exposition)
    assert found == [
        'kube_resourceclaim_status_reserved_total non-counter metrics should not have "_total" '
        "suffix"
    ]
