"""Custom resource definitions installed on a test cluster, and established before use."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import yaml

from tests.e2e.controlplane import Kube
from tests.e2e.harness import wait_until

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class CRDLoader(yaml.SafeLoader):
    """PyYAML's safe loader without its ``=`` value tag: a CRD enumerates "=" as a string."""


CRDLoader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def established(kube: Kube, name: str) -> bool:
    conditions = (kube.get(f"{CRD_PATH}/{name}").get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def install(kube: Kube, directory: Path) -> None:
    """Create every CRD of the YAML files in *directory*; wait until each is established."""
    names = []
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=CRDLoader)
        kube.create(CRD_PATH, crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        wait_until(partial(established, kube, name), 60, f"CRD {name} established")
