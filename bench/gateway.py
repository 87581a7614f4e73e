#!/usr/bin/env python3
"""The S3 gateway on many small objects (hashFS) and on large ones: cairn serve against nginx.

Everything is measured in one run, on one machine, on the same disk:

 * "cairn S3": `cairn serve` of a fresh repository; objects PUT and GET over S3 (SigV4,
   path-style, UNSIGNED-PAYLOAD bodies) by --clients parallel client processes, each on
   one keep-alive connection.
 * "nginx ext4": nginx serving the same file set from a plain directory on the same disk
   (the baseline the issue names).
 * "nginx FUSE": nginx serving cairn's FUSE mount of the same repository: the same objects
   found by the kernel's directory walk, one lookup per path component.

The file set: --objects objects (default 1,000,000) of 4-20 KiB of random data under one
bucket, 100 entries per directory, each object at depth 4 to 6 (the leaf directory's
index in base 100 makes the first two levels, one to three fixed levels follow). Objects
up to the repository's fs.inline_max (16 KiB) are stored inline in their inode.

Phases, in order:
 1. PUT every object through the gateway (PUT/s). The same files are written into the
    ext4 directory (untimed).
 2. GET --gets requests per pattern, uniform and Zipf (theta --zipf-theta over the
    objects), each cold (page cache dropped; cairn restarted, so its caches are empty)
    and then warm (the same requests at once): GET/s, p50 and p99 latency, for each of
    the three targets. Before the timed GETs, --verify objects are fetched from each
    target and compared byte for byte (a wrong byte fails the run).
 3. Storage reads per cold GET: the daemon's `storage_reads` control request (over
    REPO/run/control.sock, docs/control-protocol.md) before and after a cold uniform GET
    run over inline objects only, and one over chunked objects only; the reads of the
    metadata engine's file (`meta`), of the chunk index's files (`index`) and of
    containers (`containers`) are exact counts, divided by the GETs. Reported "n/a" when
    this cairn does not answer the request.
 4. Large objects: --large-size objects of random bytes PUT and GET through the gateway,
    against `cairn put` / `cairn get` of a file of that size on the stopped repository
    (the raw store); each of the three runs stores bytes of its own (the same bytes
    again would only be deduplicated). Two S3 runs, both Python http.client sending
    and reading 1 MiB pieces, the file to and from disk as `cairn put`/`get` do:
    a single-part PUT and a GET on one connection; and what the AWS CLI and rclone
    do with a large file, a multipart upload of 8 MiB parts and ranged GETs of 8 MiB,
    4 requests at a time on their own connections. A third run does the single-part
    PUT and GET with curl on presigned URLs (a client in C: Python's own CPU shares
    the machine with the gateway). Each run's CPU seconds, the client's and the
    gateway's, are printed beside its throughput. The GETs' bytes are compared with
    the file after the clock stops. --only-large runs this phase alone.

Targets (the issue's): storage reads per cold GET <= 1.0 for inline objects and <= 2.0
for the others; cold GET/s >= nginx-on-ext4's; warm GET/s >= 0.5 x nginx-on-ext4's;
large-object PUT and GET throughput >= 0.8 x the raw store's. Each is printed MET or NOT
MET; this is a benchmark, not a test: the exit status is 0 when every command succeeded,
1 when one failed (its stderr is printed).

Usage (as root, from the repository root, after `cargo build --release`):

    cairn bench gateway                                  # 1,000,000 objects: hours
    cairn bench gateway -- --objects 20000 --gets 5000   # a few minutes
    python3 bench/gateway.py --cairn target/release/cairn --objects 20000 --json out.json

nginx is installed with apt-get when missing. Progress goes to stderr, the tables to
stdout. Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import multiprocessing
import os
import random
import statistics
import resource
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing the helpers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest import BenchError, CacheDropper, Runner, fmt_table, log  # noqa: E402
import common  # noqa: E402

BUCKET = "bench"
FANOUT = 100
REGION = "us-east-1"
PIECE = 1 << 20
# Large objects as the AWS CLI moves them (its default part size; rclone's default
# upload concurrency).
LARGE_PART = 8 << 20
LARGE_CONNECTIONS = 4


# --------------------------------------------------------------------------- the file set

def key_of(i: int) -> str:
    """Object i's key: leaf directory i // 100 spelled in base 100, then 1-3 fixed levels
    (the leaf's depth picked by its index), then the file."""
    leaf, name = divmod(i, FANOUT)
    hi, lo = divmod(leaf, FANOUT)
    extra = ["p", "q", "r"][: 1 + (leaf * 2654435761 >> 7) % 3]
    return "/".join([f"d{hi:02d}", f"d{lo:02d}", *extra, f"f{name:02d}.bin"])


def body_of(i: int, seed: int) -> bytes:
    rng = random.Random(seed * 1_000_003 + i)
    return rng.randbytes(rng.randint(4 << 10, 20 << 10))


def zipf_sample(n: int, count: int, theta: float, seed: int) -> list[int]:
    """count indexes in [0, n) drawn with P(k) ~ 1 / (k+1)^theta, ranks shuffled over the
    objects so that popular objects are spread over the tree."""
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** theta for k in range(n)]
    ranks = rng.choices(range(n), weights=weights, k=count)
    perm = list(range(n))
    rng.shuffle(perm)
    return [perm[r] for r in ranks]


# --------------------------------------------------------------------------- SigV4

def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def quote_path(path: str) -> str:
    return urllib.parse.quote(path, safe="/-_.~")


def canonical_query(params: dict[str, str]) -> str:
    """A query string in SigV4's canonical form (sorted, every byte but -_.~ encoded),
    also the one sent."""
    q = lambda s: urllib.parse.quote(s, safe="-_.~")  # noqa: E731
    return "&".join(f"{q(k)}={q(v)}" for k, v in sorted(params.items()))


def sign(method: str, host: str, path: str, key_id: str, secret: str,
         extra: dict[str, str] | None = None, query: str = "") -> dict[str, str]:
    """Headers of a SigV4-signed request with an unsigned payload (path-style; `query`
    canonical, see canonical_query)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
               "x-amz-date": amz_date}
    for k, v in (extra or {}).items():
        headers[k.lower()] = v
    names = sorted(headers)
    canonical = "\n".join([
        method, quote_path(path), query,
        "".join(f"{n}:{headers[n].strip()}\n" for n in names),
        ";".join(names), "UNSIGNED-PAYLOAD"])
    scope = f"{day}/{REGION}/s3/aws4_request"
    sig = signature(canonical, amz_date, secret)
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={sig}")
    return headers


def signature(canonical: str, amz_date: str, secret: str) -> str:
    """SigV4's signature of a canonical request made at `amz_date`."""
    day = amz_date[:8]
    scope = f"{day}/{REGION}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = _hmac(("AWS4" + secret).encode(), day)
    for part in (REGION, "s3", "aws4_request"):
        k = _hmac(k, part)
    return hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()


def presign(method: str, host: str, path: str, key_id: str, secret: str,
            expires: int = 3600) -> str:
    """A presigned URL (SigV4 in the query, UNSIGNED-PAYLOAD): for clients that take a
    URL, such as curl."""
    now = datetime.datetime.now(datetime.timezone.utc)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    scope = f"{day}/{REGION}/s3/aws4_request"
    params = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": f"{key_id}/{scope}",
              "X-Amz-Date": amz_date, "X-Amz-Expires": str(expires),
              "X-Amz-SignedHeaders": "host"}
    query = canonical_query(params)
    canonical = "\n".join([method, quote_path(path), query, f"host:{host}\n", "host",
                           "UNSIGNED-PAYLOAD"])
    sig = signature(canonical, amz_date, secret)
    return f"http://{host}{quote_path(path)}?{query}&X-Amz-Signature={sig}"


# --------------------------------------------------------------------------- clients

class Target:
    """Where requests go: an address, a URL prefix, and credentials when signed."""

    def __init__(self, name: str, addr: tuple[str, int], prefix: str,
                 key: tuple[str, str] | None):
        self.name, self.addr, self.prefix, self.key = name, addr, prefix, key

    def spec(self) -> tuple:
        return (self.addr, self.prefix, self.key)


_conn: http.client.HTTPConnection | None = None


def _connection(addr) -> http.client.HTTPConnection:
    global _conn
    if _conn is None or (_conn.host, _conn.port) != addr:
        _conn = http.client.HTTPConnection(*addr, timeout=120)
    return _conn


def prepare(spec, method: str, key: str, body: bytes | None = None) -> tuple[str, dict]:
    """A request's quoted path and headers, signed when the target takes credentials."""
    addr, prefix, cred = spec
    path = f"{prefix}/{key}"
    host = f"{addr[0]}:{addr[1]}"
    headers = {"host": host}
    if cred:
        extra = {"content-length": str(len(body))} if body is not None else None
        headers = sign(method, host, path, cred[0], cred[1], extra)
    return quote_path(path), headers


def request(spec, method: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on this process's keep-alive connection (reconnecting once)."""
    return send(spec[0], method, *prepare(spec, method, key, body), body)


def send(addr, method: str, path: str, headers: dict,
         body: bytes | None = None) -> tuple[int, bytes]:
    """A prepared request on this process's keep-alive connection (reconnecting once)."""
    for attempt in (0, 1):
        conn = _connection(addr)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, data
        except (ConnectionError, http.client.HTTPException, socket.timeout):
            conn.close()
            if attempt:
                raise
    raise AssertionError("unreachable")


def _put_worker(args):
    spec, seed, idxs = args
    for i in idxs:
        status, data = request(spec, "PUT", key_of(i), body_of(i, seed))
        if status != 200:
            return f"PUT {key_of(i)}: HTTP {status}: {data[:300]!r}"
    return None


def _get_worker(args):
    addr, reqs = args
    lat = []
    nbytes = 0
    for path, headers in reqs:
        t0 = time.perf_counter()
        status, data = send(addr, "GET", path, headers)
        lat.append(time.perf_counter() - t0)
        if status != 200:
            return f"GET {path}: HTTP {status}: {data[:300]!r}", lat, nbytes
        nbytes += len(data)
    return None, lat, nbytes


def _verify_worker(args):
    spec, seed, idxs = args
    for i in idxs:
        status, data = request(spec, "GET", key_of(i))
        if status != 200 or data != body_of(i, seed):
            return f"GET {key_of(i)}: HTTP {status}, {len(data)} bytes, not the object's bytes"
    return None


def split(items: list, parts: int) -> list[list]:
    return [items[k::parts] for k in range(parts)]


def run_puts(pool, target: Target, n: int, seed: int, clients: int) -> dict:
    t0 = time.monotonic()
    for err in pool.imap_unordered(_put_worker, [(target.spec(), seed, part)
                                                 for part in split(list(range(n)), clients * 4)]):
        if err:
            raise BenchError(err)
    secs = time.monotonic() - t0
    return {"objects": n, "seconds": secs, "per_s": n / secs}


def run_gets(pool, target: Target, idxs: list[int], clients: int) -> dict:
    """GETs of `idxs` by `clients` processes. Every request is signed before the clock
    starts, so the clients do the same work for every target (sending, reading) and
    the figures compare the servers, not Python's SigV4 signing; the gateway still
    verifies each signature."""
    spec = target.spec()
    parts = [(target.addr, [prepare(spec, "GET", key_of(i)) for i in part])
             for part in split(idxs, clients)]
    t0 = time.monotonic()
    lat: list[float] = []
    nbytes = 0
    for err, part_lat, part_bytes in pool.imap_unordered(_get_worker, parts):
        if err:
            raise BenchError(f"{target.name}: {err}")
        lat += part_lat
        nbytes += part_bytes
    secs = time.monotonic() - t0
    lat.sort()
    return {"gets": len(idxs), "seconds": secs, "per_s": len(idxs) / secs,
            "mb_s": nbytes / secs / 1e6,
            "p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3}


def verify(pool, target: Target, idxs: list[int], seed: int, clients: int) -> None:
    for err in pool.imap_unordered(_verify_worker, [(target.spec(), seed, part)
                                                    for part in split(idxs, clients)]):
        if err:
            raise BenchError(f"{target.name}: {err}")


# --------------------------------------------------------------------------- servers

class Serve:
    """`cairn serve` of one repository at one mount point, restartable."""

    def __init__(self, binary: str, repo: str, mnt: str, logdir: str):
        self.bin, self.repo, self.mnt, self.logdir = binary, repo, mnt, logdir
        self.proc: subprocess.Popen | None = None
        self.addr: tuple[str, int] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        err_path = os.path.join(self.logdir, f"serve-{self.starts}.err")
        self.err = open(err_path, "w+")
        self.proc = subprocess.Popen(
            [self.bin, "--repo", self.repo, "serve", self.mnt, "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            self.err.seek(0)
            text = self.err.read()
            m = re.search(r"S3 gateway at http://([0-9.]+):(\d+)", text)
            if m and common.is_mounted(self.mnt):
                self.addr = (m.group(1), int(m.group(2)))
                return
            if self.proc.poll() is not None:
                raise BenchError(f"cairn serve exited with status {self.proc.returncode}\n"
                                 f"--- stderr ---\n{text}\n--- end stderr ---")
            time.sleep(0.05)
        raise BenchError(f"cairn serve: no endpoint and mount after 60 s; see {err_path}")

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            subprocess.run(["fusermount3", "-uz", self.mnt], check=False)
        self.proc = None
        if self.proc is None and common.is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], check=False)

    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    def __init__(self, root: str, workdir: str, name: str):
        self.port = free_port()
        self.conf = os.path.join(workdir, f"nginx-{name}.conf")
        os.makedirs(os.path.join(workdir, f"nginx-{name}"), exist_ok=True)
        tmp = os.path.join(workdir, f"nginx-{name}")
        with open(self.conf, "w") as f:
            f.write(f"""user root;
worker_processes 2;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 1000000;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{self.port};
    root {root};
    location / {{ }}
  }}
}}
""")
        self.proc = subprocess.Popen(["nginx", "-c", self.conf], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise BenchError(f"nginx exited: {self.proc.stderr.read().decode()}")
                time.sleep(0.05)
        raise BenchError("nginx did not start listening within 30 s")

    def target(self, name: str) -> Target:
        return Target(name, ("127.0.0.1", self.port), f"/{BUCKET}", None)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


# --------------------------------------------------------------------------- counters

READ_KINDS = ("meta", "index", "containers")


def counters(repo: str) -> dict | None:
    """The running daemon's storage read counts (`storage_reads`), or None when it does
    not answer them. The control socket opens just after the mount, so a daemon that
    has only just started is given up to 30 s to open it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(120)
                conn.connect(os.path.join(repo, "run", "control.sock"))
                conn.sendall(b'{"protocol": 1, "request": {"op": "storage_reads"}}\n')
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)
        except OSError:
            return None
    lines = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    reply = ((doc or {}).get("ok") or {}).get("reply")
    if not isinstance(reply, dict) or not all(k in reply for k in READ_KINDS):
        return None
    return reply


def reads_per_get(before: dict | None, after: dict | None, gets: int) -> dict | None:
    if before is None or after is None or gets == 0:
        return None
    out = {k: (after[k] - before[k]) / gets for k in READ_KINDS}
    out["total"] = sum(out.values())
    return out


# --------------------------------------------------------------------------- main

def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)(i?B)?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {s!r} (e.g. 512M, 1G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cairn", default="target/release/cairn", help="the cairn binary")
    p.add_argument("--objects", type=int, default=1_000_000)
    p.add_argument("--gets", type=int, default=50_000, help="GET requests per timed run")
    p.add_argument("--clients", type=int, default=8, help="parallel client processes")
    p.add_argument("--zipf-theta", type=float, default=1.0)
    p.add_argument("--verify", type=int, default=500, help="objects compared byte for byte")
    p.add_argument("--large-size", type=parse_size, default=1 << 30)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--scratch", help="directory for everything (default: a temporary one)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--large-rounds", type=int, default=3,
                   help="rounds of the large-object runs; each figure is their median")
    p.add_argument("--only-large", action="store_true",
                   help="run the large-object phase (4) alone: no file set, no nginx")
    return p.parse_args(argv)


def write_random(path: str, size: int) -> None:
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n


def s3_call(conn: http.client.HTTPConnection, cred: tuple[str, str], method: str, path: str,
            params: dict[str, str] | None = None, body=None, length: int | None = None,
            extra: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One signed request on `conn` (a body of `length` bytes, bytes or a file); the
    status, the headers (lower-case names) and the body."""
    query = canonical_query(params or {})
    extra = dict(extra or {})
    if body is not None:
        extra["content-length"] = str(len(body) if length is None else length)
    headers = sign(method, f"{conn.host}:{conn.port}", path, *cred, extra, query)
    conn.request(method, quote_path(path) + (f"?{query}" if query else ""), body=body,
                 headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


class Connections:
    """One keep-alive connection per thread, all closed at the end. http.client sends a
    file body in `blocksize` pieces (8 KiB by default, which costs the client more CPU
    than the gateway's whole PUT path on two cores); real clients send a MiB or more."""

    def __init__(self, addr: tuple[str, int]):
        self.addr, self.local, self.all = addr, threading.local(), []
        self.lock = threading.Lock()

    def get(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection(*self.addr, timeout=600,
                                                                blocksize=PIECE)
            with self.lock:
                self.all.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.all:
            conn.close()


class Meter:
    """Wall time and CPU time of one timed step: the client's (this process and the
    children it waited for, such as curl) and the gateway's (`cairn serve`)."""

    def __init__(self, server_pid: int | None):
        self.server_pid = server_pid

    def _cpu(self) -> tuple[float, float]:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        client = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
        server = 0.0
        if self.server_pid:
            with open(f"/proc/{self.server_pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            server = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return client, server

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.cpu0 = self._cpu()

    def stop(self) -> dict:
        wall = time.monotonic() - self.t0
        client, server = self._cpu()
        return {"wall_s": wall, "client_cpu_s": client - self.cpu0[0],
                "server_cpu_s": server - self.cpu0[1]}


def fetch_to(addr, cred, key: str, out: str) -> None:
    """An untimed GET of `key` into the file `out`, to check the bytes a timed GET
    (which keeps none) was sent."""
    conns = Connections(addr)
    try:
        conn = conns.get()
        conn.request("GET", quote_path(key),
                     headers=sign("GET", f"{conn.host}:{conn.port}", key, *cred))
        resp = conn.getresponse()
        with open(out, "wb") as f:
            while piece := resp.read(PIECE):
                f.write(piece)
        if resp.status != 200:
            raise BenchError(f"GET of {key}: HTTP {resp.status}")
    finally:
        conns.close()


def single_put_get(addr, cred, key: str, path: str, out: str, size: int,
                   dropper: CacheDropper, meter: Meter) -> tuple[dict, dict]:
    """A single-part PUT of `path` and a GET on one connection (Python http.client),
    whose bytes are received into one buffer and dropped: the PUT's and the GET's
    Meter figures. `out` gets the object afterwards, untimed."""
    conns = Connections(addr)
    try:
        dropper.drop()
        meter.start()
        with open(path, "rb") as f:
            status, _, data = s3_call(conns.get(), cred, "PUT", key, body=f, length=size)
        put = meter.stop()
        if status != 200:
            raise BenchError(f"PUT of {key}: HTTP {status}: {data[:300]!r}")
        dropper.drop()
        buf = memoryview(bytearray(PIECE))
        meter.start()
        conn = conns.get()
        conn.request("GET", quote_path(key),
                     headers=sign("GET", f"{conn.host}:{conn.port}", key, *cred))
        resp = conn.getresponse()
        got = 0
        while n := resp.readinto(buf):
            got += n
        get = meter.stop()
        if resp.status != 200 or got != size:
            raise BenchError(f"GET of {key}: HTTP {resp.status}, {got} bytes")
    finally:
        conns.close()
    fetch_to(addr, cred, key, out)
    return put, get


def curl_put_get(addr, cred, key: str, path: str, out: str, size: int,
                 dropper: CacheDropper, meter: Meter) -> tuple[dict, dict]:
    """The same single-part PUT and GET by curl on presigned URLs: a client in C, whose
    CPU share is small, to tell the gateway's cost from the Python client's. The GET
    goes to /dev/null; `out` gets the object afterwards, untimed."""
    host = f"{addr[0]}:{addr[1]}"
    runs = []
    for method, args in (("PUT", ["-T", path]), ("GET", ["-o", "/dev/null"])):
        url = presign(method, host, key, *cred)
        dropper.drop()
        meter.start()
        p = subprocess.run(["curl", "-sS", "--fail-with-body", "-H", "Expect:", *args, url],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        runs.append(meter.stop())
        if p.returncode != 0:
            raise BenchError(f"curl {method} of {key}: exit {p.returncode}: "
                             f"{(p.stdout + p.stderr)[:300]!r}")
    fetch_to(addr, cred, key, out)
    return runs[0], runs[1]


def parallel_put_get(addr, cred, key: str, path: str, out: str, size: int,
                     dropper: CacheDropper, meter: Meter) -> tuple[dict, dict]:
    """What the AWS CLI and rclone do with a large file: a multipart upload of
    LARGE_PART parts, and ranged GETs of LARGE_PART into `out`, LARGE_CONNECTIONS
    requests at a time, each on its own connection: the PUT's and the GET's Meter
    figures."""
    conns = Connections(addr)
    pieces = [(n + 1, at, min(LARGE_PART, size - at))
              for n, at in enumerate(range(0, size, LARGE_PART))]
    try:
        with open(path, "rb") as src, ThreadPoolExecutor(LARGE_CONNECTIONS) as pool:
            dropper.drop()
            meter.start()
            status, _, data = s3_call(conns.get(), cred, "POST", key, {"uploads": ""})
            upload = re.search(rb"<UploadId>([^<]+)</UploadId>", data)
            if status != 200 or not upload:
                raise BenchError(f"CreateMultipartUpload: HTTP {status}: {data[:300]!r}")
            upload = upload.group(1).decode()

            def put_part(piece):
                n, at, length = piece
                body = os.pread(src.fileno(), length, at)
                status, headers, data = s3_call(conns.get(), cred, "PUT", key, {
                    "partNumber": str(n), "uploadId": upload}, body)
                if status != 200:
                    raise BenchError(f"UploadPart {n}: HTTP {status}: {data[:300]!r}")
                return n, headers["etag"]

            etags = list(pool.map(put_part, pieces))
            done = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
                           for n, e in etags)
            status, _, data = s3_call(
                conns.get(), cred, "POST", key, {"uploadId": upload},
                f"<CompleteMultipartUpload>{done}</CompleteMultipartUpload>".encode())
            put = meter.stop()
            if status != 200 or b"<Error>" in data:
                raise BenchError(f"CompleteMultipartUpload: HTTP {status}: {data[:300]!r}")
        dropper.drop()
        meter.start()

        def get_range(piece):
            _, at, length = piece
            status, _, data = s3_call(conns.get(), cred, "GET", key, extra={
                "range": f"bytes={at}-{at + length - 1}"})
            if status != 206 or len(data) != length:
                raise BenchError(f"GET of {key} at {at}: HTTP {status}, {len(data)} bytes")
            return at, data

        with ThreadPoolExecutor(LARGE_CONNECTIONS) as pool:
            ranges = list(pool.map(get_range, pieces))
        get = meter.stop()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for at, data in ranges:
                os.pwrite(fd, data, at)
        finally:
            os.close(fd)
    finally:
        conns.close()
    return put, get


# The large-object runs: name, function, key, label in the report.
LARGE_RUNS = (
    ("single", single_put_get, "large.bin",
     "single-part PUT, one GET, one connection (Python)"),
    ("curl", curl_put_get, "large-curl.bin",
     "single-part PUT, one GET, curl on presigned URLs"),
    ("parallel", parallel_put_get, "large-multipart.bin",
     f"multipart PUT and ranged GETs, {LARGE_PART >> 20} MiB, {LARGE_CONNECTIONS} "
     "connections (Python)"),
)


def large_phase(args, serve: Serve, cairn_bin: str, repo: str, scratch: str,
                runner: Runner, dropper: CacheDropper) -> dict:
    """Each measurement stores its own random file: bytes already stored would only be
    deduplicated. `--large-rounds` rounds, each of every S3 run and then `cairn put`/`get`
    on the stopped repository; every figure is the median of its rounds, so that a
    stretch of a noisy host's CPU or disk moves one round, not a ratio."""
    path = os.path.join(scratch, "large.bin")
    out = os.path.join(scratch, "large.out")
    size = args.large_size
    mb = size / 1e6
    rounds = {name: [] for name, *_ in LARGE_RUNS}
    store = []
    for rnd in range(args.large_rounds):
        if rnd:
            serve.start()
        meter = Meter(serve.pid())
        for name, run, key, label in LARGE_RUNS:
            log(f"large object, round {rnd + 1} of {args.large_rounds}: {name} PUT and GET "
                f"of {size >> 20} MiB of random data")
            write_random(path, size)
            put, get = run(serve.addr, serve.key, f"/{BUCKET}/{rnd}-{key}", path, out, size,
                           dropper, meter)
            # Compared after the clock stops, as `cairn get`'s output is not hashed
            # either. Every timed GET keeps no bytes (`cairn get` writes to /dev/null
            # too): a client writing a file on the same two cores measured itself, not
            # the server.
            if file_digest(out) != file_digest(path):
                raise BenchError(f"{name} GET of the large object returned other bytes")
            put["mb_s"], get["mb_s"] = mb / put["wall_s"], mb / get["wall_s"]
            rounds[name].append({"put": put, "get": get})
            log(f"  PUT {put['mb_s']:.0f} MB/s, GET {get['mb_s']:.0f} MB/s")
            os.unlink(out)
        serve.stop()
        write_random(path, size)
        dropper.drop()
        put = runner.run([cairn_bin, "--repo", repo, "-q", "put", path, "--name",
                          f"large-{rnd}"], name=f"cairn-put-large-{rnd}")
        dropper.drop()
        get = runner.run([cairn_bin, "--repo", repo, "-q", "get", f"large-{rnd}", "-o",
                          "/dev/null", "--force"], name=f"cairn-get-large-{rnd}")
        store.append({"put_mb_s": mb / put["wall_s"], "get_mb_s": mb / get["wall_s"],
                      "put_cpu_s": put["cpu_s"], "get_cpu_s": get["cpu_s"]})
        log(f"  cairn put {store[-1]['put_mb_s']:.0f} MB/s, "
            f"get {store[-1]['get_mb_s']:.0f} MB/s")
    os.unlink(path)

    def median_of(figures: list[dict]) -> dict:
        return {k: statistics.median(f[k] for f in figures) for k in figures[0]}

    r = {"bytes": size, "part": LARGE_PART, "connections": LARGE_CONNECTIONS,
         "rounds": args.large_rounds, "runs": {}, "store_rounds": store}
    for name, _, _, label in LARGE_RUNS:
        r["runs"][name] = {"label": label, "rounds": rounds[name],
                           "put": median_of([x["put"] for x in rounds[name]]),
                           "get": median_of([x["get"] for x in rounds[name]])}
    for k, v in median_of(store).items():
        r[f"store_{k}"] = v
    return r


def file_digest(path: str) -> bytes:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


def create_key(binary: str, repo: str) -> tuple[str, str]:
    out = subprocess.run([binary, "--repo", repo, "access-key", "create"],
                         capture_output=True, text=True, timeout=60)
    key_id = re.search(r"aws_access_key_id = (\S+)", out.stdout)
    secret = re.search(r"aws_secret_access_key = (\S+)", out.stdout)
    if out.returncode != 0 or not key_id or not secret:
        raise BenchError(f"cairn access-key create failed:\n{out.stderr}")
    return key_id.group(1), secret.group(1)


def write_ext4(root: str, n: int, seed: int) -> None:
    made = set()
    for i in range(n):
        path = os.path.join(root, BUCKET, key_of(i))
        d = os.path.dirname(path)
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        with open(path, "wb") as f:
            f.write(body_of(i, seed))


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        raise BenchError("run as root (FUSE mounts, dropping the page cache, nginx)")
    cairn_bin = os.path.abspath(args.cairn)
    common.ensure_tools({"fusermount3": "fuse3", "curl": "curl"} if args.only_large else
                        {"nginx": "nginx", "fusermount3": "fuse3", "curl": "curl"})
    scratch = args.scratch or tempfile.mkdtemp(prefix="cairn-bench-gateway-")
    os.makedirs(scratch, exist_ok=True)
    runner = Runner(os.path.join(scratch, "logs"))
    dropper = CacheDropper()
    repo, mnt, ext4 = (os.path.join(scratch, d) for d in ("repo", "mnt", "ext4"))
    os.makedirs(mnt, exist_ok=True)
    runner.run([cairn_bin, "--repo", repo, "init"], name="cairn-init")
    serve = Serve(cairn_bin, repo, mnt, runner.logdir)
    serve.key = create_key(cairn_bin, repo)
    nginxes: list[Nginx] = []
    results: dict = {"objects": args.objects, "clients": args.clients, "gets": args.gets,
                     "cairn": common.tool_version([cairn_bin, "--version"]),
                     "nginx": None if args.only_large else common.tool_version(["nginx", "-v"])}
    pool = multiprocessing.get_context("fork").Pool(args.clients)
    try:
        serve.start()
        s3 = Target("cairn S3", serve.addr, f"/{BUCKET}", serve.key)
        status, body = request(s3.spec(), "PUT", "")  # CreateBucket
        if status != 200:
            raise BenchError(f"CreateBucket: HTTP {status}: {body[:300]!r}")
        if not args.only_large:
            small_phases(args, pool, serve, s3, scratch, repo, mnt, ext4, nginxes, results,
                         dropper)
        results["large"] = large_phase(args, serve, cairn_bin, repo, scratch, runner, dropper)
        results["page_cache_dropped"] = dropper.ok
    finally:
        pool.terminate()
        for n in nginxes:
            n.stop()
        serve.stop()
        if not args.keep and not args.scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


def small_phases(args, pool, serve: Serve, s3: Target, scratch: str, repo: str, mnt: str,
                 ext4: str, nginxes: list, results: dict, dropper: CacheDropper) -> None:
    """Phases 1-3: the file set PUT, GET from the three targets, storage reads per GET."""
    log(f"PUT {args.objects:,} objects through the gateway ({args.clients} clients)")
    results["put"] = run_puts(pool, s3, args.objects, args.seed, args.clients)
    log(f"  {results['put']['per_s']:,.0f} PUT/s")
    log("writing the same objects into the ext4 directory")
    write_ext4(ext4, args.objects, args.seed)
    nginx_ext4 = Nginx(ext4, scratch, "ext4")
    nginxes.append(nginx_ext4)
    nginx_fuse = Nginx(mnt, scratch, "fuse")
    nginxes.append(nginx_fuse)
    rng = random.Random(args.seed)
    patterns = {
        "uniform": [rng.randrange(args.objects) for _ in range(args.gets)],
        "zipf": zipf_sample(args.objects, args.gets, args.zipf_theta, args.seed + 1),
    }
    sample = rng.sample(range(args.objects), min(args.verify, args.objects))
    targets = {"cairn S3": lambda: Target("cairn S3", serve.addr, f"/{BUCKET}", serve.key),
               "nginx ext4": lambda: nginx_ext4.target("nginx ext4"),
               "nginx FUSE": lambda: nginx_fuse.target("nginx FUSE")}
    for name, make in targets.items():
        log(f"{name}: comparing {len(sample)} objects byte for byte")
        verify(pool, make(), sample, args.seed, args.clients)
    runs = results["get"] = {}
    for pattern, idxs in patterns.items():
        for name, make in targets.items():
            serve.stop()
            dropper.drop()
            serve.start()
            cold = run_gets(pool, make(), idxs, args.clients)
            warm = run_gets(pool, make(), idxs, args.clients)
            runs[f"{pattern} {name}"] = {"cold": cold, "warm": warm}
            log(f"{pattern:8} {name:10}: cold {cold['per_s']:,.0f} GET/s, "
                f"warm {warm['per_s']:,.0f} GET/s")
    inline_max = 16 << 10
    kinds = {"inline": [], "chunked": []}
    for i in range(min(args.objects, 200_000)):
        kinds["inline" if len(body_of(i, args.seed)) <= inline_max else "chunked"].append(i)
    reads = results["reads_per_cold_get"] = {}
    for kind, idxs in kinds.items():
        idxs = [rng.choice(idxs) for _ in range(min(args.gets, 5000))] if idxs else []
        serve.stop()
        dropper.drop()
        serve.start()
        before = counters(repo)
        run_gets(pool, targets["cairn S3"](), idxs, args.clients)
        reads[kind] = reads_per_get(before, counters(repo), len(idxs))


def report(r: dict) -> None:
    if "put" in r:
        report_small(r)
    lg = r["large"]
    print(f"\nlarge object ({lg['bytes'] >> 20} MiB, each run its own random bytes; medians of "
          f"{lg['rounds']} rounds): "
          f"cairn put {lg['store_put_mb_s']:.0f} MB/s ({lg['store_put_cpu_s']:.1f} CPU s), "
          f"get {lg['store_get_mb_s']:.0f} MB/s ({lg['store_get_cpu_s']:.1f} CPU s)")
    rows = []
    for run in lg["runs"].values():
        p, g = run["put"], run["get"]
        rows.append([run["label"], f"{p['mb_s']:.0f}", f"{p['mb_s'] / lg['store_put_mb_s']:.2f}",
                     f"{p['client_cpu_s']:.1f} / {p['server_cpu_s']:.1f}", f"{g['mb_s']:.0f}",
                     f"{g['mb_s'] / lg['store_get_mb_s']:.2f}",
                     f"{g['client_cpu_s']:.1f} / {g['server_cpu_s']:.1f}"])
    print(fmt_table(["large object over S3", "PUT MB/s", "x put", "CPU s client / gateway",
                     "GET MB/s", "x get", "CPU s client / gateway"], rows))
    print()
    targets = []
    if "put" in r:
        targets = small_targets(r)
    for name, run in lg["runs"].items():
        targets.append(common.target(f"large PUT, {name}, x cairn put",
                                     run["put"]["mb_s"] / lg["store_put_mb_s"], 0.8))
        targets.append(common.target(f"large GET, {name}, x cairn get",
                                     run["get"]["mb_s"] / lg["store_get_mb_s"], 0.8))
    rows = [[t["name"], "-" if t["value"] is None else f"{t['value']:.2f}",
             f"{'<=' if t.get('kind') == 'le' else '>='} {t['target']}", t["status"]]
            for t in targets]
    print(fmt_table(["Targets", "value", "goal", "status"], rows))


def report_small(r: dict) -> None:
    print(f"\ncairn bench gateway: {r['objects']:,} objects of 4-20 KiB, {r['clients']} "
          f"clients, {r['gets']:,} GETs per run; {r['cairn']}; nginx {r['nginx']}")
    if not r.get("page_cache_dropped", True):
        print("WARNING: the page cache could not be dropped: cold figures are warm")
    print(f"\nPUT through the gateway: {r['put']['per_s']:,.0f} objects/s "
          f"({r['put']['seconds']:.1f} s)\n")
    rows = []
    for label, run in r["get"].items():
        for temp in ("cold", "warm"):
            g = run[temp]
            rows.append([f"{label} {temp}", f"{g['per_s']:,.0f}", f"{g['mb_s']:.1f}",
                         f"{g['p50_ms']:.2f}", f"{g['p99_ms']:.2f}"])
    print(fmt_table(["GET run", "GET/s", "MB/s", "p50 ms", "p99 ms"], rows))
    print()
    rows = []
    for kind, v in r["reads_per_cold_get"].items():
        if v is None:
            rows.append([kind] + ["n/a"] * (len(READ_KINDS) + 1))
        else:
            rows.append([kind] + [f"{v[k]:.2f}" for k in READ_KINDS] + [f"{v['total']:.2f}"])
    print(fmt_table(["storage reads per cold GET", "metadata", "index", "containers",
                     "total"], rows))


def small_targets(r: dict) -> list[dict]:
    targets = []
    for kind, goal in (("inline", 1.0), ("chunked", 2.0)):
        v = r["reads_per_cold_get"].get(kind)
        targets.append(common.target(f"storage reads per cold GET, {kind}",
                                     v["total"] if v else None, goal, "le"))
    for pattern in ("uniform", "zipf"):
        s3 = r["get"][f"{pattern} cairn S3"]
        ng = r["get"][f"{pattern} nginx ext4"]
        targets.append(common.target(f"cold GET/s, {pattern}, x nginx ext4",
                                     s3["cold"]["per_s"] / ng["cold"]["per_s"], 1.0))
        targets.append(common.target(f"warm GET/s, {pattern}, x nginx ext4",
                                     s3["warm"]["per_s"] / ng["warm"]["per_s"], 0.5))
    return targets


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(1)
