"""docs/metrics.md and the code's families say the same: names, types, labels, stability, reads."""

from __future__ import annotations

import re
from pathlib import Path

from kdraexp.families import FAMILIES

REFERENCE = Path(__file__).parent.parent / "docs" / "metrics.md"
BLOCK = re.compile(
    r"^### `(?P<name>kube_[a-z_]+)`\n\n"
    r"\| type \| stability \| labels \|\n\|---\|---\|---\|\n"
    r"\| (?P<type>\w+) \| (?P<stability>\w+) \| (?P<labels>[^|\n]+) \|\n\n"
    r"Reads: (?P<reads>[^\n]+)\n\n"
    r"(?P<meaning>.+?)\n\n```promql\n(?P<promql>.+?)\n```",
    re.MULTILINE | re.DOTALL,
)


def documented() -> dict[str, dict[str, str]]:
    return {match["name"]: match.groupdict() for match in BLOCK.finditer(REFERENCE.read_text())}


def test_every_family_documented_as_declared() -> None:
    """One block per family, each with the code's type, stability, labels and fields read."""
    blocks = documented()
    assert set(blocks) == {family.name for family in FAMILIES}
    for family in FAMILIES:
        block = blocks[family.name]
        assert block["type"] == family.type, family.name
        assert block["stability"] == family.stability, family.name
        labels = tuple(label.strip().strip("`") for label in block["labels"].split(","))
        assert labels == family.label_names, family.name
        assert block["reads"] == family.fields, family.name
        assert block["meaning"].strip() and block["promql"].strip(), family.name


def test_no_family_written_twice() -> None:
    """Each family has exactly one block."""
    names = re.findall(r"^### `(kube_[a-z_]+)`", REFERENCE.read_text(), re.MULTILINE)
    assert len(names) == len(set(names))


def test_compatibility_table_names_every_family() -> None:
    """docs/compatibility.md says, for every family, the feature it needs (or the core)."""
    text = (Path(__file__).parent.parent / "docs" / "compatibility.md").read_text()
    named: set[str] = set()
    for written in re.findall(r"`(kube_[a-z_{},]+)`", text):
        group = re.fullmatch(r"([a-z_]*)\{([a-z_,]+)\}([a-z_]*)", written)
        if group:
            named.update(group[1] + part + group[3] for part in group[2].split(","))
        else:
            named.add(written)
    families = {family.name for family in FAMILIES}
    assert families <= named, sorted(families - named)
    assert named <= families, sorted(named - families)


def test_readme_table_names_every_own_metric() -> None:
    """The README's table of the exporter's own metrics has every family the telemetry writes."""
    from twisted.internet.task import Clock

    from kdraexp.store.sharding import Shard
    from kdraexp.telemetry.http import HTTPStats
    from kdraexp.telemetry.memorylimit import MemoryWatch
    from kdraexp.telemetry.reactorturns import TurnWatch
    from kdraexp.telemetry.selfmetrics import CollectionStats
    from kdraexp.telemetry.watchstats import WatchStats
    from kdraexp.util.cgroup import MemoryCgroup

    class Limited(MemoryCgroup):
        def limit(self) -> int:
            return 192 * 2**20

    stats = CollectionStats(10.0, Shard(0, 2))
    memory = MemoryWatch(Clock(), Limited(Path(), Path(), ""), lambda: 100 * 2**20)
    memory.look()
    collectors = [
        stats,
        HTTPStats(),
        WatchStats(stats, ["resourceclaims"], 300.0),
        TurnWatch(Clock(), str),
        memory,
    ]
    written = {
        metric.name + ("_total" if metric.type == "counter" else "")
        for collector in collectors
        for metric in collector.collect()
    }
    text = (Path(__file__).parent.parent / "README.md").read_text()
    table = set(re.findall(r"^\| `(kube_dra_exporter_[a-z_]+)`", text, re.MULTILINE))
    table |= set(
        re.findall(
            r"^\| `kube_dra_exporter_[a-z_]+`, `(kube_dra_exporter_[a-z_]+)`", text, re.MULTILINE
        )
    )
    assert "kube_dra_exporter_reactor_slow_turns_total" in written
    assert "kube_dra_exporter_memory_limit_bytes" in written
    assert written - table == set()
