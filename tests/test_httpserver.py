"""The test and benchmark HTTP server (tests/httpserver.py): its two engines, the threaded one the tests
run in-process and the asyncio one the benchmarks run from the command line, answer every request
alike and as RFC 9110 says (ranges, suffixes, invalid or several ranges, empty files, HEAD, other
methods, Connection: close), and count requests and bytes."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CASES = [("GET /f.bin", None), ("GET /f.bin", "bytes=5-"), ("GET /f.bin", "bytes=-10"), ("GET /f.bin", "bytes=0-0"),
         ("GET /f.bin", "bytes=90-200"), ("GET /f.bin", "bytes=200-"), ("GET /f.bin", "bytes=-0"),
         ("GET /f.bin", "bytes=10-5"), ("GET /f.bin", "bytes=0-1,5-6"), ("GET /f.bin", "items=0-5"),
         ("GET /empty.bin", "bytes=0-"), ("GET /empty.bin", None), ("GET /nope.bin", "bytes=0-1"),
         ("HEAD /f.bin", "bytes=0-9"), ("POST /f.bin", None)]

WANT = {  # (status, Content-Range, body) per case, as RFC 9110 says
    ("GET /f.bin", None): (200, None, bytes(range(100))),
    ("GET /f.bin", "bytes=5-"): (206, "bytes 5-99/100", bytes(range(5, 100))),
    ("GET /f.bin", "bytes=-10"): (206, "bytes 90-99/100", bytes(range(90, 100))),
    ("GET /f.bin", "bytes=0-0"): (206, "bytes 0-0/100", b"\0"),
    ("GET /f.bin", "bytes=90-200"): (206, "bytes 90-99/100", bytes(range(90, 100))),
    ("GET /f.bin", "bytes=200-"): (416, "bytes */100", b""),
    ("GET /f.bin", "bytes=-0"): (416, "bytes */100", b""),
    ("GET /f.bin", "bytes=10-5"): (200, None, bytes(range(100))),  # invalid: ignored
    ("GET /f.bin", "bytes=0-1,5-6"): (200, None, bytes(range(100))),  # several: may be ignored
    ("GET /f.bin", "items=0-5"): (200, None, bytes(range(100))),  # another unit: ignored
    ("GET /empty.bin", "bytes=0-"): (416, "bytes */0", b""),
    ("GET /empty.bin", None): (200, None, b""),
    ("GET /nope.bin", "bytes=0-1"): (404, None, b""),
    ("HEAD /f.bin", "bytes=0-9"): (206, "bytes 0-9/100", b""),
}


@pytest.fixture(scope="module", params=["threads", "asyncio"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("served")
    (d / "f.bin").write_bytes(bytes(range(100)))
    (d / "empty.bin").write_bytes(b"")
    mode = ["--threads"] if request.param == "threads" else []
    p = subprocess.Popen([sys.executable, str(HERE / "httpserver.py"), str(d), *mode], stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout is not None
    try:
        yield p.stdout.readline().strip()
    finally:
        p.terminate()
        p.wait(10)


def _ask(url: str, lines: list[str], wait: float = 0.05) -> tuple[int, dict[str, str], bytes, bool]:
    """(status, headers, body, closed by the server within ``wait`` s) of one raw request."""
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        f = s.makefile("rb")
        status = int(f.readline().split()[1])
        headers = {}
        while (line := f.readline().strip()):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        body = f.read(n) if not lines[0].startswith("HEAD") else b""
        s.settimeout(wait)
        try:
            closed = f.read(1) == b""
        except TimeoutError:
            closed = False
    return status, headers, body, closed


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]} {c[1]}")
def test_answers(server: str, case: tuple[str, str | None]) -> None:
    req, rng = case
    lines = [f"{req} HTTP/1.1", "Host: x", *([f"Range: {rng}"] if rng else []),
             *(["Content-Length: 0"] if req.startswith("POST") else [])]
    status, headers, body, closed = _ask(server, lines)
    if req.startswith("POST"):
        assert status == 501 and closed
        return
    assert (status, headers.get("content-range"), body) == WANT[case]
    if status in (200, 206) and req.startswith("GET"):
        assert int(headers["content-length"]) == len(body)
    assert not closed  # HTTP/1.1 keeps the connection


def test_connection_close_and_http_1_0(server: str) -> None:
    assert _ask(server, ["GET /f.bin HTTP/1.1", "Host: x", "Connection: close"], wait=5)[3]
    assert _ask(server, ["GET /f.bin HTTP/1.0"], wait=5)[3]


def test_counters(server: str) -> None:
    def count() -> tuple[int, int]:
        with urllib.request.urlopen(f"{server}/__count__") as r:
            n = int(r.read())
        with urllib.request.urlopen(f"{server}/__bytes__") as r:
            return n, int(r.read())

    n, b = count()
    req = urllib.request.Request(f"{server}/f.bin", headers={"Range": "bytes=10-19"})
    with urllib.request.urlopen(req) as r:
        assert r.read() == bytes(range(10, 20))
    assert count() == (n + 1, b + 10)
