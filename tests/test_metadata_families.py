"""Objects' own labels and annotations, written as kube-state-metrics writes them.

kube-state-metrics v2.20.0 is the model, matched function by function:

- the options' form, ``LabelsAllowList.Set`` (``pkg/options/types.go``): ``resource=[key,...]``
  entries separated by commas, names and keys trimmed, a resource named twice read from its last
  entry, at most one ``*`` in a key; and ``Builder.allowList`` (``internal/store/builder.go``):
  an unknown resource refused, ``*`` as the resource giving its keys to every resource;
- which keys are written, ``createPrometheusLabelKeysValues`` (``internal/store/utils.go``):
  ``*`` first takes every key and is passed over anywhere else, a key with one ``*`` matches as
  ``^before.*after$``, any other key is looked up;
- how a key becomes a name and names that collide are made apart, ``mapToPrometheusLabels``
  with ``labelName`` (``SanitizeLabelName`` then ``toSnakeCase``) and ``labelConflictSuffix``:
  keys sorted, colliding ones numbered ``_conflict<N>`` in that order from 1; where it would
  write one name twice (a key spelt as another's numbered name), which Prometheus refuses, a
  number whose name is some key's own is passed over;
- a kind whose allowlist is empty has no series (``createPodLabelsGenerator``), one that names
  keys has one series per object, its identifying labels first.

The expected names and values below are what those functions, run on the same keys, return.
Where kube-state-metrics reads part of a malformed value without a word (a missing bracket,
an empty key), the exporter refuses it.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_twisted
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.app.tap import Options
from kdraexp.families.allowlist import (
    ANNOTATIONS,
    CUT_MARK,
    LABELS,
    LAST_APPLIED,
    MAX_MATCHED_KEYS,
    MAX_VALUE_LENGTH,
    AllowlistError,
    KeyFilter,
    allowlist_of,
)
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from kdraexp.util.labels import kube_label_name, kube_label_names
from tests.collect import collect, text
from tests.objects import classy, gpu, new_claim, pool_slice, result
from tests.processes import TURN_BOUND, longest_turn

EVERY_KIND = "resourceclaims,resourceslices,deviceclasses,devicetaintrules,pods"


def kinds(value: str) -> dict[str, tuple[str, ...]]:
    return {kind: keys.keys for kind, keys in allowlist_of("--x", value).kinds}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", {}),
        ("resourceclaims=[team,cost-center]", {"resourceclaims": ("team", "cost-center")}),
        (
            " resourceclaims =[ team , cost-center ],pods=[*]",
            {"resourceclaims": ("team", "cost-center"), "pods": ("*",)},
        ),
        ("resourceclaims=[a],resourceclaims=[b]", {"resourceclaims": ("b",)}),
        ("resourceclaims=[],pods=[app]", {"pods": ("app",)}),
        ("deviceclasses=[app.kubernetes.io/*]", {"deviceclasses": ("app.kubernetes.io/*",)}),
        (
            "*=[team],pods=[app]",
            {
                kind: ("team",)
                for kind in (
                    "deviceclasses",
                    "devicetaintrules",
                    "resourceslices",
                    "resourceclaims",
                    "pods",
                )
            },
        ),
        ("*=[]", {}),
    ],
)
def test_allowlist_forms(value: str, expected: dict[str, tuple[str, ...]]) -> None:
    """kube-state-metrics' form and meaning; a resource with no key is as one not named."""
    assert kinds(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("resourceclaims", "expected RESOURCE=[KEY,...] separated by commas, got 'resourceclaims'"),
        ("resourceclaims=[team", "expected RESOURCE=[KEY,...] separated by commas"),
        ("resourceclaims=team", "expected RESOURCE=[KEY,...] separated by commas"),
        ("resourceclaims= [team]", "expected RESOURCE=[KEY,...] separated by commas"),
        (",pods=[a]", "expected RESOURCE=[KEY,...] separated by commas"),
        ("pods=[a],", "expected RESOURCE=[KEY,...] separated by commas"),
        ("pods=[a],,deviceclasses=[b]", "expected RESOURCE=[KEY,...] separated by commas"),
        ("pods=[a=b]", "expected RESOURCE=[KEY,...] separated by commas"),
        ("pods=[a] ,deviceclasses=[b]", "expected a comma after 'pods=[a]', got ' ,device"),
        ("pods=[a]x", "expected a comma after 'pods=[a]', got 'x'"),
        ("pods=[a,,b]", "pods=[a,,b] names an empty key"),
        ("pods=[a, ,b]", "pods=[a, ,b] names an empty key"),
        ("pods=[app/**]", "'app/**' holds more than one *"),
        ("nodes=[a]", "unknown resource 'nodes' (expected deviceclasses, devicetaintrules, "),
    ],
)
def test_malformed_allowlists_refused(value: str, message: str) -> None:
    """Each says what is wrong, naming the option."""
    with pytest.raises(AllowlistError) as raised:
        allowlist_of("--metric-labels-allowlist", value)
    assert str(raised.value).startswith("--metric-labels-allowlist: " + message)


@pytest.mark.parametrize("option", ["--metric-labels-allowlist", "--metric-annotations-allowlist"])
def test_a_malformed_allowlist_ends_the_process_with_status_2(
    option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """As any bad option: status 2 and one line naming it."""
    with pytest.raises(SystemExit) as caught:
        Options().parseOptions([option, "resourceclaims=[team"])
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        f"kdraexp: {option}: expected RESOURCE=[KEY,...] separated by commas, got "
        "'resourceclaims=[team' (see kdraexp --help)\n"
    )


@pytest.mark.parametrize(
    ("keys", "names"),
    [
        (["team"], ("label_team",)),
        (["app.kubernetes.io/name"], ("label_app_kubernetes_io_name",)),
        (["gpuURL", "GPU", "ABc", "é"], ("label_gpu_url", "label_gpu", "label_abc", "label__")),
        (
            sorted(["team", "cost-center", "costCenter"]),
            ("label_cost_center_conflict1", "label_cost_center_conflict2", "label_team"),
        ),
        (
            sorted(["team.name", "team/name", "team_name", "teamName"]),
            (
                "label_team_name_conflict1",  # team.name
                "label_team_name_conflict2",  # team/name
                "label_team_name_conflict3",  # teamName ('N' sorts before '_')
                "label_team_name_conflict4",  # team_name
            ),
        ),
        (
            sorted(["a.b", "a/b", "a_b_conflict1"]),
            ("label_a_b_conflict2", "label_a_b_conflict3", "label_a_b_conflict1"),
        ),
        (
            sorted(["A.b", "a.b", "A.b.conflict1"]),
            ("label_a_b_conflict2", "label_a_b_conflict1", "label_a_b_conflict3"),
        ),
    ],
)
def test_label_names_as_kube_state_metrics_makes_them(
    keys: list[str], names: tuple[str, ...]
) -> None:
    """Sanitized, snake-cased, collisions numbered; a number some key's own name is passed over.

    ``A.b``, ``A.b.conflict1`` and ``a.b``: the second gives ``label_a_b_conflict1`` itself, so
    ``A.b`` and ``a.b``, which collide, take 2 and 3; ``a_b_conflict1`` keeps its name whether
    it sorts before the keys it looks numbered after or after them.
    """
    assert kube_label_names("label", keys) == names


def kube_state_metrics_names(prefix: str, keys: list[str]) -> list[str]:
    """``mapToPrometheusLabels`` of kube-state-metrics (``internal/store/utils.go``), line by line.

    The first key of a colliding name is renamed ``_conflict1`` when the second comes; each
    further one takes the next number.  Numbered names are not checked against the others.
    """
    label_keys: list[str] = []
    conflicts: dict[str, list[int]] = {}  # name -> [count, initial]
    for key in keys:
        label_key = kube_label_name(prefix, key)
        conflict = conflicts.get(label_key)
        if conflict is not None:
            if conflict[0] == 1:
                label_keys[conflict[1]] = f"{label_keys[conflict[1]]}_conflict{conflict[0]}"
            conflict[0] += 1
            label_key = f"{label_key}_conflict{conflict[0]}"
        else:
            conflicts[label_key] = [1, len(label_keys)]
        label_keys.append(label_key)
    return label_keys


@given(
    st.lists(
        st.text(alphabet="aAb._/-", min_size=1, max_size=4)
        | st.sampled_from(["a_b_conflict1", "a_b_conflict2", "A.b.conflict1", "a_conflict1"]),
        max_size=8,
        unique=True,
    )
)
def test_label_names_are_kube_state_metrics_names_when_those_are_distinct(
    keys: list[str],
) -> None:
    """The names kube-state-metrics gives, wherever it gives each name once; never one twice.

    Each name is its key's own, or, where keys collide, that name numbered.
    """
    keys = sorted(keys)
    names = kube_label_names("label", keys)
    assert len(set(names)) == len(names)
    theirs = kube_state_metrics_names("label", keys)
    if len(set(theirs)) == len(theirs):
        assert list(names) == theirs
    bases = [kube_label_name("label", key) for key in keys]
    for name, base in zip(names, bases, strict=True):
        if bases.count(base) == 1:
            assert name == base
        else:
            assert re.fullmatch(re.escape(base) + "_conflict[1-9][0-9]*", name), (name, base)


@pytest.mark.parametrize(
    ("keys", "labels", "picked"),
    [
        (("*",), {"team": "ml", "other": "x"}, {"team": "ml", "other": "x"}),
        (("team", "*"), {"team": "ml", "other": "x"}, {"team": "ml"}),
        (
            ("app.kubernetes.io/*", "team"),
            {
                "team": "ml",
                "app.kubernetes.io/name": "x",
                "app.kubernetes.io": "z",
                "helm.sh/chart": "c",
            },
            {"team": "ml", "app.kubernetes.io/name": "x"},
        ),
        (
            ("*-center",),
            {"cost-center": "1", "profit-center": "2", "center": "3"},
            {"cost-center": "1", "profit-center": "2"},
        ),
        (("team", "missing"), {"team": None, "other": "x"}, {"team": ""}),
        (("team",), None, {}),
    ],
)
def test_keys_picked_as_kube_state_metrics_picks_them(
    keys: tuple[str, ...], labels: dict[str, Any] | None, picked: dict[str, str]
) -> None:
    """``*`` first is every key, later nothing; ``*`` within a key any text; null is ""."""
    assert KeyFilter(keys).pick(msgspec.Raw(json.dumps(labels).encode())) == picked


def test_keys_named_outright_are_the_only_ones_decoded() -> None:
    """A value no key names is skipped unread: a malformed one costs nothing."""
    raw = msgspec.Raw(b'{"team": "ml", "other": {"not": "a string"}}')
    assert KeyFilter(("team",)).pick(raw) == {"team": "ml"}
    with pytest.raises(msgspec.ValidationError):
        KeyFilter(("*",)).pick(raw)


META = {
    "labels": {"team": "ml", "cost-center": "42", "app.kubernetes.io/name": "trainer"},
    "annotations": {"owner": 'a "quoted"\nvalue', "hourly-cost": "0.60"},
}


def labelled(made: dict[str, Any]) -> dict[str, Any]:
    made["metadata"].update(json.loads(json.dumps(META)))
    return made


def pod(name: str, uses_a_claim: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if uses_a_claim:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "train"}]
    return labelled(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "workloads", "uid": f"uid-{name}"},
            "spec": spec,
        }
    )


RULE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "maintenance"},
    "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com"},
        "taint": {"key": "k", "effect": "NoSchedule"},
    },
}


def cluster(labels_allowlist: str = "", annotations_allowlist: str = "") -> str:
    """The exposition of one labelled object of each kind (and a pod that uses no device)."""
    return text(
        collect(
            claims=[labelled(new_claim("train", [result("gpu-0")]))],
            slices=[labelled(pool_slice("node-a-gpu", [gpu("gpu-0")]))],
            classes=[labelled(classy("gpu.nvidia.com", "true", "2.5"))],
            rules=[labelled(json.loads(json.dumps(RULE)))],
            pods=[pod("trainer", True), pod("web", False)],
            selection=select(
                resources=EVERY_KIND,
                options=FamilyOptions.from_flags(
                    {
                        "metric-labels-allowlist": labels_allowlist,
                        "metric-annotations-allowlist": annotations_allowlist,
                    }
                ),
            ),
        )
    )


def series(exposition: str, suffix: str) -> set[str]:
    return {
        line
        for line in exposition.splitlines()
        if line.startswith("kube_") and line.split("{")[0].endswith(suffix)
    }


def test_each_kind_writes_its_labels_and_annotations() -> None:
    """One series per object, its identifying labels first, then its keys in their order."""
    written = cluster(
        labels_allowlist="*=[team,cost-center,app.kubernetes.io/*]",
        annotations_allowlist="*=[*]",
    )
    keyed = 'label_app_kubernetes_io_name="trainer",label_cost_center="42",label_team="ml"} 1'
    assert series(written, "_labels") == {
        'kube_deviceclass_labels{deviceclass_name="gpu.nvidia.com",' + keyed,
        'kube_devicetaintrule_labels{devicetaintrule="maintenance",' + keyed,
        'kube_pod_labels{namespace="workloads",pod="trainer",uid="uid-trainer",' + keyed,
        'kube_resourceclaim_labels{namespace="workloads",resourceclaim_name="train",' + keyed,
        'kube_resourceslice_labels{resourceslice_name="node-a-gpu",' + keyed,
    }
    annotated = 'annotation_hourly_cost="0.60",annotation_owner="a \\"quoted\\"\\nvalue"} 1'
    assert series(written, "_annotations") == {
        'kube_deviceclass_annotations{deviceclass_name="gpu.nvidia.com",' + annotated,
        'kube_devicetaintrule_annotations{devicetaintrule="maintenance",' + annotated,
        'kube_pod_annotations{namespace="workloads",pod="trainer",uid="uid-trainer",' + annotated,
        'kube_resourceclaim_annotations{namespace="workloads",resourceclaim_name="train",'
        + annotated,
        'kube_resourceslice_annotations{resourceslice_name="node-a-gpu",' + annotated,
    }


def test_only_the_kinds_named_and_objects_without_the_keys() -> None:
    """A kind not named has no family; an object without any key named keeps its series."""
    written = cluster(labels_allowlist="resourceclaims=[missing],deviceclasses=[team]")
    assert series(written, "_labels") == {
        'kube_resourceclaim_labels{namespace="workloads",resourceclaim_name="train"} 1',
        'kube_deviceclass_labels{deviceclass_name="gpu.nvidia.com",label_team="ml"} 1',
    }
    assert series(written, "_annotations") == set()
    assert "# HELP kube_pod_labels" not in written


def test_without_an_allowlist_no_family_and_nothing_decoded() -> None:
    """The default: no such family, and labels and annotations left unread.

    Every object's labels and annotations here hold numbers, which the API server never sends:
    read, each would be a value not read; unread, nothing is reported and every other family is
    written as before (a class's ``hourly-cost`` is the one annotation decoded).
    """

    def oddly(made: dict[str, Any]) -> dict[str, Any]:
        made["metadata"]["labels"] = {"team": 1}
        made["metadata"]["annotations"] = {**made["metadata"].get("annotations", {}), "owner": 2}
        return made

    classes = [classy("gpu.nvidia.com", "true", "2.5")]
    plain = collect(
        claims=[new_claim("train", [result("gpu-0")])],
        slices=[pool_slice("node-a-gpu", [gpu("gpu-0")])],
        classes=classes,
        selection=select(),
    )
    made = collect(
        claims=[oddly(new_claim("train", [result("gpu-0")]))],
        slices=[oddly(pool_slice("node-a-gpu", [gpu("gpu-0")]))],
        classes=[oddly(classy("gpu.nvidia.com", "true", "2.5"))],
        selection=select(),
    )
    assert not made.problems
    assert text(made) == text(plain)
    assert 'kube_deviceclass_hourly_cost{deviceclass_name="gpu.nvidia.com"} 2.5' in text(made)


def test_labels_that_cannot_be_read_cost_their_series() -> None:
    """A map that is not of strings: no series for that object, a value not read."""
    claim = new_claim("train", [result("gpu-0")])
    claim["metadata"]["labels"] = {"team": 1}
    made = collect(
        claims=[claim],
        selection=select(
            options=FamilyOptions.from_flags({"metric-labels-allowlist": "resourceclaims=[*]"})
        ),
    )
    assert "kube_resourceclaim_labels{" not in text(made)
    assert [(p.resource, p.field) for p in made.problems] == [("resourceclaims", "metadata.labels")]
    assert made.problems[0].message.startswith(
        "ResourceClaim workloads/train labels: Expected `str | null`, got `int`"
    )


def test_a_resource_not_listed_is_a_warning() -> None:
    """Named but not listed: said at start, not an error (kube-state-metrics says nothing)."""
    chosen = select(
        options=FamilyOptions.from_flags(
            {"metric-labels-allowlist": "pods=[app]", "metric-annotations-allowlist": "*=[owner]"}
        )
    )
    assert chosen.warnings == (
        "--metric-labels-allowlist names pods, which --resources does not list: its labels are "
        "not written",
    )


def test_picked_labels_keep_the_sorted_keys_order() -> None:
    """Names follow the keys' order, not their own (kube-state-metrics sorts keys)."""
    made = LABELS.values({"A.b": "x", "a.b": "y", "A.b.conflict1": "z"})
    assert made.names == ("label_a_b_conflict2", "label_a_b_conflict1", "label_a_b_conflict3")
    assert made.values == ("x", "z", "y")
    assert made.text == ',label_a_b_conflict2="x",label_a_b_conflict1="z",label_a_b_conflict3="y"'


def test_last_applied_configuration_only_when_named() -> None:
    """``*`` and patterns pass over what ``kubectl apply`` leaves; naming it outright writes it.

    It holds the whole object as applied, a pod template's environment included: published, every
    scraper would read it.
    """
    raw = msgspec.Raw(json.dumps({LAST_APPLIED: "{}", "team": "ml"}).encode())
    assert KeyFilter(("*",)).pick(raw) == {"team": "ml"}
    assert KeyFilter(("kubectl.kubernetes.io/*", "team")).pick(raw) == {"team": "ml"}
    assert KeyFilter(("*", LAST_APPLIED)).pick(raw) == {LAST_APPLIED: "{}", "team": "ml"}
    assert KeyFilter((LAST_APPLIED,)).pick(raw) == {LAST_APPLIED: "{}"}


def test_long_values_are_cut_and_counted() -> None:
    """A value past the bound is its first characters and the mark, the same length each time.

    Each object whose value is cut is one value counted as cut short, not as a value left out.
    """
    long, bound = "x" * 250_000, "y" * MAX_VALUE_LENGTH
    claims = [
        new_claim(f"c{n}", annotations={"notes": long, "short": bound}, labels={"team": "ml"})
        for n in range(3)
    ]
    made = collect(
        claims=claims,
        selection=select(
            options=FamilyOptions.from_flags(
                {
                    "metric-labels-allowlist": "resourceclaims=[*]",
                    "metric-annotations-allowlist": "resourceclaims=[*]",
                }
            )
        ),
    )
    written = "x" * (MAX_VALUE_LENGTH - len(CUT_MARK)) + CUT_MARK
    assert len(written) == MAX_VALUE_LENGTH
    assert series(text(made), "_annotations") == {
        f'kube_resourceclaim_annotations{{namespace="workloads",resourceclaim_name="c{n}",'
        f'annotation_notes="{written}",annotation_short="{bound}"}} 1'
        for n in range(3)
    }
    assert [(p.resource, p.field, p.cut_short) for p in made.problems] == [
        ("resourceclaims", "metadata.annotations", True)
    ] * 3
    assert made.problems[0].message == (
        f"ResourceClaim annotations notes: values longer than {MAX_VALUE_LENGTH} characters are "
        "written cut short, ending in ..."
    )


def test_a_star_writes_at_most_its_bound_of_keys_an_object() -> None:
    """Past the bound, the first keys in order are written, the rest counted as cut short.

    Keys named outright are written besides; another object's keys are its own.
    """
    many = {f"k{n:05d}": "v" for n in range(MAX_MATCHED_KEYS + 50)}
    claims = [
        new_claim("many", labels={**many, "team": "ml"}),
        new_claim("few", labels={"a": "1", "team": "ml"}),
    ]
    made = collect(
        claims=claims,
        selection=select(
            options=FamilyOptions.from_flags({"metric-labels-allowlist": "resourceclaims=[*,team]"})
        ),
    )
    written = {
        line.split('resourceclaim_name="')[1].split('"')[0]: line
        for line in series(text(made), "_labels")
    }
    first = sorted(many)[:MAX_MATCHED_KEYS]
    assert re.findall(r"label_(\w+)=", written["many"]) == [*first, "team"]
    assert re.findall(r"label_(\w+)=", written["few"]) == ["a", "team"]
    assert [(p.field, p.cut_short, p.count) for p in made.problems] == [
        ("metadata.labels", True, 50)
    ]


@pytest.mark.slow
@pytest_twisted.ensureDeferred
async def test_objects_of_ten_thousand_labels_under_a_star_hold_no_turn(tmp_path: Path) -> None:
    """300 claims of 10,000 labels each, every key published: 3 million labels.

    Written whole, the collection held the reactor for seconds (1.6-1.8 s as measured from
    outside, 850 MiB); with 128 keys an object, within the tests' bound.
    """
    items = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            **new_claim(f"c{n}", labels={f"example.com/k{k}": f"v{n}-{k}" for k in range(10_000)}),
        }
        for n in range(300)
    ]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": items}))
    turn, body = await longest_turn(
        tmp_path, path, "--metric-labels-allowlist=resourceclaims=[*]", "--max-response-bytes=256Mi"
    )
    assert turn < TURN_BOUND, (tmp_path / "output.log").read_text()
    rows = [
        line for line in body.decode().splitlines() if line.startswith("kube_resourceclaim_labels{")
    ]
    assert len(rows) == 300
    assert all(row.count("label_") == MAX_MATCHED_KEYS for row in rows)


def test_maps_read_keep_no_copy_of_their_json() -> None:
    """What a filter keeps of the maps it read is their labels as written, not their JSON.

    Each map was kept whole as the key of the labels made of it, for up to 4,096 maps: 200
    maps of 50 KB kept 10 MB, beside the values in full.
    """
    keys = KeyFilter(("*",))
    maps = [
        msgspec.Raw(json.dumps({"notes": f"{n:06d}" + "x" * 50_000}).encode()) for n in range(200)
    ]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for raw in maps:
            keys.written(ANNOTATIONS, raw)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 200 * 2 * 1024, kept
