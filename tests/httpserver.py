"""A small HTTP file server for tests and benchmarks: 127.0.0.1, Range requests, optional delay per
request, request counting, fault modes (``fault=``, one of :data:`FAULTS`), an optional bandwidth cap
(``rate=`` bytes per second, shared by all connections).

In a test::

    with RangeServer(directory, delay=0.02) as srv:
        url = srv.url + "/file.nc"
        ...
        srv.requests  # GET/HEAD requests answered so far
        srv.bytes  # body bytes sent so far

From the command line (benchmarks run it in its own process)::

    python tests/httpserver.py DIR --delay 0.02 --port 0 [--rate 100e6] [--threads]
    # prints "http://127.0.0.1:PORT" on its first line; GET /__count__ answers the request count,
    # GET /__bytes__ the body bytes sent, GET /__refused__ the 412 answers. It runs on one asyncio loop (no fault modes; --threads:
    # the tests' threaded server)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RangeServer", "FAULTS"]

FAULTS = (None, "stall", "shift", "short", "ignore", "truncate", "500", "gzip-encoding", "ignore-conditions",
          "no-validators")

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")

def _range(header: str | None, size: int) -> tuple[int, int, int]:
    """(status, start, end exclusive) of the answer to a ``Range`` header for a file of ``size``
    bytes, as RFC 9110 (14.2) says: no header, one it cannot parse (several ranges, another unit)
    or an invalid one (last before first): 200 and the whole file; a range starting past the end,
    or any range of an empty file: 416; else 206 and the range, cut at the end of the file."""
    m = _RANGE.match(header.strip()) if header else None
    if m is None or (not m.group(1) and not m.group(2)):
        return 200, 0, size
    a, b = m.group(1), m.group(2)
    if not a:  # the last b bytes
        if int(b) == 0 or size == 0:
            return 416, 0, 0
        return 206, max(size - int(b), 0), size
    if b and int(b) < int(a):
        return 200, 0, size
    if int(a) >= size:
        return 416, 0, 0
    return 206, int(a), (min(int(b) + 1, size) if b else size)


def validators(path: str) -> tuple[str, str]:
    """(ETag, Last-Modified) of a file as nginx makes them: the modification time and size in hex,
    and the modification time as an HTTP date (whole seconds)."""
    from email.utils import formatdate

    st = os.stat(path)
    return f'"{int(st.st_mtime):x}-{st.st_size:x}"', formatdate(int(st.st_mtime), usegmt=True)


def precondition_failed(path: str, if_match: str | None, if_unmodified_since: str | None) -> bool:
    """Whether a request's preconditions fail (RFC 9110 13.2.2): ``If-Match`` (strong comparison,
    ``*`` any), else ``If-Unmodified-Since`` (whole seconds)."""
    etag, _ = validators(path)
    if if_match is not None:
        tags = [t.strip() for t in if_match.split(",")]
        return "*" not in tags and etag not in tags
    if if_unmodified_since is not None:
        from email.utils import parsedate_to_datetime

        try:
            since = parsedate_to_datetime(if_unmodified_since).timestamp()
        except (TypeError, ValueError):
            return False
        return int(os.stat(path).st_mtime) > since
    return False


_PIECE = 64 * 1024  # bodies are written in pieces of this size when a bandwidth cap is set


class _Bucket:
    """A token bucket shared by all connections: ``rate`` bytes per second, bursts of one piece.

    :meth:`take` reserves ``n`` bytes (the balance may go negative) and sleeps until the balance is
    back to zero, so writers queue behind each other and the total stays under the cap."""

    def __init__(self, rate: float, burst: int = _PIECE) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, not {rate!r}")
        self.rate = float(rate)
        self.burst = burst
        self._tokens = float(burst)
        self._t = time.monotonic()
        self._lock = threading.Lock()

    def reserve(self, n: int) -> float:
        """Reserve ``n`` bytes: the seconds to wait before sending them."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
            self._t = now
            self._tokens -= n
            return -self._tokens / self.rate if self._tokens < 0 else 0.0

    def take(self, n: int) -> None:
        wait = self.reserve(n)
        if wait > 0:
            time.sleep(wait)


def _served(root: str, target: str) -> str | None:
    """The file under ``root`` a request target names, or None (outside it, or no such file)."""
    rel = target.split("?", 1)[0].lstrip("/")
    full = os.path.realpath(os.path.join(root, rel))
    if not full.startswith(root + os.sep) or not os.path.isfile(full):
        return None
    return full


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else delayed ACKs add ~40 ms to every response
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(self, body: bool) -> None:
        if self.path in ("/__count__", "/__bytes__"):
            data = str(self.server.count if self.path == "/__count__" else self.server.nbytes).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.server.bump()
        self._answer(body)

    def _answer(self, body: bool) -> None:
        # requests "at once" are those waiting out their delay together: counted around the wait
        # only, since a client may have the last byte and send its next request before a thread
        # that wrote a body runs again
        self.server.enter()
        try:
            if self.server.delay:
                time.sleep(self.server.delay)
        finally:
            self.server.leave()
        if self.server.fault == "stall":  # read the request, never answer
            self.server.stopping.wait(600)
            self.close_connection = True
            return
        path = _served(self.server.root, self.path)
        if path is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        size = os.path.getsize(path)
        fault = self.server.fault
        if fault not in ("ignore-conditions", "no-validators") and precondition_failed(
                path, self.headers.get("If-Match"), self.headers.get("If-Unmodified-Since")):
            self.server.bump(0, 0, 1)
            self.send_response(412)
            self._validators(path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status, start, end = _range(self.headers.get("Range"), size)  # end exclusive
        if status == 416:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "500":
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if fault == "ignore":  # Range ignored: 200 with the whole file
            start, end, status = 0, size, 200
        if status == 206 and fault == "shift" and end < size:
            start, end = start + 1, end + 1  # the right length, the wrong bytes, and says so
        if status == 206 and fault == "short" and end - start > 1:
            end -= 1  # one byte fewer than asked, and says so
        sent = end - start
        if fault == "truncate":  # the headers promise every byte, the body stops halfway
            sent = (end - start) // 2
            self.close_connection = True
        self.send_response(status)
        self.send_header("Accept-Ranges", "bytes")
        self._validators(path)
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{max(end - 1, start)}/{size}")
        if self.server.fault == "gzip-encoding":  # the stored bytes said to be gzip-encoded
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        if body and sent > 0:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(sent)
            # counted before the write: a client may get the last byte, and a test read the count,
            # before this thread runs again
            self.server.bump(0, sent)
            bucket = self.server.bucket
            if bucket is None:
                self.wfile.write(data)
            else:
                view = memoryview(data)
                for i in range(0, len(view), _PIECE):
                    piece = view[i:i + _PIECE]
                    bucket.take(len(piece))
                    self.wfile.write(piece)

    def _validators(self, path: str) -> None:
        if self.server.fault != "no-validators":
            etag, last_modified = validators(path)
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", last_modified)

    def do_GET(self) -> None:
        self._reply(True)

    def do_HEAD(self) -> None:
        self._reply(False)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, root: str, delay: float, port: int = 0, rate: float | None = None) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.root = os.path.realpath(root)
        self.delay = delay
        self.bucket = _Bucket(rate) if rate else None  # bandwidth cap, bytes/s, all connections
        self.fault: str | None = None  # one of FAULTS
        self.stopping = threading.Event()
        self.count = 0
        self.nbytes = 0
        self.refused = 0  # 412 answers (a precondition failed)
        self.inflight = 0
        self.most_inflight = 0  # the most requests waiting out their delay at once
        self._lock = threading.Lock()

    def bump(self, requests: int = 1, nbytes: int = 0, refused: int = 0) -> None:
        with self._lock:
            self.count += requests
            self.nbytes += nbytes
            self.refused += refused

    def enter(self) -> None:
        with self._lock:
            self.inflight += 1
            self.most_inflight = max(self.most_inflight, self.inflight)

    def leave(self) -> None:
        with self._lock:
            self.inflight -= 1


class RangeServer:
    """Serve ``root`` over HTTP on an ephemeral port of 127.0.0.1, in a background thread."""

    def __init__(self, root: str | os.PathLike[str], *, delay: float = 0.0, fault: str | None = None,
                 rate: float | None = None, port: int = 0) -> None:
        self._srv = _Server(os.fspath(root), delay, port=port, rate=rate)
        self.fault = fault
        self._thread = threading.Thread(target=self._srv.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._srv.server_address[:2]
        return f"http://{host}" if port == 80 else f"http://{host}:{port}"

    @property
    def requests(self) -> int:
        return self._srv.count

    @property
    def bytes(self) -> int:
        return self._srv.nbytes

    @property
    def refused(self) -> int:
        """412 answers so far (since the last :meth:`reset`): reads of a file that changed."""
        return self._srv.refused

    @property
    def most_inflight(self) -> int:
        """The most requests the server was answering at once (since the last :meth:`reset`)."""
        return self._srv.most_inflight

    def reset(self) -> None:
        self._srv.count = 0
        self._srv.nbytes = 0
        self._srv.refused = 0
        self._srv.most_inflight = 0

    @property
    def delay(self) -> float:
        return self._srv.delay

    @delay.setter
    def delay(self, value: float) -> None:
        self._srv.delay = value

    @property
    def fault(self) -> str | None:
        """A fault mode: None, ``"stall"`` (read each request, never answer), ``"shift"`` (range
        answers start one byte late, with a Content-Range saying so and the right length), ``"short"``
        (range answers one byte short, and say so), ``"ignore"`` (Range ignored: 200 and the whole
        file), ``"truncate"`` (the body stops halfway through its Content-Length, the connection
        closes), ``"500"`` (every answer an HTTP 500), ``"gzip-encoding"`` (every answer says
        ``Content-Encoding: gzip``), ``"ignore-conditions"`` (``If-Match``/``If-Unmodified-Since``
        ignored; answers still carry ``ETag`` and ``Last-Modified``) or ``"no-validators"`` (neither
        header sent, conditions ignored). Without a fault, answers carry ``ETag`` and
        ``Last-Modified`` as nginx makes them and failed preconditions are answered 412."""
        return self._srv.fault

    @fault.setter
    def fault(self, value: str | None) -> None:
        if value not in FAULTS:
            raise ValueError(f"unknown fault {value!r}")
        self._srv.fault = value

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._srv.stopping.set()
        self._srv.shutdown()
        self._srv.server_close()
        self._thread.join(5)


class _AsyncServer:
    """The command line's server: the same answers without faults, on one asyncio loop. A request
    costs ~5x less CPU than on the threaded server (whose ``http.server`` parses headers with the
    email package, ~0.3 ms a request): a benchmark's server shares the machine's cores with the
    clients it serves, and an object store's CPU is not the client's."""

    def __init__(self, root: str, delay: float, rate: float | None) -> None:
        self.root = os.path.realpath(root)
        self.delay = delay
        self.bucket = _Bucket(rate) if rate else None  # bandwidth cap, bytes/s, all connections
        self.count = 0
        self.nbytes = 0
        self.refused = 0

    async def _send(self, w: Any, data: bytes) -> None:
        if self.bucket is None:
            w.write(data)
            await w.drain()
            return
        view = memoryview(data)
        for i in range(0, len(view), _PIECE):  # one token bucket for all connections
            piece = view[i:i + _PIECE]
            wait = self.bucket.reserve(len(piece))
            if wait > 0:
                await asyncio.sleep(wait)
            w.write(piece)
            await w.drain()

    async def handle(self, r: Any, w: Any) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                fields = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
                rng = fields.get("range")
                cond = fields.get("if-match"), fields.get("if-unmodified-since")
                conn = fields.get("connection", "").lower()
                close = conn == "close" or (version == "HTTP/1.0" and conn != "keep-alive")
                if method not in ("GET", "HEAD"):
                    w.write(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    await w.drain()
                    return
                if target in ("/__count__", "/__bytes__", "/__refused__"):
                    body = str({"/__count__": self.count, "/__bytes__": self.nbytes,
                                "/__refused__": self.refused}[target]).encode()
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                    await w.drain()
                    continue
                self.count += 1
                if self.delay:
                    await asyncio.sleep(self.delay)
                status, hdrs, body = self._answer(target, rng, method == "GET", cond)
                if close:
                    hdrs += "Connection: close\r\n"
                w.write(f"HTTP/1.1 {status}\r\n{hdrs}\r\n".encode())
                if body:
                    self.nbytes += len(body)
                    await self._send(w, body)
                else:
                    await w.drain()
                if close:
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError, OSError):
            pass  # a broken request or connection: dropped
        finally:
            w.close()

    def _answer(self, target: str, rng: str | None, body: bool,
                cond: tuple[str | None, str | None] = (None, None)) -> tuple[str, str, bytes]:
        path = _served(self.root, target)
        if path is None:
            return "404 Not Found", "Content-Length: 0\r\n", b""
        etag, last_modified = validators(path)
        tags = f"ETag: {etag}\r\nLast-Modified: {last_modified}\r\n"
        if precondition_failed(path, *cond):
            self.refused += 1
            return "412 Precondition Failed", tags + "Content-Length: 0\r\n", b""
        size = os.path.getsize(path)
        code, start, end = _range(rng, size)
        if code == 416:
            return "416 Range Not Satisfiable", f"Content-Range: bytes */{size}\r\nContent-Length: 0\r\n", b""
        status, extra = "200 OK", ""
        if code == 206:
            status = "206 Partial Content"
            extra = f"Content-Range: bytes {start}-{end - 1}/{size}\r\n"
        data = b""
        if body and end > start:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
        return status, f"Accept-Ranges: bytes\r\n{tags}Content-Length: {end - start}\r\n{extra}", data


def _serve_async(root: str, delay: float, port: int, rate: float | None) -> None:
    async def run() -> None:
        srv = _AsyncServer(root, delay, rate)
        server = await asyncio.start_server(srv.handle, "127.0.0.1", port, backlog=1024)
        host, got = server.sockets[0].getsockname()[:2]
        print(f"http://{host}:{got}", flush=True)
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds added to every request")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rate", type=float, default=None,
                    help="bandwidth cap in bytes per second, shared by all connections (default: none)")
    ap.add_argument("--threads", action="store_true",
                    help="the threaded server the tests use (default: the asyncio one)")
    a = ap.parse_args()
    if not a.threads:
        _serve_async(a.root, a.delay, a.port, a.rate)
        return
    srv = _Server(a.root, a.delay, a.port, a.rate)
    host, port = srv.server_address[:2]
    print(f"http://{host}:{port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
