#!/usr/bin/env python3
"""Issue 18's cluster benchmark: metadata on redb, on etcd and sharded over etcd clusters; data
shared by two clients.

Everything is measured in one run, on one machine, on the same disk:

 * "ext4": a plain directory (the kernel's own metadata, for scale);
 * "cairn redb": `cairn mount` of a fresh repository, its namespace in the embedded
   redb file;
 * "cairn etcd 1x1" / "1x3": `--meta etcd://.../bench` on one etcd cluster of one member
   and of three members (every write on a quorum of two), started here on loopback
   (fsync on, as etcd always runs);
 * "cairn ring 2x1" / "3x1": `cairn cluster init` over a control cluster and 2 or 3 data
   clusters of one member each, mounted with `--cluster` (RFS placement: a directory's
   entries in its shard; a rename across shards goes through an intent).

Metadata phases, each timed over --workers processes working at once, each in a directory
of its own (so the figure is what parallel clients of one mount get):
 1. create: --files empty files (open O_CREAT|O_EXCL, close);
 2. stat: every file, after a remount (the kernel's caches empty, every lookup reaches
    the daemon);
 3. readdir: each worker lists its directory --listings times;
 4. rename: every file renamed inside its directory;
 5. rename across: every file moved into the next worker's directory.
Then every name is checked (listing of each directory equals what was made): a wrong
name fails the run.

Two clients (issue 18's "data across nodes"): two client repositories (`init --join`) of
one file system, namespace on one etcd, containers on a `cairn chunkd` branch both name,
each mounted:
 6. duplicate: client A writes --dup-size random bytes and closes; client B writes the same
    bytes to another name: the bytes the shared branch grew by for B's copy, per byte;
 7. together: A and B each write --together-size bytes of their own at the same moment:
    MB/s of the two together, against one client writing the same amount alone.

This is a benchmark, not a test: it prints the figures and the ratios; the exit status
is 0 when every command succeeded, 1 when one failed (with its stderr).

Scaling (issue 18: two cores cannot show scaling with real processes): `cairn bench
cluster-trace` records which etcd cluster each operation asks and how, with the namespace
sharded over m simulated clusters (the engine's own code), for each m of
--scaling-machines; `cluster_model.py` replays the traces on m machines with RFS placement
(clusters of 1 and of 3 members) and service times calibrated from the etcd 1x1 and 1x3
runs above. Printed: simulated ops/s per phase and the scaling against one machine, with
the issue's targets (reads, a stat: >= 0.8 m; writes, a create: >= 0.8 m / n).
`--scaling-only --service-ms READ,LEAD,FOLLOW` runs only that, with given service times.

Usage (as root, from the repository root, after `cargo build --release`):

    cairn bench cluster -- --files 4000
    python3 bench/cluster.py --cairn target/release/cairn --files 4000 --json out.json

etcd (Debian's etcd-server) is installed with apt-get when missing. Progress goes to
stderr, the tables to stdout. Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True  # no bench/__pycache__
from common import Mounts, ensure_tools, is_mounted, tool_version  # noqa: E402
from ingest import BenchError, Runner, fmt_table, log  # noqa: E402
import cluster_model  # noqa: E402

PHASES = ("create", "stat", "readdir", "rename", "rename across")
ETCD_START_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """An etcd cluster of `members` processes on loopback, data under `base`."""

    def __init__(self, base: str, members: int, logdir: str, name: str):
        self.procs: list[subprocess.Popen] = []
        self.clients = [free_port() for _ in range(members)]
        peers = [free_port() for _ in range(members)]
        initial = ",".join(f"{name}{i}=http://127.0.0.1:{p}" for i, p in enumerate(peers))
        for i in range(members):
            data = os.path.join(base, f"{name}{i}")
            os.makedirs(data, exist_ok=True)
            err = open(os.path.join(logdir, f"etcd-{name}{i}.log"), "wb")
            cmd = ["etcd", "--name", f"{name}{i}", "--data-dir", data,
                   "--listen-client-urls", f"http://127.0.0.1:{self.clients[i]}",
                   "--advertise-client-urls", f"http://127.0.0.1:{self.clients[i]}",
                   "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
                   "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
                   "--initial-cluster", initial, "--initial-cluster-state", "new",
                   "--initial-cluster-token", name]
            self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err,
                                               stderr=err, close_fds=True))
            err.close()
        self.wait_ready()

    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.clients)

    def healthy(self) -> bool:
        """Every member answers `/health` with `"health":"true"` (a leader is elected)."""
        for port in self.clients:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if json.load(r).get("health") != "true":
                        return False
            except (OSError, ValueError):
                return False
        return True

    def wait_ready(self) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < ETCD_START_S:
            if self.healthy():
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        self.stop()
        raise BenchError(f"etcd ({self.endpoints()}) did not become healthy")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---------------------------------------------------------------- the work of one worker

def names(n: int, worker: int, tag: str) -> list[str]:
    return [f"{tag}-{worker}-{i:06d}" for i in range(n)]


def work(phase: str, root: str, worker: int, workers: int, n: int, listings: int,
         barrier, out) -> None:
    """One worker's part of a phase, started at the barrier; its op count to `out`."""
    mine = os.path.join(root, f"w{worker}")
    nxt = os.path.join(root, f"w{(worker + 1) % workers}")
    barrier.wait()
    ops = 0
    if phase == "create":
        for nm in names(n, worker, "f"):
            os.close(os.open(os.path.join(mine, nm), os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                             0o644))
            ops += 1
    elif phase == "stat":
        for nm in names(n, worker, "f"):
            os.stat(os.path.join(mine, nm))
            ops += 1
    elif phase == "readdir":
        for _ in range(listings):
            ops += len(os.listdir(mine))
    elif phase == "rename":
        for a, b in zip(names(n, worker, "f"), names(n, worker, "g")):
            os.rename(os.path.join(mine, a), os.path.join(mine, b))
            ops += 1
    elif phase == "rename across":
        for a, b in zip(names(n, worker, "g"), names(n, worker, "h")):
            os.rename(os.path.join(mine, a), os.path.join(nxt, b))
            ops += 1
    out.put(ops)


def run_phase(phase: str, root: str, workers: int, per: int, listings: int) -> dict:
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=work, args=(phase, root, w, workers, per, listings,
                                             barrier, out)) for w in range(workers)]
    for p in procs:
        p.start()
    barrier.wait()
    t0 = time.monotonic()
    ops = sum(out.get() for _ in procs)
    secs = time.monotonic() - t0
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise BenchError(f"a {phase} worker failed (exit {p.exitcode}) under {root}")
    return {"ops": ops, "seconds": secs, "ops_s": ops / secs if secs else None}


def verify(root: str, workers: int, per: int) -> None:
    for w in range(workers):
        want = sorted(names(per, (w - 1) % workers, "h"))
        got = sorted(os.listdir(os.path.join(root, f"w{w}")))
        if got != want:
            raise BenchError(f"{root}/w{w} lists {len(got)} names, not the {len(want)} "
                             f"moved there (first difference: "
                             f"{next((a, b) for a, b in zip(got + [None], want + [None]) if a != b)})")


# ---------------------------------------------------------------- targets

def measure(label: str, root: str, remount, args) -> dict:
    per = args.files // args.workers
    for w in range(args.workers):
        os.makedirs(os.path.join(root, f"w{w}"), exist_ok=True)
    res = {}
    for phase in PHASES:
        if phase == "stat":
            root = remount()
        res[phase] = run_phase(phase, root, args.workers, per, args.listings)
        log(f"{label}: {phase}: {res[phase]['ops_s']:,.0f} ops/s")
    verify(root, args.workers, per)
    return res


def measure_mounted(label: str, repo: str, mnt: str, extra: tuple, mounts: Mounts,
                    args) -> dict:
    """The phases on `cairn mount` of repo (with `extra` options), remounted for stat."""
    mounts.cairn_mount(repo, mnt, label, extra)

    def remount() -> str:
        mounts.cairn_umount(mnt)
        mounts.cairn_mount(repo, mnt, label, extra)
        return mnt
    res = measure(label, mnt, remount, args)
    mounts.cairn_umount(mnt)
    return res


def run_cairn(label: str, work_dir: str, runner: Runner, mounts: Mounts, args,
              members: int | None) -> dict:
    repo = os.path.join(work_dir, f"repo-{label.replace(' ', '-')}")
    mnt = os.path.join(work_dir, "mnt")
    runner.run([args.cairn, "--repo", repo, "-q", "init"], name="cairn-init",
               env={"CAIRN_REPO": None})
    etcd = None
    extra: tuple = ()
    if members:
        etcd = Etcd(os.path.join(work_dir, "etcd-" + label.replace(" ", "-")), members,
                    runner.logdir, "e" + str(members))
        extra = ("--meta", f"etcd://{etcd.endpoints()}/bench")
    try:
        return measure_mounted(label, repo, mnt, extra, mounts, args)
    finally:
        if is_mounted(mnt):
            mounts.cleanup()
        if etcd:
            etcd.stop()


def run_ext4(work_dir: str, args) -> dict:
    root = os.path.join(work_dir, "ext4")
    os.makedirs(root)

    def remount() -> str:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return root
    return measure("ext4", root, remount, args)


def run_ring(label: str, work_dir: str, runner: Runner, mounts: Mounts, args,
             data_clusters: int) -> dict:
    """The metadata phases on a file system sharded over `data_clusters` etcd clusters."""
    tag = label.replace(" ", "-")
    base = os.path.join(work_dir, "etcd-" + tag)
    control = Etcd(base, 1, runner.logdir, "c")
    data = [Etcd(base, 1, runner.logdir, f"d{i}") for i in range(data_clusters)]
    repo = os.path.join(work_dir, f"repo-{tag}")
    mnt = os.path.join(work_dir, "mnt")
    try:
        runner.run([args.cairn, "--repo", repo, "-q", "init"], name="cairn-init",
                   env={"CAIRN_REPO": None})
        cmd = [args.cairn, "--repo", repo, "-q", "cluster", "init", "--control",
               f"etcd://{control.endpoints()}", "--fsid", "bench", "--json"]
        for d in data:
            cmd += ["--data", f"etcd://{d.endpoints()}"]
        made = runner.run(cmd, name="cluster-init", env={"CAIRN_REPO": None}, capture=True)
        url = json.loads(made["stdout"])["url"]
        extra = ("--cluster", url)
        return measure_mounted(label, repo, mnt, extra, mounts, args)
    finally:
        if is_mounted(mnt):
            mounts.cleanup()
        for e in [control, *data]:
            e.stop()


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def write_file(path: str, data_path: str) -> float:
    """Copies data_path to path (1 MiB pieces) and fsyncs it; seconds."""
    t0 = time.monotonic()
    with open(data_path, "rb") as src, open(path, "wb") as dst:
        while piece := src.read(1 << 20):
            dst.write(piece)
        dst.flush()
        os.fsync(dst.fileno())
    return time.monotonic() - t0


def random_file(path: str, size: int) -> None:
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 8 << 20)
            f.write(os.urandom(n))
            left -= n


def run_two_clients(work_dir: str, runner: Runner, mounts: Mounts, args) -> dict:
    """Phases 6 and 7: two client repositories over one etcd and one chunkd branch."""
    base = os.path.join(work_dir, "two")
    os.makedirs(base)
    etcd = Etcd(os.path.join(base, "etcd"), 1, runner.logdir, "t")
    token = os.path.join(base, "token")
    with open(token, "w") as f:
        f.write(os.urandom(24).hex())
    blobs = os.path.join(base, "blobs")
    port = free_port()
    err = open(os.path.join(runner.logdir, "chunkd.log"), "wb")
    chunkd = subprocess.Popen([args.cairn, "chunkd", "--dir", blobs, "--listen",
                               f"127.0.0.1:{port}", "--token-file", token],
                              stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    err.close()
    a, b = os.path.join(base, "a"), os.path.join(base, "b")
    ma, mb = os.path.join(base, "mnt-a"), os.path.join(base, "mnt-b")
    url = f"etcd://{etcd.endpoints()}/two"
    try:
        deadline = time.monotonic() + ETCD_START_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or chunkd.poll() is not None:
                    raise BenchError("cairn chunkd did not start; see chunkd.log")
                time.sleep(0.1)
        runner.run([args.cairn, "--repo", a, "-q", "init"], name="cairn-init",
                   env={"CAIRN_REPO": None})
        with open(os.path.join(a, "cairn.toml"), "a") as f:
            f.write(f"""
[[branch]]
name = "shared"
kind = "chunkd"
url = "http://127.0.0.1:{port}"
token_file = "{token}"

[default_rule]
policy = "single"
branches = ["shared"]
""")
        runner.run([args.cairn, "--repo", b, "-q", "init", "--join", a, "--client", "1"],
                   name="cairn-join", env={"CAIRN_REPO": None})
        mounts.cairn_mount(a, ma, "client A", ("--meta", url))
        mounts.cairn_mount(b, mb, "client B", ("--meta", url))
        res: dict = {}
        src = os.path.join(base, "dup.bin")
        random_file(src, args.dup_size)
        write_file(os.path.join(ma, "dup-a.bin"), src)
        before = dir_bytes(blobs)
        write_file(os.path.join(mb, "dup-b.bin"), src)
        grew = dir_bytes(blobs) - before
        res["duplicate"] = {"size": args.dup_size, "branch_grew": grew,
                            "per_byte": grew / args.dup_size}
        log(f"duplicate: the branch grew {grew:,} B for B's copy of {args.dup_size:,} B "
            f"({100 * grew / args.dup_size:.2f}%)")
        os.remove(src)
        srcs = []
        for who in ("alone", "a", "b"):
            p = os.path.join(base, f"{who}.bin")
            random_file(p, args.together_size)
            srcs.append(p)
        alone_s = write_file(os.path.join(ma, "alone.bin"), srcs[0])
        times: dict = {}

        def write(who: str, mnt: str, src_path: str) -> None:
            times[who] = write_file(os.path.join(mnt, f"together-{who}.bin"), src_path)
        ts = [threading.Thread(target=write, args=("a", ma, srcs[1])),
              threading.Thread(target=write, args=("b", mb, srcs[2]))]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        both_s = time.monotonic() - t0
        if set(times) != {"a", "b"}:
            raise BenchError("a client's write failed while writing together")
        alone = args.together_size / alone_s / 1e6
        together = 2 * args.together_size / both_s / 1e6
        res["together"] = {"size": args.together_size, "alone_mb_s": alone,
                           "together_mb_s": together}
        log(f"together: {together:.1f} MB/s for two clients, {alone:.1f} MB/s alone")
        for p in srcs:
            os.remove(p)
        mounts.cairn_umount(mb)
        mounts.cairn_umount(ma)
        return res
    finally:
        mounts.cleanup()
        chunkd.terminate()
        chunkd.wait()
        etcd.stop()


def run_scaling(results: dict, args) -> dict:
    """The scaling simulation, calibrated from this run's etcd 1x1 and 1x3 figures (or
    --service-ms)."""
    if args.service_ms:
        read, lead, follow = (float(v) / 1000 for v in args.service_ms.split(","))
        times = cluster_model.ServiceTimes(read, lead, follow)
        source = "--service-ms"
    else:
        one = cluster_model.trace(args.cairn, 1, args.scaling_dirs, args.scaling_files)
        e1, e3 = results["cairn etcd 1x1"], results["cairn etcd 1x3"]
        times = cluster_model.calibrate(one, e1["stat"]["ops_s"], e1["create"]["ops_s"],
                                        e3["create"]["ops_s"])
        source = "calibrated from cairn etcd 1x1 and 1x3"
    machines = [int(m) for m in args.scaling_machines.split(",")]
    if machines[0] != 1:
        machines.insert(0, 1)
    runs = cluster_model.scaling(args.cairn, times, machines, args.scaling_dirs,
                                 args.scaling_files, log)
    return {"service_ms": [times.read * 1000, times.lead * 1000, times.follow * 1000],
            "source": source, "runs": runs}


SIM_PHASES = ("stat", "create", "readdir", "rename", "rename-across", "mkdir")


def report_scaling(sim: dict) -> str:
    runs = sim["runs"]
    base = runs["1x1"]
    rows = []
    targets = []
    for label, r in runs.items():
        m, n = r["machines"], r["members"]
        rows.append([label] + [f"{r[p]:,.0f} ({r[p] / base[p]:.1f}x)" for p in SIM_PHASES])
        if m == 1:
            continue
        reads, writes = r["stat"] / base["stat"], r["create"] / base["create"]
        targets.append([f"reads (stat) on {m} machines, clusters of {n}", f"{reads:.2f}",
                        f">= {0.8 * m:.1f}", "MET" if reads >= 0.8 * m else "NOT MET"])
        targets.append([f"writes (create) on {m} machines, clusters of {n}", f"{writes:.2f}",
                        f">= {0.8 * m / n:.1f}",
                        "MET" if writes >= 0.8 * m / n else "NOT MET"])
    rd, ld, fo = sim["service_ms"]
    out = (f"scaling simulation: m machines x n members per cluster, simulated ops/s (x one "
           f"machine); service ms read {rd:.3f}, leader {ld:.3f}, follower {fo:.3f} "
           f"({sim['source']})\n")
    out += fmt_table(["machines x members", *SIM_PHASES], rows)
    out += "\n\n" + fmt_table(["target", "scaling", "goal", "status"], targets)
    return out


def report(results: dict, args) -> str:
    base = results.get("cairn redb", {})
    rows = []
    for label, res in results.items():
        if label in ("two clients", "scaling"):
            continue
        row = [label]
        for phase in PHASES:
            v = res[phase]["ops_s"]
            b = base.get(phase, {}).get("ops_s")
            row.append(f"{v:,.0f}" + (f" ({v / b:.2f}x)" if b and label != "cairn redb" else ""))
        rows.append(row)
    head = (f"cairn metadata benchmark: {args.files:,} files, {args.workers} workers "
            f"at once, ops/s (x the redb mount)")
    out = head + "\n" + fmt_table(["target", *PHASES], rows)
    two = results.get("two clients")
    if two:
        d, t = two["duplicate"], two["together"]
        out += "\n\ntwo clients on one file system (etcd namespace, chunkd branch)\n"
        out += fmt_table(["measure", "figure", "target", "status"], [
            ["bytes stored for a duplicate, per byte", f"{d['per_byte']:.4f}", "<= 0.01",
             "MET" if d["per_byte"] <= 0.01 else "NOT MET"],
            ["two clients writing at once, MB/s", f"{t['together_mb_s']:.1f}",
             f"one alone: {t['alone_mb_s']:.1f}", "-"],
        ])
    if "scaling" in results:
        out += "\n\n" + report_scaling(results["scaling"])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cairn", default="target/release/cairn")
    ap.add_argument("--files", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--listings", type=int, default=20)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--dup-size", type=int, default=64 << 20)
    ap.add_argument("--together-size", type=int, default=256 << 20)
    ap.add_argument("--skip-two-clients", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--scaling-only", action="store_true",
                    help="only the scaling simulation (needs --service-ms)")
    ap.add_argument("--service-ms", default=None,
                    help="READ,LEAD,FOLLOW service times in ms instead of calibrating")
    ap.add_argument("--scaling-machines", default="1,2,4,8,16")
    ap.add_argument("--scaling-dirs", type=int, default=4096)
    ap.add_argument("--scaling-files", type=int, default=16384)
    args = ap.parse_args()
    if args.scaling_only:
        if not args.service_ms:
            raise BenchError("--scaling-only needs --service-ms READ,LEAD,FOLLOW")
        args.cairn = os.path.abspath(args.cairn)
        sim = run_scaling({}, args)
        print(report_scaling(sim))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "results": {"scaling": sim}}, f, indent=1)
        return 0
    args.cairn = os.path.abspath(args.cairn)
    if args.files < args.workers:
        raise BenchError("--files must be at least --workers")
    installed = ensure_tools({"etcd": "etcd-server"})
    work_dir = tempfile.mkdtemp(prefix="cairn-bench-cluster-", dir=args.workdir)
    runner = Runner(os.path.join(work_dir, "logs"))
    mounts = Mounts(runner, args.cairn)
    results: dict = {}
    try:
        results["ext4"] = run_ext4(work_dir, args)
        results["cairn redb"] = run_cairn("cairn redb", work_dir, runner, mounts, args, None)
        results["cairn etcd 1x1"] = run_cairn("cairn etcd 1x1", work_dir, runner, mounts,
                                              args, 1)
        results["cairn etcd 1x3"] = run_cairn("cairn etcd 1x3", work_dir, runner, mounts,
                                              args, 3)
        results["cairn ring 2x1"] = run_ring("cairn ring 2x1", work_dir, runner, mounts, args, 2)
        results["cairn ring 3x1"] = run_ring("cairn ring 3x1", work_dir, runner, mounts, args, 3)
        if not args.skip_two_clients:
            results["two clients"] = run_two_clients(work_dir, runner, mounts, args)
        if not args.skip_scaling:
            results["scaling"] = run_scaling(results, args)
    finally:
        mounts.cleanup()
    print(report(results, args))
    print(f"\n  etcd: {tool_version(['etcd', '--version'])}"
          + (f"; installed now: {', '.join(installed)}" if installed else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        log(f"FAILED: {e}")
        sys.exit(1)
