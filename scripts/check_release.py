#!/usr/bin/env python3
"""Check that a release is consistent: one SemVer for the chart, the app and the image.

The chart's ``version`` and ``appVersion`` must be equal, valid SemVer, and the app version a
valid image tag (no build metadata, at most 128 characters). Shipped values files must leave
``image.tag`` empty (or equal to appVersion) and pin no digest, so the image follows appVersion.
With ``--release-tag``, the tag (one leading ``v`` allowed) must equal that version. The
changelog (``CHANGELOG.md`` at the repository's root, or ``--changelog``) must have a section
for it, so that no release ships without saying what changed.

Exit status 0 with ``Release consistency OK: ...`` on stdout, or 1 with the reason on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CHART = ROOT / "chart" / "kube-dra-exporter"
DEFAULT_CHANGELOG = ROOT / "CHANGELOG.md"
_IDENTIFIER = r"[0-9A-Za-z-]+"
_SEMVER = re.compile(
    r"(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    rf"(?:-(?P<pre>{_IDENTIFIER}(?:\.{_IDENTIFIER})*))?"
    rf"(?:\+(?P<build>{_IDENTIFIER}(?:\.{_IDENTIFIER})*))?"
)


def validate_semver(value: Any, what: str) -> str:
    """Return *value* if it is a SemVer 2.0 string, else raise ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a semantic version string, got {value!r}")
    match = _SEMVER.fullmatch(value)
    if match is None:
        raise ValueError(f"{what} {value!r} is not a semantic version (MAJOR.MINOR.PATCH)")
    for identifier in (match["pre"] or "").split("."):
        if identifier.isdigit() and len(identifier) > 1 and identifier.startswith("0"):
            raise ValueError(
                f"{what} {value!r} has a numeric prerelease identifier with a leading zero"
            )
    return value


def validate_image_version(value: Any, what: str) -> str:
    """SemVer that is also a valid image tag: no build metadata, at most 128 characters."""
    validate_semver(value, what)
    if "+" in value:
        raise ValueError(f"{what} {value!r} has build metadata, which is not valid in an image tag")
    if len(value) > 128:
        raise ValueError(f"{what} {value!r} is longer than the 128 characters of an image tag")
    return str(value)


def _load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise TypeError(f"{path.name} is not a mapping")
    return document


def check_release(chart_dir: Path | str, release_tag: str | None = None) -> tuple[str, str]:
    """Check the chart in *chart_dir* (and *release_tag*); return (version, appVersion)."""
    chart_dir = Path(chart_dir)
    chart = _load(chart_dir / "Chart.yaml")
    chart_version = validate_semver(chart.get("version"), "Chart.yaml version")
    app_version = validate_image_version(chart.get("appVersion"), "Chart.yaml appVersion")
    if chart_version != app_version:
        raise ValueError(
            "Chart.yaml version and appVersion must match for a unified image/chart release"
        )
    defaults = _load(chart_dir / "values.yaml").get("image") or {}
    profiles = [("values.yaml", defaults)]
    for path in sorted(chart_dir.iterdir()):
        if path.is_file() and path.name.endswith("values.yaml") and path.name != "values.yaml":
            overlay = _load(path).get("image") or {}
            profiles.append((path.name, {**defaults, **overlay}))
    for name, image in profiles:
        tag = image.get("tag")
        if tag not in (None, "", app_version):
            raise ValueError(
                f"{name} image.tag={tag!r} differs from appVersion={app_version!r}; "
                "leave it empty to follow appVersion"
            )
        if image.get("digest"):
            raise ValueError(
                f"{name} image.digest pins an image independently of appVersion; "
                "remove it from shipped release defaults"
            )
    if release_tag is not None:
        version = release_tag[1:] if release_tag.startswith("v") else release_tag
        validate_image_version(version, "release tag")
        if version != chart_version:
            raise ValueError(
                f"{release_tag} does not match Chart.yaml version/appVersion={chart_version!r}"
            )
    return chart_version, app_version


def check_changelog(changelog: Path | str, version: str) -> None:
    """Raise ValueError unless *changelog* has a ``## <version>`` section."""
    heading = re.compile(rf"^## \[?v?{re.escape(version)}\]?(\s|$)", re.MULTILINE)
    if heading.search(Path(changelog).read_text(encoding="utf-8")) is None:
        raise ValueError(f"{Path(changelog).name} has no section for {version} (## {version})")


def main(argv: list[str] | None = None) -> int:
    """Command line: ``check_release.py [--chart DIR] [--release-tag TAG]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", default=str(DEFAULT_CHART), help="chart directory")
    parser.add_argument("--release-tag", help="the git tag being released, e.g. v0.2.0")
    parser.add_argument("--changelog", default=str(DEFAULT_CHANGELOG), help="the changelog")
    args = parser.parse_args(argv)
    try:
        chart_version, app_version = check_release(args.chart, args.release_tag)
        check_changelog(args.changelog, chart_version)
    except (ValueError, KeyError, TypeError, OSError, yaml.YAMLError) as error:
        print(f"Release consistency check failed: {error}", file=sys.stderr)
        return 1
    print(f"Release consistency OK: chart={chart_version}, app/image={app_version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
