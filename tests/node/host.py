"""What a node changes on this host, recorded before and undone after, even after a crashed run.

A kubelet, containerd, kube-proxy and the CNI bridge plugin change the host itself: kernel
settings (the kubelet sets ``vm.overcommit_memory``, ``kernel.panic`` and more on every start,
the bridge plugin turns on forwarding), iptables chains, a bridge, mounts (container root
filesystems, network namespaces, pod volumes), cgroups, and processes that outlive their parent
(containerd's shims, the containers). Everything the node writes is under :data:`ROOT`, its
cgroups under :data:`CGROUP`, its bridge is :data:`BRIDGE`; the settings it finds are recorded in
:data:`RECORD` before anything changes, so that the next run undoes what a killed one left.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import IO

ROOT = Path("/var/tmp/kdraexp-node")
"""Where the node writes: containerd's root and state, the kubelet's, the CNI's, the logs."""
RECORD = ROOT / "host.json"
"""The host's settings as found, kept until they are restored."""
PIDS = ROOT / "pids"
"""A file per process the node tier starts: its pid and start time."""
LOCK = Path("/var/tmp/kdraexp-node.lock")
"""Held while a node runs: one node a host."""
BRIDGE = "kdraexp0"
GATEWAY = "10.244.0.1"
"""The bridge's address: the pods' gateway, and where the API server listens for them."""
SUBNET = "10.244.0.0/24"
CGROUP = "kdraexp-node"
"""The kubelet's cgroup root, in every hierarchy: every container's cgroup is below it."""
CHAIN_PREFIXES = ("KUBE-", "CNI-")
"""The iptables chains the kubelet, kube-proxy and the CNI plugins make."""
CONTAINER_LOGS = Path("/var/log/containers")
"""Where the kubelet links container logs, whatever its configuration says."""
OUTSIDE = (Path("/run/containerd"), Path("/var/lib/cni"), CONTAINER_LOGS)
"""Where the node writes outside :data:`ROOT` whatever it is told: containerd its shims'
sockets and runc's state, the CNI plugins their results, the kubelet its links to the logs.
Removed after, when the node made them."""
SYSCTLS = (
    # The kubelet's, on every start (setupKernelTunables).
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    # The CNI bridge plugin's, for a gateway.
    "net/ipv4/ip_forward",
    # kube-proxy's, for NodePorts on loopback (turned off in its configuration).
    "net/ipv4/conf/all/route_localnet",
)
TIMEOUT = 30
REMOVAL_TIMEOUT = 600


def run(*args: str, check: bool = True, timeout: float = TIMEOUT) -> str:
    """Run a command; its standard output."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done.stdout


@contextlib.contextmanager
def exclusive(limit: float = 1800.0) -> Iterator[None]:
    """Hold the host's node lock: another run's node is waited for, at most *limit* seconds."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as lock:
        deadline = time.monotonic() + limit
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another node holds {LOCK}") from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def sysctl(key: str) -> str:
    return (Path("/proc/sys") / key).read_text().strip()


def chains() -> dict[str, list[str]]:
    """The node's kind of iptables chains present now, by ``tool:table``."""
    found: dict[str, list[str]] = {}
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle", "raw"):
            listing = run(tool, "-w", "5", "-t", table, "-S", check=False)
            names = [
                line.split()[1]
                for line in listing.splitlines()
                if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES)
            ]
            found[f"{tool}:{table}"] = names
    return found


def tables() -> list[str]:
    """The nftables tables present now (iptables-nft makes one a table it is asked to use)."""
    listing = run("nft", "--json", "list", "tables")
    return sorted(
        f"{item['table']['family']} {item['table']['name']}"
        for item in json.loads(listing)["nftables"]
        if "table" in item
    )


def prepare() -> None:
    """Undo what a killed run left, then record the host as it is now and make :data:`ROOT`."""
    if RECORD.exists():
        restore()
    ROOT.mkdir(parents=True, exist_ok=True)
    for stale in ROOT.iterdir():
        _remove_tree(stale)
    PIDS.mkdir()
    record = {
        "sysctls": {key: sysctl(key) for key in SYSCTLS if (Path("/proc/sys") / key).exists()},
        "chains": chains(),
        "tables": tables(),
        "absent": [str(path) for path in OUTSIDE if not path.exists()],
    }
    RECORD.write_text(json.dumps(record, indent=1))
    _make_cgroups()


def restore_sysctls() -> None:
    """Set back the kernel settings recorded (the kubelet changes them as it starts)."""
    record = json.loads(RECORD.read_text())
    for key, value in record["sysctls"].items():
        if sysctl(key) != value:
            (Path("/proc/sys") / key).write_text(value)


def restore() -> None:
    """Stop what the node started and undo what it changed; forget the record.

    In an order that lets each step succeed: processes (the recorded ones, containerd's shims,
    whatever runs in the node's cgroups), the kernel settings, mounts, the bridge, iptables
    chains and nftables tables, cgroups, what the kubelet, containerd and the CNI plugins write
    outside :data:`ROOT`, and what the node wrote but its logs. A step that fails does not stop
    the others; the record then stays, for the next run to try again.
    """
    record = json.loads(RECORD.read_text())
    steps: list[Callable[[], None]] = [
        _kill_recorded,
        _kill_cgroups,
        restore_sysctls,
        partial(_unmount_below, ROOT),
        _remove_bridge,
        partial(_remove_chains, record["chains"]),
        partial(_remove_tables, record["tables"]),
        _remove_cgroups,
        partial(_remove_outside, record["absent"]),
        _remove_written,
    ]
    failed = []
    for step in steps:
        try:
            step()
        except Exception as error:  # the others must still run
            failed.append(f"{getattr(step, '__name__', step)}: {error}")
    if failed:
        raise RuntimeError("the host is not restored: " + "; ".join(failed))
    RECORD.unlink()


def _remove_bridge() -> None:
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        run("ip", "link", "delete", BRIDGE)


def _remove_written() -> None:
    """What the node wrote under :data:`ROOT`, but its logs: a failure's are read there."""
    for entry in ROOT.iterdir():
        if entry.name not in ("logs", RECORD.name):
            _remove_tree(entry)


def spawn(
    name: str,
    args: list[str],
    log: IO[bytes],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a process of the node, recorded under *name* so that a later run can stop it."""
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    (PIDS / name).write_text(f"{process.pid} {_started(process.pid)}")
    return process


def stop(process: subprocess.Popen[bytes], limit: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after *limit* seconds; reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=limit)


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot: with the pid, who it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill_recorded() -> None:
    """Kill the processes the node tier started that still run, and containerd's shims."""
    if PIDS.is_dir():
        for entry in PIDS.iterdir():
            pid, started = entry.read_text().split()
            if _started(int(pid)) == started:
                _kill(int(pid))
    # containerd starts a shim for each pod, in a session of its own: found by its binary.
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                exe = os.readlink(proc / "exe")
                if exe.endswith("/containerd-shim-runc-v2") and "/node-" in exe:
                    _kill(int(proc.name))


def _cgroup_dirs() -> list[Path]:
    """The node's cgroups in every v1 hierarchy and in the unified one, deepest first."""
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        top = hierarchy / CGROUP
        if top.is_dir():
            found += [top, *[d for d in top.rglob("*") if d.is_dir()]]
    return sorted(found, key=lambda d: len(d.parts), reverse=True)


def _kill_cgroups() -> None:
    """Kill every process in the node's cgroups (the containers), until none is left."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        pids = set()
        for directory in _cgroup_dirs():
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in (directory / "cgroup.procs").read_text().split()}
        if not pids:
            return
        for pid in pids:
            _kill(pid)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(pids)} survive in the node's cgroups")
        time.sleep(0.2)


def _make_cgroups() -> None:
    """The kubelet's cgroup root in every hierarchy: it must exist before the kubelet starts."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if (hierarchy / "cgroup.procs").exists():
            top = hierarchy / CGROUP
            top.mkdir(exist_ok=True)
            for inherited in ("cpuset.cpus", "cpuset.mems"):  # empty in a new cpuset cgroup
                if (top / inherited).exists() and not (top / inherited).read_text().strip():
                    (top / inherited).write_text((hierarchy / inherited).read_text())


def _remove_cgroups() -> None:
    for directory in _cgroup_dirs():
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))  # \040 for a space
    return points


def _unmount_below(directory: Path) -> None:
    """Detach every mount at or below *directory*, deepest first."""
    prefix = str(directory)
    for _ in range(5):  # a mount may be stacked on another at the same point
        below = [p for p in _mount_points() if p == prefix or p.startswith(prefix + "/")]
        if not below:
            return
        for point in sorted(set(below), key=len, reverse=True):
            run("umount", "--lazy", point, check=False)
    raise RuntimeError(f"mounts below {directory} remain: {below}")


def _remove_tree(path: Path) -> None:
    _unmount_below(path)
    # containerd's snapshots hold the images unpacked: tens of thousands of files.
    run("rm", "-rf", "--one-file-system", str(path), timeout=REMOVAL_TIMEOUT)


def _remove_chains(before: dict[str, list[str]]) -> None:
    """Remove the node's iptables chains that were not there before, and the jumps to them."""
    for key, names in chains().items():
        tool, table = key.split(":")
        ours = [name for name in names if name not in before.get(key, [])]
        if not ours:
            continue
        for line in run(tool, "-w", "5", "-t", table, "-S").splitlines():
            rule = shlex.split(line)
            if rule[:1] == ["-A"] and rule[1] not in ours and _jumps_to(rule, ours):
                run(tool, "-w", "5", "-t", table, "-D", *rule[1:])
        for name in ours:
            run(tool, "-w", "5", "-t", table, "-F", name)
        for name in ours:
            run(tool, "-w", "5", "-t", table, "-X", name)


def _jumps_to(rule: list[str], chains: list[str]) -> bool:
    return any(flag in ("-j", "-g") and target in chains for flag, target in pairwise(rule))


def _remove_tables(before: list[str]) -> None:
    """Remove the nftables tables made since, once empty of rules (the chains are gone)."""
    ruleset = json.loads(run("nft", "--json", "list", "ruleset"))["nftables"]
    holding = {f"{i['rule']['family']} {i['rule']['table']}" for i in ruleset if "rule" in i}
    for table in tables():
        if table not in before and table not in holding:
            run("nft", "delete", "table", *table.split())


def _remove_outside(absent: list[str]) -> None:
    """Remove what the node wrote outside :data:`ROOT`.

    All of a directory it made; its own files in one it found.
    """
    for path in OUTSIDE:
        if str(path) in absent:
            _remove_tree(path)
    if CONTAINER_LOGS.is_dir():
        for link in CONTAINER_LOGS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(ROOT)):
                link.unlink()
    for cached in Path("/var/lib/cni/results").glob("kdraexp-*"):
        cached.unlink()
