"""The chart's Grafana dashboard ConfigMap: what the sidecar finds, and every query's shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from kdraexp import __version__
from kdraexp.families import BY_NAME
from tests import dashboard, tools
from tests.collect import collect, text
from tests.helm import CHART, render, resource
from tests.objects import gpu, new_claim, pool_slice, result
from tests.test_resourcepool_families import H200, PRICED, h200

ROWS = [
    "Overview",
    "Supply and demand",
    "Utilisation",
    "Claims",
    "Why pending, and what still fits",
    "Pods",
    "Health",
    "Cost",
    "The exporter",
]
VARIABLES = ["datasource", "job", "cluster", "driver", "model", "node", "namespace", "deviceclass"]


def test_config_map_for_the_sidecar() -> None:
    """Labelled for the Grafana sidecar, foldered, holding the dashboard file as it is."""
    docs = render(
        {
            "dashboards": {
                "enabled": True,
                "namespace": "monitoring",
                "folder": "GPU",
                "labels": {"team": "gpu"},
            }
        }
    )
    config = resource(docs, "ConfigMap")
    assert config["metadata"]["namespace"] == "monitoring"
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["labels"]["team"] == "gpu"
    assert config["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    runbooks = f"https://github.com/gradiant/kube-dra-exporter/blob/v{__version__}/docs/alerts.md"
    assert json.loads(config["data"]["kdraexp.json"]) == dashboard.installed(
        "kube-dra-exporter", "USD", runbooks
    )
    assert "ConfigMap" not in {doc["kind"] for doc in render()}
    other = resource(
        render({"dashboards": {"enabled": True, "label": "dash", "labelValue": "yes"}}),
        "ConfigMap",
    )
    assert other["metadata"]["labels"]["dash"] == "yes"
    assert "annotations" not in other["metadata"]


def test_job_currency_and_runbooks_follow_the_values() -> None:
    """nameOverride names the job; the currency and the runbook URL are values."""
    values = {
        "nameOverride": "gpu-metrics",
        "dashboards": {"enabled": True, "currency": "EUR"},
        "prometheusRule": {"runbookURL": "https://wiki.example/dra"},
    }
    config = resource(render(values), "ConfigMap")
    board = json.loads(config["data"]["kdraexp.json"])
    assert board == dashboard.installed("gpu-metrics", "EUR", "https://wiki.example/dra")
    job = next(v for v in board["templating"]["list"] if v["name"] == "job")
    assert job["query"] == "gpu-metrics"
    cost = next(p for p in board["panels"] if p["title"] == "Cost per hour")
    assert cost["fieldConfig"]["defaults"]["unit"] == "suffix: EUR/h"
    links = next(p for p in board["panels"] if p["title"] == "Why claims are pending")["links"]
    assert links[0]["url"] == "https://wiki.example/dra#draresourceclaimunsatisfiable"


def test_import_inputs() -> None:
    """Every ${...} in the file is an import input; their defaults are this release's."""
    board = dashboard.load()
    inputs = {i["name"]: i for i in board["__inputs"]}
    used = set(re.findall(r"\$\{([A-Z_]+)\}", dashboard.DASHBOARD.read_text()))
    assert used == set(inputs)
    assert inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    assert inputs["VAR_JOB"]["value"] == "kube-dra-exporter"
    assert inputs["VAR_RUNBOOK_URL"]["value"] == (
        f"https://github.com/gradiant/kube-dra-exporter/blob/v{__version__}/docs/alerts.md"
    )


def test_tables_show_no_time_and_named_values() -> None:
    """No table shows Grafana's raw Time column, nor a Value column without a name."""
    for panel in dashboard.load()["panels"]:
        if panel["type"] != "table":
            continue
        organize = [t for t in panel.get("transformations", ()) if t["id"] == "organize"]
        assert organize, panel["title"]
        options = organize[0]["options"]
        assert options["excludeByName"].get("Time") is True, panel["title"]
        assert options["excludeByName"].get("Value") or options["renameByName"].get("Value")


def test_requested_by_class_counts_each_device_once(
    prometheus_release: Path, tmp_path: Path
) -> None:
    """Alternatives count once and adminAccess results not at all: 3 allocated, 2 pending.

    Evaluated by each release's promtool on series as the exporter writes them.
    """
    series = {
        # allocated: two devices, plus one adminAccess result that holds nothing
        'kube_resourceclaim_allocation_result_info{namespace="ml",resourceclaim_name="a",'
        'request="gpus",driver="d",pool="p",device_name="gpu-0",deviceclass_name="gpu",'
        'admin_access="false",share_id=""}': 1,
        'kube_resourceclaim_allocation_result_info{namespace="ml",resourceclaim_name="a",'
        'request="gpus",driver="d",pool="p",device_name="gpu-1",deviceclass_name="gpu",'
        'admin_access="false",share_id=""}': 1,
        'kube_resourceclaim_allocation_result_info{namespace="mon",resourceclaim_name="dcgm",'
        'request="all",driver="d",pool="p",device_name="gpu-0",deviceclass_name="gpu",'
        'admin_access="true",share_id=""}': 1,
        # allocated from the second alternative of a firstAvailable request
        'kube_resourceclaim_allocation_result_info{namespace="ml",resourceclaim_name="b",'
        'request="gpu/small",driver="d",pool="p",device_name="gpu-2",deviceclass_name="gpu",'
        'admin_access="false",share_id=""}': 1,
        'kube_resourceclaim_request_devices{namespace="ml",resourceclaim_name="b",'
        'request="gpu/big",deviceclass_name="gpu",allocation_mode="ExactCount"}': 2,
        'kube_resourceclaim_request_devices{namespace="ml",resourceclaim_name="b",'
        'request="gpu/small",deviceclass_name="gpu",allocation_mode="ExactCount"}': 1,
        # pending: a firstAvailable request of two alternatives asking 2 or 1
        'kube_resourceclaim_request_devices{namespace="ml",resourceclaim_name="c",'
        'request="gpu/big",deviceclass_name="gpu",allocation_mode="ExactCount"}': 2,
        'kube_resourceclaim_request_devices{namespace="ml",resourceclaim_name="c",'
        'request="gpu/small",deviceclass_name="gpu",allocation_mode="ExactCount"}': 1,
        'kube_resourceclaim_status_state{namespace="ml",resourceclaim_name="c",state="pending"}': 1,
        'kube_resourceclaim_status_state{namespace="ml",resourceclaim_name="b",state="pending"}': 0,
    }
    job = "kdraexp"
    with_job = {name.replace("{", f'{{job="{job}",', 1): v for name, v in series.items()}
    allocated, pending = (
        dashboard.as_run(t["expr"], job)
        for t in dashboard.panel("Devices by class: allocated, and requested by pending claims")[
            "targets"
        ]
    )
    tested = dashboard.evaluate(
        prometheus_release,
        tmp_path,
        {name: f"{value}x3" for name, value in with_job.items()},
        [
            {
                "expr": allocated,
                "eval_time": "1m",
                "exp_samples": [{"labels": '{deviceclass_name="gpu"}', "value": 3}],
            },
            {
                "expr": pending,
                "eval_time": "1m",
                "exp_samples": [{"labels": '{deviceclass_name="gpu"}', "value": 2}],
            },
        ],
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def promtool_test(binaries: Path, directory: Path, tests: dict[str, Any]) -> None:
    """Run *tests* (a promtool rule-test file with no rules) with that release's promtool."""
    tested = dashboard.promtool(binaries, directory, tests)
    assert tested.returncode == 0, tested.stdout + tested.stderr


SPEND = "Spend over the dashboard's range"
SPEND_HOURS = {"2.42": 2, "3.16": 1}
"""Hours of cost a one-hour range reads when it ends exactly on the hour: Prometheus 2 takes the
samples at both ends of a range, 3 leaves its start open (docs/compatibility.md)."""


def test_spend_is_hours_times_cost(tmp_path: Path) -> None:
    """Three claims costing 2, 3 and 5 an hour for a two-hour range: 20 on each release.

    Off the hour, both releases agree; ending exactly on the hour, Prometheus 2 counts one
    hour more (2.42 reads twice a one-hour range's spend), Prometheus 3 is right.
    """
    costs = {"a": 2, "b": 3, "c": 5}
    (expr,) = (t["expr"] for t in dashboard.panel(SPEND)["targets"])
    for release, binaries in sorted(tools.PROMETHEUS.items()):
        directory = tmp_path / release
        directory.mkdir()
        series = [
            {
                "series": f'kube_resourceclaim_hourly_cost{{job="kdraexp",namespace="ml",'
                f'resourceclaim_name="{claim}",deviceclass_name="gpu"}}',
                "values": f"{cost}x240",
            }
            for claim, cost in costs.items()
        ]
        checks = [
            ("2h", "3h30m", 20),
            ("1h", "3h30m", 10),
            ("1h", "3h", 10 * SPEND_HOURS[release]),
        ]
        promtool_test(
            binaries(),
            directory,
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": series,
                        "promql_expr_test": [
                            {
                                "expr": dashboard.as_run(expr.replace("$__range", window)),
                                "eval_time": at,
                                "exp_samples": [{"labels": "{}", "value": value}],
                            }
                            for window, at, value in checks
                        ],
                    }
                ],
            },
        )


def test_all_matches_every_label_value(prometheus_release: Path, tmp_path: Path) -> None:
    """Each variable's "All" matches any label value, one holding a newline too, and none.

    Prometheus 2 does not let ``.`` match a newline, 3 does: ``(?s:.*)`` matches alike on both,
    where ``.*`` would hide on 2.x a device whose attribute holds a newline.
    """
    variables = [v for v in dashboard.load()["templating"]["list"] if v.get("includeAll")]
    assert [v["name"] for v in variables] == VARIABLES[2:]
    checks = []
    for variable in variables:
        label = {"namespace": "namespace", "deviceclass": "deviceclass_name"}.get(
            variable["name"], variable["name"]
        )
        checks.append(
            {
                "expr": f'count(x{{{label}=~"{variable["allValue"]}"}})',
                "eval_time": "1m",
                "exp_samples": [{"labels": "{}", "value": 3}],
            }
        )
    series = [
        {
            "series": 'x{model="A\\nB", cluster="A\\nB", driver="A\\nB", node="A\\nB", '
            'namespace="A\\nB", deviceclass_name="A\\nB"}',
            "values": "1x3",
        },
        {
            "series": 'x{model="c", cluster="c", driver="c", node="c", namespace="c", '
            'deviceclass_name="c"}',
            "values": "1x3",
        },
        {"series": 'x{other="d"}', "values": "1x3"},
    ]
    promtool_test(
        prometheus_release,
        tmp_path,
        {
            "rule_files": [],
            "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
        },
    )


RATES = re.compile(r"\b(?:rate|irate|increase|delta|idelta|deriv|changes|resets)\(.*?\[([^\]:]+)\]")


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * units[u] for n, u in parts)


def test_rate_windows_hold_four_scrapes_at_the_chart_interval() -> None:
    """Each rate and increase window, as Grafana fills it in, spans four default intervals.

    A window of two scrapes is blanked by one missed scrape; four leave room for one. The
    chart's monitors scrape every 30 s by default, the interval kube-prometheus-stack's Grafana
    assumes, so its ``$__rate_interval`` of 2m holds four samples.
    """
    values = yaml.safe_load((CHART / "values.yaml").read_text())["prometheus"]
    intervals = {
        kind: _seconds(values[kind]["interval"]) for kind in ("servicemonitor", "podmonitor")
    }
    assert intervals == {"servicemonitor": 30, "podmonitor": 30}
    windows = [
        (title, window)
        for title, expr in dashboard.queries()
        for window in RATES.findall(dashboard.as_run(expr))
    ]
    assert len(windows) >= 4, windows
    for title, window in windows:
        for kind, interval in intervals.items():
            assert _seconds(window) >= 4 * interval, (title, window, kind)


def test_idle_cost_is_the_sum_of_the_family(prometheus_release: Path, tmp_path: Path) -> None:
    """Two idle H200s priced 5.00, one partitionable into seven 1g at 0.55: 10.00, not more.

    The exporter's own exposition of that cluster is what promtool evaluates the panel on; with
    one 1g partition in use, an eighth of that GPU is used; with nothing priced, 0.
    """
    (query,) = (
        dashboard.as_run(t["expr"]) for t in dashboard.panel("Idle cost per hour")["targets"]
    )
    slices = [*h200("mig-node"), pool_slice("plain", [gpu("g", product=H200)], pool="plain-node")]
    used = [new_claim("one", [result("1g-3", "mig-node")])]
    for claims, classes, figure in (
        ([], PRICED, 10.0),
        (used, PRICED, 5.0 + 5.0 * 7 / 8),
        (used, [], 0.0),
    ):
        exposition = text(collect(slices=slices, claims=claims, classes=classes))
        tested = dashboard.evaluate(
            prometheus_release,
            tmp_path,
            {name: f"{value}x3" for name, value in dashboard.series_of(exposition).items()},
            [
                {
                    "expr": query,
                    "eval_time": "2m",
                    "exp_samples": [{"labels": "{}", "value": figure}],
                }
            ],
        )
        assert tested.returncode == 0, tested.stdout + tested.stderr


def test_scrape_duration_leaves_out_handlers_not_asked(
    prometheus_release: Path, tmp_path: Path
) -> None:
    """A handler with no request in the window has no p90 (it was NaN), the others theirs.

    /metrics answered 60 requests a minute, all between 0.1 and 0.25 s: p90 0.235 s.
    """
    (query,) = (
        dashboard.as_run(t["expr"]) for t in dashboard.panel("Scrape duration (p90)")["targets"]
    )
    name = "kube_dra_exporter_http_request_duration_seconds"
    series = {}
    for handler, values in (("metrics", "0+60x10"), ("other", "5x10")):
        labels = f'job="kdraexp",listener="main",handler="{handler}"'
        series[f'{name}_bucket{{{labels},le="0.1"}}'] = "0x10" if handler == "metrics" else values
        series[f'{name}_bucket{{{labels},le="0.25"}}'] = values
        series[f'{name}_bucket{{{labels},le="+Inf"}}'] = values
        series[f"{name}_count{{{labels}}}"] = values
        series[f"{name}_sum{{{labels}}}"] = values
    tested = dashboard.evaluate(
        prometheus_release,
        tmp_path,
        series,
        [
            {
                "expr": f"round(1000 * ({query}))",  # milliseconds: no float noise
                "eval_time": "5m",
                "exp_samples": [{"labels": '{handler="metrics"}', "value": 235}],
            }
        ],
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_taints_count_devices_by_taint_allocated_and_ruled_ones_included(
    prometheus_release: Path, tmp_path: Path
) -> None:
    """The "Tainted devices" stat and the "Device taints" table read the taints, not the states.

    An allocated device with its driver's NoExecute taint counts; a device two rules taint alike
    counts once and is two rows of the table, one per rule; a None taint does not count.
    """
    device = 'driver="d",pool="p",node_name="n",resourceslice_name="s",device_name="{}"'
    series = {}
    for name in ("gpu-0", "gpu-1", "gpu-2", "gpu-3"):
        labels = device.format(name)
        series[
            f'kube_resourceslice_device_info{{{labels},type="gpu",model="H200",uuid="",parent_uuid=""}}'
        ] = 1
    state = {"gpu-0": "allocated", "gpu-1": "tainted", "gpu-2": "available", "gpu-3": "available"}
    for name, value in state.items():
        series[f'kube_resourceslice_device_state{{{device.format(name)},state="{value}"}}'] = 1
    taint = (
        'kube_resourceslice_device_taint{{{},key="{}",value="",effect="{}",devicetaintrule="{}"}}'
    )
    series[taint.format(device.format("gpu-0"), "xid", "NoExecute", "")] = 1
    series[taint.format(device.format("gpu-1"), "maintenance", "NoSchedule", "drain")] = 1
    series[taint.format(device.format("gpu-1"), "maintenance", "NoSchedule", "repair")] = 1
    series[taint.format(device.format("gpu-2"), "fyi", "None", "")] = 1
    job = "kdraexp"
    with_job = {name.replace("{", f'{{job="{job}",', 1): v for name, v in series.items()}
    (stat,) = (
        dashboard.as_run(t["expr"], job) for t in dashboard.panel("Tainted devices")["targets"]
    )
    (table,) = (
        dashboard.as_run(t["expr"], job) for t in dashboard.panel("Device taints")["targets"]
    )
    row = (
        'driver="d",pool="p",device_name="{}",node_name="n",key="{}",effect="{}"'  # "" is no label
    )
    rows = [
        row.format("gpu-0", "xid", "NoExecute"),
        row.format("gpu-1", "maintenance", "NoSchedule") + ',devicetaintrule="drain"',
        row.format("gpu-1", "maintenance", "NoSchedule") + ',devicetaintrule="repair"',
        row.format("gpu-2", "fyi", "None"),
    ]
    tested = dashboard.evaluate(
        prometheus_release,
        tmp_path,
        {name: f"{value}x3" for name, value in with_job.items()},
        [
            {"expr": stat, "eval_time": "1m", "exp_samples": [{"labels": "{}", "value": 2}]},
            {
                "expr": table,
                "eval_time": "1m",
                "exp_samples": [{"labels": f"{{{r}}}", "value": 1} for r in rows],
            },
        ],
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_rows_and_variables() -> None:
    """The rows and variables operators look for."""
    board = dashboard.load()
    assert [p["title"] for p in board["panels"] if p["type"] == "row"] == ROWS
    assert [v["name"] for v in board["templating"]["list"]] == VARIABLES


def test_every_query_reads_known_series_of_the_job() -> None:
    """Every panel has a query; each selects the exporter's job and reads families that exist."""
    board = dashboard.load()
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert all(p.get("targets") for p in panels)
    own = {
        "kube_dra_exporter_list_duration_seconds",
        "kube_dra_exporter_list_errors_total",
        "kube_dra_exporter_list_objects",
        "kube_dra_exporter_invalid_values_total",
        "kube_dra_exporter_cel_errors_total",
        "kube_dra_exporter_http_request_duration_seconds_bucket",
        "kube_dra_exporter_http_request_duration_seconds_count",
        "process_resident_memory_bytes",
    }
    for title, expr in dashboard.queries(board):
        names = set(re.findall(r"\b(kube_[a-z_]+|process_[a-z_]+)\{", expr))
        assert names, title
        for name in names:
            assert name in BY_NAME or name in own, (title, name)
        assert expr.count("{") == expr.count('job="$job"'), title
