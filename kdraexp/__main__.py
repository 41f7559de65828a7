"""``python -m kdraexp [OPTIONS]``: the exporter in the foreground, as the container runs it.

That is ``twistd --nodaemon --pidfile= --logger=kdraexp.logs.json_observer kdraexp [OPTIONS]``:
no pid file and no log file (nothing is written, so a read-only root filesystem works), and one
JSON object a line on standard output.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run twistd with the container's settings and the exporter's *OPTIONS*."""
    from twisted.scripts.twistd import run

    sys.argv = [
        "twistd",
        "--nodaemon",
        "--pidfile=",
        "--logger=kdraexp.logs.json_observer",
        "kdraexp",
        *sys.argv[1:],
    ]
    run()


if __name__ == "__main__":
    main()
