"""The GitHub workflows: actionlint-clean, and the release order validate -> image -> chart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.tools import actionlint

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
PLATFORMS = "linux/amd64,linux/arm64,linux/ppc64le,linux/s390x,linux/riscv64"


def test_actionlint() -> None:
    """Both workflows pass actionlint."""
    files = sorted(str(p) for p in WORKFLOWS.glob("*.yaml"))
    assert len(files) == 2
    result = subprocess.run(
        [actionlint(), "-color=false", *files], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def load(name: str) -> dict[str, object]:
    document = yaml.safe_load((WORKFLOWS / name).read_text())
    document["on"] = document.pop(True)  # YAML 1.1 reads the key `on` as true
    return document  # type: ignore[no-any-return]


def test_validate_runs_the_readme_test_command() -> None:
    """Validation runs make test, the release check and a five-platform build without push."""
    steps = load("validate.yaml")["jobs"]["validate"]["steps"]  # type: ignore[index]
    runs = " ".join(step.get("run", "") for step in steps)
    assert "make test" in runs and "scripts/check_release.py --release-tag" in runs
    build = next(s for s in steps if s.get("uses", "").startswith("docker/build-push-action"))
    assert build["with"]["platforms"] == PLATFORMS and build["with"]["push"] is False


def test_release_order() -> None:
    """A version tag validates, then publishes the image, then the chart."""
    release = load("release.yaml")
    assert release["on"] == {"push": {"tags": ["[0-9]*", "v[0-9]*"]}}
    jobs = release["jobs"]
    assert jobs["checks"]["uses"] == "./.github/workflows/validate.yaml"  # type: ignore[index]
    assert jobs["publish-image"]["needs"] == "checks"  # type: ignore[index]
    assert jobs["publish-chart"]["needs"] == "publish-image"  # type: ignore[index]
    image_steps = jobs["publish-image"]["steps"]  # type: ignore[index]
    push = next(s for s in image_steps if s.get("uses", "").startswith("docker/build-push-action"))
    assert push["with"]["platforms"] == PLATFORMS and push["with"]["push"] is True
    chart_run = " ".join(s.get("run", "") for s in jobs["publish-chart"]["steps"])  # type: ignore[index]
    assert "helm package chart/kube-dra-exporter" in chart_run
    assert "oci://$REGISTRY/$owner/charts" in chart_run
