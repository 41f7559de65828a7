"""The simulated cluster's objects and readings, shared by the tests that run on it.

What a test makes there (a driver's slices, classes, claims, pods) and reads back (where the
scheduler bound a pod, its conditions, the exporter's samples), and the exporter it starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.controlplane import APIError
from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated
from tests.objects import resource_slice

DRIVER = "gpu.sim.example"
NAMESPACE = "sim"
RESOURCE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
RESOURCES = "resourceclaims,resourceslices,deviceclasses,devicetaintrules"
SCHEDULED = 30.0
"""Seconds the scheduler (and the controller manager) get to act: they take tens of ms."""


def device(
    pool: str,
    name: str,
    kind: str | None = "gpu",
    *,
    memory: str | None = None,
    attributes: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A device of type *kind* with a unique uuid, by which a claim can ask for it alone.

    *kind* None: no type; *memory* is its capacity, *attributes* more attributes, *extra* more of
    its fields.
    """
    typed = {} if kind is None else {"type": {"string": kind}}
    made: dict[str, Any] = {
        "name": name,
        "attributes": {**typed, "uuid": {"string": f"{pool}/{name}"}, **(attributes or {})},
    }
    if memory is not None:
        made["capacity"] = {"memory": {"value": memory}}
    return {**made, **extra}


def gpu(pool: str, name: str, kind: str = "gpu", **extra: Any) -> dict[str, Any]:
    """A device with memory: 40Gi for a GPU, 10Gi for anything else (a partition)."""
    return device(pool, name, kind, memory="40Gi" if kind == "gpu" else "10Gi", **extra)


def pool_slice(name: str, node: str, pool: str, count: int = 1, **spec: Any) -> dict[str, Any]:
    return resource_slice(name, driver=DRIVER, pool=pool, count=count, nodeName=node, **spec)


def counters(**values: str) -> dict[str, dict[str, str]]:
    return {name.replace("_", "-"): {"value": value} for name, value in values.items()}


def device_class(name: str, kind: str) -> dict[str, Any]:
    """The class of the driver's devices of type *kind*."""
    return class_selecting(
        name, f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
    )


def class_selecting(name: str, *expressions: str) -> dict[str, Any]:
    """A DeviceClass with these CEL selectors."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def request(deviceclass: str, *selectors: str, name: str = "dev", **exactly: Any) -> dict[str, Any]:
    """A request *name* for devices of *deviceclass* that satisfy *selectors*."""
    body: dict[str, Any] = {"deviceClassName": deviceclass, **exactly}
    if selectors:
        body["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": body}


def claim_of(
    name: str, *requests: dict[str, Any], namespace: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A ResourceClaim of these *requests* (or of *spec* as given)."""
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": spec or {"devices": {"requests": list(requests)}},
    }


def claim(
    name: str,
    deviceclass: str,
    *selectors: str,
    request_name: str = "dev",
    namespace: str | None = None,
    **exactly: Any,
) -> dict[str, Any]:
    """A claim of one request, ``dev``, for devices of *deviceclass* that satisfy *selectors*."""
    made = request(deviceclass, *selectors, name=request_name, **exactly)
    return claim_of(name, made, namespace=namespace)


def allocated(simulated: Simulated) -> set[tuple[str, str]]:
    """(pool, device) of every device the claims are allocated."""
    return {
        (result["pool"], result["device"])
        for claim in claims(simulated)
        for result in claim.get("status", {})
        .get("allocation", {})
        .get("devices", {})
        .get("results", [])
    }


def remove(simulated: Simulated, names: Iterable[str]) -> None:
    """Pods deleted at once, then their claims; wait until the claims are gone."""
    names = list(names)
    simulated.delete_pods(NAMESPACE, *names)
    for name in names:
        try:
            simulated.kube.delete(f"{CLAIMS}/{name}")
        except APIError as error:
            if error.code != 404:
                raise

    def gone() -> bool:
        left = {c["metadata"]["name"] for c in simulated.kube.get(CLAIMS)["items"]}
        return not left & set(names)

    wait_until(gone, SCHEDULED, "the claims deleted (deallocated first)")


def claim_spec(device_class_name: str, uuid: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": 1}
    if uuid is not None:
        exactly["selectors"] = [
            {"cel": {"expression": f'device.attributes["{DRIVER}"].uuid == "{uuid}"'}}
        ]
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def claim_template(name: str, device_class_name: str) -> dict[str, Any]:
    """A ResourceClaimTemplate of :func:`claim_spec`'s claim for one device of the class."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(device_class_name)},
    }


def taint_rule(name: str, key: str, effect: str, **selected: str) -> dict[str, Any]:
    """A DeviceTaintRule tainting the driver's devices *selected* (``pool=``, ``device=``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, **selected},
            "taint": {"key": key, "effect": effect},
        },
    }


def pod(
    name: str,
    claim: dict[str, str],
    node: str | None = None,
    *,
    cpu: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod using one claim (named, or by its template), pinned to *node* if given.

    *cpu* is what it requests of CPU, *labels* its labels.
    """
    resources: dict[str, Any] = {"claims": [{"name": "gpu"}]}
    if cpu is not None:
        resources["requests"] = {"cpu": cpu}
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": resources}
        ],
        "resourceClaims": [{"name": "gpu", **claim}],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def extended_pod(name: str, extended: str) -> dict[str, Any]:
    """A pod asking for one of the extended resource *extended*, as with a device plugin."""
    container = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {extended: "1"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def bound(simulated: Simulated, name: str) -> str | None:
    """The node the scheduler bound pod *name* to, if it has."""
    node: str | None = simulated.kube.get(f"{PODS}/{name}")["spec"].get("nodeName")
    return node


def claims(simulated: Simulated) -> list[dict[str, Any]]:
    return list(simulated.kube.get(CLAIMS)["items"])


def samples(body: str, family: str) -> list[dict[str, str]]:
    return [
        dict(sample.labels)
        for parsed in text_string_to_metric_families(body)
        if parsed.name == family
        for sample in parsed.samples
        if sample.value == 1
    ]


def sample_values(body: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples named *name* (``_total`` and all) of an exposition: (labels, value)."""
    return [
        (dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name
    ]


def values(body: str, family: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(sample.labels), sample.value)
        for parsed in text_string_to_metric_families(body)
        if parsed.name == family
        for sample in parsed.samples
    ]


def exporter(
    simulated: Simulated, directory: Path, mode: str, *args: str, resources: str = RESOURCES
) -> Exporter:
    """The exporter over the simulated cluster, listing *resources*, with *args* more options."""
    directory.mkdir(parents=True, exist_ok=True)
    config = write_kubeconfig(directory / "kubeconfig", simulated.kube, simulated.kube.token)
    return Exporter(
        directory / "run",
        ["--resources", resources, "--mode", mode, *args],
        {"KUBECONFIG": str(config)},
    )


def scrape_once(
    simulated: Simulated, directory: Path, mode: str = "list", resources: str = RESOURCES
) -> str:
    """What a new exporter writes at its first good scrape (it is stopped after)."""
    running = exporter(simulated, directory, mode, resources=resources)
    try:
        _, body = wait_until(lambda: ok(running.scrape()), 30, "a scrape")
    finally:
        running.stop()
    return body


def ok(answer: tuple[int, str]) -> tuple[int, str] | None:
    return answer if answer[0] == 200 else None


def unschedulable(simulated: Simulated, name: str) -> dict[str, Any] | None:
    """The pod's PodScheduled=False condition, once the scheduler has given one."""
    for condition in simulated.kube.get(f"{PODS}/{name}").get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            return dict(condition)
    return None


def placed_one_after_another(cluster: Simulated, prefix: str, start: Callable[[str], None]) -> int:
    """How many pods the scheduler places one after another before one stays Pending.

    *start* makes the claim and the pod named *prefix*-N, N from 0; all are removed after.
    """
    names: list[str] = []
    try:
        while True:
            name = f"{prefix}-{len(names)}"
            names.append(name)
            start(name)

            def decided(name: str = name) -> str | None:
                if bound(cluster, name):
                    return "bound"
                return "pending" if unschedulable(cluster, name) else None

            if wait_until(decided, SCHEDULED, f"{name} decided") == "pending":
                return len(names) - 1
            assert len(names) < 20, "more fit than the test expects"
    finally:
        remove(cluster, names)


def body_of(running: Exporter) -> str:
    """The exporter's exposition, or "" if it did not answer 200."""
    answer = ok(running.scrape())
    return answer[1] if answer else ""


def settled(
    exporters: tuple[Exporter, Exporter],
    families: Iterable[str],
    what: str,
    test: Callable[[str], Any],
) -> str:
    """The listing exporter's exposition, once *test* holds of it and the watching one agrees.

    The two agree when they write the same rows of *families*.
    """

    def rows(body: str) -> dict[str, list[tuple[dict[str, str], float]]]:
        return {
            family: sorted(values(body, family), key=lambda sample: sorted(sample[0].items()))
            for family in families
        }

    def found() -> str | None:
        listed, watched = (body_of(running) for running in exporters)
        agreed = listed and watched and rows(listed) == rows(watched)
        return listed if agreed and test(listed) else None

    found_body: str = wait_until(found, SCHEDULED, what)
    return found_body
