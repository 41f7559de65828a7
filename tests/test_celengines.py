"""Both CEL engines give the suite's answers: Google's runtime, and the Rust one it falls back to.

``cel-expr-python`` has wheels for x86_64 and aarch64 only; on ppc64le, s390x and riscv64 the
evaluation process uses ``common-expression-language``.  Every CEL case of the suite (the test
modules below) runs again with the process told to use the Rust engine, and must pass: the same
matches, the same reasons, the same budgets.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from kdraexp.cel.worker import ENGINE, engine

ROOT = Path(__file__).parent.parent
CEL_CASES = [
    "tests/test_cel_matching.py",
    "tests/test_cel_native.py",
    "tests/test_cel_process.py",
    "tests/test_deviceclass_families.py",
    "tests/test_pending.py",
    "tests/test_headroom.py",
    "tests/test_resourceslice_families.py",
]
"""The modules whose tests evaluate selectors."""


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(
    not _installed("common-expression-language"), reason="the Rust engine is not installed"
)
def test_the_rust_engine_passes_every_cel_case() -> None:
    environment = {**os.environ, ENGINE: "common-expression-language"}
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CEL_CASES],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and " skipped" not in ran.stdout, ran.stdout[-2000:]


def test_the_engine_is_chosen_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Google's where it is installed, unless told otherwise; the Rust one else."""
    monkeypatch.delenv(ENGINE, raising=False)
    expected = "cel-expr-python" if _installed("cel-expr-python") else "common-expression-language"
    chosen = engine().NAME
    assert chosen == expected
    if _installed("common-expression-language"):
        monkeypatch.setenv(ENGINE, "common-expression-language")
        chosen = engine().NAME
        assert chosen == "common-expression-language"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64", "ppc64le", "s390x", "riscv64"])
def test_every_image_platform_installs_the_engines_it_needs(machine: str) -> None:
    """Google's where it has a wheel, the Rust one everywhere (it evaluates what Google's stops)."""
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    required = [
        Requirement(line.strip())
        for line in parser["options"]["install_requires"].splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    environment = {"platform_machine": machine}
    chosen = {
        r.name
        for r in required
        if r.name in {"cel-expr-python", "common-expression-language"}
        and (r.marker is None or r.marker.evaluate(environment))
    }
    google = {"cel-expr-python"} if machine in {"x86_64", "aarch64"} else set()
    assert chosen == google | {"common-expression-language"}


@pytest.mark.skipif(not _installed("cel-expr-python"), reason="Google's runtime is not installed")
@pytest.mark.parametrize(
    ("expression", "refused"),
    [
        ("device.driver == 1", "found no matching overload for '_==_' applied to '(string, int)'"),
        ("device.allowMultipleAllocations == 'yes'", "applied to '(bool, string)'"),
        ("device.capacity['d'].memory == '1Gi'", "applied to '(map(string, dyn), string)'"),
        ("device.serial == 'x'", "undeclared reference to 'device.serial'"),
        ("device.attributes['d'].exists(k, k == 'type')", None),
        ("device.attributes['d'].filter(k, k.startsWith('t')).size() == 1", None),
        ("device.capacity['d'].all(k, device.capacity['d'][k].sign() > 0)", None),
    ],
)
def test_googles_runtime_types_the_device_as_kubernetes(
    expression: str, refused: str | None
) -> None:
    """The fields have Kubernetes' types: a comparison Kubernetes refuses does not compile."""
    from kdraexp.cel import runtime

    try:
        runtime.compile_selector(expression)
    except Exception as error:  # the runtime's own exception type
        assert refused is not None and refused in str(error), error
    else:
        assert refused is None
