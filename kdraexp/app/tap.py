"""``twistd kdraexp``: the command line and the service it makes."""

from __future__ import annotations

import math
import os
import re
import signal
import sys
from collections.abc import Callable
from types import FrameType

from twisted.application.service import IService
from twisted.logger import Logger
from twisted.python import usage

from kdraexp import __version__
from kdraexp.app import logs
from kdraexp.app.service import Settings, build_service
from kdraexp.dra.listing import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_RESOURCES, LIST_ORDER
from kdraexp.dra.quantity import QuantityError, parse_quantity
from kdraexp.families.options import DEFAULT_DEVICE_CAPACITIES, FamilyOptions
from kdraexp.families.selection import SelectionError, select
from kdraexp.kube import kubeconfig
from kdraexp.kube.kubeconfig import SERVICEACCOUNT_DIR, ConfigError
from kdraexp.kube.tls import TLSConfigError
from kdraexp.serve import listen, tlscontext, webconfig
from kdraexp.store import sharding
from kdraexp.store.sharding import Shard
from kdraexp.util.reactor import IKdraReactor, installed

log = Logger()


def _seconds(option: str) -> Callable[[str], float]:
    """A coercer of *option*'s value: seconds, greater than 0."""

    def coerce(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not 0 < number < math.inf:
            raise ValueError(f"--{option}: expected seconds greater than 0, got {value!r}")
        return number

    coerce.coerceDoc = "Seconds, greater than 0."  # type: ignore[attr-defined]
    return coerce


def _page_size(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"--page-size: expected a whole number of at least 1, got {value!r}")
    return number


_page_size.coerceDoc = "A whole number, at least 1."  # type: ignore[attr-defined]


def _bytes(value: str) -> int:
    try:
        number = parse_quantity(value)
    except QuantityError:
        number = 0
    if not 64 * 1024 <= number < 2**63:
        raise ValueError(
            f"--max-response-bytes: expected bytes from 64Ki to below 8Ei, got {value!r}"
        )
    return int(number)


_bytes.coerceDoc = "Bytes, a number or a quantity such as 256Mi."  # type: ignore[attr-defined]


class Options(usage.Options):
    """Options of ``twistd kdraexp``."""

    synopsis = "[--listen ADDRESS] [--timeout SECONDS] [--source SOURCE] [OPTIONS]"
    longdesc = (
        "Serve Prometheus metrics about Kubernetes Dynamic Resource Allocation: "
        "ResourceClaims, ResourceSlices and DeviceClasses of resource.k8s.io/v1."
    )
    optParameters = [
        [
            "listen",
            "l",
            ":8080",
            "Where the DRA metrics are served: :PORT (IPv4 and IPv6), PORT, HOST:PORT "
            "(HOST an IPv4 address, or a name such as localhost: its first IPv4 address, else "
            "IPv6), [IPv6]:PORT or a Twisted endpoint (tcp:8080:interface=127.0.0.1).",
        ],
        [
            "telemetry-listen",
            None,
            ":8081",
            "Where the exporter's own metrics and /healthz are served (the same forms); "
            "empty for nowhere.",
        ],
        ["timeout", "t", 10.0, "Seconds one whole collection may take.", _seconds("timeout")],
        ["page-size", None, 500, "Objects per list page (the limit parameter).", _page_size],
        [
            "max-response-bytes",
            None,
            DEFAULT_MAX_RESPONSE_BYTES,
            "Largest API server response read, inflated (a bigger one fails that list).",
            _bytes,
        ],
        ["source", None, "cluster", "cluster, or file:PATH to read a kubectl YAML/JSON dump."],
        [
            "serviceaccount-dir",
            None,
            SERVICEACCOUNT_DIR,
            "Where the in-cluster ServiceAccount token and ca.crt are.",
        ],
        [
            "resources",
            None,
            ",".join(DEFAULT_RESOURCES),
            f"Resources to list: {', '.join(kind.plural for kind in LIST_ORDER)}.",
        ],
        ["metric-allowlist", None, "", "Comma-separated regexes: write only families matching."],
        ["metric-denylist", None, "", "Comma-separated regexes: write no family matching."],
        ["metric-opt-in-list", None, "", "Comma-separated regexes: opt-in families to write."],
        [
            "device-attributes",
            None,
            "",
            "Device attributes (name or domain/name) added to kube_resourceslice_device_info.",
        ],
        [
            "claim-device-data",
            None,
            "",
            "Keys of status.devices[].data that kube_resourceclaim_status_device_info shows.",
        ],
        [
            "hides-allocated-devices",
            None,
            "",
            "Drivers that take allocated devices out of their slices: not orphaned while their "
            "pool is published.",
        ],
        [
            "metric-labels-allowlist",
            None,
            "",
            "Labels written by kube_<kind>_labels, per resource: "
            "resourceclaims=[team,cost-center],pods=[*] (kube-state-metrics' form).",
        ],
        [
            "metric-annotations-allowlist",
            None,
            "",
            "Annotations written by kube_<kind>_annotations, per resource, in the same form.",
        ],
        [
            "device-capacities",
            None,
            DEFAULT_DEVICE_CAPACITIES,
            "Regex of the capacity names kube_resourceslice_device_capacity reports.",
        ],
        [
            "mode",
            None,
            "list",
            "list: every scrape lists every object; watch: list once, then follow the changes.",
        ],
        [
            "max-staleness",
            None,
            300.0,
            "In watch mode, seconds a failing watch's last state may still be served.",
            _seconds("max-staleness"),
        ],
        ["shard", None, None, "This exporter's shard, 0 to --total-shards minus 1."],
        ["total-shards", None, "1", "Shards the cluster is split over (see the README)."],
        [
            "pod",
            None,
            None,
            "The StatefulSet pod this exporter runs as: its ordinal is the shard.",
        ],
        [
            "cost-share-capacity",
            None,
            "memory",
            "Capacity whose consumed share of a shareable device is the share of its cost.",
        ],
        [
            "auth-token-audiences",
            None,
            "",
            "With --auth-filter: comma-separated audiences a token must be meant for.",
        ],
        [
            "auth-allowed-ttl",
            None,
            300.0,
            "With --auth-filter: seconds an allowing SubjectAccessReview is kept.",
            _seconds("auth-allowed-ttl"),
        ],
        [
            "probe-listen",
            None,
            "",
            "Where /healthz and /readyz alone are served in plain HTTP, for probes that present "
            "no client certificate (the same forms); empty for nowhere.",
        ],
        [
            "tls-config",
            None,
            None,
            "Serve both listeners over TLS as this Prometheus web configuration file says "
            "(exporter-toolkit's format); it and the files it names are read again on change.",
        ],
        ["log-level", None, "info", f"Least level logged: {', '.join(logs.LEVELS)}."],
        ["log-format", None, "text", f"Log line format: {' or '.join(logs.FORMATS)}."],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["expect-pools"] = []

    def opt_expect_pools(self, value: str) -> None:
        """DRIVER=LABEL_SELECTOR: a pool of DRIVER serves each Node it matches; repeatable."""
        self["expect-pools"].append(value)

    optFlags = [
        [
            "auth-filter",
            None,
            "Every route but /healthz, /livez and /readyz asks for a bearer token that a "
            "TokenReview authenticates and a SubjectAccessReview allows.",
        ]
    ]

    def opt_version(self) -> None:
        """Display the exporter's version and exit."""
        print(f"kdraexp {__version__}")
        raise SystemExit(0)

    def parseOptions(self, options: list[str] | None = None) -> None:
        """Parse; a bad value ends the process with status 2 and one line saying what is wrong."""
        try:
            super().parseOptions(options)
        except usage.UsageError as error:
            message = str(error).replace("Parameter type enforcement failed: ", "")
            sys.stderr.write(f"kdraexp: {message} (see kdraexp --help)\n")
            raise SystemExit(2) from None

    def postOptions(self) -> None:
        """Check the values and turn them into :class:`Settings`."""
        self._check_listeners()
        source = self["source"]
        file = None
        if source.startswith("file:") and source[5:]:
            file = source[5:]
        elif source != "cluster":
            raise usage.UsageError(f"--source {source!r}: expected 'cluster' or 'file:PATH'")
        shard = self._shard()
        try:
            selection = select(
                resources=self["resources"],
                allowlist=self["metric-allowlist"],
                denylist=self["metric-denylist"],
                opt_in=self["metric-opt-in-list"],
                options=FamilyOptions.from_flags(self),
                sharded=not shard.whole,
            )
        except SelectionError as error:
            raise usage.UsageError(str(error)) from None
        if self["log-level"] not in logs.LEVELS:
            raise usage.UsageError(
                f"--log-level {self['log-level']!r}: expected one of {', '.join(logs.LEVELS)}"
            )
        if self["log-format"] not in logs.FORMATS:
            raise usage.UsageError(f"--log-format {self['log-format']!r}: expected text or json")
        if self["mode"] not in ("list", "watch"):
            raise usage.UsageError(f"--mode {self['mode']!r}: expected list or watch")
        if self["mode"] == "watch" and file is not None:
            raise usage.UsageError("--mode watch reads a cluster: it cannot follow a --source file")
        audiences = self._protection(file)
        self.settings = Settings(
            listen=self["listen"],
            telemetry_listen=self["telemetry-listen"],
            timeout=self["timeout"],
            page_size=self["page-size"],
            max_response_bytes=self["max-response-bytes"],
            file=file,
            selection=selection,
            shard=shard,
            mode=self["mode"],
            max_staleness=self["max-staleness"],
            log_level=self["log-level"],
            log_format=self["log-format"],
            auth_filter=bool(self["auth-filter"]),
            auth_token_audiences=audiences,
            auth_allowed_ttl=self["auth-allowed-ttl"],
            tls_config=self["tls-config"],
            probe_listen=self["probe-listen"],
        )

    def _check_listeners(self) -> None:
        """Each listener's address, none taking another's port, none TLS twice."""
        if self["tls-config"] is not None:
            for option in ("listen", "telemetry-listen"):
                if self[option].startswith("ssl:"):
                    raise usage.UsageError(
                        f"--{option} {self[option]!r} is TLS already: with --tls-config, "
                        "give a plain address (--tls-config serves it over TLS)"
                    )
        listeners = ("listen", "telemetry-listen", "probe-listen")
        for option in listeners:
            if option != "listen" and not self[option]:
                continue
            try:
                listen.check(self[option])
            except listen.ListenError as error:
                raise usage.UsageError(f"--{option} {error}") from None
        for index, one in enumerate(listeners):
            for other in listeners[index + 1 :]:
                if self[one] and self[other] and listen.overlap(self[one], self[other]):
                    raise usage.UsageError(
                        f"--{one} {self[one]!r} and --{other} {self[other]!r} take the same "
                        "port: give them different ones"
                    )

    def _protection(self, file: str | None) -> tuple[str, ...]:
        """Check --auth-filter and --tls-config; the token audiences."""
        if self["auth-filter"] and file is not None:
            raise usage.UsageError(
                "--auth-filter asks the API server to review tokens: it needs --source cluster"
            )
        audiences = tuple(a.strip() for a in self["auth-token-audiences"].split(",") if a.strip())
        if audiences and not self["auth-filter"]:
            raise usage.UsageError("--auth-token-audiences is used by --auth-filter alone")
        if self["tls-config"] is not None:
            try:
                tlscontext.context(webconfig.load(self["tls-config"]))
            except webconfig.WebConfigError as error:
                raise usage.UsageError(f"--tls-config {error}") from None
        return audiences

    def _shard(self) -> Shard:
        """--shard and --total-shards, or the shard from --pod's ordinal."""
        total = _whole(self["total-shards"])
        if total is None or total < 1:
            raise usage.UsageError(
                f"--total-shards: expected a whole number of at least 1, "
                f"got {_shown(self['total-shards'])}"
            )
        if self["shard"] is not None and self["pod"] is not None:
            raise usage.UsageError("--shard and --pod are mutually exclusive")
        pod = self["pod"]
        if pod is not None and len(pod) > 253:
            raise usage.UsageError(f"--pod: a pod name has at most 253 characters, got {len(pod)}")
        try:
            if pod is not None:
                index = sharding.ordinal(pod)
            else:
                found = _whole(self["shard"] or "0")
                if found is None:
                    raise ValueError(
                        f"--shard: expected a whole number, got {_shown(self['shard'])}"
                    )
                index = found
            return Shard(index, total)
        except ValueError as error:
            raise usage.UsageError(str(error)) from None


_WHOLE = re.compile(r"[0-9]{1,9}", re.ASCII)


def _whole(value: str) -> int | None:
    """A whole number written in ASCII digits (int() also takes other scripts, "1_0", " 1 ")."""
    return int(value) if _WHOLE.fullmatch(value) else None


def _shown(value: str) -> str:
    """A value for an error message: quoted, and clipped when long."""
    return repr(value if len(value) <= 40 else value[:40] + "...")


def _stop_on_sigterm(reactor: IKdraReactor) -> None:
    """Make SIGTERM, the orderly way a pod is stopped, stop the exporter with status 0.

    The reactor's own handler (installed as it starts, before this runs) records the signal,
    and twistd then ends the process by raising it again: status 143.  This handler stops the
    reactor as that one does, and records nothing.
    """

    def stop(number: int, frame: FrameType | None) -> None:
        log.info("Received SIGTERM, shutting down.")
        reactor.callFromThread(reactor.stop)

    signal.signal(signal.SIGTERM, stop)


def makeService(options: Options) -> IService:
    """Make the exporter's service; exit with status 1 if there is no usable cluster config."""
    reactor = installed()
    reactor.callWhenRunning(_stop_on_sigterm, reactor)
    settings = options.settings
    cluster = None
    try:
        if settings.file is None:
            cluster = kubeconfig.load(os.environ, serviceaccount_dir=options["serviceaccount-dir"])
        return build_service(settings, cluster, reactor)
    except (ConfigError, TLSConfigError) as error:
        sys.stderr.write(f"kdraexp: {error}\n")
        raise SystemExit(1) from None
    except webconfig.WebConfigError as error:  # the file changed since the options were read
        sys.stderr.write(f"kdraexp: --tls-config {error}\n")
        raise SystemExit(2) from None
