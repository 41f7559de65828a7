"""A TCP proxy the end-to-end tests can cut: the exporter loses the API server, then finds it."""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.processes import free_port


class Proxy:
    """Forwards 127.0.0.1:port to *target*; :meth:`cut` drops and refuses connections."""

    def __init__(self, target: int) -> None:
        self.port = free_port()
        self._target = target
        self._cut = False
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def restore(self) -> None:
        """Forward again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        """Stop listening and drop everything."""
        self.cut()
        _close(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    _close(client)
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self._target))
                except OSError:
                    _close(client)
                    continue
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    while True:
        try:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
        except OSError:
            break
    _close(source)
    _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
