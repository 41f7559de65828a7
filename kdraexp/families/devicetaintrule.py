"""DeviceTaintRule families, written when ``--resources`` names ``devicetaintrules``.

The kind is served as ``resource.k8s.io/v1`` from Kubernetes 1.37 and ``v1beta2`` in 1.36 (behind
the DRADeviceTaintRules gate); the newest version the server serves is listed.
"""

from __future__ import annotations

from collections.abc import Iterator

from kdraexp.allocator.facts import RuleFacts
from kdraexp.dra import gated, wire
from kdraexp.dra.gated import TAINT_EFFECTS
from kdraexp.dra.listing import DEVICE_TAINT_RULES
from kdraexp.families.context import Context
from kdraexp.families.family import Row, family
from kdraexp.families.kind import KindSpec
from kdraexp.families.metadata import Named, metadata_families


class TaintRuleView:
    """One DeviceTaintRule."""

    __slots__ = ("context", "meta", "name", "selected", "selector", "status", "taint")

    def __init__(self, item: wire.DeviceTaintRule, context: Context) -> None:
        spec = item.spec or wire.TaintRuleSpec()
        self.context = context
        self.meta = item.metadata or wire.ObjectMeta()
        self.name = self.meta.name or ""
        self.selected = spec.device_selector is not None
        """Without a ``deviceSelector`` a rule selects no device (an empty one selects all)."""
        self.selector = spec.device_selector or wire.TaintSelector()
        self.taint = spec.taint or wire.DeviceTaint()
        self.status = item.status or wire.TaintRuleStatus()

    def selected_taint(self) -> tuple[str, str, str, str, str, str]:
        """(driver, pool, device, key, value, effect): what it selects and the taint it puts."""
        taint, selector = self.taint, self.selector
        return (
            selector.driver or "",
            selector.pool or "",
            selector.device or "",
            taint.key or "",
            taint.value or "",
            taint.effect or "",
        )

    def facts(self) -> RuleFacts | None:
        """The rule's selector and taint, when its effect is known."""
        taint = self.taint
        if taint.effect not in TAINT_EFFECTS:
            return None
        added = None
        if taint.time_added is not None:
            try:
                added = gated.timestamp(
                    taint.time_added if isinstance(taint.time_added, str) else None
                )
            except gated.Unreadable as error:
                self.context.problems.add(
                    DEVICE_TAINT_RULES.plural,
                    "spec.taint.timeAdded",
                    f"DeviceTaintRule {self.name} timeAdded: {error}",
                )
        return RuleFacts(*self.selected_taint(), added, self.name, self.selected)


@family(
    "kube_devicetaintrule_info",
    "A DeviceTaintRule: the devices it selects and the taint it puts on them.",
    ("devicetaintrule", "driver", "pool", "device_name", "key", "value", "effect"),
    DEVICE_TAINT_RULES,
    "spec.deviceSelector.{driver,pool,device}, spec.taint.{key,value,effect}",
)
def taint_rule_info(view: TaintRuleView) -> Iterator[Row]:
    """One row per rule with a known effect."""
    if view.taint.effect not in TAINT_EFFECTS:
        view.context.problems.add(
            DEVICE_TAINT_RULES.plural,
            "spec.taint.effect",
            f"DeviceTaintRule {view.name}: unknown effect {view.taint.effect!r}",
        )
        return
    yield (view.name, *view.selected_taint(), 1.0)


@family(
    "kube_devicetaintrule_status_condition",
    "A condition of a DeviceTaintRule (EvictionInProgress), by its status.",
    ("devicetaintrule", "condition", "status"),
    DEVICE_TAINT_RULES,
    "status.conditions[].{type,status}",
)
def taint_rule_condition(view: TaintRuleView) -> Iterator[Row]:
    """One row per condition; status is true, false or unknown."""
    where = f"DeviceTaintRule {view.name}"
    plural = DEVICE_TAINT_RULES.plural
    for condition, status in gated.conditions(
        view.status.conditions, view.context.problems, plural, where
    ):
        yield (view.name, condition, status, 1.0)


def _named(view: TaintRuleView) -> Named:
    return (view.name,), view.meta


taint_rule_labels, taint_rule_annotations = metadata_families(
    DEVICE_TAINT_RULES, ("devicetaintrule",), _named
)

FAMILIES = (taint_rule_info, taint_rule_condition, taint_rule_labels, taint_rule_annotations)


def _rule_facts(view: TaintRuleView, written: bool) -> RuleFacts | None:
    return view.facts()


KIND = KindSpec(DEVICE_TAINT_RULES, TaintRuleView, _rule_facts, first=True)
"""Listed first: a rule's taints change the states of the devices it selects."""
