#!/usr/bin/env python3
"""Write growth: the bytes cairn's repository grows by per byte a program writes, for
sequential writers, random overwrites and a database, through `cairn mount` and `cairn
serve`, against a plain directory and bindfs, idle and under load.

Growth = the bytes the repository directory (or, for the plain and bindfs targets, the
directory that holds the files) grew by, as apparent size (like `du -sb`), divided by the
bytes the program wrote. It is measured before any `cairn gc`: a `du` just before the
writer, then the writer, then `sync`, then --settle seconds (6) so that cairn's committer
(it records every fs.commit_seconds = 5 s) has made everything durable, then a `du` again.
The plain and bindfs targets have no committer: there the `du` follows `sync` at once.

Targets, all on the same disk in one run: "plain" (a directory in the scratch dir),
"bindfs" (`bindfs SRC MNT` over another one, a passthrough FUSE mount), "cairn mount"
(`cairn --repo R mount MNT`) and "cairn serve" (`cairn --repo R serve --listen
127.0.0.1:0 MNT`: the same mount with the S3 gateway, /metrics and the dashboard beside
it). Every cairn repository is made with `cairn init`, then fs.version_seconds = 0 is set
in its cairn.toml (no automatic versions, which would keep overwritten data alive) and
nothing else: automatic garbage collection ([gc] auto_after, default 8MiB, looked at every
auto_check_seconds = 5 s, in builds that have it) stays ON, as users run it. After each
measurement `cairn stats --json` (through the daemon) tells whether the repository still
holds garbage: its held.other_bytes (recipe nodes, version records and garbage).

Every workload runs on a fresh directory or repository of its own (set up, mounted,
measured, unmounted, deleted), with the writer's working directory at the target's root:

 1. head: `head -c 100000000 /dev/urandom > big.bin`                         (100 MB)
 2. dd: `dd if=/dev/urandom of=f bs=4k count=12500`          (51.2 MB in 4 KiB writes)
 3. append4k: Python appends 4 KiB of random bytes to log.bin every 1 ms, 5,000 times
    (one open file, `write` + `flush` per append; 20.5 MB)
 4. append512: the same with 512 B every 0.5 ms, 20,000 times (10.2 MB)
 5. fio: the 256 MiB file `data` (no extension, so no chunking rule applies) laid out
    sequentially (1 MiB writes, end_fsync), then 4 KiB random writes for --runtime
    seconds (20), fsync after every 32; ioengine=psync, direct=0, refill_buffers=1,
    fallocate=none. Growth is per byte fio wrote: layout + random (its JSON
    write.io_bytes); the random phase alone (growth after the layout, settled, to the end,
    per random byte) is printed beside it.
 6. sqlite: Python's sqlite3, 3,000 autocommit INSERTs (isolation_level=None) of 1 KiB
    random blobs into a fresh db.sqlite. Growth is per byte of the database file's final
    size.
Reported per workload and target: growth and the writer's time (fio: IOPS of the random
phase); per cairn step also the growth at unmount and the garbage stats still shows.

Each condition runs every workload on every target, "idle" and then "loaded": two CPU
hogs (`yes > /dev/null`) and a disk hog (a shell loop of `dd if=/dev/zero
of=SCRATCH/hog bs=1M count=64 conv=fsync`) run for the whole condition and are killed
after it.

Targets (per condition, for cairn mount and cairn serve each): growth <= 1.1 for every
sequential writer (1-4); fio growth per byte written (layout + random) <= 1.5, fio IOPS
>= 1.0 x bindfs and >= 0.3 x plain; sqlite time <= 2.0 x plain and repository growth
<= 3 x the database file's final size.

Usage (as root, from the repository root, after `cargo build --release`):

    python3 bench/writes.py                                     # both conditions, ~20 min
    python3 bench/writes.py --runtime 5 --conditions idle       # a quick run
    python3 bench/writes.py --targets plain,serve --workloads fio,sqlite --json /tmp/w.json
    sudo cairn bench writes -- --conditions loaded               # once built in

fio, bindfs and fusermount3 are installed with apt-get when missing. Progress goes to
stderr, the tables to stdout. Every step (a mount, a writer, a sync, an unmount) is
bounded by --step-timeout (default 600 s): on overrun the FUSE connections are aborted,
the cairn processes and the writer killed. A step that fails is reported as FAILED and the
run goes on with the next one. Exit status: 0 when every step ran (targets NOT MET do not
change it: this is a benchmark, not a test); 1 when a step failed or the run could not
start; 130 when interrupted. Every mount this script made is unmounted and every hog
killed on the way out, also on failure or Ctrl-C. Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing the helpers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (shared helpers; importing runs nothing)
from ingest import (BenchError, Runner, du_bytes, fmt_table, log, mem_gib, nb,  # noqa: E402
                    parse_json_object)
from common import (Cairn, Interrupted, Mounts, Watchdog, _on_signal, ensure_tools,  # noqa: E402
                    f0, f2, fs_of, is_mounted, mounted_paths, ratio, read_tail, target,
                    tool_version, wait_mounted)
from random_io import apply_settings, fio_jobfile  # noqa: E402

REPO_ROOT = ingest.REPO_ROOT
MIB = 1 << 20
FIO_SIZE = 256 * MIB

GOALS = {
    "seq_growth": 1.1,
    "fio_growth": 1.5,
    "fio_iops_vs_bindfs": 1.0,
    "fio_iops_vs_plain": 0.3,
    "db_time_vs_plain": 2.0,
    "db_growth_per_db": 3.0,
}

# (key, column label); the order of the table's columns and of the runs.
COLUMNS = (("plain", "plain dir"), ("bindfs", "bindfs"), ("mount", "cairn mount"),
           ("serve", "cairn serve"))
CAIRN_COLUMNS = ("mount", "serve")
CONDITIONS = ("idle", "loaded")

# (key, label); the order they run in.
WORKLOADS = (
    ("head", "head -c 100000000 /dev/urandom > big.bin"),
    ("dd", "dd if=/dev/urandom bs=4k count=12500 (51.2 MB)"),
    ("append4k", "Python: append 4 KiB every 1 ms, 5,000 x"),
    ("append512", "Python: append 512 B every 0.5 ms, 20,000 x"),
    ("fio", "fio 4 KiB randwrite, 256 MiB 'data', fsync=32"),
    ("sqlite", "sqlite3: 3,000 autocommit INSERTs of 1 KiB"),
)
SEQUENTIAL = ("head", "dd", "append4k", "append512")
APPENDS = {"append4k": (4096, 5000, 0.001), "append512": (512, 20000, 0.0005)}
DB_INSERTS, DB_BLOB = 3000, 1024

# Run with `python3 -c`: appends BS random bytes to PATH every INTERVAL seconds, N times
# (on a fixed schedule: a late append is not made up by sleeping less than zero), one
# write + flush per append; prints its own time as JSON.
APPENDER = r"""
import json, os, sys, time
path, bs, n, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
t0 = time.monotonic()
with open(path, "ab") as f:
    for i in range(n):
        f.write(os.urandom(bs))
        f.flush()
        wait = t0 + (i + 1) * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
secs = time.monotonic() - t0
print(json.dumps({"secs": secs, "bytes": os.path.getsize(path), "nominal_s": n * interval}))
"""

# Run with `python3 -c`: N autocommit INSERTs of BLOB random bytes into a fresh PATH.
SQLITE_WRITER = r"""
import json, os, sqlite3, sys, time
path, n, blob = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t0 = time.monotonic()
con = sqlite3.connect(path, isolation_level=None)
con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
for _ in range(n):
    con.execute("INSERT INTO t (v) VALUES (?)", (os.urandom(blob),))
con.close()
secs = time.monotonic() - t0
print(json.dumps({"secs": secs, "db_bytes": os.path.getsize(path)}))
"""


# --------------------------------------------------------------------------- processes

def run_child(ctx: dict, cmd: list, name: str, cwd: str | None = None) -> dict:
    """Runs cmd to completion as the watchdog's registered child (killed when the step
    overruns); returns {"wall_s", "cpu_s", "stdout"}. Raises BenchError on a non-zero
    exit, with its stderr."""
    runner = ctx["runner"]
    runner.count += 1
    base = os.path.join(runner.logdir, f"{runner.count:03d}-{name}")
    watch = ctx["watch"]
    with open(base + ".out", "wb") as out, open(base + ".err", "wb") as err:
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=err, close_fds=True)
        except OSError as e:
            raise BenchError(f"cannot start {cmd[0]!r}: {e}") from e
        watch.child = p
        try:
            _, status, ru = os.wait4(p.pid, 0)
        except BaseException:
            p.kill()
            p.wait()
            raise
        finally:
            watch.child = None
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
    if p.returncode != 0:
        raise BenchError(f"command failed (exit {p.returncode}): {' '.join(map(str, cmd))}"
                         f"\n--- stderr ---\n{read_tail(base + '.err')}\n--- end stderr ---")
    with open(base + ".out", "rb") as f:
        stdout = f.read().decode(errors="replace")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "stdout": stdout,
            "log": base}


class Hogs:
    """The loaded condition's neighbours: two `yes > /dev/null` and a loop of
    `dd if=/dev/zero of=SCRATCH/hog bs=1M count=64 conv=fsync`, each in a process group of
    its own so that stopping it also stops the dd it is running."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "hog")
        self.procs: list[subprocess.Popen] = []
        self.died: list[str] = []

    def start(self) -> None:
        loop = ('while :; do dd if=/dev/zero of="$1" bs=1M count=64 conv=fsync '
                '2>/dev/null || sleep 1; done')
        cmds = [["yes"], ["yes"], ["sh", "-c", loop, "disk-hog", self.path]]
        for cmd in cmds:
            self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL,
                                               start_new_session=True))
        log(f"hogs started: pids {', '.join(str(p.pid) for p in self.procs)} "
            f"(2 x yes > /dev/null, dd loop on {self.path})")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                self.died.append(f"{p.args[0]} pid {p.pid} exited early ({p.returncode})")
                continue
            try:
                os.killpg(p.pid, signal.SIGKILL)  # its own group: the pid we started
            except ProcessLookupError:
                pass
            p.wait()
        if self.procs:
            log(f"hogs stopped: pids {', '.join(str(p.pid) for p in self.procs)}")
        self.procs = []
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class WriteMounts(Mounts):
    """common.Mounts plus `cairn serve`; its cleanup (which the watchdog also calls when
    the main thread stays stuck) stops the hogs too."""

    def __init__(self, runner: Runner, cairn_bin: str):
        super().__init__(runner, cairn_bin)
        self.hogs: Hogs | None = None

    def cairn_serve(self, repo: str, mnt: str, purpose: str) -> str | None:
        """`cairn serve` of repo on mnt, the gateway on a free loopback port; returns the
        gateway's address as it printed it."""
        self.seq += 1
        os.makedirs(mnt, exist_ok=True)
        err_path = os.path.join(self.r.logdir, f"mount-{self.seq:02d}-serve.err")
        cmd = [self.bin, "--repo", repo, "serve", "--listen", "127.0.0.1:0", mnt]
        env = dict(os.environ)
        env.pop("CAIRN_REPO", None)
        with open(err_path, "wb") as err:
            try:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                        env=env, close_fds=True)
            except OSError as e:
                raise BenchError(f"cannot start {self.bin!r}: {e}") from e
        self.active[mnt] = {"kind": "cairn", "proc": proc, "err": err_path, "cmd": cmd,
                            "purpose": purpose, "t_start": time.monotonic()}
        secs = wait_mounted(mnt, proc, " ".join(cmd), err_path)
        self.active[mnt]["mount_s"] = secs
        m = re.search(r"S3 gateway at (\S+)", read_tail(err_path))
        log(f"cairn serve on {mnt} (pid {proc.pid}, {secs:.2f} s, gateway "
            f"{m.group(1) if m else '?'}) for {purpose}")
        return m.group(1) if m else None

    def cleanup(self, keep_hogs: bool = False) -> None:
        try:
            super().cleanup()
        finally:
            if self.hogs is not None and not keep_hogs:
                self.hogs.stop()


# --------------------------------------------------------------------------- targets

class Site:
    """One target for one workload: a fresh directory or repository, mounted."""

    def __init__(self, ctx: dict, kind: str, tag: str):
        self.ctx, self.kind, self.tag = ctx, kind, tag
        self.base = os.path.join(ctx["workdir"], "steps", tag)
        self.data = os.path.join(self.base, "data")  # what du measures
        self.mnt = os.path.join(self.base, "mnt")
        self.root = self.data if kind == "plain" else self.mnt
        self.cairn = kind in CAIRN_COLUMNS

    def setup(self) -> dict:
        mounts, info = self.ctx["mounts"], {}
        if self.kind == "plain":
            os.makedirs(self.data)
        elif self.kind == "bindfs":
            mounts.bindfs_mount(self.data, self.mnt)
        else:
            self.ctx["cairn"].init(self.data)
            toml = os.path.join(self.data, "cairn.toml")
            apply_settings(toml, [("fs.version_seconds", "0")])
            with open(toml, "rb") as f:
                conf = tomllib.load(f)
            info["gc_config"] = conf.get("gc")  # None: this build has no automatic gc
            info["commit_seconds"] = conf.get("fs", {}).get("commit_seconds")
            self.ctx.setdefault("cairn_conf", info)
            if self.kind == "mount":
                mounts.cairn_mount(self.data, self.mnt, self.tag)
            else:
                info["gateway"] = mounts.cairn_serve(self.data, self.mnt, self.tag)
        return info

    def unmount(self) -> dict | None:
        mounts = self.ctx["mounts"]
        if self.cairn:
            row = mounts.cairn_umount(self.mnt)
            return {k: row[k] for k in ("vm_hwm_bytes", "cpu_s", "umount_s", "lifetime_s")}
        if self.kind == "bindfs":
            mounts.bindfs_umount(self.mnt)
        return None

    def teardown(self) -> None:
        if not is_mounted(self.mnt):
            shutil.rmtree(self.base, ignore_errors=True)
        os.sync()


# --------------------------------------------------------------------------- workloads

def sync_settle(ctx: dict, site: Site, label: str) -> float:
    """`sync`, then (cairn) --settle seconds for the committer; returns sync's seconds."""
    with ctx["watch"].step(f"{label}: sync"):
        secs = run_child(ctx, ["sync"], "sync")["wall_s"]
    if site.cairn:
        time.sleep(ctx["args"].settle)
    return secs


def wl_shell(ctx, site, rec, name, script, out_file):
    with ctx["watch"].step(f"{site.tag}: {script}"):
        res = run_child(ctx, ["sh", "-c", script], name, cwd=site.root)
    rec["secs"] = res["wall_s"]
    rec["writer_cpu_s"] = res["cpu_s"]
    rec["written_bytes"] = os.stat(os.path.join(site.root, out_file)).st_size


def wl_head(ctx, site, rec):
    wl_shell(ctx, site, rec, "head", "head -c 100000000 /dev/urandom > big.bin", "big.bin")


def wl_dd(ctx, site, rec):
    wl_shell(ctx, site, rec, "dd", "dd if=/dev/urandom of=f bs=4k count=12500", "f")


def wl_append(ctx, site, rec, key):
    bs, n, interval = APPENDS[key]
    with ctx["watch"].step(f"{site.tag}: {key}"):
        res = run_child(ctx, [sys.executable, "-c", APPENDER, "log.bin", str(bs), str(n),
                              str(interval)], key, cwd=site.root)
    out = parse_json_object(res["stdout"], f"{key} writer")
    rec.update(secs=out["secs"], nominal_s=out["nominal_s"], written_bytes=out["bytes"],
               writer_wall_s=res["wall_s"], writer_cpu_s=res["cpu_s"])


def run_fio(ctx, site, name, jobfile) -> dict:
    """fio on jobfile (job "main"); returns its write figures from fio's JSON."""
    base = os.path.join(ctx["runner"].logdir, f"{site.tag}-{name}")
    with open(base + ".fio", "w") as f:
        f.write(jobfile)
    run_child(ctx, ["fio", "--output-format=json", f"--output={base}.json", base + ".fio"],
              f"fio-{name}")
    with open(base + ".json") as f:
        report = parse_json_object(f.read(), f"fio {base}.fio")
    for job in report.get("jobs", []):
        if job.get("error"):
            raise BenchError(f"fio job {job.get('jobname')} in {base}.fio failed: error "
                             f"{job['error']} ({os.strerror(job['error'])})")
        if job.get("jobname") == "main":
            w = job["write"]
            return {"iops": w["iops"], "io_bytes": w["io_bytes"], "bw_bytes": w["bw_bytes"],
                    "runtime_ms": w.get("runtime")}
    raise BenchError(f"fio {base}.fio: no job 'main' in its JSON output")


def wl_fio(ctx, site, rec):
    path = os.path.join(site.root, "data")
    # Different seeds: with one seed the random phase would rewrite the layout's bytes,
    # which cairn would deduplicate.
    layout = fio_jobfile(path, FIO_SIZE, {"rw": "write", "bs": "1M", "end_fsync": 1}, {},
                         None, 1001)
    with ctx["watch"].step(f"{site.tag}: fio layout"):
        t0 = time.monotonic()
        lay = run_fio(ctx, site, "layout", layout)
        rec["layout_s"] = time.monotonic() - t0
    rec["layout_bytes"] = lay["io_bytes"]
    rec["layout_sync_s"] = sync_settle(ctx, site, f"{site.tag}: after layout")
    rec["after_layout_bytes"] = du_bytes(site.data)
    rw = fio_jobfile(path, FIO_SIZE, {"rw": "randwrite", "bs": "4k", "fsync": 32}, {},
                     ctx["args"].runtime, 2002)
    with ctx["watch"].step(f"{site.tag}: fio randwrite"):
        t0 = time.monotonic()
        job = run_fio(ctx, site, "randwrite", rw)
        rec["secs"] = time.monotonic() - t0
    rec.update(iops=job["iops"], random_bytes=job["io_bytes"], random_bw_bytes=job["bw_bytes"],
               written_bytes=lay["io_bytes"] + job["io_bytes"])
    log(f"{site.tag}: fio randwrite {job['iops']:,.0f} IOPS, {nb(job['io_bytes'])} B")


def wl_sqlite(ctx, site, rec):
    with ctx["watch"].step(f"{site.tag}: sqlite"):
        res = run_child(ctx, [sys.executable, "-c", SQLITE_WRITER, "db.sqlite",
                              str(DB_INSERTS), str(DB_BLOB)], "sqlite", cwd=site.root)
    out = parse_json_object(res["stdout"], "sqlite writer")
    # Growth is per byte of the database's final size (what it wrote is not known).
    rec.update(secs=out["secs"], db_bytes=out["db_bytes"], written_bytes=out["db_bytes"],
               writer_wall_s=res["wall_s"], writer_cpu_s=res["cpu_s"])


RUNNERS = {"head": wl_head, "dd": wl_dd,
           "append4k": lambda c, s, r: wl_append(c, s, r, "append4k"),
           "append512": lambda c, s, r: wl_append(c, s, r, "append512"),
           "fio": wl_fio, "sqlite": wl_sqlite}


def garbage_of(stats: dict) -> dict:
    held = stats.get("held") or {}
    other = held.get("other_bytes")
    unique = stats.get("unique_bytes") or 0
    return {"other_bytes": other, "unique_bytes": unique,
            "referenced_bytes": stats.get("referenced_bytes"),
            "stored_bytes": stats.get("stored_bytes"),
            "versions": stats.get("versions"),
            # "Still garbage": more than 1 MiB and 2% of the chunks' raw bytes neither
            # live files nor versions hold (recipe nodes of these files are far less).
            "has_garbage": (other is not None and other > max(MIB, 0.02 * unique))}


def run_step(ctx: dict, cond: str, col: str, wl: str) -> dict:
    """One workload on one fresh target: set up, du, write, sync + settle, du, stats,
    unmount, du, delete. A failure is recorded in the result; the run goes on."""
    tag = f"{cond}-{col}-{wl}"
    site = Site(ctx, col, tag)
    mounts = ctx["mounts"]
    mounts.killed = []
    ctx["watch"] = watch = Watchdog(mounts, ctx["args"].step_timeout)
    rec: dict = {"target": col, "workload": wl, "condition": cond}
    log(f"--- {cond}: {wl} on {col}")
    try:
        with watch.step(f"{tag}: set up"):
            rec.update(site.setup())
            run_child(ctx, ["sync"], "sync")
        rec["before_bytes"] = du_bytes(site.data)
        RUNNERS[wl](ctx, site, rec)
        rec["sync_s"] = sync_settle(ctx, site, tag)
        rec["after_bytes"] = du_bytes(site.data)
        rec["growth_bytes"] = rec["after_bytes"] - rec["before_bytes"]
        rec["growth"] = ratio(rec["growth_bytes"], rec["written_bytes"])
        if wl == "fio":
            rec["random_growth"] = ratio(rec["after_bytes"] - rec["after_layout_bytes"],
                                         rec["random_bytes"])
        if site.cairn:
            try:
                with watch.step(f"{tag}: cairn stats"):
                    rec["stats"] = garbage_of(ctx["cairn"].stats(site.data))
            except BenchError as e:
                rec["stats_error"] = str(e)
                ctx["problems"].append(f"{tag}: cairn stats --json failed: {e}")
        with watch.step(f"{tag}: unmount"):
            rec["daemon"] = site.unmount()
        rec["after_umount_bytes"] = du_bytes(site.data)
        extra = (f", {rec['iops']:,.0f} IOPS" if wl == "fio" else f", {rec['secs']:.2f} s")
        log(f"{tag}: wrote {nb(rec['written_bytes'])} B, grew {nb(rec['growth_bytes'])} B "
            f"({f2(rec['growth'])}x){extra}")
    except BenchError as e:
        msg = f"{e}{mounts.dead_daemons()}"
        log(f"FAILED {tag}: {msg}")
        rec["error"] = msg
        ctx["problems"].append(f"{tag}: {msg.splitlines()[0]}")
        mounts.cleanup(keep_hogs=True)
    finally:
        site.teardown()
    return rec


def run_condition(ctx: dict, cond: str) -> dict:
    args, mounts = ctx["args"], ctx["mounts"]
    out: dict = {"steps": {c: {} for c in args.targets}}
    hogs = Hogs(ctx["workdir"]) if cond == "loaded" else None
    mounts.hogs = hogs
    t0 = time.monotonic()
    try:
        if hogs:
            hogs.start()
            time.sleep(2)  # let them get going
        for wl in args.workloads:
            for col in args.targets:
                out["steps"][col][wl] = run_step(ctx, cond, col, wl)
    finally:
        if hogs:
            hogs.stop()
            out["hogs_died"] = hogs.died
            ctx["problems"].extend(f"{cond}: hog {d}" for d in hogs.died)
        mounts.hogs = None
    out["secs"] = time.monotonic() - t0
    return out


# --------------------------------------------------------------------------- report

def build_report(res: dict) -> tuple[str, list]:
    env, a = res["env"], res["args"]
    cols = [(k, lab) for k, lab in COLUMNS if k in a["targets"]]
    wls = [(k, lab) for k, lab in WORKLOADS if k in a["workloads"]]
    out, targets = [], []
    out.append("cairn write-growth benchmark")
    out.append(f"  machine: {env['cpus']} CPUs, {env['mem_gib']:.1f} GiB RAM, {env['kernel']}; "
               f"workdir {env['workdir']} on {env['workdir_fs']}")
    out.append(f"  cairn: {env['cairn_binary']} ({env['cairn_version']}); {env['fio_version']}; "
               f"bindfs {env['bindfs_version']}; sqlite {env['sqlite_version']}")
    if env["installed_now"]:
        out.append(f"  installed now with apt-get: {', '.join(env['installed_now'])}")
    out.append("  growth = bytes the directory / repository grew (apparent size, du -sb) / "
               "bytes written, after `sync`")
    out.append(f"    (+ {a['settle']:g} s for cairn's committer), before any `cairn gc`; "
               f"fio --runtime {a['runtime']} s")
    conf = res.get("cairn_conf")
    if conf:
        gc = conf.get("gc_config")
        gcs = (f"[gc] auto_after = {gc.get('auto_after')!r}, auto_check_seconds = "
               f"{gc.get('auto_check_seconds')}" if gc else
               "no [gc] in cairn.toml: this build has no automatic gc")
        out.append(f"  cairn repositories: fs.version_seconds = 0, commit_seconds = "
                   f"{conf.get('commit_seconds')}; {gcs}")
    out.append("  loaded = 2 x `yes > /dev/null` + a loop of `dd if=/dev/zero bs=1M count=64 "
               "conv=fsync`, for the whole condition")

    def rec(cond, col, wl):
        return res["conditions"].get(cond, {}).get("steps", {}).get(col, {}).get(wl)

    def ok(r):
        return r is not None and not r.get("error")

    for cond in a["conditions"]:
        if cond not in res["conditions"]:
            continue
        c = res["conditions"][cond]
        out.append("")
        out.append(f"Condition: {cond} ({c['secs']:.0f} s). Cells: growth (x bytes written) "
                   f"and the writer's time (fio: IOPS)")
        rows = []
        for wl, label in wls:
            row = [label]
            for col, _ in cols:
                r = rec(cond, col, wl)
                if r is None:
                    row.append("-")
                elif r.get("error"):
                    row.append("FAILED")
                elif wl == "fio":
                    row.append(f"{f2(r['growth'])}x {f0(r['iops'])} IOPS")
                else:
                    row.append(f"{f2(r['growth'])}x {f2(r['secs'])} s")
            rows.append(row)
        out.append(fmt_table(["workload"] + [lab for _, lab in cols], rows))
        out.append("  sqlite: growth per byte of the database's final size; fio: per byte of "
                   "layout + random writes")

        if "fio" in a["workloads"]:
            rows = []
            for col, lab in cols:
                r = rec(cond, col, "fio")
                if ok(r):
                    rows.append([lab, nb(r["layout_bytes"]), nb(r["random_bytes"]),
                                 f0(r["iops"]), nb(r["growth_bytes"]), f2(r["growth"]),
                                 f2(r["random_growth"])])
            if rows:
                out.append("")
                out.append(f"  fio ({cond}): growth / (layout + random bytes), and the random "
                           f"phase alone")
                out.append(fmt_table(["target", "layout B", "random B", "IOPS", "grown B",
                                      "/ (layout+random)", "random phase / random B"], rows))

        rows = []
        for wl, _ in wls:
            for col, lab in cols:
                r = rec(cond, col, wl)
                if not ok(r):
                    continue
                st = r.get("stats") or {}
                garbage = ("-" if not r.get("stats") else
                           f"{nb(st['other_bytes'])} ({'yes' if st['has_garbage'] else 'no'})")
                rows.append([wl, lab, nb(r["written_bytes"]), nb(r["growth_bytes"]),
                             f2(r["growth"]),
                             f2(ratio(r["after_umount_bytes"] - r["before_bytes"],
                                      r["written_bytes"])),
                             garbage])
        out.append("")
        out.append(f"  bytes ({cond}): growth settled and at unmount; cairn: stats' "
                   f"held.other_bytes (garbage?) after the settle")
        out.append(fmt_table(["workload", "target", "written B", "grown B", "growth",
                              "at unmount", "other B (garbage?)"], rows))

        for col, lab in cols:
            if col not in CAIRN_COLUMNS:
                continue
            for wl, _ in wls:
                r = rec(cond, col, wl)
                if wl in SEQUENTIAL:
                    targets.append(target(f"{cond}: {lab} growth, {wl}",
                                          r["growth"] if ok(r) else None,
                                          GOALS["seq_growth"], kind="le"))
                elif wl == "fio":
                    b, p = rec(cond, "bindfs", "fio"), rec(cond, "plain", "fio")
                    targets.append(target(f"{cond}: {lab} fio growth / (layout + random)",
                                          r["growth"] if ok(r) else None,
                                          GOALS["fio_growth"], kind="le"))
                    targets.append(target(f"{cond}: {lab} fio IOPS / bindfs",
                                          ratio(r["iops"], b["iops"]) if ok(r) and ok(b)
                                          else None, GOALS["fio_iops_vs_bindfs"]))
                    targets.append(target(f"{cond}: {lab} fio IOPS / plain",
                                          ratio(r["iops"], p["iops"]) if ok(r) and ok(p)
                                          else None, GOALS["fio_iops_vs_plain"]))
                elif wl == "sqlite":
                    p = rec(cond, "plain", "sqlite")
                    targets.append(target(f"{cond}: {lab} sqlite time / plain",
                                          ratio(r["secs"], p["secs"]) if ok(r) and ok(p)
                                          else None, GOALS["db_time_vs_plain"], kind="le"))
                    targets.append(target(f"{cond}: {lab} sqlite growth / db size",
                                          r["growth"] if ok(r) else None,
                                          GOALS["db_growth_per_db"], kind="le"))

    out.append("")
    out.append("Targets")
    rows = [[t["name"], f2(t["value"]), f"{'>=' if t['kind'] == 'ge' else '<='} "
             f"{t['target']:g}", t["status"]] for t in targets]
    out.append(fmt_table(["target", "measured", "goal", "status"], rows))
    met = sum(t["status"] == "MET" for t in targets)
    out.append(f"{met} of {len(targets)} targets MET")
    if res["problems"]:
        out.append("")
        out.append("PROBLEMS")
        out.extend(f"  - {p}" for p in res["problems"])
    return "\n".join(out), targets


# --------------------------------------------------------------------------- main

def csv_choice(p, text: str, allowed: tuple, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        p.error(f"{what}: {', '.join(bad) or 'nothing'} not in {','.join(allowed)}")
    return [x for x in allowed if x in items]  # in the canonical order, once each


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the top of bench/writes.py or bench/README.md for "
                                       "what each step does.")
    p.add_argument("--cairn", default=os.path.join(REPO_ROOT, "target", "release", "cairn"),
                   help="cairn binary (default: %(default)s)")
    p.add_argument("--workdir", default="/var/tmp",
                   help="a fresh scratch dir is created inside this dir (default: %(default)s)")
    p.add_argument("--runtime", type=int, default=20, metavar="SECONDS",
                   help="seconds of fio's random-write phase (default: %(default)s)")
    p.add_argument("--conditions", default="idle,loaded",
                   help="which load conditions to run (default: %(default)s)")
    p.add_argument("--targets", default=",".join(k for k, _ in COLUMNS),
                   help="which targets to run (default: %(default)s)")
    p.add_argument("--workloads", default=",".join(k for k, _ in WORKLOADS),
                   help="which workloads to run (default: %(default)s)")
    p.add_argument("--settle", type=float, default=6.0, metavar="SECONDS",
                   help="seconds to wait after `sync` for cairn's committer before measuring "
                        "(default: %(default)s)")
    p.add_argument("--step-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="abort the mounts and fail the step when one step (a mount, a writer, "
                        "a sync, an unmount) takes longer (default: %(default)s)")
    p.add_argument("--json", metavar="OUT", help="also write all figures as JSON to OUT")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch dir (logs, fio job files and JSON); each step's data "
                        "is deleted after it is measured either way")
    a = p.parse_args(argv)
    a.conditions = csv_choice(p, a.conditions, CONDITIONS, "--conditions")
    a.targets = csv_choice(p, a.targets, tuple(k for k, _ in COLUMNS), "--targets")
    a.workloads = csv_choice(p, a.workloads, tuple(k for k, _ in WORKLOADS), "--workloads")
    if a.runtime < 1:
        p.error("--runtime must be >= 1")
    if a.settle < 0:
        p.error("--settle must be >= 0")
    if a.step_timeout <= 0:
        p.error("--step-timeout must be > 0")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    cairn_bin = os.path.abspath(args.cairn)
    uses_cairn = any(c in CAIRN_COLUMNS for c in args.targets)
    if uses_cairn and not (os.path.isfile(cairn_bin) and os.access(cairn_bin, os.X_OK)):
        print(f"error: cairn binary not found or not executable: {cairn_bin}\n"
              f"(build it with `cargo build --release`, or pass --cairn PATH)", file=sys.stderr)
        return 1
    if any(c != "plain" for c in args.targets) and not os.path.exists("/dev/fuse"):
        print("error: /dev/fuse does not exist (FUSE is needed for cairn and bindfs)",
              file=sys.stderr)
        return 1
    os.umask(0o022)
    os.makedirs(args.workdir, exist_ok=True)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="cairn-writesbench-", dir=args.workdir))
    log(f"workdir {workdir}")
    runner = Runner(os.path.join(workdir, "logs"))
    mounts = WriteMounts(runner, cairn_bin)
    ctx = {"args": args, "workdir": workdir, "runner": runner, "problems": [],
           "cairn": Cairn(runner, cairn_bin), "mounts": mounts,
           "watch": Watchdog(mounts, args.step_timeout)}
    results: dict = {"args": vars(args), "goals": GOALS, "problems": ctx["problems"],
                     "conditions": {}}
    old_handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    rc = 0
    try:
        need = {"fusermount3": "fuse3"}
        if "fio" in args.workloads:
            need["fio"] = "fio"
        if "bindfs" in args.targets:
            need["bindfs"] = "bindfs"
        installed = ensure_tools(need)
        results["env"] = {
            "cpus": os.cpu_count(), "mem_gib": mem_gib(), "kernel": platform.release(),
            "python": platform.python_version(), "sqlite_version": sqlite3.sqlite_version,
            "cairn_binary": cairn_bin,
            "cairn_version": ctx["cairn"].version() if uses_cairn else "not used",
            "workdir": workdir, "workdir_fs": fs_of(workdir),
            "fio_version": (tool_version(["fio", "--version"]) if "fio" in need
                            else "fio not used"),
            "bindfs_version": (tool_version(["bindfs", "--version"]) if "bindfs" in need
                               else "not used"),
            "installed_now": installed}
        for cond in args.conditions:
            log(f"=== condition {cond}")
            results["conditions"][cond] = run_condition(ctx, cond)
        results["cairn_conf"] = ctx.get("cairn_conf")
        text, targets = build_report(results)
        results["targets"] = targets
        print(text, flush=True)
        failed = [r for c in results["conditions"].values() for s in c["steps"].values()
                  for r in s.values() if r.get("error")]
        if failed:
            log(f"{len(failed)} step(s) FAILED (see PROBLEMS)")
            rc = 1
    except (BenchError, OSError) as e:
        what = "" if isinstance(e, BenchError) else f"{type(e).__name__}: "
        msg = f"{what}{e}{mounts.dead_daemons()}"
        print(f"\nFAILED: {msg}", file=sys.stderr)
        results["error"] = msg
        rc = 1
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"\ninterrupted ({e or 'Ctrl-C'})", file=sys.stderr)
        results["error"] = "interrupted"
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            mounts.cleanup()
        finally:
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=2, default=str)
                    f.write("\n")
                log(f"wrote {args.json}")
            if args.keep:
                log(f"kept workdir {workdir}")
            else:
                left = [m for m in mounted_paths() if m.startswith(workdir + "/")]
                if left:
                    log(f"NOT removing {workdir}: still mounted: {left}")
                else:
                    shutil.rmtree(workdir, ignore_errors=True)
                    log(f"removed workdir {workdir}")
            for s, h in old_handlers.items():
                signal.signal(s, h)
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return rc


if __name__ == "__main__":
    sys.exit(main())
