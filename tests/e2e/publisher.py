"""publish-slices as a child process: slices published by the controller DRA drivers use.

The binary (tools/control-plane/publish-slices) is built with the simulated cluster's. A test
gives it a description (a driver and, per Node, its pools), republishes a new one (the file
rewritten, then SIGHUP) and waits until each pool's sync has seen it; with ``hold=True`` every
write of the controller waits until the test releases it, so the cluster can be looked at
between two writes of a rollout.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from tests import tools
from tests.e2e.controlplane import Kube
from tests.e2e.harness import write_kubeconfig

SYNCED = re.compile(r"publish-slices: synced node=(\S+) pool=(\S+) version=(\d+)$")
PUBLISHED = re.compile(r"publish-slices: published version=(\d+)$")
HOLDING = re.compile(r"publish-slices: holding (\S+) (\S+)$")
LIMIT = 60.0
"""Seconds for a sync or a write to show: the controller takes milliseconds."""


def pools(description: dict[str, Any]) -> set[tuple[str, str]]:
    """The (node, pool) pairs a description publishes."""
    return {
        (node, pool)
        for node, resources in description["nodes"].items()
        for pool in resources.get("pools", {})
    }


class Publisher:
    """publish-slices publishing *description* as the identity of *kube*."""

    def __init__(
        self, directory: Path, kube: Kube, description: dict[str, Any], hold: bool = False
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._file = directory / "description.yaml"
        self._file.write_text(yaml.safe_dump(description))
        self._described = pools(description)
        # The pools the current version's sync goes through: a removed pool is synced too.
        self._pools = self._described
        self._lines: list[str] = []
        self._held = 0
        self._changed = threading.Condition()
        config = write_kubeconfig(directory / "kubeconfig", kube, kube.token)
        args = [str(tools.scheduler_plane() / "publish-slices"), f"--kubeconfig={config}"]
        args += [f"--description={self._file}", *(["--hold-writes"] if hold else [])]
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.version = 1

    def _read(self) -> None:
        assert self.process.stderr is not None
        with self.process.stderr, (self.directory / "publish-slices.log").open("w") as log:
            for line in self.process.stderr:
                log.write(line)
                log.flush()
                with self._changed:
                    self._lines.append(line.rstrip("\n"))
                    self._changed.notify_all()

    def log(self) -> str:
        with self._changed:
            return "\n".join(self._lines)

    def _synced(self, version: int, wanted: set[tuple[str, str]]) -> bool:
        done = set()
        for line in self._lines:
            found = SYNCED.match(line)
            if found and int(found[3]) >= version:
                done.add((found[1], found[2]))
        return wanted <= done

    def _wait(self, ready: Any, what: str) -> Any:
        deadline = time.monotonic() + LIMIT
        with self._changed:
            while not (answer := ready()):
                assert self.process.poll() is None, f"publish-slices exited:\n{self.log()}"
                left = deadline - time.monotonic()
                assert left > 0, f"{what} not within {LIMIT:g}s:\n{self.log()}"
                self._changed.wait(min(left, 1.0))
            return answer

    def wait_synced(self) -> None:
        """Wait until every pool of the current description has been synced."""
        self._wait(lambda: self._synced(self.version, self._pools), f"version {self.version}")

    def republish(self, description: dict[str, Any]) -> None:
        """Publish *description* instead (pools it leaves out are removed)."""
        written = self._file.with_suffix(".new")
        written.write_text(yaml.safe_dump(description))
        written.replace(self._file)
        self._pools = self._described | pools(description)
        self._described = pools(description)
        self.process.send_signal(signal.SIGHUP)
        self.version += 1
        self._wait(self._published, f"version {self.version} published")

    def _published(self) -> bool:
        return any(
            (found := PUBLISHED.match(line)) and int(found[1]) >= self.version
            for line in self._lines
        )

    def next_write(self) -> tuple[str, str] | None:
        """The next write the controller holds, (method, path); None once the sync is done.

        Only with ``hold=True``; the write waits until :meth:`release`.
        """

        def ready() -> tuple[str, str] | str | None:
            held = [found for line in self._lines if (found := HOLDING.match(line))]
            if len(held) > self._held:
                return held[self._held][1], held[self._held][2]
            return "synced" if self._synced(self.version, self._pools) else None

        answer = self._wait(ready, "a write or the sync")
        if answer == "synced":
            return None
        self._held += 1
        method, path = answer
        return str(method), str(path)

    def release(self) -> None:
        """Let the held write through."""
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def stop(self) -> int:
        """SIGTERM; the exit status (0: stopped cleanly). The slices stay, as a driver's do."""
        self.process.terminate()
        code = self.process.wait(timeout=30)
        assert self.process.stdin is not None
        self.process.stdin.close()
        self._reader.join(timeout=30)
        return code
