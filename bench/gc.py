#!/usr/bin/env python3
"""Garbage-collection and version benchmark for cairn, against restic prune.

Everything is measured in one run, on one machine, on the same data.

1. GC. A tree of files of random content, 16 KiB to 1 MiB each, --gib GiB in all;
   half the files (seeded choice) are then deleted, so every container and every
   pack holds live and dead data mixed, as after real deletions. cairn: a fresh
   repository whose chunking is set small enough (--avg-chunk, default 1.25 KiB) that it
   holds at least --min-chunks chunks, periodic versions off; the tree is copied into
   `cairn mount`, half the files deleted there, unmounted, then the timed `cairn gc`
   (default threshold 0.5) runs on the unmounted repository. restic (defaults,
   repository version 2): `backup .` of the tree, the same files deleted, `backup .`
   again, then the timed `restic forget --keep-last 1` and `restic prune` (times
   added, peak RSS the larger of the two). Reported for both: wall time, CPU time,
   peak RSS (getrusage), repository bytes on disk before and after (like `du -sb`),
   so bytes reclaimed, and chunk/blob counts. After gc, `cairn check` must pass, the
   surviving files must all be there and the deleted ones gone, and 300 survivors
   are compared byte for byte (untimed).
   Targets: cairn gc >= 10x faster than restic forget+prune; cairn peak RSS <= 1/10
   of restic's.
2. Version cost. A fresh cairn mount; --tree-files small files (default 100,000 of
   200-2000 bytes) in directories of 1,000; `cairn version --json` writes the first
   version; one file is changed; `cairn version --json` again. Reported: the second
   version's time and the bytes it added to the store (cairn's own report, before
   compression), and the same for the first one for comparison.

Usage (as root, from the repository root, after `cargo build --release`):

    python3 bench/gc.py                            # 4 GiB, >= 2M chunks, 100k-file tree
    python3 bench/gc.py --gib 0.25 --min-chunks 100000 --tree-files 10000   # quick

Exit status: 1 if a command failed, 2 if data read back after gc differs or check
fails, 0 otherwise (also when targets are NOT MET).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing ingest.py

import ingest as common  # noqa: E402  (shared helpers; importing runs nothing)
from ingest import (BenchError, Runner, du_bytes, files_identical, fmt_table,  # noqa: E402
                    generate_random, log, mem_gib, mib, nb, parse_json_object)
from common import Mounts  # noqa: E402

GIB = common.GIB
REPO_ROOT = common.REPO_ROOT


class Cairn:
    def __init__(self, runner: Runner, binary: str):
        self.r = runner
        self.bin = binary
        self.env = {"CAIRN_REPO": None}

    def run(self, repo: str, *args, name: str, capture=False) -> dict:
        return self.r.run([self.bin, "--repo", repo, *args], name=name, env=self.env,
                          capture=capture)

    def json(self, repo: str, *args, name: str) -> tuple[dict, dict]:
        res = self.run(repo, *args, "--json", name=name, capture=True)
        return parse_json_object(res["stdout"], f"cairn {' '.join(args)} --json"), res


def set_small_chunks(repo: str, avg: int) -> None:
    """Rewrites the repository's cairn.toml: [chunking] for average chunk size avg,
    and no periodic versions (they would keep the deleted files alive)."""
    path = os.path.join(repo, "cairn.toml")
    with open(path) as f:
        text = f.read()
    lines, out, in_chunking = text.splitlines(), [], False
    for line in lines:
        if line.startswith("["):
            in_chunking = line.strip() == "[chunking]"
        key = line.split("=")[0].strip()
        if in_chunking and key in ("min", "avg", "max"):
            size = {"min": avg // 2, "avg": avg, "max": avg * 4}[key]
            line = f'{key} = "{size}"'
        if key == "version_seconds":
            line = "version_seconds = 0"
        out.append(line)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def restic_env(workdir: str) -> dict:
    return {"RESTIC_PASSWORD": "cairn-bench",
            "RESTIC_CACHE_DIR": os.path.join(workdir, "cache", "restic"),
            "RESTIC_REPOSITORY": None, "RESTIC_PASSWORD_FILE": None,
            "RESTIC_PASSWORD_COMMAND": None, "RESTIC_COMPRESSION": None,
            "RESTIC_PACK_SIZE": None}


def make_tree(root: str, total: int, rng: random.Random) -> list[str]:
    """Files of random content, 16 KiB to 1 MiB each, 100 to a directory, until
    total bytes; returns their paths relative to root."""
    rels, size, i = [], 0, 0
    while size < total:
        rel = os.path.join(f"d{i // 100:04d}", f"f{i:06d}")
        n = min(rng.randint(16 << 10, 1 << 20), total - size)
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(os.urandom(n))
        rels.append(rel)
        size += n
        i += 1
    return rels


def phase_gc(ctx: dict) -> dict:
    args, r, cairn, mounts = ctx["args"], ctx["runner"], ctx["cairn"], ctx["mounts"]
    work = ctx["workdir"]
    rng = random.Random(20261122)
    src = os.path.join(work, "src")
    log(f"generating {args.gib:.2f} GiB of files (16 KiB - 1 MiB each)")
    rels = make_tree(src, int(args.gib * GIB), rng)
    doomed = set(rng.sample(rels, len(rels) // 2))
    out: dict = {"files": len(rels), "deleted_files": len(doomed),
                 "bytes": sum(os.path.getsize(os.path.join(src, x)) for x in rels),
                 "deleted_bytes": sum(os.path.getsize(os.path.join(src, x)) for x in doomed)}

    repo = os.path.join(work, "cairn-repo")
    mnt = os.path.join(work, "mnt")
    cairn.run(repo, "init", name="cairn-init")
    set_small_chunks(repo, args.avg_chunk)
    mounts.cairn_mount(repo, mnt, "gc data")
    log("copying the tree into the cairn mount")
    t0 = time.monotonic()
    shutil.copytree(src, os.path.join(mnt, "data"))
    os.sync()
    out["cairn_ingest_s"] = time.monotonic() - t0
    for rel in doomed:
        os.unlink(os.path.join(mnt, "data", rel))
    mounts.cairn_umount(mnt)
    stats, _ = cairn.json(repo, "stats", name="cairn-stats")
    out["cairn_chunks"] = stats.get("chunks")
    if (out["cairn_chunks"] or 0) < args.min_chunks:
        ctx["problems"].append(f"the cairn repository holds {out['cairn_chunks']} chunks, "
                               f"fewer than --min-chunks {args.min_chunks}")
    os.sync()
    out["cairn_before"] = du_bytes(repo)
    log("cairn gc (timed)")
    report, res = cairn.json(repo, "-q", "gc", name="cairn-gc")
    os.sync()
    out["cairn_after"] = du_bytes(repo)
    out["cairn_gc"] = {"wall_s": res["wall_s"], "maxrss_bytes": res["maxrss_bytes"],
                       "cpu_s": res["cpu_s"], "report": report}
    try:
        cairn.run(repo, "check", name="cairn-check")
    except BenchError as e:
        ctx["problems"].append(f"cairn check failed after gc: {e}")
    mounts.cairn_mount(repo, mnt, "verify after gc")
    for rel in rels:
        there = os.path.exists(os.path.join(mnt, "data", rel))
        if there == (rel in doomed):
            ctx["problems"].append(f"{rel}: {'present' if there else 'missing'} after gc")
            break
    for rel in rng.sample([x for x in rels if x not in doomed], min(300, len(rels) - len(doomed))):
        same, why = files_identical(os.path.join(src, rel), os.path.join(mnt, "data", rel))
        if not same:
            ctx["problems"].append(f"{rel} differs after gc: {why}")
            break
    mounts.cairn_umount(mnt)
    shutil.rmtree(repo)

    if args.skip_restic:
        return out
    if shutil.which("restic") is None:
        log("restic is missing: apt-get install -y restic")
        subprocess.run(["apt-get", "install", "-y", "restic"], check=True,
                       stdout=sys.stderr, stderr=sys.stderr)
    env = restic_env(work)
    rrepo = os.path.join(work, "restic-repo")
    r.run(["restic", "-r", rrepo, "init", "--repository-version", "2"], name="restic-init",
          env=env)
    log("restic backup (all files)")
    r.run(["restic", "-r", rrepo, "backup", "--quiet", "."], name="restic-backup-1", env=env,
          cwd=src)
    for rel in doomed:
        os.unlink(os.path.join(src, rel))
    log("restic backup (half deleted)")
    r.run(["restic", "-r", rrepo, "backup", "--quiet", "."], name="restic-backup-2", env=env,
          cwd=src)
    out["restic_version"] = subprocess.run(["restic", "version"], capture_output=True,
                                           text=True).stdout.strip()
    stats = r.run(["restic", "-r", rrepo, "stats", "--mode", "raw-data", "--json"],
                  name="restic-stats", env=env, capture=True)
    out["restic_blobs"] = parse_json_object(stats["stdout"], "restic stats").get("total_blob_count")
    os.sync()
    out["restic_before"] = du_bytes(rrepo)
    log("restic forget --keep-last 1 && restic prune (timed)")
    forget = r.run(["restic", "-r", rrepo, "forget", "--keep-last", "1"], name="restic-forget",
                   env=env)
    prune = r.run(["restic", "-r", rrepo, "prune"], name="restic-prune", env=env)
    os.sync()
    out["restic_after"] = du_bytes(rrepo)
    out["restic_prune"] = {"wall_s": forget["wall_s"] + prune["wall_s"],
                           "forget_s": forget["wall_s"], "prune_s": prune["wall_s"],
                           "maxrss_bytes": max(forget["maxrss_bytes"], prune["maxrss_bytes"]),
                           "cpu_s": forget["cpu_s"] + prune["cpu_s"]}
    shutil.rmtree(rrepo)
    shutil.rmtree(src)
    return out


def phase_version(ctx: dict) -> dict:
    args, cairn, mounts, work = ctx["args"], ctx["cairn"], ctx["mounts"], ctx["workdir"]
    repo = os.path.join(work, "tree-repo")
    mnt = os.path.join(work, "mnt")
    cairn.run(repo, "init", name="cairn-init-tree")
    mounts.cairn_mount(repo, mnt, "version cost")
    rng = random.Random(20261122)
    per_dir = 1000
    log(f"creating {args.tree_files:,} files")
    t0 = time.monotonic()
    for i in range(args.tree_files):
        d = os.path.join(mnt, f"d{i // per_dir:04d}")
        if i % per_dir == 0:
            os.mkdir(d)
        with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
            f.write(rng.randbytes(rng.randint(200, 2000)))
    create_s = time.monotonic() - t0
    first, _ = cairn.json(repo, "version", name="cairn-version-1")
    victim = os.path.join(mnt, f"d{(args.tree_files // 2) // per_dir:04d}",
                          f"f{args.tree_files // 2:06d}")
    with open(victim, "r+b") as f:
        f.write(b"changed")
    time.sleep(0.2)
    second, res = cairn.json(repo, "version", name="cairn-version-2")
    mounts.cairn_umount(mnt)
    shutil.rmtree(repo)
    if not second.get("written"):
        ctx["problems"].append("the version after changing one file was not written")
    return {"files": args.tree_files, "create_s": create_s, "first": first,
            "second": second, "second_wall_s": res["wall_s"]}


def ratio(a, b):
    return a / b if a is not None and b else None


def build_report(res: dict) -> str:
    gc = res["gc"]
    lines = []
    c, p = gc["cairn_gc"], gc.get("restic_prune")
    rows = [["cairn gc", f"{c['wall_s']:.2f}", f"{c['cpu_s']:.2f}", mib(c["maxrss_bytes"]),
             mib(gc["cairn_before"]), mib(gc["cairn_after"]),
             mib(gc["cairn_before"] - gc["cairn_after"]), nb(gc["cairn_chunks"])]]
    if p:
        rows.append(["restic forget+prune", f"{p['wall_s']:.2f}", f"{p['cpu_s']:.2f}",
                     mib(p["maxrss_bytes"]), mib(gc["restic_before"]), mib(gc["restic_after"]),
                     mib(gc["restic_before"] - gc["restic_after"]), nb(gc["restic_blobs"])])
    lines.append(f"GC: {gc['files']:,} files, {gc['bytes'] / GIB:.2f} GiB of random data; "
                 f"{gc['deleted_files']:,} files ({gc['deleted_bytes'] / GIB:.2f} GiB) deleted. "
                 f"cairn ingest through the mount: {gc['cairn_ingest_s']:.1f} s")
    lines.append(fmt_table(["", "wall s", "cpu s", "peak RSS MiB", "repo before MiB",
                            "repo after MiB", "reclaimed MiB", "chunks/blobs"], rows))
    rep = c["report"]
    lines.append(f"cairn gc report: marked {nb(rep.get('marked_chunks'))} chunks in "
                 f"{rep.get('mark_seconds', 0):.2f} s, reclaimed "
                 f"{nb(rep.get('reclaimed_containers'))} of {nb(rep.get('candidates'))} "
                 f"containers in {rep.get('sweep_seconds', 0):.2f} s, copied "
                 f"{nb(rep.get('copied_chunks'))} chunks forward")
    targets = []
    if p:
        speed = ratio(p["wall_s"], c["wall_s"])
        rss = ratio(c["maxrss_bytes"], p["maxrss_bytes"])
        targets.append(("gc speed vs restic (x faster)", speed, ">= 10", speed and speed >= 10))
        targets.append(("gc peak RSS vs restic", rss, "<= 0.10", rss is not None and rss <= 0.1))
    v = res.get("version")
    if v:
        lines.append("")
        lines.append(f"Version cost: tree of {v['files']:,} files "
                     f"(created in {v['create_s']:.1f} s through the mount)")
        lines.append(fmt_table(
            ["version", "seconds", "new bytes", "dirs written"],
            [["first (whole tree)", f"{v['first']['seconds']:.3f}", nb(v["first"]["new_bytes"]),
              nb(v["first"]["dirs_written"])],
             ["after changing 1 file", f"{v['second']['seconds']:.3f}",
              nb(v["second"]["new_bytes"]), nb(v["second"]["dirs_written"])]]))
    lines.append("")
    lines.append(fmt_table(["target", "value", "goal", "status"],
                           [[n, f"{val:.3f}" if val is not None else "-", g,
                             "MET" if ok else "NOT MET"] for n, val, g, ok in targets]))
    for prob in res["problems"]:
        lines.append(f"PROBLEM: {prob}")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cairn", default=os.path.join(REPO_ROOT, "target", "release", "cairn"))
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--gib", type=float, default=4.0, help="total data (half is deleted)")
    ap.add_argument("--avg-chunk", type=int, default=1280,
                    help="cairn's average chunk size for the gc repository (bytes)")
    ap.add_argument("--min-chunks", type=int, default=2_000_000,
                    help="the gc repository must hold at least this many chunks")
    ap.add_argument("--tree-files", type=int, default=100_000)
    ap.add_argument("--skip-restic", action="store_true")
    ap.add_argument("--skip-version", action="store_true")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cairn_bin = os.path.abspath(args.cairn)
    if not os.access(cairn_bin, os.X_OK):
        print(f"error: no cairn binary at {cairn_bin} (cargo build --release)", file=sys.stderr)
        return 1
    os.makedirs(args.workdir, exist_ok=True)
    work = os.path.realpath(tempfile.mkdtemp(prefix="cairn-gcbench-", dir=args.workdir))
    log(f"workdir {work}")
    runner = Runner(os.path.join(work, "logs"))
    mounts = Mounts(runner, cairn_bin)
    ctx = {"args": args, "workdir": work, "runner": runner, "problems": [],
           "cairn": Cairn(runner, cairn_bin), "mounts": mounts}
    res: dict = {"args": vars(args), "problems": ctx["problems"],
                 "env": {"cpus": os.cpu_count(), "mem_gib": mem_gib(),
                         "kernel": platform.release()}}
    rc = 0
    try:
        res["gc"] = phase_gc(ctx)
        if not args.skip_version:
            res["version"] = phase_version(ctx)
        print(build_report(res), flush=True)
        if ctx["problems"]:
            rc = 2
    except (BenchError, OSError) as e:
        print(f"\nFAILED: {e}{mounts.dead_daemons()}", file=sys.stderr)
        res["error"] = str(e)
        rc = 1
    finally:
        mounts.cleanup()
        if args.json:
            try:
                with open(args.json, "w") as f:
                    json.dump(res, f, indent=2, default=str)
            except OSError as e:
                print(f"cannot write {args.json}: {e}", file=sys.stderr)
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
