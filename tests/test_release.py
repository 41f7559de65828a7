"""Release rules: one SemVer for chart, app and image; the tag must match it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.check_release import DEFAULT_CHART, check_changelog, check_release

SCRIPT = Path(__file__).parent.parent / "scripts" / "check_release.py"


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    (tmp_path / "Chart.yaml").write_text(
        yaml.safe_dump({"version": "1.2.3", "appVersion": "1.2.3"})
    )
    (tmp_path / "values.yaml").write_text(yaml.safe_dump({"image": {"tag": ""}}))
    return tmp_path


def write(path: Path, document: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(document))


@pytest.mark.parametrize("tag", [None, "1.2.3", "v1.2.3"])
def test_unified_chart_and_app_versions(chart: Path, tag: str | None) -> None:
    """A tag with or without one v, or none, passes."""
    assert check_release(chart, tag) == ("1.2.3", "1.2.3")


def test_chart_and_app_must_match(chart: Path) -> None:
    """version and appVersion differ: refused."""
    write(chart / "Chart.yaml", {"version": "1.2.3", "appVersion": "1.2.4"})
    with pytest.raises(ValueError, match="version and appVersion must match"):
        check_release(chart)


@pytest.mark.parametrize("tag", ["1.2.4", "v1.2.4"])
def test_mismatched_release_tags(chart: Path, tag: str) -> None:
    """A tag for another version: refused."""
    with pytest.raises(ValueError, match="does not match"):
        check_release(chart, tag)


@pytest.mark.parametrize(
    "tag",
    [
        "1.2",
        "01.2.3",
        "v1.2",
        "1.2.3-01",
        "v1.2.3+build",
        "chart-v1.2.3",
        "release-1.2.3",
        "",
        "vv1.2.3",
    ],
)
def test_invalid_tag_versions(chart: Path, tag: str) -> None:
    """Tags that are not SemVer image tags: refused."""
    with pytest.raises(ValueError):
        check_release(chart, tag)


@pytest.mark.parametrize("tag", ["1.2.3-rc.1", "v1.2.3-rc.1"])
def test_prerelease_versions(chart: Path, tag: str) -> None:
    """Prereleases are releases too."""
    write(chart / "Chart.yaml", {"version": "1.2.3-rc.1", "appVersion": "1.2.3-rc.1"})
    assert check_release(chart, tag) == ("1.2.3-rc.1", "1.2.3-rc.1")


@pytest.mark.parametrize(
    ("tag", "ok"),
    [("", True), (None, True), ("1.2.3", True), ("old", False), ("1.2.2", False), (1.2, False)],
)
def test_image_overrides(chart: Path, tag: Any, ok: bool) -> None:
    """image.tag may be empty or appVersion, nothing else."""
    write(chart / "values.yaml", {"image": {"tag": tag}})
    if ok:
        check_release(chart)
    else:
        with pytest.raises(ValueError, match=r"image\.tag"):
            check_release(chart)


def test_production_image_override(chart: Path) -> None:
    """Every shipped *values.yaml is checked and named."""
    write(chart / "prod-values.yaml", {"image": {"tag": "1.2.2"}})
    with pytest.raises(ValueError, match=r"prod-values\.yaml"):
        check_release(chart)


def test_digest_override(chart: Path) -> None:
    """A shipped digest pin is refused."""
    write(chart / "values.yaml", {"image": {"tag": "", "digest": "sha256:deadbeef"}})
    with pytest.raises(ValueError, match=r"image\.digest"):
        check_release(chart)


@pytest.mark.parametrize("app_version", [None, 2.3, "latest", "2.3.4+build"])
def test_invalid_app_version(chart: Path, app_version: Any) -> None:
    """appVersion must be a SemVer string usable as an image tag."""
    write(chart / "Chart.yaml", {"version": "2.3.4", "appVersion": app_version})
    with pytest.raises(ValueError):
        check_release(chart)


def test_cli_blocks_mismatched_tag(chart: Path) -> None:
    """The command line exits 1 with the reason on stderr."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--chart", str(chart), "--release-tag", "1.2.4"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "does not match" in result.stderr
    assert result.stderr.startswith("Release consistency check failed: ")


def test_cli_ok_on_shipped_chart() -> None:
    """The chart in this repository is consistent."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    from kdraexp import __version__

    assert result.stdout == (
        f"Release consistency OK: chart={__version__}, app/image={__version__}\n"
    )
    assert DEFAULT_CHART.is_dir()


def test_release_needs_a_changelog_section(chart: Path, tmp_path: Path) -> None:
    """A version the changelog says nothing of is refused, naming the file and the version."""
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text("# Changelog\n\n## 1.2.2\n\n- before\n\n## 1.2.30\n")
    refused = subprocess.run(
        [sys.executable, str(SCRIPT), "--chart", str(chart), "--changelog", str(changelog)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 1
    assert "CHANGELOG.md has no section for 1.2.3" in refused.stderr
    changelog.write_text("# Changelog\n\n## 1.2.3\n\n- this one\n")
    check_changelog(changelog, "1.2.3")


def test_readme_installs_this_release() -> None:
    """The README's install line names the chart's own version, not an older one's."""
    readme = (DEFAULT_CHART.parent.parent / "README.md").read_text()
    versions = re.findall(r"oci://\S+/kube-dra-exporter\s*\\?\s*--version (\S+)", readme)
    assert versions == [check_release(DEFAULT_CHART)[0]]


def test_chart_app_version_is_package_version() -> None:
    """The chart's appVersion is the Python package's version."""
    from kdraexp import __version__

    assert check_release(DEFAULT_CHART)[1] == __version__


def test_broken_chart_file(chart: Path) -> None:
    """A Chart.yaml that is not YAML fails through the CLI with the reason."""
    (chart / "Chart.yaml").write_text("version: [\n")
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--chart", str(chart)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("Release consistency check failed: ")
