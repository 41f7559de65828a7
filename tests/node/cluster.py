"""A cluster of one real node: the control plane, containerd 2, a kubelet and kube-proxy.

The control plane is the simulated cluster's (tests/e2e/simulated.py: etcd, kube-apiserver,
kube-scheduler and kube-controller-manager with every controller), its API server listening
on the pods' bridge with ServiceAccount admission on, so that pods reach it as in any cluster:
at the ``kubernetes`` Service's address through kube-proxy, with a projected token. The node's
binaries come from scripts/build-node.sh, the images (the exporter's, built from the
Dockerfile, and the sandbox's pause) from scripts/build-node-image.sh, imported into containerd
under the names the chart and the kubelet ask for. The host's changes are tests/node/host.py's.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import io
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import yaml

from tests import tools
from tests.e2e.controlplane import Kube
from tests.e2e.harness import wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, start_simulated
from tests.helm import CHART
from tests.node import host
from tests.processes import free_port

NODE = "kdraexp-node"
"""The Node's name."""
SERVICES = "10.0.0.0/24"
"""The Services' addresses (kube-apiserver's ``--service-cluster-ip-range``)."""
PAUSE = "registry.k8s.io/pause:3.10.1"
"""The sandbox image containerd is told to use, and the image of the tests' idle pods."""
READY_TIMEOUT = 120.0
BODY_LIMIT = 256 * 1024 * 1024
"""The most read of one answer: a 64,000-device exposition is about 160 MiB."""


def http_get(url: str, timeout: float = 30.0, gzipped: bool = False) -> tuple[int, bytes]:
    """GET *url*, as Prometheus asks if *gzipped*: (status, body inflated), bounded in size."""
    headers = {"Accept-Encoding": "gzip"} if gzipped else {}
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            code, body, encoding = answer.status, answer.read(BODY_LIMIT + 1), answer.headers
    except urllib.error.HTTPError as error:
        code, body, encoding = error.code, error.read(BODY_LIMIT + 1), error.headers
    assert len(body) <= BODY_LIMIT, f"{url} answered more than {BODY_LIMIT} bytes"
    if encoding.get("Content-Encoding") == "gzip":
        with gzip.GzipFile(fileobj=io.BytesIO(body)) as inflating:
            body = inflating.read(BODY_LIMIT + 1)
        assert len(body) <= BODY_LIMIT, f"{url} inflated to more than {BODY_LIMIT} bytes"
    return code, body


@attrs.define
class Node:
    """The running cluster of one node, and what the tests ask of it."""

    simulated: Simulated
    binaries: Path
    kubeconfig: Path
    """The admin's kubeconfig, for helm and the node's components."""
    processes: dict[str, subprocess.Popen[bytes]] = attrs.field(factory=dict)

    @property
    def kube(self) -> Kube:
        return self.simulated.kube

    def helm(self, *args: str, timeout: float = 180.0) -> str:
        """Run helm against the cluster as the admin; its output."""
        done = subprocess.run(
            [tools.helm(), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr.strip()[-2000:]}"
        return done.stdout

    def install(self, release: str, namespace: str, *args: str) -> None:
        """The chart installed as *release* in *namespace* (made if missing), its pods Ready.

        *args* are helm's (values).  helm waits three minutes and says what it waited for.
        """
        self.helm(
            "install",
            release,
            str(CHART),
            "--namespace",
            namespace,
            "--create-namespace",
            *args,
            "--wait",
            "--timeout",
            "180s",
            timeout=240.0,
        )

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return found

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        found: list[dict[str, Any]] = self.kube.get(f"/api/v1/namespaces/{namespace}/pods{query}")[
            "items"
        ]
        return found

    def ready_pod(self, namespace: str, selector: str, limit: float = 120.0) -> dict[str, Any]:
        """The one pod of *selector* not being deleted, once the kubelet says it is Ready."""

        def ready() -> dict[str, Any] | None:
            live = [
                p
                for p in self.pods(namespace, selector)
                if not p["metadata"].get("deletionTimestamp")
            ]
            if len(live) != 1:
                return None
            conditions = {c["type"]: c["status"] for c in live[0]["status"].get("conditions", [])}
            return live[0] if conditions.get("Ready") == "True" else None

        return wait_until(ready, limit, f"a Ready pod of {selector} in {namespace}")

    def container_cgroup(self, pod: dict[str, Any], hierarchy: str = "memory") -> Path:
        """The cgroup the kubelet made for the pod's first container, in *hierarchy*.

        A hierarchy of cgroup v1; on v2, the one hierarchy.
        """
        uid = pod["metadata"]["uid"]
        container = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        top = Path("/sys/fs/cgroup") / hierarchy
        if not top.is_dir():
            top = Path("/sys/fs/cgroup")
        found = [
            d
            for d in (top / host.CGROUP).rglob(container)
            if d.is_dir() and d.parent.name == f"pod{uid}"
        ]
        assert len(found) == 1, f"the cgroup of {container}: {found}"
        return found[0]

    def container_pids(self, pod: dict[str, Any]) -> list[int]:
        """The host pids of the processes in the pod's first container."""
        procs = self.container_cgroup(pod, "pids") / "cgroup.procs"
        return sorted(int(pid) for pid in procs.read_text().split())

    def text(self, path: str, limit: int = 4 * 1024 * 1024) -> str:
        """GET *path* of the API server as text (a pod's log, say), at most *limit* bytes."""
        request = urllib.request.Request(
            self.kube.server + path, headers={"Authorization": f"Bearer {self.kube.token}"}
        )
        try:
            with urllib.request.urlopen(request, context=self._tls(), timeout=30) as answer:
                body: bytes = answer.read(limit + 1)
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{path}: {error.code} {error.read(4096)!r}") from None
        assert len(body) <= limit, f"{path}: more than {limit} bytes"
        return body.decode()

    def watch_pod(self, namespace: str, name: str, limit: float) -> Iterator[dict[str, Any]]:
        """The watch events of one pod from its current version on, *limit* seconds at most.

        The watch is open once the generator has yielded its first, empty, event.
        """
        version = self.pod(namespace, name)["metadata"]["resourceVersion"]
        query = urllib.parse.urlencode(
            {
                "watch": "true",
                "fieldSelector": f"metadata.name={name}",
                "resourceVersion": version,
                "timeoutSeconds": str(int(limit)),
            }
        )
        request = urllib.request.Request(
            f"{self.kube.server}/api/v1/namespaces/{namespace}/pods?{query}",
            headers={"Authorization": f"Bearer {self.kube.token}"},
        )
        deadline = time.monotonic() + limit
        with urllib.request.urlopen(request, context=self._tls(), timeout=limit) as answer:
            yield {}  # open: what happens to the pod from now on is seen
            while time.monotonic() < deadline:
                line = answer.readline(4 * 1024 * 1024)
                if not line:
                    return
                event: dict[str, Any] = json.loads(line)
                yield event

    def kubelet_metrics(self, path: str = "/metrics/probes") -> str:
        """The kubelet's own metrics at *path*, asked as the API server asks it (anonymous)."""
        node = self.kube.get(f"/api/v1/nodes/{NODE}")
        port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet's own self-signed certificate
        url = f"https://{host.GATEWAY}:{port}{path}"
        with urllib.request.urlopen(url, context=context, timeout=30) as answer:
            return str(answer.read(BODY_LIMIT).decode())

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.kube.ca_pem.decode())

    def log(self, name: str) -> str:
        """The tail of a component's log (for a failure's message)."""
        path = host.ROOT / "logs" / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        """Stop kube-proxy, the kubelet, containerd and the control plane.

        The pods are not drained one by one: what they leave (containers, sandboxes, mounts,
        network namespaces) is :func:`~tests.node.host.restore`'s, as after a killed run.
        """
        for name in ("kube-proxy", "kubelet", "containerd"):
            if name in self.processes:
                host.stop(self.processes[name])
        host.run(str(self.binaries / "kube-proxy"), "--cleanup", check=False)
        self.simulated.stop()


@attrs.frozen
class MemoryCgroup:
    """What a container's memory cgroup says (v1's files, or v2's)."""

    path: Path

    def _read(self, *names: str) -> str:
        for name in names:
            if (self.path / name).exists():
                return (self.path / name).read_text()
        raise AssertionError(f"none of {names} in {self.path}")

    def limit(self) -> int:
        return int(self._read("memory.limit_in_bytes", "memory.max"))

    def peak(self) -> int:
        """The most memory charged to it at once."""
        return int(self._read("memory.max_usage_in_bytes", "memory.peak"))

    def oom_kills(self) -> int:
        """Processes the kernel killed in it for memory."""
        for line in self._read("memory.oom_control", "memory.events").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        raise AssertionError(f"no oom_kill count in {self.path}")


def memory_cgroup(node: Node, pod: dict[str, Any]) -> MemoryCgroup:
    """The memory cgroup of the pod's first container."""
    return MemoryCgroup(node.container_cgroup(pod, "memory"))


def _containerd_config(directory: Path) -> str:
    """containerd 2's configuration: everything under *directory*.

    CDI specs where the drivers write them, runc, the node's bridge; the sandbox's
    oom_score_adj not below containerd's own (this host refuses lowering it).
    """
    cri_runtime = '[plugins."io.containerd.cri.v1.runtime"]'
    return f"""version = 3
root = "{directory}/root"
state = "{directory}/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{directory}/containerd.sock"

[plugins."io.containerd.internal.v1.opt"]
  path = "{directory}/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE}"

{cri_runtime}
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ["{host.ROOT}/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{host.ROOT}/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def _network() -> dict[str, Any]:
    """The pods' network: the host's bridge, its address their gateway, no masquerading."""
    return {
        "cniVersion": "1.0.0",
        "name": "kdraexp-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": host.BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": host.SUBNET, "gateway": host.GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(host.ROOT / "cni" / "ipam"),
                },
            }
        ],
    }


def _kubelet_config(socket: Path, port: int, healthz: int) -> dict[str, Any]:
    """The kubelet's: cgroup v1 and cgroupfs as this host has them, its own cgroup root.

    Anonymous and allowed (the API server reaches it for logs), nothing evicted or collected.
    """
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": host.GATEWAY,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{host.CGROUP}",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket}",
        "podLogsDir": str(host.ROOT / "pod-logs"),
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
    }


def _proxy_config(kubeconfig: Path, healthz: int, metrics: int) -> dict[str, Any]:
    """kube-proxy's: iptables, no NodePort on loopback, the host's conntrack settings kept."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE,
        "clusterCIDR": host.SUBNET,
        "healthzBindAddress": f"127.0.0.1:{healthz}",
        "metricsBindAddress": f"127.0.0.1:{metrics}",
        "iptables": {"localhostNodePorts": False},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def start_node(binaries: Path, images: Path) -> Node:
    """Start the cluster and its node; wait until the Node is Ready and kube-proxy serves.

    containerd starts and takes the images while the control plane starts. The host must have
    been :func:`~tests.node.host.prepare`-d; :meth:`Node.stop` then
    :func:`~tests.node.host.restore` undo it.
    """
    (host.ROOT / "logs").mkdir(parents=True, exist_ok=True)
    host.run("ip", "link", "add", host.BRIDGE, "type", "bridge")
    host.run("ip", "address", "add", f"{host.GATEWAY}/24", "dev", host.BRIDGE)
    host.run("ip", "link", "set", host.BRIDGE, "up")
    # Services' addresses lead to the bridge, as in a cluster, where nothing routes them: what
    # kube-proxy has no rule for finds nobody there instead of leaving by the default route.
    host.run("ip", "route", "add", SERVICES, "dev", host.BRIDGE)
    with concurrent.futures.ThreadPoolExecutor(1) as beside:
        runtime = beside.submit(_start_runtime, binaries, images)
        plane_dir = host.ROOT / "control-plane"
        plane_dir.mkdir()
        simulated = start_simulated(
            plane_dir,
            # The node's name resolves nowhere: its address, as kubeadm's clusters say.
            ("--kubelet-preferred-address-types=InternalIP,Hostname",),
            pods_reach=host.GATEWAY,
            controllers="*",
        )
        kube = simulated.kube
        kubeconfig = write_kubeconfig(host.ROOT / "admin.kubeconfig", kube, kube.token)
        node = Node(simulated, binaries, kubeconfig)
        try:
            node.processes["containerd"] = runtime.result()
            proxy_healthz = _start_proxy(node)
            _start_kubelet(node)
            _wait_proxy(node, proxy_healthz)
        except BaseException:
            node.stop()
            raise
    return node


def _start(node: Node, name: str, args: list[str]) -> None:
    with (host.ROOT / "logs" / f"{name}.log").open("wb") as log:
        node.processes[name] = host.spawn(name, args, log)


def _alive(node: Node, name: str) -> None:
    process = node.processes[name]
    assert process.poll() is None, f"{name} exited with {process.returncode}:\n{node.log(name)}"


def _start_runtime(binaries: Path, images: Path) -> subprocess.Popen[bytes]:
    """Start containerd; import the images once it serves."""
    directory = host.ROOT / "containerd"
    directory.mkdir()
    (host.ROOT / "cdi").mkdir()
    (host.ROOT / "cni" / "net.d").mkdir(parents=True)
    (host.ROOT / "cni" / "net.d" / "10-kdraexp.conflist").write_text(json.dumps(_network()))
    config = directory / "config.toml"
    config.write_text(_containerd_config(directory))
    path = f"{binaries}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    with (host.ROOT / "logs" / "containerd.log").open("wb") as log:
        process = host.spawn(
            "containerd",
            [str(binaries / "containerd"), "--config", str(config)],
            log,
            env={"PATH": path},
        )
    socket = directory / "containerd.sock"

    def serving() -> bool:
        assert process.poll() is None, f"containerd exited with {process.returncode}"
        return socket.exists() and _ctr(binaries, "version", check=False).returncode == 0

    wait_until(serving, 60, "containerd serving")
    for archive in ("pause.tar", "kdraexp.tar"):
        _ctr(binaries, "images", "import", "--local", str(images / archive))
    return process


def _ctr(binaries: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    socket = host.ROOT / "containerd" / "containerd.sock"
    done = subprocess.run(
        [str(binaries / "ctr"), "--address", str(socket), "--namespace", "k8s.io", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"ctr {' '.join(args)}: {done.stderr[-2000:]}"
    return done


def _start_kubelet(node: Node) -> None:
    directory = host.ROOT / "kubelet"
    directory.mkdir()
    config = directory / "config.yaml"
    socket = host.ROOT / "containerd" / "containerd.sock"
    config.write_text(yaml.safe_dump(_kubelet_config(socket, free_port(), free_port())))
    _start(
        node,
        "kubelet",
        [
            str(node.binaries / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={node.kubeconfig}",
            f"--root-dir={directory}",
            f"--hostname-override={NODE}",
            f"--node-ip={host.GATEWAY}",
            "--v=2",
        ],
    )

    def ready() -> bool:
        _alive(node, "kubelet")
        status = node.kube.find(f"/api/v1/nodes/{NODE}")
        if status is None:
            return False
        conditions = {c["type"]: c["status"] for c in status["status"].get("conditions", [])}
        taints = status["spec"].get("taints") or []
        return conditions.get("Ready") == "True" and not taints

    wait_until(ready, READY_TIMEOUT, "the Node Ready and untainted")
    # The kubelet has set vm.overcommit_memory, kernel.panic and the rest as it started: this
    # host is shared, they go back at once.
    host.restore_sysctls()


def _start_proxy(node: Node) -> int:
    """Start kube-proxy; its health port."""
    directory = host.ROOT / "kube-proxy"
    directory.mkdir()
    config = directory / "config.yaml"
    healthz = free_port()
    config.write_text(yaml.safe_dump(_proxy_config(node.kubeconfig, healthz, free_port())))
    _start(node, "kube-proxy", [str(node.binaries / "kube-proxy"), f"--config={config}", "--v=2"])
    return healthz


def _wait_proxy(node: Node, healthz: int) -> None:
    """Wait until kube-proxy has written the Services' rules once (it is healthy then)."""

    def serving() -> bool:
        _alive(node, "kube-proxy")
        try:
            code, _ = http_get(f"http://127.0.0.1:{healthz}/healthz", timeout=5)
        except OSError:
            return False
        return code == 200

    wait_until(serving, 60, "kube-proxy healthy")
