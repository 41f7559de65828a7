"""The offline source: kubectl dumps in YAML or JSON, re-read when they change, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from twisted.internet.defer import Deferred

from kdraexp.apiclient import ListError
from kdraexp.dra import DEVICE_CLASSES, KINDS, RESOURCE_SLICES
from kdraexp.filesource import FileSource
from tests.conftest import failure_of, result_of
from tests.objects import SEED_CLAIM, SEED_CLASS, SEED_SLICE

EXAMPLE = Path(__file__).parent.parent / "examples" / "cluster.yaml"


def typed(kind: str, obj: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, **obj}


SEED = [
    typed("ResourceClaim", SEED_CLAIM),
    typed("ResourceSlice", SEED_SLICE),
    typed("DeviceClass", SEED_CLASS),
]


def list_file(path: Path, kind: object) -> Deferred[object]:
    return Deferred.fromCoroutine(FileSource(str(path)).fetch(kind))  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["list-yaml", "multi-document", "json"])
def test_forms(tmp_path: Path, form: str) -> None:
    """A List, several YAML documents, or JSON."""
    path = tmp_path / "dump"
    if form == "list-yaml":
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": SEED}))
    elif form == "multi-document":
        path.write_text(yaml.safe_dump_all(SEED))
    else:
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": SEED}))
    for kind in KINDS:
        assert result_of(list_file(path, kind)).objects == 1  # type: ignore[attr-defined]


def test_example_cluster() -> None:
    """The shipped example holds every kind and every family."""
    source = FileSource(str(EXAMPLE))
    results = [result_of(Deferred.fromCoroutine(source.fetch(kind))) for kind in KINDS]
    assert all(r.objects for r in results)
    assert not any(r.problems for r in results)
    merged = results[0].samples
    for result in results[1:]:
        merged.update(result.samples)
    assert all(merged.by_family.values()), "every family has samples"


def test_reread_when_changed(tmp_path: Path) -> None:
    """A change to the file shows at the next list."""
    path = tmp_path / "dump"
    path.write_text(yaml.safe_dump_all(SEED))
    source = FileSource(str(path))
    assert result_of(Deferred.fromCoroutine(source.fetch(DEVICE_CLASSES))).objects == 1
    path.write_text(
        yaml.safe_dump_all([*SEED, typed("DeviceClass", {"metadata": {"name": "two"}})])
    )
    assert result_of(Deferred.fromCoroutine(source.fetch(DEVICE_CLASSES))).objects == 2


@pytest.mark.parametrize(
    ("content", "reason", "message"),
    [
        (None, "FileUnreadable", "No such file or directory"),
        ("items: [\n", "Decode", "is not YAML or JSON"),
        ("- 1\n- 2\n", "Decode", "a document is not a mapping"),
        (
            yaml.safe_dump(
                {"kind": "List", "items": [{**SEED[1], "apiVersion": "resource.k8s.io/v1beta1"}]}
            ),
            "Decode",
            "apiVersion 'resource.k8s.io/v1beta1' is not resource.k8s.io/v1",
        ),
        (
            yaml.safe_dump(
                {
                    "kind": "List",
                    "items": [
                        typed(
                            "ResourceSlice", {"metadata": {"name": "s"}, "spec": {"devices": "x"}}
                        )
                    ],
                }
            ),
            "Decode",
            "ResourceSlice s: Expected `array | null`, got `str`",
        ),
    ],
)
def test_bad_files(tmp_path: Path, content: str | None, reason: str, message: str) -> None:
    """Unreadable or malformed files fail with a reason fit for the HTTP answer."""
    path = tmp_path / "dump"
    if content is not None:
        path.write_text(content)
    error = failure_of(list_file(path, RESOURCE_SLICES)).value
    assert isinstance(error, ListError)
    assert error.reason == reason
    assert message in error.summary()
