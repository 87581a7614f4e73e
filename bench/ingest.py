#!/usr/bin/env python3
"""Ingest / read-back benchmark for cairn, against the disk itself, BLAKE3, restic and borg.

What it measures (every figure comes from the same run, on the same machine):

1. Unique data. A random file of --random-gib GiB (os.urandom, 16 MiB blocks) is
   written once. With the file page-cached before each step, it times:
     - a plain copy of it into the workdir (16 MiB buffer, one fsync at the end):
       the disk's own write speed;
     - `cairn bench hash FILE`: keyed BLAKE3 over the content-defined chunks on
       all cores (the hashing limit), as reported by cairn itself;
     - `cairn put` into a fresh repository (durable on exit 0).
   After one untimed warm-up copy, --rounds rounds (default 3) alternate the three,
   each writer into a new directory with the previous output deleted and synced,
   and medians are reported: this VM's disk writes ~5x faster into blocks it has
   already allocated than into never-written ones, and alternation keeps the plain
   copy and cairn put in the same conditions.
   Target: cairn put GB/s >= 0.8 x plain write GB/s (medians).

2. Versioned data set. Generation 0 is a deterministic tar (GNU tar, --sort=name,
   --mtime=@0, owner/group 0) of a copy of --tree-source trimmed to about
   --tree-gib GiB. Generation 1 is the same tree with a seeded 1% of files edited
   (1-3 inserts/deletes of 1-64 bytes each) and 1% new files (near-copies of
   existing files in random directories), tarred the same way. cairn, restic and
   borg each ingest gen0 then gen1 into one fresh repository, with default
   settings (restic repository version 2, compression auto; borg `-e none`,
   default lz4). Per generation: wall seconds, MB/s, logical bytes, repository
   size on disk (whole directory, apparent size, like `du -sb`), cumulative dedup
   ratio, peak RSS (ru_maxrss from os.wait4) and CPU seconds.
   Targets: cairn gen0 MB/s >= 4 x restic and >= 2.5 x borg; cairn repository
   no larger than restic's after gen0 and after gen1.

3. Read-back, cold. Page cache dropped (echo 3 > /proc/sys/vm/drop_caches, needs
   root) before each of: a plain read of the gen0 tar, `cairn get gen0 -o
   /dev/null`, `restic dump <gen0> /tree.tar > /dev/null` and (informational)
   `borg extract --stdout`. Targets: cairn get >= 0.8 x plain read, >= 3 x restic.
   Outside timing, `cairn get gen1` is checked byte for byte against the gen1 tar.
   Also reported: index RAM bytes per chunk from `cairn stats --json` (target <= 16).

How to run (as root, from the repository root, after `cargo build --release`):

    python3 bench/ingest.py                       # defaults: 2 GiB random, 1 GiB of /usr/lib
    python3 bench/ingest.py --random-gib 0.1 --tree-gib 0.05   # quick smoke run
    python3 bench/ingest.py --json /tmp/ingest.json --keep

Options: --cairn PATH (default <repo>/target/release/cairn), --workdir DIR (a fresh
scratch dir is made inside it; default /var/tmp; removed at the end unless --keep),
--random-gib, --tree-source, --tree-gib, --rounds, --skip-peers, --json OUT, --keep.
restic and borg are installed with `apt-get install -y restic borgbackup` when
missing (unless --skip-peers). Progress goes to stderr, the table to stdout.

Exit status: 0 when every command succeeded and the round-trip check passed
(targets NOT MET do not change it: this is a benchmark, not a test); 1 when a
command failed (its stderr is printed); 2 when the run finished but the gen1
round-trip check failed or cairn's output broke its contract.
Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import re
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time

BUF = 16 * 1024 * 1024
GIB = 1 << 30
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T0 = time.monotonic()

TARGETS = {
    "put_vs_write": 0.8,
    "gen0_vs_restic": 4.0,
    "gen0_vs_borg": 2.5,
    "get_vs_read": 0.8,
    "get_vs_restic": 3.0,
    "index_ram_per_chunk": 16.0,
}
STATS_KEYS = ("logical_bytes", "stored_bytes", "unique_bytes", "dedup_ratio",
              "chunks", "containers", "index_ram_bytes_per_chunk")


class BenchError(Exception):
    """A command or step failed; the message says what and includes its stderr."""


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:8.1f}s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- processes

class Runner:
    """Runs child processes, measuring wall time (monotonic) and rusage via os.wait4."""

    def __init__(self, logdir: str):
        self.logdir = logdir
        self.count = 0
        os.makedirs(logdir, exist_ok=True)

    def run(self, cmd, *, name, env=None, cwd=None, stdin=None, stdout=None,
            capture=False):
        """Run cmd to completion. stdout: None -> log file, or a file object /
        subprocess.DEVNULL. capture=True returns stdout text in result["stdout"].
        Raises BenchError (with the child's stderr) on a non-zero exit."""
        self.count += 1
        base = os.path.join(self.logdir, f"{self.count:03d}-{name}")
        out_path = base + ".out"
        err_path = base + ".err"
        full_env = dict(os.environ)
        for k, v in (env or {}).items():
            if v is None:
                full_env.pop(k, None)  # None: remove the variable
            else:
                full_env[k] = v
        own_out = None
        if stdout is None or capture:
            own_out = open(out_path, "wb")
            stdout = own_out
        with open(err_path, "wb") as err:
            t0 = time.monotonic()
            try:
                p = subprocess.Popen(cmd, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                     stdout=stdout, stderr=err, env=full_env, cwd=cwd,
                                     close_fds=True)
            except OSError as e:
                if own_out:
                    own_out.close()
                raise BenchError(f"cannot start {cmd[0]!r}: {e}") from e
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.monotonic() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
        if own_out:
            own_out.close()
        if p.returncode != 0:
            with open(err_path, "rb") as f:
                err_text = f.read()[-64 * 1024:].decode(errors="replace")
            raise BenchError(
                f"command failed (exit {p.returncode}): {' '.join(map(str, cmd))}\n"
                f"--- stderr ---\n{err_text.rstrip()}\n--- end stderr ---")
        res = {
            "cmd": [str(c) for c in cmd],
            "wall_s": wall,
            "maxrss_bytes": ru.ru_maxrss * 1024,  # Linux reports KiB
            "cpu_s": ru.ru_utime + ru.ru_stime,
        }
        if capture:
            with open(out_path, "rb") as f:
                res["stdout"] = f.read().decode(errors="replace")
        return res


# --------------------------------------------------------------------------- files

def du_bytes(path: str) -> int:
    """Apparent size of everything under path, like `du -sb` (hard links once)."""
    seen = set()
    total = 0
    st = os.lstat(path)
    total += st.st_size
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except FileNotFoundError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_size
    return total


def warm(path: str) -> None:
    """Read the whole file so it is page-cached before an ingest."""
    buf = bytearray(BUF)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


class CacheDropper:
    def __init__(self):
        self.ok = True
        self.error = None

    def drop(self) -> None:
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
        except OSError as e:
            if self.ok:
                log(f"WARNING: cannot drop caches ({e}); read-back figures will be WARM")
            self.ok = False
            self.error = str(e)


def generate_random(path: str, size: int) -> None:
    with open(path, "wb", buffering=0) as f:
        left = size
        while left:
            n = min(BUF, left)
            f.write(os.urandom(n))
            left -= n
        os.fsync(f.fileno())


def plain_copy(src: str, dst: str) -> float:
    """Copy with a 16 MiB buffer and one fsync at the end; returns seconds."""
    buf = bytearray(BUF)
    mv = memoryview(buf)
    t0 = time.monotonic()
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        while True:
            n = fi.readinto(buf)
            if not n:
                break
            view = mv[:n]
            while view:
                w = fo.write(view)
                view = view[w:]
        os.fsync(fo.fileno())
    return time.monotonic() - t0


def plain_read(path: str) -> tuple[float, int]:
    buf = bytearray(BUF)
    total = 0
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            total += n
    return time.monotonic() - t0, total


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    buf = bytearray(BUF)
    mv = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(mv[:n])
    return h.hexdigest()


def files_identical(a: str, b: str) -> tuple[bool, str]:
    sa, sb = os.path.getsize(a), os.path.getsize(b)
    if sa != sb:
        return False, f"size {sb} != expected {sa}"
    off = 0
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x = fa.read(BUF)
            y = fb.read(BUF)
            if x != y:
                for i, (p, q) in enumerate(zip(x, y)):
                    if p != q:
                        return False, f"first difference at byte {off + i}"
                return False, f"difference near byte {off}"
            if not x:
                return True, "identical"
            off += len(x)


# --------------------------------------------------------------------------- data set

def build_tree(src: str, dst: str, budget: int) -> dict:
    """Copy regular files of src into dst in sorted depth-first order (the order
    `tar --sort=name` uses) until `budget` bytes are copied. Symlinks are kept as
    symlinks; unreadable files and special files are skipped."""
    copied = files = links = dirs = skipped = 0
    os.makedirs(dst)
    os.chmod(dst, 0o755)

    def walk(s: str, d: str) -> bool:  # returns False once the budget is reached
        nonlocal copied, files, links, dirs, skipped
        try:
            names = sorted(os.listdir(s))
        except OSError:
            skipped += 1
            return True
        for n in names:
            if copied >= budget:
                return False
            sp, dp = os.path.join(s, n), os.path.join(d, n)
            try:
                st = os.lstat(sp)
            except OSError:
                skipped += 1
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                try:
                    os.symlink(os.readlink(sp), dp)
                    links += 1
                except OSError:
                    skipped += 1
            elif stat.S_ISDIR(mode):
                os.mkdir(dp)
                os.chmod(dp, mode & 0o777)
                dirs += 1
                if not walk(sp, dp):
                    return False
            elif stat.S_ISREG(mode):
                try:
                    shutil.copyfile(sp, dp, follow_symlinks=False)
                except OSError:
                    skipped += 1
                    try:
                        os.unlink(dp)
                    except OSError:
                        pass
                    continue
                os.chmod(dp, mode & 0o777)  # no setuid/setgid copies in /var/tmp
                files += 1
                copied += os.path.getsize(dp)
            else:
                skipped += 1
        return True

    walk(src, dst)
    return {"bytes": copied, "files": files, "symlinks": links, "dirs": dirs,
            "skipped": skipped}


def mutate_tree(root: str, seed: int = 42) -> dict:
    """Gen1: edit a seeded 1% of regular files (1-3 inserts/deletes of 1-64 bytes
    at random offsets) and add 1% new files (near-copies of existing files)."""
    rng = random.Random(seed)
    regular, directories = [], [""]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for dn in dirnames:
            if not os.path.islink(os.path.join(dirpath, dn)):
                directories.append(os.path.join(rel, dn))
        for fn in sorted(filenames):
            p = os.path.join(dirpath, fn)
            if os.path.isfile(p) and not os.path.islink(p):
                regular.append(os.path.join(rel, fn))
    regular.sort()
    directories.sort()
    if not regular:
        raise BenchError(f"no regular files copied under {root}")
    n = max(1, round(len(regular) * 0.01))

    edits = edited_bytes = 0
    for rel in rng.sample(regular, n):
        p = os.path.join(root, rel)
        with open(p, "rb") as f:
            data = bytearray(f.read())
        for _ in range(rng.randint(1, 3)):
            length = rng.randint(1, 64)
            off = rng.randint(0, len(data))
            if data and rng.random() < 0.5:
                del data[off:off + length]
            else:
                data[off:off] = rng.randbytes(length)
            edits += 1
            edited_bytes += length
        with open(p, "wb") as f:
            f.write(data)

    candidates = [r for r in regular if os.path.getsize(os.path.join(root, r)) > 0] or regular
    new_bytes = 0
    for i in range(n):
        src = rng.choice(candidates)
        d = rng.choice(directories)
        with open(os.path.join(root, src), "rb") as f:
            data = bytearray(f.read())
        if data:
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(len(data))
                data[pos] ^= rng.randint(1, 255)
        else:
            data = bytearray(rng.randbytes(rng.randint(1, 4)))
        dp = os.path.join(root, d, f"zz-bench-new-{i:05d}-{os.path.basename(src)}")
        with open(dp, "wb") as f:
            f.write(data)
        os.chmod(dp, 0o644)
        new_bytes += len(data)
    return {"files_edited": n, "edits": edits, "edit_bytes": edited_bytes,
            "files_added": n, "added_bytes": new_bytes}


TAR_FLAGS = ["--format=gnu", "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
             "--numeric-owner"]


def make_tar(runner: Runner, parent: str, member: str, out: str) -> None:
    runner.run(["tar", *TAR_FLAGS, "-cf", out, "-C", parent, member], name="tar",
               env={"LC_ALL": "C", "TZ": "UTC"})


# --------------------------------------------------------------------------- tools

class Cairn:
    """The cairn CLI contract, one method per command used."""

    def __init__(self, runner: Runner, binary: str):
        self.r = runner
        self.bin = binary
        self.env = {"CAIRN_REPO": None}  # --repo is always passed

    def version(self) -> str:
        try:
            out = subprocess.run([self.bin, "--version"], capture_output=True, text=True,
                                 timeout=30)
            return (out.stdout.strip() or out.stderr.strip() or "unknown").splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    def init(self, repo: str) -> dict:
        return self.r.run([self.bin, "--repo", repo, "init"], name="cairn-init", env=self.env)

    def put(self, repo: str, path: str, label: str) -> dict:
        return self.r.run([self.bin, "--repo", repo, "put", path, "--name", label, "--quiet"],
                          name=f"cairn-put-{label}", env=self.env)

    def get(self, repo: str, label: str, out: str) -> dict:
        return self.r.run([self.bin, "--repo", repo, "get", label, "-o", out, "--force", "--quiet"],
                          name=f"cairn-get-{label}", env=self.env)

    def stats(self, repo: str) -> dict:
        res = self.r.run([self.bin, "--repo", repo, "stats", "--json"], name="cairn-stats",
                         env=self.env, capture=True)
        return parse_json_object(res["stdout"], "cairn stats --json")

    def bench_hash(self, path: str) -> tuple[dict, dict]:
        res = self.r.run([self.bin, "bench", "hash", path], name="cairn-bench-hash",
                         env=self.env, capture=True)
        return parse_json_object(res["stdout"], "cairn bench hash"), res


def parse_json_object(text: str, what: str) -> dict:
    for line in [text] + text.strip().splitlines()[::-1]:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    raise BenchError(f"{what}: no JSON object in its output:\n{text[:2000]}")


class Restic:
    def __init__(self, runner: Runner, workdir: str):
        self.r = runner
        self.env = {"RESTIC_PASSWORD": "cairn-bench",
                    "RESTIC_CACHE_DIR": os.path.join(workdir, "cache", "restic"),
                    "RESTIC_REPOSITORY": None, "RESTIC_PASSWORD_FILE": None,
                    "RESTIC_PASSWORD_COMMAND": None, "RESTIC_COMPRESSION": None,
                    "RESTIC_PACK_SIZE": None}
        self.init_flags: list[str] = []

    def version(self) -> str:
        return subprocess.run(["restic", "version"], capture_output=True, text=True,
                              check=True).stdout.strip()

    def init(self, repo: str) -> dict:
        helptext = subprocess.run(["restic", "init", "--help"], capture_output=True,
                                  text=True).stdout
        self.init_flags = ["--repository-version", "2"] if "--repository-version" in helptext else []
        self.r.run(["restic", "-r", repo, "init", *self.init_flags], name="restic-init",
                   env=self.env)
        cfg = self.r.run(["restic", "-r", repo, "cat", "config"], name="restic-config",
                         env=self.env, capture=True)
        return parse_json_object(cfg["stdout"], "restic cat config")

    def backup(self, repo: str, tar: str) -> tuple[dict, str]:
        # The tar file itself is restic's stdin (no pipe, no extra process).
        with open(tar, "rb") as f:
            res = self.r.run(["restic", "-r", repo, "backup", "--quiet", "--json", "--stdin",
                              "--stdin-filename", "tree.tar"],
                             name="restic-backup", env=self.env, stdin=f, capture=True)
        snap = None
        for line in res["stdout"].splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("message_type") == "summary":
                snap = obj.get("snapshot_id")
        if not snap:
            lst = self.r.run(["restic", "-r", repo, "snapshots", "--json", "latest"],
                             name="restic-snapshots", env=self.env, capture=True)
            snaps = json.loads(lst["stdout"])
            snap = snaps[-1]["id"]
        return res, snap

    def dump(self, repo: str, snap: str) -> dict:
        return self.r.run(["restic", "-r", repo, "dump", snap, "/tree.tar"],
                          name="restic-dump", env=self.env, stdout=subprocess.DEVNULL)


class Borg:
    def __init__(self, runner: Runner, workdir: str):
        self.r = runner
        base = os.path.join(workdir, "borg-home")
        self.env = {"BORG_BASE_DIR": base,
                    "BORG_CACHE_DIR": os.path.join(workdir, "cache", "borg"),
                    "BORG_CONFIG_DIR": os.path.join(base, "config"),
                    "BORG_SECURITY_DIR": os.path.join(base, "security"),
                    "BORG_KEYS_DIR": os.path.join(base, "keys"),
                    "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
                    "BORG_RELOCATED_REPO_ACCESS_IS_OK": "yes",
                    "BORG_REPO": None, "BORG_PASSPHRASE": None}

    def version(self) -> str:
        return subprocess.run(["borg", "--version"], capture_output=True, text=True,
                              check=True).stdout.strip()

    def init(self, repo: str) -> dict:
        return self.r.run(["borg", "init", "-e", "none", repo], name="borg-init", env=self.env)

    def create(self, repo: str, archive: str, tar: str) -> dict:
        # Run in the tar's directory so the archived path is plain "tree.tar".
        return self.r.run(["borg", "create", f"{repo}::{archive}", os.path.basename(tar)],
                          name=f"borg-create-{archive}", env=self.env,
                          cwd=os.path.dirname(tar))

    def extract_stdout(self, repo: str, archive: str) -> dict:
        return self.r.run(["borg", "extract", "--stdout", f"{repo}::{archive}", "tree.tar"],
                          name=f"borg-extract-{archive}", env=self.env,
                          stdout=subprocess.DEVNULL)


def ensure_peers() -> list[str]:
    missing = [t for t in ("restic", "borg") if shutil.which(t) is None]
    if not missing:
        return []
    log(f"{' and '.join(missing)} not found: running `apt-get install -y restic borgbackup`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "restic", "borgbackup"]
    if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
        log("apt-get install failed; running `apt-get update` and retrying")
        subprocess.run(["apt-get", "update"], env=env, stdout=sys.stderr)
        if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
            raise BenchError("apt-get install -y restic borgbackup failed (see above)")
    still = [t for t in ("restic", "borg") if shutil.which(t) is None]
    if still:
        raise BenchError(f"still missing after apt-get install: {still}")
    return missing


# --------------------------------------------------------------------------- phases

def gbps(nbytes: int, secs: float) -> float:
    return nbytes / secs / 1e9 if secs > 0 else float("inf")


def mbps(nbytes: int, secs: float) -> float:
    return nbytes / secs / 1e6 if secs > 0 else float("inf")


def summarize(samples: list[dict], key: str) -> dict:
    """Median (and min/max) of samples[*][key]; the median round's other fields too."""
    vals = sorted(x[key] for x in samples)
    med = statistics.median(vals)
    return {key: med, f"{key}_min": vals[0], f"{key}_max": vals[-1],
            "wall_s": statistics.median(x["wall_s"] for x in samples),
            "cpu_s": statistics.median(x.get("cpu_s", 0.0) for x in samples),
            "maxrss_bytes": max((x.get("maxrss_bytes") or 0) for x in samples) or None,
            "rounds": samples}


def phase_unique(ctx: dict) -> dict:
    """Rounds of: plain copy, BLAKE3, cairn put, each writer into a new directory,
    the previous writer's output deleted and synced first. On a virtual disk that
    writes far faster into blocks it has already allocated than into never-written
    ones, an untimed warm-up copy first and strict alternation put the plain copy
    and cairn put in the same conditions; medians are reported."""
    wd, cairn, args = ctx["workdir"], ctx["cairn"], ctx["args"]
    size = int(args.random_gib * GIB)
    src = os.path.join(wd, "random.bin")
    log(f"unique: generating {size} random bytes (os.urandom, 16 MiB blocks)")
    generate_random(src, size)
    out: dict = {"bytes": size, "rounds": args.rounds}

    log("unique: untimed warm-up copy (disk preconditioning)")
    warm(src)
    tmp = os.path.join(wd, "plain-warmup")
    os.makedirs(tmp)
    out["warmup_write_gb_s"] = gbps(size, plain_copy(src, os.path.join(tmp, "random.copy")))
    shutil.rmtree(tmp)
    os.sync()

    plain, hashes, puts = [], [], []
    for k in range(1, args.rounds + 1):
        warm(src)
        os.sync()
        log(f"unique: round {k}/{args.rounds}: plain copy with fsync")
        tmp = os.path.join(wd, f"plain-{k}")
        os.makedirs(tmp)
        secs = plain_copy(src, os.path.join(tmp, "random.copy"))
        plain.append({"wall_s": secs, "gb_s": gbps(size, secs)})
        shutil.rmtree(tmp)

        warm(src)
        os.sync()
        log(f"unique: round {k}/{args.rounds}: cairn bench hash")
        h, res = cairn.bench_hash(src)
        try:
            hb, hs = int(h["bytes"]), float(h["seconds"])
        except (KeyError, TypeError, ValueError) as e:
            raise BenchError(f"cairn bench hash: output lacks bytes/seconds: {h}") from e
        if hb != size and k == 1:
            ctx["problems"].append(f"cairn bench hash reported {hb} bytes for a {size}-byte file")
        hashes.append({"bytes": hb, "seconds": hs, "gb_s": gbps(hb, hs), "wall_s": res["wall_s"],
                       "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]})

        repo = os.path.join(wd, "repos", f"cairn-unique-{k}")
        cairn.init(repo)
        warm(src)
        os.sync()
        log(f"unique: round {k}/{args.rounds}: cairn put")
        res = cairn.put(repo, src, "random")
        row = {"wall_s": res["wall_s"], "gb_s": gbps(size, res["wall_s"]),
               "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"],
               "repo_bytes": du_bytes(repo)}
        if k == 1:
            row["stats"] = cairn.stats(repo)
        puts.append(row)
        log(f"unique: round {k}: plain {plain[-1]['gb_s']:.3f} GB/s, BLAKE3 "
            f"{hashes[-1]['gb_s']:.3f} GB/s, put {row['gb_s']:.3f} GB/s")
        shutil.rmtree(repo)
    os.sync()
    out["plain_write"] = summarize(plain, "gb_s")
    out["blake3"] = summarize(hashes, "gb_s")
    out["cairn_put"] = summarize(puts, "gb_s")
    out["cairn_put"]["repo_bytes"] = puts[0]["repo_bytes"]
    out["cairn_put"]["stats"] = puts[0]["stats"]
    out["put_vs_write_per_round"] = [p["gb_s"] / w["gb_s"] for p, w in zip(puts, plain)]
    os.unlink(src)
    return out


def phase_dataset(ctx: dict) -> dict:
    wd, runner, args = ctx["workdir"], ctx["runner"], ctx["args"]
    budget = int(args.tree_gib * GIB)
    parent = os.path.join(wd, "treecopy")
    os.makedirs(parent)
    root = os.path.join(parent, "tree")
    log(f"dataset: copying {args.tree_source} (budget {budget} bytes)")
    copy_stats = build_tree(args.tree_source, root, budget)
    log(f"dataset: copied {copy_stats}")
    gens = []
    for g in (0, 1):
        if g == 1:
            mstats = mutate_tree(root, seed=42)
            log(f"dataset: gen1 changes {mstats}")
        gdir = os.path.join(wd, f"gen{g}")
        os.makedirs(gdir)
        tar = os.path.join(gdir, "tree.tar")
        log(f"dataset: tar gen{g}")
        make_tar(runner, parent, "tree", tar)
        gens.append({"path": tar, "bytes": os.path.getsize(tar)})
    shutil.rmtree(parent)
    for g in gens:
        g["sha256"] = sha256_file(g["path"])
    log("dataset: gen0 %d bytes sha256 %s; gen1 %d bytes sha256 %s"
        % (gens[0]["bytes"], gens[0]["sha256"], gens[1]["bytes"], gens[1]["sha256"]))
    return {"source": args.tree_source, "budget_bytes": budget, "copy": copy_stats,
            "gen1_changes": mstats, "gens": gens}


def ingest_row(g: int, logical: int, cum_logical: int, res: dict, repo: str) -> dict:
    stored = du_bytes(repo)
    return {"gen": g, "wall_s": res["wall_s"], "mb_s": mbps(logical, res["wall_s"]),
            "logical_bytes": logical, "stored_bytes": stored,
            "cum_dedup": cum_logical / stored if stored else float("inf"),
            "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]}


def phase_versioned(ctx: dict, ds: dict) -> dict:
    wd, cairn = ctx["workdir"], ctx["cairn"]
    out: dict = {}
    tools = ["cairn"] + ([] if ctx["args"].skip_peers else ["restic", "borg"])
    for tool in tools:
        repo = os.path.join(wd, "repos", f"{tool}-versioned")
        os.makedirs(os.path.dirname(repo), exist_ok=True)
        rows, extra = [], {"repo": repo}
        if tool == "cairn":
            cairn.init(repo)
            extra["stats"] = []
        elif tool == "restic":
            extra["config"] = ctx["restic"].init(repo)
            extra["init_flags"] = ctx["restic"].init_flags
            extra["snapshots"] = []
        else:
            ctx["borg"].init(repo)
        cum = 0
        for g, gen in enumerate(ds["gens"]):
            warm(gen["path"])
            os.sync()
            log(f"versioned: {tool} ingest gen{g}")
            if tool == "cairn":
                res = cairn.put(repo, gen["path"], f"gen{g}")
            elif tool == "restic":
                res, snap = ctx["restic"].backup(repo, gen["path"])
                extra["snapshots"].append(snap)
            else:
                res = ctx["borg"].create(repo, f"gen{g}", gen["path"])
            cum += gen["bytes"]
            rows.append(ingest_row(g, gen["bytes"], cum, res, repo))
            if tool == "cairn":
                extra["stats"].append(cairn.stats(repo))
            log(f"versioned: {tool} gen{g}: {rows[-1]['wall_s']:.2f}s "
                f"{rows[-1]['mb_s']:.1f} MB/s, repo {rows[-1]['stored_bytes']} bytes")
        out[tool] = {"rows": rows, **extra}
    return out


def phase_readback(ctx: dict, ds: dict, ver: dict) -> dict:
    wd, cairn, dropper = ctx["workdir"], ctx["cairn"], ctx["dropper"]
    gen0 = ds["gens"][0]
    out: dict = {}
    dropper.drop()
    log("read-back: plain read of gen0 tar (cold)")
    secs, n = plain_read(gen0["path"])
    out["plain_read"] = {"wall_s": secs, "gb_s": gbps(n, secs)}

    dropper.drop()
    log("read-back: cairn get gen0 -o /dev/null (cold)")
    res = cairn.get(ver["cairn"]["repo"], "gen0", "/dev/null")
    out["cairn_get"] = {"wall_s": res["wall_s"], "gb_s": gbps(gen0["bytes"], res["wall_s"]),
                        "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]}
    if "restic" in ver:
        dropper.drop()
        log("read-back: restic dump gen0 > /dev/null (cold)")
        res = ctx["restic"].dump(ver["restic"]["repo"], ver["restic"]["snapshots"][0])
        out["restic_dump"] = {"wall_s": res["wall_s"], "gb_s": gbps(gen0["bytes"], res["wall_s"]),
                              "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]}
    if "borg" in ver:
        dropper.drop()
        log("read-back: borg extract --stdout gen0 > /dev/null (cold)")
        res = ctx["borg"].extract_stdout(ver["borg"]["repo"], "gen0")
        out["borg_extract"] = {"wall_s": res["wall_s"], "gb_s": gbps(gen0["bytes"], res["wall_s"]),
                               "maxrss_bytes": res["maxrss_bytes"], "cpu_s": res["cpu_s"]}
    out["cold"] = dropper.ok

    log("verify: cairn get gen1 vs gen1 tar (untimed)")
    check = os.path.join(wd, "verify-gen1.tar")
    cairn.get(ver["cairn"]["repo"], "gen1", check)
    ok, detail = files_identical(ds["gens"][1]["path"], check)
    os.unlink(check)
    out["verify_gen1"] = {"ok": ok, "detail": detail}
    if not ok:
        ctx["problems"].append(f"cairn get gen1 is not byte-identical to the gen1 tar: {detail}")
    return out


# --------------------------------------------------------------------------- report

def fmt_table(headers, rows) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths))).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def nb(n) -> str:
    return f"{n:,}" if isinstance(n, int) else "-"


def mib(n) -> str:
    return f"{n / (1 << 20):.1f}" if isinstance(n, (int, float)) else "-"


def ratio_target(name, num, den, target, kind="ge"):
    if num is None or den is None or den == 0:
        return {"name": name, "value": None, "target": target, "status": "SKIPPED"}
    v = num / den
    met = v >= target if kind == "ge" else v <= target
    return {"name": name, "value": v, "target": target, "kind": kind,
            "status": "MET" if met else "NOT MET"}


def build_report(results: dict) -> tuple[str, list]:
    out = []
    uq, ds, ver, rb = (results.get(k) for k in ("unique", "dataset", "versioned", "readback"))
    env = results["env"]
    out.append("cairn ingest benchmark")
    out.append(f"  machine: {env['cpus']} CPUs, {env['mem_gib']:.1f} GiB RAM, {env['kernel']}")
    out.append(f"  cairn: {env['cairn_binary']} ({env['cairn_version']})")
    for t in ("restic", "borg"):
        if env.get(f"{t}_version"):
            out.append(f"  {t}: {env[f'{t}_version']}")
    out.append("  units: GB/s = 10^9 B/s, MB/s = 10^6 B/s; stored bytes = whole repository "
               "directory, apparent size (du -sb)")
    targets = []

    out.append("")
    out.append(f"1. Unique data: {nb(uq['bytes'])} random bytes, source page-cached; "
               f"{uq['rounds']} alternating round(s), median [min-max]")
    pw = uq["plain_write"]["gb_s"]

    def urow(label, d):
        return [label, f"{d['gb_s']:.3f}", f"{d['gb_s_min']:.3f}-{d['gb_s_max']:.3f}",
                f"{d['gb_s'] / pw:.2f}", f"{d['wall_s']:.2f}", mib(d["maxrss_bytes"]),
                f"{d['cpu_s']:.2f}" if d["maxrss_bytes"] else "-"]
    rows = [urow("plain copy + fsync (disk)", uq["plain_write"]),
            urow("BLAKE3 (cairn bench hash)", uq["blake3"]),
            urow("cairn put (fresh repo)", uq["cairn_put"])]
    out.append(fmt_table(["step", "GB/s", "range", "x plain write", "wall s", "peak RSS MiB",
                          "CPU s"], rows))
    out.append(f"   untimed warm-up copy ran at {uq['warmup_write_gb_s']:.3f} GB/s; per-round "
               "cairn put / plain write: "
               + ", ".join(f"{r:.2f}" for r in uq["put_vs_write_per_round"]))
    cp = uq["cairn_put"]
    out.append(f"   cairn put / BLAKE3: {cp['gb_s'] / uq['blake3']['gb_s']:.2f}; cairn repo after "
               f"put: {nb(cp['repo_bytes'])} bytes ({cp['repo_bytes'] / uq['bytes']:.4f} x input)")
    targets.append(ratio_target("cairn put / plain write (unique data)", cp["gb_s"], pw,
                                TARGETS["put_vs_write"]))

    out.append("")
    g0, g1 = ds["gens"]
    ch = ds["gen1_changes"]
    out.append(f"2. Versioned data set: {ds['source']} trimmed to {nb(ds['copy']['bytes'])} bytes "
               f"({ds['copy']['files']} files, {ds['copy']['symlinks']} symlinks, "
               f"{ds['copy']['skipped']} skipped)")
    out.append(f"   gen0 tar {nb(g0['bytes'])} B sha256 {g0['sha256'][:16]}…; gen1 tar "
               f"{nb(g1['bytes'])} B sha256 {g1['sha256'][:16]}… ({ch['files_edited']} files "
               f"edited, {ch['edits']} edits; {ch['files_added']} files added)")
    rows = []
    for tool, data in ver.items():
        for r in data["rows"]:
            rows.append([tool, f"gen{r['gen']}", f"{r['wall_s']:.2f}", f"{r['mb_s']:.1f}",
                         nb(r["logical_bytes"]), nb(r["stored_bytes"]), f"{r['cum_dedup']:.2f}",
                         mib(r["maxrss_bytes"]), f"{r['cpu_s']:.2f}"])
    out.append(fmt_table(["tool", "gen", "wall s", "MB/s", "logical bytes", "stored bytes",
                          "cum dedup", "peak RSS MiB", "CPU s"], rows))
    if "restic" in ver:
        out.append(f"   restic: repository version {ver['restic']['config'].get('version')}, "
                   f"compression auto (default)")
    st = ver["cairn"]["stats"][-1]
    out.append("   cairn stats after gen1: " + ", ".join(
        f"{k}={st.get(k, 'MISSING')}" for k in STATS_KEYS))
    c = {r["gen"]: r for r in ver["cairn"]["rows"]}
    for peer, key in (("restic", "gen0_vs_restic"), ("borg", "gen0_vs_borg")):
        p = ver.get(peer)
        targets.append(ratio_target(f"cairn gen0 MB/s / {peer} gen0 MB/s", c[0]["mb_s"],
                                    p["rows"][0]["mb_s"] if p else None, TARGETS[key]))
    for g in (0, 1):
        p = ver.get("restic")
        if p:
            cs, rs = c[g]["stored_bytes"], p["rows"][g]["stored_bytes"]
            targets.append({"name": f"cairn stored <= restic stored after gen{g}",
                            "value": f"{'yes' if cs <= rs else 'no'} (cairn {nb(cs)} vs restic "
                                     f"{nb(rs)})",
                            "target": "cairn <= restic", "status": "MET" if cs <= rs else "NOT MET"})
        else:
            targets.append({"name": f"cairn stored <= restic stored after gen{g}", "value": None,
                            "target": "cairn <= restic", "status": "SKIPPED"})

    out.append("")
    cold = "cold: page cache dropped before each" if rb["cold"] else \
        "WARM: caches could NOT be dropped, figures are not cold"
    out.append(f"3. Read-back of gen0 ({nb(g0['bytes'])} bytes), {cold}")
    pr = rb["plain_read"]["gb_s"]
    rows = [["plain read of gen0 tar", f"{pr:.3f}", "1.00", f"{rb['plain_read']['wall_s']:.2f}",
             "-", "-"]]
    for key, label in (("cairn_get", "cairn get gen0 -o /dev/null"),
                       ("restic_dump", "restic dump gen0 > /dev/null"),
                       ("borg_extract", "borg extract --stdout gen0 (info)")):
        if key in rb:
            r = rb[key]
            rows.append([label, f"{r['gb_s']:.3f}", f"{r['gb_s'] / pr:.2f}", f"{r['wall_s']:.2f}",
                         mib(r["maxrss_bytes"]), f"{r['cpu_s']:.2f}"])
    out.append(fmt_table(["step", "GB/s", "x plain read", "seconds", "peak RSS MiB", "CPU s"],
                         rows))
    v = rb["verify_gen1"]
    out.append(f"   cairn get gen1 == gen1 tar: {'OK' if v['ok'] else 'FAIL'} ({v['detail']})")
    targets.append(ratio_target("cairn get / plain read (cold)", rb["cairn_get"]["gb_s"], pr,
                                TARGETS["get_vs_read"]))
    targets.append(ratio_target("cairn get / restic dump (cold)", rb["cairn_get"]["gb_s"],
                                rb["restic_dump"]["gb_s"] if "restic_dump" in rb else None,
                                TARGETS["get_vs_restic"]))
    ib = st.get("index_ram_bytes_per_chunk")
    if isinstance(ib, (int, float)):
        targets.append(ratio_target("index RAM bytes per chunk (cairn stats)", ib, 1,
                                    TARGETS["index_ram_per_chunk"], kind="le"))
    else:
        targets.append({"name": "index RAM bytes per chunk (cairn stats)", "value": ib,
                        "target": TARGETS["index_ram_per_chunk"], "kind": "le",
                        "status": "MISSING"})
    targets.append({"name": "cairn get gen1 byte-identical to gen1 tar",
                    "value": "OK" if v["ok"] else "FAIL", "target": "OK",
                    "status": "MET" if v["ok"] else "NOT MET"})

    out.append("")
    out.append("Targets")
    rows = []
    for t in targets:
        val = t["value"]
        vs = f"{val:.2f}" if isinstance(val, float) else ("-" if val is None else str(val))
        tg = t["target"]
        ts = (f"{'>=' if t.get('kind', 'ge') == 'ge' else '<='} {tg:g}"
              if isinstance(tg, (int, float)) else str(tg))
        rows.append([t["name"], vs, ts, t["status"]])
    out.append(fmt_table(["target", "measured", "target", "status"], rows))
    if results["problems"]:
        out.append("")
        out.append("PROBLEMS")
        out.extend(f"  - {p}" for p in results["problems"])
    return "\n".join(out), targets


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cairn", default=os.path.join(REPO_ROOT, "target", "release", "cairn"),
                   help="cairn binary (default: %(default)s)")
    p.add_argument("--workdir", default="/var/tmp",
                   help="a fresh scratch dir is created inside this dir (default: %(default)s)")
    p.add_argument("--random-gib", type=float, default=2.0, help="unique-data file size in GiB")
    p.add_argument("--tree-source", default="/usr/lib", help="tree to copy for the data set")
    p.add_argument("--tree-gib", type=float, default=1.0, help="data-set budget in GiB")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating plain-copy / BLAKE3 / cairn-put rounds for the unique data; "
                        "medians are reported (default: %(default)s)")
    p.add_argument("--skip-peers", action="store_true", help="do not run restic and borg")
    p.add_argument("--json", metavar="OUT", help="also write all figures as JSON to OUT")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir (and logs)")
    a = p.parse_args(argv)
    if a.random_gib <= 0 or a.tree_gib <= 0:
        p.error("--random-gib and --tree-gib must be > 0")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    return a


def mem_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"MemTotal:\s+(\d+)", f.read())
        return int(m.group(1)) / (1 << 20)
    except (OSError, AttributeError):
        return 0.0


def main(argv=None) -> int:
    args = parse_args(argv)
    cairn_bin = os.path.abspath(args.cairn)
    if not (os.path.isfile(cairn_bin) and os.access(cairn_bin, os.X_OK)):
        print(f"error: cairn binary not found or not executable: {cairn_bin}\n"
              f"(build it with `cargo build --release`, or pass --cairn PATH)", file=sys.stderr)
        return 1
    if not os.path.isdir(args.tree_source):
        print(f"error: --tree-source {args.tree_source} is not a directory", file=sys.stderr)
        return 1
    os.umask(0o022)
    os.makedirs(args.workdir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="cairn-bench-", dir=args.workdir)
    log(f"workdir {workdir}")
    runner = Runner(os.path.join(workdir, "logs"))
    ctx = {"args": args, "workdir": workdir, "runner": runner, "problems": [],
           "cairn": Cairn(runner, cairn_bin), "dropper": CacheDropper()}
    results: dict = {"args": vars(args), "problems": ctx["problems"], "targets_def": TARGETS}
    rc = 0
    try:
        installed = [] if args.skip_peers else ensure_peers()
        env = {"cpus": os.cpu_count(), "mem_gib": mem_gib(), "kernel": platform.release(),
               "python": platform.python_version(), "cairn_binary": cairn_bin,
               "cairn_version": ctx["cairn"].version(), "workdir": workdir,
               "peers_installed_now": installed}
        if not args.skip_peers:
            ctx["restic"] = Restic(runner, workdir)
            ctx["borg"] = Borg(runner, workdir)
            env["restic_version"] = ctx["restic"].version()
            env["borg_version"] = ctx["borg"].version()
        results["env"] = env
        results["unique"] = phase_unique(ctx)
        ds = phase_dataset(ctx)
        results["dataset"] = {k: v for k, v in ds.items()}
        results["versioned"] = phase_versioned(ctx, ds)
        results["readback"] = phase_readback(ctx, ds, results["versioned"])
        for tool, data in results["versioned"].items():
            for s in data.get("stats", []):
                missing = [k for k in STATS_KEYS if k not in s]
                if missing:
                    ctx["problems"].append(f"cairn stats --json lacks {missing}")
                    break
        text, targets = build_report(results)
        results["targets"] = targets
        print(text, flush=True)
        if ctx["problems"]:
            rc = 2
    except BenchError as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        results["error"] = str(e)
        rc = 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        results["error"] = "interrupted"
        rc = 130
    finally:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2, default=str)
                f.write("\n")
            log(f"wrote {args.json}")
        if args.keep:
            log(f"kept workdir {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            log(f"removed workdir {workdir}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
