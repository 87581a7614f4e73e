#!/usr/bin/env python3
"""File-system benchmark for cairn's FUSE mount, against bindfs and a plain directory.

Everything is measured in one run, on one machine, on the same data. "plain" is a
directory in the scratch dir (same disk); "bindfs" is `bindfs SRC MNT`, a passthrough
FUSE mount over another directory on the same disk; "cairn FS" is `cairn mount`;
"raw store" is `cairn put` / `cairn get` into a fresh repository.

1. Big file. --big-gib GiB of random data (os.urandom) is written once to a source file
   in the scratch dir and page-cached before every write. Each write copies it with a
   16 MiB buffer and one fsync at the end (the time includes the fsync); each read is
   cold (page cache dropped; for cairn the mount is also unmounted and remounted) and
   uses a 16 MiB buffer. Raw store: `cairn put` of the source into a fresh repository,
   then `cairn get -o /dev/null`, cold. An untimed warm-up copy runs first (this VM's
   disk writes much faster into blocks it has already allocated; see README).
   Targets: cairn FS write >= 0.95 x raw put; cairn FS read >= 0.95 x raw get;
   cairn FS write >= bindfs write.
2. Second copy. The same data written again on the cairn mount under a new name
   (fsync included), then unmounted. Reported: its MB/s and the bytes it added to the
   repository directory (apparent size, like `du -sb`, after the unmount before it and
   after the unmount following it). Target: added <= 1% of its size. The copy is then
   compared byte for byte with the source (untimed, through the mount).
3. Postmark (Debian's postmark, PostMark v1.51): --postmark-files files in 10
   subdirectories, 512 B - 16 KiB, --postmark-tx transactions. Transactions/s are
   timed from postmark's own progress output (the gap between "Performing
   transactions" and "Deleting files"), because postmark prints whole seconds; its own
   figure is shown too. Target: cairn >= 0.8 x bindfs.
4. Small files. --small-files files of 4 KiB (distinct random content) in 100
   directories: creates/s (open O_CREAT|O_EXCL + write + close, timed; mkdir untimed),
   then caches dropped (cairn and bindfs also unmounted and remounted) and every file
   read back in a seeded random order, contents checked: reads/s. Targets: cairn
   creates/s >= 0.5 x plain; cairn cold reads/s >= 0.5 x plain (bindfs informational).
5. Peak RSS of the cairn mount daemon: VmHWM from /proc/PID/status just before each
   unmount; the maximum over all mounts of the run.

Usage (as root, from the repository root, after `cargo build --release`):

    python3 bench/fs.py                                   # 4 GiB, 50k/30k postmark, 20k files
    python3 bench/fs.py --big-gib 0.25 --postmark-files 2000 --postmark-tx 2000 \\
        --small-files 2000                                # about a minute
    python3 bench/fs.py --json /tmp/fs.json --keep

bindfs and postmark are installed with `apt-get install -y bindfs postmark` when missing.
Progress goes to stderr, the table to stdout. Every step on a mount is bounded by
--step-timeout (default 900 s): on overrun the mounts are aborted and the run fails.
Exit status: 0 when every command succeeded (targets NOT MET do not change it: this is
a benchmark, not a test); 1 when a command failed or a step timed out (its stderr is
printed); 2 when the run finished but data read back did not match what was written.
Every mount this script made is unmounted on the way out, also on failure.
Standard library only (Python 3.11); helpers are shared with bench/ingest.py and
bench/common.py.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing ingest.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (shared helpers; importing runs nothing)
from ingest import (BenchError, CacheDropper, Runner, du_bytes, files_identical,  # noqa: E402
                    fmt_table, generate_random, log, mem_gib, mib, nb, plain_copy,
                    plain_read, warm)
from common import (Cairn, Interrupted, Mounts, Watchdog, _on_signal,  # noqa: E402
                    dpkg_version, ensure_tools, f0, f1, f2, fs_of, mbps, mounted_paths,
                    ratio, read_tail, target, tool_version)

GIB = ingest.GIB
REPO_ROOT = ingest.REPO_ROOT
SMALL_SIZE = 4096
SMALL_DIRS = 100
READ_SEED = 20261122
TARGETS = {
    "fs_write_vs_put": 0.95,
    "fs_read_vs_get": 0.95,
    "fs_write_vs_bindfs": 1.0,
    "copy_added_fraction": 0.01,
    "postmark_vs_bindfs": 0.8,
    "creates_vs_plain": 0.5,
    "reads_vs_plain": 0.5,
}


# --------------------------------------------------------------------------- peers

def ensure_peers() -> list[str]:
    return ensure_tools({"bindfs": "bindfs", "postmark": "postmark", "fusermount3": "fuse3"})


def postmark_config(location: str, files: int, tx: int) -> str:
    return (f"set location {location}\n"
            f"set number {files}\n"
            f"set transactions {tx}\n"
            f"set subdirectories 10\n"
            f"set size 512 16384\n"
            f"run\n"
            f"quit\n")


def run_postmark(runner: Runner, location: str, files: int, tx: int, name: str,
                 watch: Watchdog) -> dict:
    """Run postmark on location. Its progress output is flushed at every phase, so the
    transaction phase is timed from the moment "Performing transactions" appears on its
    stdout to the moment "Deleting files" appears. Returns our timing and postmark's own
    (whole-second) figures."""
    runner.count += 1
    base = os.path.join(runner.logdir, f"{runner.count:03d}-postmark-{name}")
    cfg = base + ".cfg"
    with open(cfg, "w") as f:
        f.write(postmark_config(location, files, tx))
    cmd = ["postmark", cfg]
    marks: dict[str, float] = {}
    chunks = []
    with open(base + ".err", "wb") as err:
        t0 = time.monotonic()
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=err, close_fds=True, cwd=runner.logdir)
        except OSError as e:
            raise BenchError(f"cannot start postmark: {e}") from e
        watch.child = p
        text = ""
        fd = p.stdout.fileno()
        while True:
            b = os.read(fd, 65536)
            now = time.monotonic()
            if not b:
                break
            chunks.append(b)
            text += b.decode(errors="replace")
            for key, pat in (("create", "Creating files"), ("tx", "Performing transactions"),
                             ("delete", "Deleting files")):
                if key not in marks and pat in text:
                    marks[key] = now
        p.stdout.close()
        rc = p.wait()
        wall = time.monotonic() - t0
        watch.child = None
    with open(base + ".out", "wb") as f:
        f.write(b"".join(chunks))
    if rc != 0:
        raise BenchError(f"command failed (exit {rc}): postmark {cfg} (location {location})\n"
                         f"--- stdout ---\n{text[-4000:].rstrip()}\n--- stderr ---\n"
                         f"{read_tail(base + '.err')}\n--- end stderr ---")
    m_tx = re.search(r"(\d+) seconds of transactions \((\d+) per second\)", text)
    m_total = re.search(r"(\d+) seconds total", text)
    if not m_tx or "tx" not in marks or "delete" not in marks:
        raise BenchError(f"postmark on {location}: cannot parse its output (did it run?)\n"
                         f"--- stdout ---\n{text[-4000:].rstrip()}\n--- stderr ---\n"
                         f"{read_tail(base + '.err')}\n--- end stderr ---")
    tx_s = marks["delete"] - marks["tx"]
    create_s = marks["tx"] - marks["create"] if "create" in marks else None
    errs = read_tail(base + ".err")
    return {"tx": tx, "files": files, "tx_s": tx_s, "tx_per_s": tx / tx_s if tx_s > 0 else None,
            "create_phase_s": create_s, "wall_s": wall,
            "postmark_tx_s": int(m_tx.group(1)), "postmark_tx_per_s": int(m_tx.group(2)),
            "postmark_total_s": int(m_total.group(1)) if m_total else None,
            "stderr": errs if errs and errs != "(no stderr captured)" else ""}


# --------------------------------------------------------------------------- phases

def timed_write(src: str, dst: str) -> dict:
    warm(src)
    os.sync()
    size = os.path.getsize(src)
    secs = plain_copy(src, dst)
    return {"bytes": size, "wall_s": secs, "mb_s": mbps(size, secs)}


def timed_cold_read(path: str, dropper: CacheDropper, expect: int, problems: list,
                    what: str, drop: bool = True) -> dict:
    if drop:
        dropper.drop()
    before = resource.getrusage(resource.RUSAGE_SELF)
    secs, n = plain_read(path)
    after = resource.getrusage(resource.RUSAGE_SELF)
    if n != expect:
        problems.append(f"{what}: read {n} bytes, expected {expect}")
    reader_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"bytes": n, "wall_s": secs, "mb_s": mbps(n, secs), "reader_cpu_s": reader_cpu}


def phase_big(ctx: dict) -> dict:
    wd, cairn, mounts, dropper = ctx["workdir"], ctx["cairn"], ctx["mounts"], ctx["dropper"]
    problems, step = ctx["problems"], ctx["watch"].step
    size = int(ctx["args"].big_gib * GIB)
    src = os.path.join(wd, "src", "big.bin")
    os.makedirs(os.path.dirname(src))
    log(f"big: generating {size} random bytes (os.urandom, 16 MiB blocks)")
    generate_random(src, size)
    out: dict = {"bytes": size}

    log("big: untimed warm-up copy (disk preconditioning)")
    tmp = os.path.join(wd, "warmup")
    os.makedirs(tmp)
    out["warmup"] = timed_write(src, os.path.join(tmp, "big.bin"))
    shutil.rmtree(tmp)
    os.sync()

    # Raw store: put then cold get, fresh repository.
    raw = os.path.join(wd, "repos", "raw")
    cairn.init(raw)
    warm(src)
    os.sync()
    log("big: raw store: cairn put")
    res = cairn.put(raw, src, "big")
    out["raw_put"] = {"wall_s": res["wall_s"], "mb_s": mbps(size, res["wall_s"]),
                      "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"],
                      "repo_bytes": du_bytes(raw)}
    dropper.drop()
    log("big: raw store: cairn get -o /dev/null (cold)")
    res = cairn.get(raw, "big", "/dev/null")
    out["raw_get"] = {"wall_s": res["wall_s"], "mb_s": mbps(size, res["wall_s"]),
                      "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]}
    shutil.rmtree(raw)
    os.sync()

    # cairn FS: write, unmount; cold read after remount; second copy; unmount.
    repo = os.path.join(wd, "repos", "fs-big")
    mnt = os.path.join(wd, "mnt", "cairn")
    cairn.init(repo)
    mounts.cairn_mount(repo, mnt, "big: write")
    with step("cairn FS: big write + fsync + unmount"):
        log("big: cairn FS: write + fsync")
        out["cairn_write"] = timed_write(src, os.path.join(mnt, "big.bin"))
        log(f"big: cairn FS write {out['cairn_write']['mb_s']:.1f} MB/s")
        out["cairn_write"]["umount_s"] = mounts.cairn_umount(mnt)["umount_s"]

    dropper.drop()
    mounts.cairn_mount(repo, mnt, "big: cold read")
    with step("cairn FS: big cold read + unmount"):
        log("big: cairn FS: cold read")
        out["cairn_read"] = timed_cold_read(os.path.join(mnt, "big.bin"), dropper, size,
                                            problems, "cairn FS big read", drop=False)
        log(f"big: cairn FS read {out['cairn_read']['mb_s']:.1f} MB/s")
        mounts.cairn_umount(mnt)
    before = du_bytes(repo)
    stats_before = cairn.stats(repo)

    warm(src)
    mounts.cairn_mount(repo, mnt, "copy: write")
    with step("cairn FS: second copy write + fsync + unmount"):
        log("copy: cairn FS: second copy, write + fsync")
        copy = timed_write(src, os.path.join(mnt, "big-copy.bin"))
        log(f"copy: cairn FS second copy {copy['mb_s']:.1f} MB/s")
        copy["umount_s"] = mounts.cairn_umount(mnt)["umount_s"]
    after = du_bytes(repo)
    stats_after = cairn.stats(repo)
    copy.update({"repo_bytes_before": before, "repo_bytes_after": after,
                 "added_bytes": after - before, "added_fraction": (after - before) / size,
                 "stats_before": stats_before, "stats_after": stats_after})

    log("copy: verifying the copy against the source through the mount (untimed)")
    mounts.cairn_mount(repo, mnt, "copy: verify")
    with step("cairn FS: verify second copy + unmount"):
        ok, detail = files_identical(src, os.path.join(mnt, "big-copy.bin"))
        mounts.cairn_umount(mnt)
    copy["verify"] = {"ok": ok, "detail": detail}
    if not ok:
        problems.append(f"second copy on the cairn mount differs from the source: {detail}")
    out["copy"] = copy
    out["fs_repo_bytes"] = du_bytes(repo)
    shutil.rmtree(repo)
    os.sync()

    # bindfs over a plain directory on the same disk.
    bsrc = os.path.join(wd, "bindfs-src")
    bmnt = os.path.join(wd, "mnt", "bindfs")
    mounts.bindfs_mount(bsrc, bmnt)
    with step("bindfs: big write + fsync"):
        log("big: bindfs: write + fsync")
        out["bindfs_write"] = timed_write(src, os.path.join(bmnt, "big.bin"))
    with step("bindfs: big cold read + unmount"):
        log("big: bindfs: cold read")
        out["bindfs_read"] = timed_cold_read(os.path.join(bmnt, "big.bin"), dropper, size,
                                             problems, "bindfs big read")
        mounts.bindfs_umount(bmnt)
    shutil.rmtree(bsrc)
    os.sync()

    # Plain directory.
    pdir = os.path.join(wd, "plain")
    os.makedirs(pdir)
    log("big: plain dir: write + fsync")
    out["plain_write"] = timed_write(src, os.path.join(pdir, "big.bin"))
    log("big: plain dir: cold read")
    out["plain_read"] = timed_cold_read(os.path.join(pdir, "big.bin"), dropper, size, problems,
                                        "plain big read")
    shutil.rmtree(pdir)
    os.unlink(src)
    os.sync()
    return out


def phase_postmark(ctx: dict) -> dict:
    wd, cairn, mounts, runner = ctx["workdir"], ctx["cairn"], ctx["mounts"], ctx["runner"]
    watch = ctx["watch"]
    a = ctx["args"]
    out: dict = {"files": a.postmark_files, "tx": a.postmark_tx}

    def pm(kind: str, loc: str) -> None:
        os.makedirs(loc)
        os.sync()
        log(f"postmark: {kind}")
        out[kind] = run_postmark(runner, loc, a.postmark_files, a.postmark_tx, kind, watch)
        log(f"postmark: {kind} {out[kind]['tx_per_s']:.0f} tx/s")

    repo = os.path.join(wd, "repos", "fs-files")
    mnt = os.path.join(wd, "mnt", "cairn")
    cairn.init(repo)
    mounts.cairn_mount(repo, mnt, "postmark")
    with watch.step("cairn FS: postmark + unmount"):
        pm("cairn", os.path.join(mnt, "postmark"))
        mounts.cairn_umount(mnt)

    bsrc = os.path.join(wd, "bindfs-src")
    bmnt = os.path.join(wd, "mnt", "bindfs")
    mounts.bindfs_mount(bsrc, bmnt)
    with watch.step("bindfs: postmark + unmount"):
        pm("bindfs", os.path.join(bmnt, "postmark"))
        mounts.bindfs_umount(bmnt)
    shutil.rmtree(bsrc)

    with watch.step("plain dir: postmark"):
        pm("plain", os.path.join(wd, "plain", "postmark"))
    shutil.rmtree(os.path.join(wd, "plain"))
    os.sync()
    return out


def small_layout(n: int) -> list[str]:
    """Relative paths of n files spread evenly, in order, over SMALL_DIRS directories."""
    per_dir = -(-n // SMALL_DIRS) if n else 1
    return [os.path.join(f"d{i // per_dir:02d}", f"f{i:07d}") for i in range(n)]


def small_create(root: str, rels: list[str], pool: memoryview) -> float:
    for d in range(SMALL_DIRS):
        os.makedirs(os.path.join(root, f"d{d:02d}"))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    paths = [os.path.join(root, r) for r in rels]
    t0 = time.monotonic()
    for i, p in enumerate(paths):
        fd = os.open(p, flags, 0o644)
        try:
            data = pool[i * SMALL_SIZE:(i + 1) * SMALL_SIZE]
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
    return time.monotonic() - t0


def small_read(root: str, rels: list[str], pool: memoryview) -> tuple[float, int]:
    order = list(range(len(rels)))
    random.Random(READ_SEED).shuffle(order)
    paths = [os.path.join(root, rels[i]) for i in order]
    bad = 0
    t0 = time.monotonic()
    for i, p in zip(order, paths):
        fd = os.open(p, os.O_RDONLY)
        try:
            parts = []
            while True:
                b = os.read(fd, 2 * SMALL_SIZE)
                if not b:
                    break
                parts.append(b)
        finally:
            os.close(fd)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if data != pool[i * SMALL_SIZE:(i + 1) * SMALL_SIZE]:
            bad += 1
    return time.monotonic() - t0, bad


def phase_small(ctx: dict) -> dict:
    wd, mounts, dropper, step = ctx["workdir"], ctx["mounts"], ctx["dropper"], ctx["watch"].step
    n = ctx["args"].small_files
    rels = small_layout(n)
    pool = memoryview(os.urandom(n * SMALL_SIZE))  # distinct content: nothing dedups
    out: dict = {"files": n, "size": SMALL_SIZE, "dirs": SMALL_DIRS, "read_seed": READ_SEED}

    def record(kind: str, create_s: float, read_s: float, bad: int) -> None:
        out[kind] = {"create_s": create_s, "creates_per_s": n / create_s if create_s else None,
                     "read_s": read_s, "reads_per_s": n / read_s if read_s else None,
                     "mismatched": bad}
        if bad:
            ctx["problems"].append(f"small files on {kind}: {bad} of {n} read back wrong")
        log(f"small: {kind}: {out[kind]['creates_per_s']:.0f} creates/s, "
            f"{out[kind]['reads_per_s']:.0f} cold reads/s")

    # cairn FS (same repository as postmark); unmounted, caches dropped, remounted.
    repo = os.path.join(wd, "repos", "fs-files")
    mnt = os.path.join(wd, "mnt", "cairn")
    root = os.path.join(mnt, "small")
    mounts.cairn_mount(repo, mnt, "small: create")
    with step("cairn FS: small-file creates + unmount"):
        os.makedirs(root)
        os.sync()
        log(f"small: cairn FS: create {n} files")
        cs = small_create(root, rels, pool)
        mounts.cairn_umount(mnt)
    dropper.drop()
    mounts.cairn_mount(repo, mnt, "small: cold read")
    with step("cairn FS: small-file cold reads + unmount"):
        log("small: cairn FS: cold random-order read")
        rs, bad = small_read(root, rels, pool)
        mounts.cairn_umount(mnt)
    record("cairn", cs, rs, bad)
    out["fs_repo_bytes"] = du_bytes(repo)

    # bindfs (informational); also unmounted and remounted around the cache drop.
    bsrc = os.path.join(wd, "bindfs-src")
    bmnt = os.path.join(wd, "mnt", "bindfs")
    root = os.path.join(bmnt, "small")
    mounts.bindfs_mount(bsrc, bmnt)
    with step("bindfs: small-file creates + unmount"):
        os.makedirs(root)
        os.sync()
        log(f"small: bindfs: create {n} files")
        cs = small_create(root, rels, pool)
        mounts.bindfs_umount(bmnt)
    dropper.drop()
    mounts.bindfs_mount(bsrc, bmnt)
    with step("bindfs: small-file cold reads + unmount"):
        log("small: bindfs: cold random-order read")
        rs, bad = small_read(root, rels, pool)
        mounts.bindfs_umount(bmnt)
    record("bindfs", cs, rs, bad)
    shutil.rmtree(bsrc)

    # plain directory
    root = os.path.join(wd, "plain", "small")
    os.makedirs(root)
    os.sync()
    log(f"small: plain dir: create {n} files")
    cs = small_create(root, rels, pool)
    dropper.drop()
    log("small: plain dir: cold random-order read")
    rs, bad = small_read(root, rels, pool)
    record("plain", cs, rs, bad)
    shutil.rmtree(os.path.join(wd, "plain"))
    os.sync()
    return out


def build_report(res: dict) -> tuple[str, list]:
    env, big, pm, sm = res["env"], res["big"], res["postmark"], res["small"]
    out, targets = [], []
    out.append("cairn file-system benchmark")
    out.append(f"  machine: {env['cpus']} CPUs, {env['mem_gib']:.1f} GiB RAM, {env['kernel']}; "
               f"workdir {env['workdir']} on {env['workdir_fs']}")
    out.append(f"  cairn: {env['cairn_binary']} ({env['cairn_version']})")
    out.append(f"  bindfs: {env['bindfs_version']} (`bindfs SRC MNT`, default options); "
               f"postmark: {env['postmark_version']} (Debian {env['postmark_deb']})")
    if env["peers_installed_now"]:
        out.append(f"  installed now with apt-get: {', '.join(env['peers_installed_now'])}")
    cold = ("cold: page cache dropped before each read; cairn also unmounted and remounted"
            if res["cold"] else "WARM: caches could NOT be dropped, read figures are not cold")
    out.append(f"  units: MB/s = 10^6 B/s; {cold}")

    # 1
    size = big["bytes"]
    out.append("")
    out.append(f"1. Big file: {nb(size)} random bytes, source page-cached, 16 MiB buffers, "
               "write time includes the final fsync")
    put, get = big["raw_put"], big["raw_get"]
    rows = [["raw store (cairn put / get -o /dev/null)", f1(put["mb_s"]), f2(put["wall_s"]),
             f1(get["mb_s"]), f2(get["wall_s"])]]
    for key, label in (("cairn", "cairn FS mount"), ("bindfs", "bindfs over plain dir"),
                       ("plain", "plain dir")):
        w, r = big[f"{key}_write"], big[f"{key}_read"]
        rows.append([label, f1(w["mb_s"]), f2(w["wall_s"]), f1(r["mb_s"]), f2(r["wall_s"])])
    out.append(fmt_table(["target", "write MB/s", "write s", "cold read MB/s", "read s"], rows))
    cw, cr = big["cairn_write"]["mb_s"], big["cairn_read"]["mb_s"]
    out.append(f"   cairn FS / raw store: write {f2(ratio(cw, put['mb_s']))}, read "
               f"{f2(ratio(cr, get['mb_s']))}; cairn FS / bindfs: write "
               f"{f2(ratio(cw, big['bindfs_write']['mb_s']))}, read "
               f"{f2(ratio(cr, big['bindfs_read']['mb_s']))}; cairn FS / plain: write "
               f"{f2(ratio(cw, big['plain_write']['mb_s']))}, read "
               f"{f2(ratio(cr, big['plain_read']['mb_s']))}")
    out.append(f"   the unmount after the cairn FS write took {f2(big['cairn_write']['umount_s'])} "
               f"s (write + fsync + unmount: "
               f"{f1(mbps(size, big['cairn_write']['wall_s'] + big['cairn_write']['umount_s']))}"
               f" MB/s); untimed warm-up copy ran at {f1(big['warmup']['mb_s'])} MB/s")
    daemon = next((m["cpu_s"] for m in res.get("cairn_mounts", [])
                   if m["purpose"] == "big: cold read"), None)
    if daemon is not None and get.get("cpu_s") is not None:
        # Both reads are CPU-bound on a small machine; their CPU says what the mount adds.
        reader = big["cairn_read"].get("reader_cpu_s", 0.0)
        out.append(f"   cold read CPU-s: cairn get {f2(get['cpu_s'])}; cairn FS {f2(daemon + reader)} "
                   f"(daemon {f2(daemon)} incl. mount and unmount, reader {f2(reader)}), "
                   f"on {env['cpus']} cores")
    targets.append(target("cairn FS write / raw store put", ratio(cw, put["mb_s"]),
                          TARGETS["fs_write_vs_put"]))
    targets.append(target("cairn FS cold read / raw store cold get", ratio(cr, get["mb_s"]),
                          TARGETS["fs_read_vs_get"]))
    targets.append(target("cairn FS write / bindfs write", ratio(cw, big["bindfs_write"]["mb_s"]),
                          TARGETS["fs_write_vs_bindfs"]))

    # 2
    c = big["copy"]
    out.append("")
    out.append(f"2. Second copy of the big file on the cairn mount (new name), "
               f"{nb(size)} bytes")
    sb = c["stats_before"].get("stored_bytes")
    sa = c["stats_after"].get("stored_bytes")
    rows = [["write + fsync", f1(c["mb_s"]), f2(c["wall_s"]), f2(c["umount_s"]),
             nb(c["repo_bytes_before"]), nb(c["repo_bytes_after"]), nb(c["added_bytes"]),
             f"{100 * c['added_fraction']:.3f}%"]]
    out.append(fmt_table(["step", "MB/s", "seconds", "umount s", "repo bytes before",
                          "repo bytes after", "added", "added / size"], rows))
    out.append(f"   repo bytes = whole repository directory, apparent size (du -sb), each after "
               f"an unmount; cairn stats stored_bytes {nb(sb)} -> {nb(sa)}; "
               f"copy == source: {'OK' if c['verify']['ok'] else 'FAIL'} "
               f"({c['verify']['detail']})")
    targets.append(target("second copy: bytes added / its size", c["added_fraction"],
                          TARGETS["copy_added_fraction"], kind="le", percent=True))

    # 3
    out.append("")
    out.append(f"3. Postmark: {nb(pm['files'])} files in 10 subdirectories, 512 B-16 KiB, "
               f"{nb(pm['tx'])} transactions")
    rows = []
    for key, label in (("cairn", "cairn FS mount"), ("bindfs", "bindfs over plain dir"),
                       ("plain", "plain dir")):
        p = pm[key]
        rows.append([label, f0(p["tx_per_s"]), f2(p["tx_s"]),
                     f2(ratio(p["tx_per_s"], pm["bindfs"]["tx_per_s"])),
                     f"{p['postmark_tx_per_s']:,} ({p['postmark_tx_s']} s)",
                     f2(p["create_phase_s"]), f2(p["wall_s"])])
    out.append(fmt_table(["target", "tx/s", "tx phase s", "x bindfs", "postmark's own tx/s",
                          "create phase s", "total s"], rows))
    out.append("   tx/s = transactions / time between postmark's \"Performing transactions\" "
               "and \"Deleting files\" output; postmark's own figure uses whole seconds")
    targets.append(target("postmark tx/s: cairn / bindfs",
                          ratio(pm["cairn"]["tx_per_s"], pm["bindfs"]["tx_per_s"]),
                          TARGETS["postmark_vs_bindfs"]))

    # 4
    out.append("")
    out.append(f"4. Small files: {nb(sm['files'])} files of {sm['size']} B in {sm['dirs']} "
               f"directories, distinct random content; cold reads in seeded random order "
               f"(seed {sm['read_seed']})")
    rows = []
    pc, pr = sm["plain"]["creates_per_s"], sm["plain"]["reads_per_s"]
    for key, label in (("cairn", "cairn FS mount"), ("bindfs", "bindfs (informational)"),
                       ("plain", "plain dir")):
        s = sm[key]
        rows.append([label, f0(s["creates_per_s"]), f2(s["create_s"]),
                     f2(ratio(s["creates_per_s"], pc)), f0(s["reads_per_s"]), f2(s["read_s"]),
                     f2(ratio(s["reads_per_s"], pr)), nb(s["mismatched"])])
    out.append(fmt_table(["target", "creates/s", "create s", "x plain", "cold reads/s",
                          "read s", "x plain", "bad"], rows))
    out.append("   create = open(O_CREAT|O_EXCL) + write 4 KiB + close, no fsync; cairn's "
               "unmount/remount and the cache drop are outside the timings")
    targets.append(target("small files creates/s: cairn / plain",
                          ratio(sm["cairn"]["creates_per_s"], pc), TARGETS["creates_vs_plain"]))
    targets.append(target("small files cold reads/s: cairn / plain",
                          ratio(sm["cairn"]["reads_per_s"], pr), TARGETS["reads_vs_plain"]))

    # 5
    out.append("")
    mrows = res["cairn_mounts"]
    peak = max((m["vm_hwm_bytes"] or 0 for m in mrows), default=0)
    out.append(f"5. cairn mount daemon: peak RSS (VmHWM just before unmount) over "
               f"{len(mrows)} mounts: {mib(peak)} MiB")
    peak_exit = max((m["vm_hwm_exit_bytes"] or 0 for m in mrows), default=0)
    rows = [[m["purpose"], mib(m["vm_hwm_bytes"]), mib(m["vm_hwm_exit_bytes"]), f2(m["cpu_s"]),
             f2(m["mount_s"]), f2(m["umount_s"])] for m in mrows]
    out.append(fmt_table(["mount", "VmHWM MiB", "incl. unmount MiB", "CPU s", "mount s",
                          "umount s"], rows))
    out.append(f"   incl. unmount: VmHWM last read while the process flushed and exited after "
               f"`cairn umount` (peak {mib(peak_exit)} MiB); CPU s from wait4")
    res["peak_rss_incl_unmount_bytes"] = peak_exit
    res["peak_rss_bytes"] = peak

    out.append("")
    out.append("Targets")
    rows = []
    for t in targets:
        v = t["value"]
        if t["percent"]:
            vs = f"{100 * v:.3f}%" if isinstance(v, (int, float)) else "-"
            ts = f"{100 * t['target']:g}%"
        else:
            vs, ts = f2(v), f"{t['target']:g}"
        rows.append([t["name"], vs, f"{'>=' if t['kind'] == 'ge' else '<='} {ts}", t["status"]])
    out.append(fmt_table(["target", "measured", "target", "status"], rows))
    out.append(f"(informational) peak RSS of the cairn mount daemon: {mib(peak)} MiB")
    if res["problems"]:
        out.append("")
        out.append("PROBLEMS")
        out.extend(f"  - {p}" for p in res["problems"])
    return "\n".join(out), targets


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cairn", default=os.path.join(REPO_ROOT, "target", "release", "cairn"),
                   help="cairn binary (default: %(default)s)")
    p.add_argument("--workdir", default="/var/tmp",
                   help="a fresh scratch dir is created inside this dir (default: %(default)s)")
    p.add_argument("--big-gib", type=float, default=4.0, help="big file size in GiB "
                   "(default: %(default)s)")
    p.add_argument("--postmark-files", type=int, default=50000,
                   help="postmark file count (default: %(default)s)")
    p.add_argument("--postmark-tx", type=int, default=30000,
                   help="postmark transactions (default: %(default)s)")
    p.add_argument("--small-files", type=int, default=20000,
                   help="number of 4 KiB files (default: %(default)s)")
    p.add_argument("--step-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="abort the mounts and fail when one step on a mount (a write, a read, "
                        "a postmark run, an unmount) takes longer (default: %(default)s)")
    p.add_argument("--json", metavar="OUT", help="also write all figures as JSON to OUT")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch dir (logs, postmark configs); mounts are always "
                        "unmounted")
    a = p.parse_args(argv)
    if a.big_gib <= 0 or int(a.big_gib * GIB) < (1 << 20):
        p.error("--big-gib must be at least 1 MiB worth")
    if a.postmark_files < 1 or a.postmark_tx < 1 or a.small_files < 1:
        p.error("--postmark-files, --postmark-tx and --small-files must be >= 1")
    if a.step_timeout <= 0:
        p.error("--step-timeout must be > 0")
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    cairn_bin = os.path.abspath(args.cairn)
    if not (os.path.isfile(cairn_bin) and os.access(cairn_bin, os.X_OK)):
        print(f"error: cairn binary not found or not executable: {cairn_bin}\n"
              f"(build it with `cargo build --release`, or pass --cairn PATH)", file=sys.stderr)
        return 1
    if not os.path.exists("/dev/fuse"):
        print("error: /dev/fuse does not exist (FUSE is needed for cairn mount and bindfs)",
              file=sys.stderr)
        return 1
    os.umask(0o022)
    os.makedirs(args.workdir, exist_ok=True)
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="cairn-fsbench-",
                                                dir=args.workdir))
    log(f"workdir {workdir}")
    runner = Runner(os.path.join(workdir, "logs"))
    mounts = Mounts(runner, cairn_bin)
    ctx = {"args": args, "workdir": workdir, "runner": runner, "problems": [],
           "cairn": Cairn(runner, cairn_bin), "mounts": mounts, "dropper": CacheDropper(),
           "watch": Watchdog(mounts, args.step_timeout)}
    results: dict = {"args": vars(args), "problems": ctx["problems"], "targets_def": TARGETS}
    old_handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    rc = 0
    try:
        installed = ensure_peers()
        results["env"] = {
            "cpus": os.cpu_count(), "mem_gib": mem_gib(), "kernel": platform.release(),
            "python": platform.python_version(), "cairn_binary": cairn_bin,
            "cairn_version": ctx["cairn"].version(), "workdir": workdir,
            "workdir_fs": fs_of(workdir), "bindfs_version": tool_version(["bindfs", "--version"]),
            "postmark_version": "PostMark v1.51", "postmark_deb": dpkg_version("postmark"),
            "peers_installed_now": installed}
        results["big"] = phase_big(ctx)
        results["postmark"] = phase_postmark(ctx)
        results["small"] = phase_small(ctx)
        results["cairn_mounts"] = mounts.cairn_log
        results["cold"] = ctx["dropper"].ok
        text, targets = build_report(results)
        results["targets"] = targets
        print(text, flush=True)
        if ctx["problems"]:
            rc = 2
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
            results.setdefault("cairn_mounts", mounts.cairn_log)
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
