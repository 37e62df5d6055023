"""A minimal HTTP/1.1 client on a raw socket, for what httpx hides: reusing one keep-alive connection on
purpose, sending headers without (all of) the body, and seeing exactly when the server answers."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    """One TCP connection to the server; requests are sent and read one at a time."""

    def __init__(self, url: str, timeout: float = 30.0, source: str | None = None) -> None:
        """``source``: the local address to connect from (``127.0.0.2``: another client to the server)."""
        u = httpx.URL(url)
        self.host = u.host
        where = (source, 0) if source else None
        self.sock = socket.create_connection((u.host, u.port), timeout=timeout, source_address=where)
        self.file = self.sock.makefile("rb")

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.file.close()
        self.sock.close()

    def send_head(self, method: str, path: str, headers: dict[str, str], content_length: int | None) -> None:
        """The request line and headers; ``content_length`` None: a chunked body."""
        chunked = content_length is None
        length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {content_length}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", length]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> RawResponse:
        self.send_head(method, path, {"Content-Type": "application/json", **(headers or {})}, len(body))
        self.sock.sendall(body)
        return self.read_response()

    def read_response(self) -> RawResponse:
        """The next response; ``ConnectionError`` if the server closed the connection instead."""
        status_line = self.file.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = self.file.read(int(headers.get("content-length", "0")))
        return RawResponse(status, headers, body)
