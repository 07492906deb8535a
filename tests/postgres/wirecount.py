"""Counting what a client asks a real PostgreSQL server, on the wire.

:class:`WireCounter` is a TCP relay on 127.0.0.1 between the client and the test server. It
reads the frontend protocol the client sends and counts, per connection, the messages that
make the client wait for the server: a simple query (``Q``) or a ``Sync`` (``S``) ends a
request whose answer the client reads before it can go on. Statements are ``Q`` plus
extended-protocol ``Execute`` (``E``) messages, so a pipeline of three statements is three
statements and one round trip. Nothing is mocked: the server sees every byte.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from urllib.parse import urlsplit, urlunsplit


class _Frontend:
    """A parser of one connection's client-to-server stream (the first message, the
    startup packet, has no type byte; an SSL or GSS request before it is answered by one
    byte and followed by another untyped message)."""

    def __init__(self, counts: Counter[str], sent: list[str], lock: threading.Lock) -> None:
        self.buf = b""
        self.untyped = True
        self.counts = counts
        self.sent = sent
        self.lock = lock

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            if self.untyped:
                if len(self.buf) < 8:
                    return
                (size,) = struct.unpack("!I", self.buf[:4])
                if len(self.buf) < size:
                    return
                (code,) = struct.unpack("!I", self.buf[4:8])
                self.buf = self.buf[size:]
                # SSLRequest / GSSENCRequest are followed by the real startup packet
                self.untyped = code in (80877103, 80877104)
                continue
            if len(self.buf) < 5:
                return
            kind = chr(self.buf[0])
            (size,) = struct.unpack("!I", self.buf[1:5])
            if len(self.buf) < 1 + size:
                return
            body, self.buf = self.buf[5:1 + size], self.buf[1 + size:]
            with self.lock:
                self.counts[kind] += 1
                if kind in "QPS":  # what was asked, for a failing test's message
                    self.sent.append(kind + " " + _text(kind, body))


def _text(kind: str, body: bytes) -> str:
    if kind == "Q":
        return body.split(b"\0", 1)[0].decode(errors="replace")[:160]
    if kind == "P":  # statement name, then the query
        return body.split(b"\0", 2)[1].decode(errors="replace")[:160]
    return ""


class WireCounter:
    """A relay to ``url``'s server; :attr:`url` is the same URL through it. ``reset`` then
    ``round_trips``/``statements`` count what every connection opened through it asked."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        query = parts.query + ("&" if parts.query else "") + "sslmode=disable"
        self.url = urlunsplit((parts.scheme, f"{auth}127.0.0.1:{port}", parts.path, query, ""))
        self.counts: Counter[str] = Counter()
        self.sent: list[str] = []  # "Q sql", "P sql" and "S " in the order they were sent
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for s in (client, server):  # relay each message as it comes (no Nagle delay)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sockets += [client, server]
            frontend = _Frontend(self.counts, self.sent, self.lock)
            threading.Thread(target=self._pump, args=(client, server, frontend.feed),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, None),
                             daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, seen) -> None:
        try:
            while data := src.recv(65536):
                if seen is not None:
                    seen(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.sent.clear()

    @property
    def round_trips(self) -> int:
        """Requests the client waited on: simple queries and Syncs."""
        with self.lock:
            return self.counts["Q"] + self.counts["S"]

    @property
    def statements(self) -> int:
        with self.lock:
            return self.counts["Q"] + self.counts["E"]

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> "WireCounter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
