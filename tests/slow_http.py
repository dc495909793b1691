"""A local HTTP server on 127.0.0.1 that misbehaves in one chosen way, for the deadline tests.

Each accepted connection reads one request (up to the blank line and its Content-Length body) and then answers
as `behaviour` says: slow headers, a slow body (keep-alive, Connection: close, HTTP/1.0, chunked), no answer at
all (`no_answer`: after the request; `silent`: not even the TLS handshake), or a connection closed mid-body.
Plain TCP sockets (not http.server) so that every byte on the wire is the test's choice. With `tls=True` the
connection is TLS (a throwaway self-signed CA, `ca_pem`). Every thread is a daemon and stops when the client goes
away or `close()` is called, so a test that fails cannot hang the suite.
"""

from __future__ import annotations

import socket
import ssl
import tempfile
import threading
import time
from pathlib import Path

BODY = b'{"kind": "PodList", "metadata": {}, "items": []}'
BEHAVIOURS = (
    "slow_headers",
    "slow_body_keep_alive",
    "slow_body_close",
    "slow_body_http10",
    "slow_body_chunked",
    "no_answer",
    "silent",
    "closed_mid_body",
    "closed_mid_body_http10",
)


class SlowHttpServer:
    def __init__(
        self,
        behaviour: str,
        drip_s_per_byte: float = 0.1,
        tls: bool = False,
        body: bytes = BODY,
        content_type: str = "application/json",
    ):
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}")
        self.behaviour = behaviour
        self.drip_s_per_byte = drip_s_per_byte
        self.body = body
        self.content_type = content_type
        self.requests = 0
        self._stop = threading.Event()
        self._ctx = None
        self.ca_pem = None
        if tls:
            from fake_kube import _self_signed

            cert_pem, key_pem = _self_signed()
            self.ca_pem = cert_pem
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
                cert.write_text(cert_pem)
                key.write_text(key_pem)
                self._ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                self._ctx.load_cert_chain(cert, key)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        host = "localhost" if tls else "127.0.0.1"  # the certificate names localhost
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            if self.behaviour == "silent":  # accepts the TCP connection, then not a byte: no TLS handshake either
                self._stop.wait(30)
                return
            if self._ctx is not None:
                conn = self._ctx.wrap_socket(conn, server_side=True)
            while not self._stop.is_set():
                if not self._read_request(conn):
                    return
                self.requests += 1
                if not self._answer(conn):
                    return
        except OSError:  # the client gave up (its deadline): what these tests want
            pass
        finally:
            conn.close()

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            rest += chunk
        return True

    def _drip(self, conn: socket.socket, data: bytes) -> None:
        for i in range(len(data)):
            if self._stop.is_set():
                raise OSError("server closed")
            conn.sendall(data[i : i + 1])
            time.sleep(self.drip_s_per_byte)

    def _head(self, version: str = "HTTP/1.1", **extra: str) -> bytes:
        lines = [f"{version} 200 OK", f"Content-Type: {self.content_type}"]
        lines += [f"{k.replace('_', '-')}: {v}" for k, v in extra.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def _answer(self, conn: socket.socket) -> bool:
        """Send one answer; False when the connection is to be closed afterwards."""
        b, length = self.body, str(len(self.body))
        if self.behaviour == "slow_headers":
            self._drip(conn, self._head(Content_Length=length) + b)
            return True
        if self.behaviour == "slow_body_keep_alive":
            conn.sendall(self._head(Content_Length=length))
            self._drip(conn, b)
            return True
        if self.behaviour == "slow_body_close":
            conn.sendall(self._head(Content_Length=length, Connection="close"))
            self._drip(conn, b)
            return False
        if self.behaviour == "slow_body_http10":
            conn.sendall(self._head("HTTP/1.0"))  # no length: the body ends where the connection does
            self._drip(conn, b)
            return False
        if self.behaviour == "slow_body_chunked":
            conn.sendall(self._head(Transfer_Encoding="chunked"))
            self._drip(conn, f"{len(b):x}\r\n".encode() + b + b"\r\n0\r\n\r\n")
            return True
        if self.behaviour == "no_answer":
            self._stop.wait(30)
            return False
        if self.behaviour == "closed_mid_body":
            conn.sendall(self._head(Content_Length=length) + b[: len(b) // 2])
            return False
        conn.sendall(self._head("HTTP/1.0") + b[: len(b) // 2])  # closed_mid_body_http10
        return False
