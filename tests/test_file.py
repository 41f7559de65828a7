"""The offline source: kubectl dumps in YAML or JSON, re-read when they change, clear errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.task import Clock

from kdraexp.dra.listing import (
    DEFAULT_RESOURCES,
    DEVICE_CLASSES,
    LIST_ORDER,
    RESOURCE_SLICES,
    ListError,
)
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from kdraexp.serve.web import failure_line
from kdraexp.sources.file import FileSource
from kdraexp.sources.gather import Gatherer
from kdraexp.telemetry.selfmetrics import CollectionStats
from tests.collect import Recorder, fetch, values
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


def list_file(path: Path, kind: object) -> Deferred[Recorder]:
    return fetch(FileSource(str(path), Clock(), run=maybeDeferred), kind, read=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["list-yaml", "multi-document", "json", "flow-yaml"])
def test_forms(tmp_path: Path, form: str) -> None:
    """A List, several YAML documents, JSON, or YAML that looks like JSON at first."""
    path = tmp_path / "dump"
    if form == "list-yaml":
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": SEED}))
    elif form == "multi-document":
        path.write_text(yaml.safe_dump_all(SEED))
    elif form == "flow-yaml":
        path.write_text(yaml.safe_dump({"kind": "List", "items": SEED}, default_flow_style=True))
    else:
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": SEED}))
    for kind in LIST_ORDER:
        expected = 1 if kind.plural in DEFAULT_RESOURCES else 0
        assert result_of(list_file(path, kind)).count == expected


def test_example_cluster() -> None:
    """The shipped example gives every family, opt-in ones included, and reads cleanly.

    Its one problem is on purpose: a pending claim whose own selector is not valid CEL.
    """
    everything = select(
        resources=",".join(kind.plural for kind in LIST_ORDER),
        opt_in=".*",
        options=FamilyOptions.from_flags(
            {
                "device-attributes": "profile",
                "expect-pools": ("gpu.nvidia.com=nvidia.com/gpu.present=true",),
            }
        ),
    )
    gatherer = Gatherer(
        FileSource(str(EXAMPLE), Clock(), run=maybeDeferred),
        Clock(),
        10,
        CollectionStats(),
        everything,
    )
    collection = result_of(gatherer.gather())
    assert [(p.resource, p.field) for p in collection.problems] == [("resourceclaims", "selectors")]
    assert "train-b-gpu-selector-error request gpu selector" in collection.problems[0].message
    assert collection.class_errors == {}
    written = {family.name for family, _ in collection.families()}
    assert written == {family.name for family in everything.families}


def test_reread_when_changed(tmp_path: Path) -> None:
    """A change to the file shows at the next list."""
    path = tmp_path / "dump"
    path.write_text(yaml.safe_dump_all(SEED))
    source = FileSource(str(path), Clock(), run=maybeDeferred)
    assert result_of(fetch(source, DEVICE_CLASSES)).count == 1
    path.write_text(
        yaml.safe_dump_all([*SEED, typed("DeviceClass", {"metadata": {"name": "two"}})])
    )
    assert result_of(fetch(source, DEVICE_CLASSES)).count == 2


def test_an_edit_keeping_the_resource_version_shows(tmp_path: Path) -> None:
    """A hand edit that leaves resourceVersion as the dump had it is read, not the old rows."""
    path = tmp_path / "dump.yaml"

    def write(cost: str) -> None:
        metadata = {"name": "gpu", "resourceVersion": "7", "annotations": {"hourly-cost": cost}}
        path.write_text(yaml.safe_dump(typed("DeviceClass", {"metadata": metadata, "spec": {}})))

    gatherer = Gatherer(
        FileSource(str(path), Clock(), run=maybeDeferred),
        Clock(),
        10,
        CollectionStats(),
        select(resources="deviceclasses"),
    )

    def cost() -> dict[tuple[str, ...], float]:
        collection = result_of(gatherer.gather())
        return values(collection, "kube_deviceclass_hourly_cost", "deviceclass_name")

    write("1.5")
    assert cost() == {("gpu",): 1.5}
    write("2.5")
    os.utime(path, ns=(1, 10**18))  # a new stamp even within the clock's resolution
    assert cost() == {("gpu",): 2.5}


def test_same_object_twice_counts_once(tmp_path: Path) -> None:
    """A dump that holds an object twice lists it once (the first), so no series is doubled."""
    path = tmp_path / "dump"
    second = typed("DeviceClass", {"metadata": {"name": "gpu"}, "spec": {"selectors": []}})
    path.write_text(yaml.safe_dump_all([*SEED, second]))
    assert result_of(list_file(path, DEVICE_CLASSES)).count == 1


@pytest.mark.parametrize(
    ("content", "reason", "message"),
    [
        (None, "FileUnreadable", "No such file or directory"),
        ("items: [\n", "Decode", "is not YAML or JSON"),
        ('{"kind": "List", "items": [}\n', "Decode", "is not YAML or JSON"),
        (
            '{"kind": "List", "items": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "Decode",
            "nesting depth",
        ),
        ("items:\n- " + "[" * 100_000 + "]" * 100_000 + "\n", "Decode", "nesting depth"),
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
    assert message in failure_line(error)


@pytest.mark.parametrize("kind", ["fifo", "device", "huge", "yaml", "aliases"])
def test_hostile_files(tmp_path: Path, kind: str) -> None:
    """A FIFO, a device, a file past the limit, YAML past its share of it, an alias bomb.

    Refused, nothing blocks or grows.
    """
    path = tmp_path / "dump"
    message = {
        "fifo": "is not a regular file",
        "device": "is not a regular file",
        "huge": "is larger than 65536 bytes",
        "yaml": "is YAML of 2066 bytes, more than 1/32 of --max-response-bytes=65536: parsed, "
        "YAML takes about 40 times its size (write it with -o json",
        "aliases": "its YAML aliases expand to more than",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    elif kind == "huge":
        path.write_text(yaml.safe_dump_all(SEED) + "#" * 70000)
    elif kind == "yaml":
        dump = yaml.safe_dump_all(SEED)
        path.write_text(dump + "#" * (2066 - len(dump)))
    else:
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
        path.write_text("\n".join(lines) + "\n")
    source = FileSource(str(path), Clock(), limit=65536, run=maybeDeferred)
    error = failure_of(fetch(source, DEVICE_CLASSES)).value
    assert isinstance(error, ListError)
    assert message in failure_line(error)


def test_changed_file_parsed_once(tmp_path: Path) -> None:
    """The three lists of a collection share one read and parse of a changed file."""
    path = tmp_path / "dump"
    path.write_text(yaml.safe_dump_all(SEED))
    runs = []

    def counting(function: Any, *args: Any) -> Deferred[Any]:
        runs.append(function)
        return maybeDeferred(function, *args)

    source = FileSource(str(path), Clock(), run=counting)
    for _ in range(2):
        for kind in LIST_ORDER:
            result_of(fetch(source, kind))
    assert len(runs) == 1
    path.write_text(yaml.safe_dump_all(SEED[:1]))
    os.utime(path, ns=(1, 1))
    assert result_of(fetch(source, DEVICE_CLASSES)).count == 0
    assert len(runs) == 2


def test_malformed_file_parsed_once_until_it_changes(tmp_path: Path) -> None:
    """A file that fails to parse fails again at every scrape, unread, until it changes."""
    path = tmp_path / "dump"
    path.write_text("kind: [unclosed\n")
    runs = []

    def counting(function: Any, *args: Any) -> Deferred[Any]:
        runs.append(function)
        return maybeDeferred(function, *args)

    source = FileSource(str(path), Clock(), run=counting)
    errors = [failure_of(fetch(source, kind)).value for _ in range(3) for kind in LIST_ORDER]
    assert len(runs) == 1
    assert {str(error) for error in errors} == {str(errors[0])}
    assert "is not YAML or JSON" in str(errors[0])
    path.write_text(yaml.safe_dump_all(SEED))
    os.utime(path, ns=(1, 1))
    assert result_of(fetch(source, DEVICE_CLASSES)).count == 1
    assert len(runs) == 2


def test_parse_outlives_abandoned_scrape(tmp_path: Path) -> None:
    """A scrape that gives up (its deadline) while the file is parsed does not waste the parse.

    The next scrape has the result without parsing again.
    """
    path = tmp_path / "dump"
    path.write_text(yaml.safe_dump_all(SEED))
    parses: list[tuple[Any, tuple[Any, ...], Deferred[Any]]] = []

    def later(function: Any, *args: Any) -> Deferred[Any]:
        parses.append((function, args, Deferred()))
        return parses[-1][2]

    source = FileSource(str(path), Clock(), run=later)
    abandoned = fetch(source, DEVICE_CLASSES)
    abandoned.cancel()
    failure_of(abandoned)
    function, args, parsing = parses[0]
    parsing.callback(function(*args))
    assert result_of(fetch(source, DEVICE_CLASSES)).count == 1
    assert len(parses) == 1


@pytest.mark.slow
def test_a_json_dump_is_read_within_three_times_its_size(tmp_path: Path) -> None:
    """``-o json`` of 16,000 devices and their claims is read within three times its size.

    Measured in a process of its own: its objects stay JSON, decoded one at a time.  Decoded
    whole, a 77 MB dump took 742 MiB (now 211 MiB).
    """
    from benchmarks import cluster

    lists = cluster.cluster(16000 // cluster.DEVICES_PER_NODE)
    items = [o for k in ("deviceclasses", "resourceslices", "resourceclaims") for o in lists[k]]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    del lists, items
    script = (  # the peak is started over here: a child's ru_maxrss starts at its parent's
        "import sys\n"
        "from pathlib import Path\n"
        "from kdraexp.sources.file import FileSource\n"
        "def kib(name):\n"
        "    status = Path('/proc/self/status').read_text().splitlines()\n"
        "    return int(next(s for s in status if s.startswith(name)).split()[1])\n"
        "source = FileSource(sys.argv[1], None, 2**30)\n"
        "Path('/proc/self/clear_refs').write_text('5')\n"
        "before = kib('VmRSS')\n"
        "parsed = source._load(source._stamp())\n"
        "print(len(parsed.items['ResourceSlice']), (kib('VmHWM') - before) * 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    slices, grown = map(int, done.stdout.split())
    assert slices == 2000
    assert grown < 3 * path.stat().st_size, (grown, path.stat().st_size)


def test_a_lone_surrogate_costs_its_object_a_value_not_the_file(tmp_path: Path) -> None:
    """A JSON dump whose claim has a label with a lone surrogate (U+D800, escaped) is read.

    The file failed whole (not YAML or JSON); the claim is now read as the API server reads it
    (U+FFFD), the value it cost counted.
    """
    odd = typed("ResourceClaim", {**SEED_CLAIM, "metadata": {"name": "odd", "uid": "odd"}})
    odd["metadata"]["labels"] = {"team": "\ud800"}  # type: ignore[index]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [odd, *SEED]}))
    gatherer = Gatherer(
        FileSource(str(path), Clock(), run=maybeDeferred),
        Clock(),
        10,
        CollectionStats(),
        select(),
    )
    collection = result_of(gatherer.gather())
    assert [p.message for p in collection.problems if p.field == "json"] == [
        "ResourceClaim odd: 1 lone UTF-16 surrogate escapes in its strings, read as U+FFFD (as "
        "the API server reads them)"
    ]
    assert len(values(collection, "kube_resourceclaim_info", "resourceclaim_name")) == 2
