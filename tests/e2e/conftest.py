"""The end-to-end tier's fixtures: the real control plane for the whole session, and what it holds.

Its binaries are built while the tests are collected (tests/tools.py); what the tests share
besides fixtures is tests/e2e/harness.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.controlplane import ControlPlane, Kube, start
from tests.e2e.harness import CHART_NAMESPACE, RELEASE_OBJECTS, RESOURCES, ensure_namespace
from tests.helm import render


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver for the session."""
    plane = start(tmp_path_factory.mktemp("control-plane"))
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    """The admin client."""
    return control_plane.kube


@pytest.fixture(scope="session")
def dra_objects(kube: Kube) -> None:
    """The DRA dataset (tests/e2e/dataset.py), created once for the session."""
    from tests.e2e import dataset

    ensure_namespace(kube, dataset.NAMESPACE)
    dataset.create_all(kube)


@pytest.fixture(scope="session")
def chart_rbac(kube: Kube) -> dict[str, dict[str, Any]]:
    """The chart's ServiceAccount, ClusterRole and ClusterRoleBinding, from helm template."""
    ensure_namespace(kube, CHART_NAMESPACE)
    docs = render(extra=("--namespace", CHART_NAMESPACE))
    created = {}
    for doc in docs:
        if doc["kind"] in RELEASE_OBJECTS:
            kube.create(RELEASE_OBJECTS[doc["kind"]].format(ns=CHART_NAMESPACE), doc)
            created[doc["kind"]] = doc
    assert set(created) == set(RELEASE_OBJECTS)
    return created


@pytest.fixture(scope="session")
def family_claims(kube: Kube) -> dict[str, dict[str, Any]]:
    """The objects with the newer DRA fields (tests/e2e/families.py); the claims as held."""
    from tests.e2e import families

    return families.create_all(kube)


@pytest.fixture(scope="session")
def stuck_objects(kube: Kube) -> None:
    """Claims and pods stuck on their devices (tests/e2e/stuck.py), created once."""
    from tests.e2e import stuck

    stuck.create_all(kube)


@pytest.fixture(scope="session")
def families_account(kube: Kube, chart_rbac: object) -> str:
    """The chart's RBAC for a release listing devicetaintrules, pods and nodes too.

    The role follows the resources.
    """
    docs = render(
        {"fullnameOverride": "families", "exporter": {"resources": [*RESOURCES, "pods", "nodes"]}},
        extra=("--namespace", CHART_NAMESPACE),
    )
    for doc in docs:
        if doc["kind"] in RELEASE_OBJECTS:
            kube.create(RELEASE_OBJECTS[doc["kind"]].format(ns=CHART_NAMESPACE), doc)
        if doc["kind"] == "ClusterRole":
            assert doc["rules"][0]["resources"] == RESOURCES
            assert doc["rules"][1] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    return "families"
