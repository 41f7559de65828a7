"""Pod families, written when ``--resources`` names ``pods``: what no claim shows.

Four answers live on pods only. A pod asking for a DRA-backed extended resource
(``nvidia.com/gpu: 1`` served by a DeviceClass's ``extendedResourceName``, or
``deviceclass.resource.kubernetes.io/<class>``) has no claim until the scheduler makes one just
before binding; the scheduler's ``PodScheduled`` condition says why a pod is not placed; a pod
bound whose containers do not start waits for the kubelet to prepare its devices; and the
kubelet writes each allocated device's health into ``allocatedResourcesStatus``.

Only the pods that matter are kept: those naming ``spec.resourceClaims``, asking for an extended
resource, or reporting device health. Any other pod is decoded (the fields below only) and then
costs an entry of the store and nothing else. The families join pods with claims and classes,
so they are cross-object, made again when pods, claims or classes change.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator

from kdraexp.allocator.facts import ClaimFacts, Placement, PodFacts
from kdraexp.allocator.index import ClusterIndex
from kdraexp.allocator.scopes import Per
from kdraexp.dra import gated, wire
from kdraexp.dra.listing import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS
from kdraexp.dra.quantity import QuantityError, parse_quantity
from kdraexp.families.context import Context
from kdraexp.families.family import CLUSTER, FamilyKeywords, Row, family
from kdraexp.families.kind import KindSpec, ShardKey
from kdraexp.families.metadata import Named, metadata_families

_NATIVE = "kubernetes.io"
"""Resources of this domain (and its subdomains) are Kubernetes' own, not extended."""
_IMPLICIT = "deviceclass.resource.kubernetes.io"
HEALTH = ("healthy", "unhealthy", "unknown")
HEALTH_DEVICES = 1024
"""The most devices a pod's ``allocatedResourcesStatus`` is read for (its containers' in all):
more than any node offers.  Each is a row, its ``resourceID`` kept: 18 pods listing 10,000
devices of 300-byte IDs each took the exporter past its memory limit in 0.6 s."""
CAUSES = ("claim_missing", "scheduler_error", "class_missing", "claims", "other", "claim_pending")
"""Why a pod is unschedulable (``kube_pod_dra_unschedulable``), in the order they are tried."""
CLAIM_MISSING, SCHEDULER_ERROR, CLASS_MISSING, CLAIMS, OTHER, CLAIM_PENDING = CAUSES
_READY = "PodReadyToStartContainers"
_DONE = frozenset({"Succeeded", "Failed"})
"""The phases of a pod that has ended: it waits for nothing."""


def extended_name(name: str) -> bool:
    """Whether a resource name is an extended resource (a domain that is not Kubernetes')."""
    domain, slash, _ = name.partition("/")
    if not slash:
        return False
    if domain == _IMPLICIT:
        return True
    return not (domain == _NATIVE or domain.endswith("." + _NATIVE))


class PodView:
    """One pod, read once: its facts when it matters, else None."""

    __slots__ = ("context", "facts", "meta")

    def __init__(self, item: wire.Pod, context: Context) -> None:
        self.context = context
        self.meta = meta = item.metadata or wire.ObjectMeta()
        spec = item.spec or wire.PodSpec()
        status = item.status or wire.PodStatus()
        where = f"Pod {meta.namespace or ''}/{meta.name or ''}"
        extended = self._extended(spec, where)
        intern = sys.intern  # container, entry and health names repeat from pod to pod
        devices = (
            (
                intern(container.name or ""),
                intern(entry.name or ""),
                one.resource_id or "",
                intern(one.health or ""),
            )
            for container in (
                *(status.container_statuses or ()),
                *(status.init_container_statuses or ()),
            )
            for entry in container.allocated_resources_status or ()
            for one in entry.resources or ()
        )
        health = tuple(itertools.islice(devices, HEALTH_DEVICES + 1))
        if len(health) > HEALTH_DEVICES:
            health = health[:HEALTH_DEVICES]
            field = "status.containerStatuses[].allocatedResourcesStatus"
            context.problems.add(
                PODS.plural,
                field,
                f"{where} {field}: more than {HEALTH_DEVICES} devices, more than a node has: "
                f"the first {HEALTH_DEVICES} read",
            )
        if not (spec.resource_claims or extended or health):
            self.facts: PodFacts | None = None
            return
        claims = [
            (intern(claim.name or ""), claim.resource_claim_name)
            for claim in spec.resource_claims or ()
            if claim.resource_claim_name
        ]
        claims += [
            (intern(entry.name or ""), entry.resource_claim_name)
            for entry in status.resource_claim_statuses or ()
            if entry.resource_claim_name
        ]
        made = status.extended_resource_claim_status
        if made is not None and made.resource_claim_name:
            claims.append((made.resource_claim_name, made.resource_claim_name))
        conditions = {c.type: c for c in reversed(status.conditions or ())}
        placed = conditions.get("PodScheduled")
        made_for = {entry.name for entry in status.resource_claim_statuses or ()}
        self.facts = PodFacts(
            namespace=sys.intern(meta.namespace or ""),
            name=meta.name or "",
            uid=meta.uid or "",
            node=intern(spec.node_name or ""),
            extended=extended,
            named=tuple(
                c.resource_claim_name for c in spec.resource_claims or () if c.resource_claim_name
            ),
            unmade=any(
                c.resource_claim_template_name and c.name not in made_for
                for c in spec.resource_claims or ()
            ),
            claims=tuple(claims),
            scheduled=(
                (placed.status or "", placed.reason or "", placed.message or "") if placed else None
            ),
            health=health,
            placement=self._placement(spec, where),
            waiting_since=self._waiting_since(meta, spec, status, conditions, where),
        )

    def _placement(self, spec: wire.PodSpec, where: str) -> Placement | None:
        """Which nodes the pod may run on, when it says: its node, node selector, affinity."""
        affinity = spec.affinity.node_affinity if spec.affinity else None
        required = (
            self.context.node_selector(affinity.required, PODS.plural, f"{where} nodeAffinity")
            if affinity is not None
            else None
        )
        if not (spec.node_name or spec.node_selector or required):
            return None
        selector = tuple(sorted((spec.node_selector or {}).items()))
        return Placement(spec.node_name or "", selector, required)

    def _waiting_since(
        self,
        meta: wire.ObjectMeta,
        spec: wire.PodSpec,
        status: wire.PodStatus,
        conditions: dict[str | None, wire.PodCondition],
        where: str,
    ) -> float | None:
        """Since when a bound pod waits to start, if it does (see ``PodFacts.waiting_since``).

        The kubelet's ``PodReadyToStartContainers`` (GA in 1.37; False until the sandbox runs)
        says when it last changed; a kubelet that writes no such condition says a pod started
        by a container running or run, and then the pod waits since it was scheduled (else
        created).
        """
        if not spec.node_name or meta.deletion_timestamp or status.phase in _DONE:
            return None
        ready = conditions.get(_READY)
        if ready is not None and ready.status == "True":
            return None
        if ready is None and any(
            c.state is not None and (c.state.running or c.state.terminated)
            for c in (*(status.container_statuses or ()), *(status.init_container_statuses or ()))
        ):
            return None
        placed = conditions.get("PodScheduled")
        for condition in (ready, placed if placed and placed.status == "True" else None):
            if condition is not None and condition.last_transition_time:
                try:
                    return gated.timestamp(condition.last_transition_time)
                except gated.Unreadable as error:
                    field = f"status.conditions[{condition.type}].lastTransitionTime"
                    self.context.problems.add(PODS.plural, field, f"{where} {field}: {error}")
        return self.context.created(PODS.plural, meta, where)

    def _extended(self, spec: wire.PodSpec, where: str) -> tuple[tuple[str, float], ...]:
        summed: dict[str, float] = {}
        for container in spec.containers or ():
            for name, quantity in self._asked(container, where).items():
                summed[name] = summed.get(name, 0.0) + quantity
        for container in spec.init_containers or ():
            for name, quantity in self._asked(container, where).items():
                summed[name] = max(summed.get(name, 0.0), quantity)
        return tuple(sorted(summed.items()))

    def _asked(self, container: wire.Container, where: str) -> dict[str, float]:
        """A container's extended resources: its requests, else its limits (they are equal)."""
        resources = container.resources or wire.ContainerResources()
        asked = {**(resources.limits or {}), **(resources.requests or {})}
        found = {}
        for name, value in asked.items():
            if not extended_name(name):
                continue
            try:
                quantity = parse_quantity(str(value))
            except QuantityError as error:
                self._not_read(container, where, name, str(error))
                continue
            if quantity < 0 or quantity != int(quantity):
                # The API server refuses these; one from elsewhere (a dump) must not lower demand.
                self._not_read(
                    container, where, name, f"{value!r} is not a whole, non-negative count"
                )
                continue
            found[sys.intern(name)] = quantity
        return found

    def _not_read(self, container: wire.Container, where: str, name: str, why: str) -> None:
        self.context.problems.add(
            PODS.plural, "resources", f"{where} container {container.name or ''} {name}: {why}"
        )


def cause(reason: str, message: str) -> str:
    """Why the scheduler did not place a pod, from its ``PodScheduled=False`` condition."""
    if reason == "SchedulerError":
        return SCHEDULER_ERROR
    if "device class" in message and "does not exist" in message:
        return CLASS_MISSING
    if "cannot allocate all claims" in message:
        return CLAIMS
    return OTHER


P = ("namespace", "pod", "uid")
EVERY_CLAIM = "a shard does not see every claim a pod names"
_WITH_CLAIMS: FamilyKeywords = {
    "needs": (PODS, RESOURCE_CLAIMS),
    "per": Per.POD,
    "whole_cluster": EVERY_CLAIM,
}
"""How the families of pods joined with their claims are declared."""


@family(
    "kube_pod_dra_extended_resource_request",
    "What a pod not yet bound asks for of an extended resource a DeviceClass serves.",
    (*P, "resource", "deviceclass_name"),
    CLUSTER,
    "spec.nodeName, spec.{containers,initContainers}[].resources.{requests,limits}, "
    "DeviceClass spec.extendedResourceName",
    needs=(PODS, DEVICE_CLASSES),
    per=Per.POD,
)
def extended_resource_request(index: ClusterIndex) -> Iterator[Row]:
    """One row per (pod, extended resource) until the pod is bound; then its claim shows it."""
    for pod in index.pods:
        if pod.bound:
            continue
        for resource, quantity in pod.extended:
            served = index.extended.get(resource)
            if served is not None:
                yield (pod.namespace, pod.name, pod.uid, resource, served, quantity)


@family(
    "kube_pod_dra_unschedulable",
    "1 for a pod the scheduler could not place, with the cause for its devices.",
    (*P, "cause"),
    CLUSTER,
    "spec.nodeName, spec.resourceClaims[].{resourceClaimName,resourceClaimTemplateName}, "
    "status.{conditions[PodScheduled],resourceClaimStatuses,extendedResourceClaimStatus}, "
    "ResourceClaim metadata.name, status.allocation",
    needs=(PODS, RESOURCE_CLAIMS, DEVICE_CLASSES),
    per=Per.POD,
    whole_cluster=EVERY_CLAIM,
)
def unschedulable(index: ClusterIndex) -> Iterator[Row]:
    """A pod not bound whose ``PodScheduled`` is False, or whose claims the scheduler lacks.

    ``claim_missing`` (a claim it names does not exist, or its template's claim is not made)
    and ``claim_pending`` (a claim it uses is pending, and the scheduler has said nothing) are
    the exporter's own findings: the scheduler holds the first back and says nothing on it,
    and a pod no scheduler serves hears nothing.
    """
    for pod in index.pods:
        if pod.bound or not (pod.named or pod.unmade or pod.claims or _served(index, pod)):
            continue
        if pod.claims and _holding(index, pod):
            continue  # placed: the scheduler waits for its devices' binding conditions
        if pod.unmade or any(index.claim_named(pod.namespace, name) is None for name in pod.named):
            yield (pod.namespace, pod.name, pod.uid, CLAIM_MISSING, 1.0)
        elif pod.scheduled is not None and pod.scheduled[0] == "False":
            yield (pod.namespace, pod.name, pod.uid, cause(*pod.scheduled[1:]), 1.0)
        elif any(claim is not None and claim.pending for claim in _claims(index, pod)):
            yield (pod.namespace, pod.name, pod.uid, CLAIM_PENDING, 1.0)


def _claims(index: ClusterIndex, pod: PodFacts) -> Iterator[ClaimFacts | None]:
    """The claims the pod uses, None for one not listed."""
    for _, name in pod.claims:
        yield index.claim_named(pod.namespace, name)


def _holding(index: ClusterIndex, pod: PodFacts) -> bool:
    """Whether every claim the pod uses is allocated and reserved for it."""
    return all(
        claim is not None and bool(claim.results) and pod.uid in claim.reserved
        for claim in _claims(index, pod)
    )


@family(
    "kube_pod_dra_not_started",
    "Unix time since which a bound pod holding its devices has not started.",
    (*P, "node_name"),
    CLUSTER,
    "spec.{nodeName,resourceClaims}, status.{phase,conditions[PodReadyToStartContainers,"
    "PodScheduled].{status,lastTransitionTime},containerStatuses[].state,resourceClaimStatuses,"
    "extendedResourceClaimStatus}, ResourceClaim status.{allocation,reservedFor}",
    **_WITH_CLAIMS,
)
def not_started(index: ClusterIndex) -> Iterator[Row]:
    """A pod bound, every claim it uses allocated and reserved for it, that has not started.

    What a driver that cannot prepare its devices looks like from the API: the devices held,
    nothing running. The value is the time since which it waits.
    """
    for pod in index.pods:
        if pod.waiting_since is not None and pod.claims and _holding(index, pod):
            yield (pod.namespace, pod.name, pod.uid, pod.node, pod.waiting_since)


def _served(index: ClusterIndex, pod: PodFacts) -> bool:
    return any(resource in index.extended for resource, _ in pod.extended)


@family(
    "kube_pod_dra_device_health",
    "1 per device allocated to a pod's container, by the health the kubelet reports.",
    (*P, "container", "resourceclaim_name", "request", "driver", "pool", "device_name", "health"),
    CLUSTER,
    "status.{containerStatuses,initContainerStatuses}[].allocatedResourcesStatus[]"
    ".{name,resources[].{resourceID,health}}, ResourceClaim status.allocation.devices.results",
    **_WITH_CLAIMS,
)
def device_health(index: ClusterIndex) -> Iterator[Row]:
    """One row per device entry, resolved to the device it is.

    ``resourceID`` is ``<driver>/<pool>/<device>``, or a CDI device ID that the claim's one
    result for the request resolves; an entry that cannot be resolved keeps its row with the
    names there are (``device_name=""``).
    """
    for pod in index.pods:
        own = dict(pod.claims)
        for container, entry, resource_id, health in pod.health:
            claim, _, request = entry.removeprefix("claim:").partition("/")
            claim = own.get(claim, claim)
            driver, pool, device = _device(index, pod.namespace, claim, request, resource_id)
            state = health.lower()
            yield (
                pod.namespace,
                pod.name,
                pod.uid,
                container,
                claim,
                request,
                driver,
                pool,
                device,
                state if state in HEALTH else "unknown",
                1.0,
            )


def _device(
    index: ClusterIndex, namespace: str, claim: str, request: str, resource_id: str
) -> tuple[str, str, str]:
    driver, slash, rest = resource_id.partition("/")
    pool, _, device = rest.rpartition("/")
    if slash and pool and device and "=" not in resource_id:
        return driver, pool, device
    facts = index.claim_named(namespace, claim)
    results = [
        r
        for r in (facts.results if facts else ())
        if not request or r.request == request or r.request.startswith(request + "/")
    ]
    if len(results) == 1:
        return results[0].driver, results[0].pool, results[0].device
    return "", "", ""


def _named(view: PodView) -> Named | None:
    """A pod that matters (see the module): its labels are written, no other pod's."""
    facts = view.facts
    if facts is None:
        return None
    return (facts.namespace, facts.name, facts.uid), view.meta


pod_labels, pod_annotations = metadata_families(PODS, P, _named)

FAMILIES = (
    extended_resource_request,
    unschedulable,
    not_started,
    device_health,
    pod_labels,
    pod_annotations,
)


def _pod_facts(view: PodView, written: bool) -> PodFacts | None:
    return view.facts


def _pod_shard(item: wire.Pod) -> ShardKey:
    """A pod is written by the shard of its namespace and name."""
    meta = item.metadata
    return ShardKey(f"{meta.namespace or ''}/{meta.name or ''}" if meta else "/")


KIND = KindSpec(PODS, PodView, _pod_facts, _pod_shard)
