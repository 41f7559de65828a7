"""The ``kdraexp`` command (and ``python -m kdraexp``): the exporter in the foreground.

The same service as ``twistd kdraexp``, without twistd's options: no pid file, no log file (a
read-only root filesystem is fine), log lines on standard output in the format and at the level
asked for.  SIGTERM and SIGINT stop it with status 0.
"""

from __future__ import annotations

import sys

from kdraexp import __version__


def main(argv: list[str] | None = None) -> None:
    """Parse *argv* (the command line), start the exporter and run until stopped.

    ``kdraexp --version`` alone imports nothing else: it answers in the time Python starts.
    """
    args = sys.argv[1:] if argv is None else argv
    if args == ["--version"]:
        print(f"kdraexp {__version__}")
        return
    from twisted.logger import globalLogBeginner

    from kdraexp.app import logs
    from kdraexp.app.tap import Options, makeService

    class CommandOptions(Options):
        """The exporter's options, as ``kdraexp`` names itself."""

        def getSynopsis(self) -> str:
            """``Usage: kdraexp ...`` however the command was started."""
            return f"Usage: kdraexp {self.synopsis}"

    options = CommandOptions()
    options.parseOptions(args)
    settings = options.settings
    globalLogBeginner.beginLoggingTo(
        [logs.observer(settings.log_level, settings.log_format)], redirectStandardIO=False
    )
    from twisted.internet import reactor

    service = makeService(options)
    service.privilegedStartService()
    reactor.callWhenRunning(service.startService)
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reactor.run()
