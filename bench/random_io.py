#!/usr/bin/env python3
"""Random I/O on a big file (VM images, databases): cairn's FUSE mount against a plain
ext4 directory and bindfs, with fio.

Everything is measured in one run, on one machine, on the same disk. "ext4 dir" is a
directory in the scratch dir; "bindfs" is `bindfs SRC MNT` over another directory there (a
passthrough FUSE mount); "cairn" is `cairn mount` of a fresh repository (one column per
--cairn-config set, see below). Every fio job uses ioengine=psync, direct=0,
refill_buffers=1, fallocate=none and invalidate=0 (the script drops caches itself).

Each target runs twice, once per data variant, each time on a fresh directory or
repository: "unique" (refill_buffers: every block new random data) and "dedup50" (fio's
dedupe_percentage=50: half of the blocks written repeat earlier ones). In each:

 1. image.img of --size written sequentially (1 MiB blocks, end_fsync), and stream.bin of
    the same size for the reader of step 5 (untimed).
 2. 4 KiB random read, cold: page cache dropped; cairn is also unmounted and remounted.
 3. 4 KiB random read, warm: the same job again at once.
 4. 64 KiB random read.
 5. 4 KiB random read while a second fio job streams stream.bin sequentially (1 MiB
    reads): the drop of the random reader's IOPS against step 3, in %.
 6. 4 KiB random write; 7. 70/30 random read/write mix (4 KiB); 8. 64 KiB random write;
 9. database-like: 16 KiB random 70/30 read/write, fsync after every 32 writes.
Steps 2-9 are time-based (--runtime seconds each).

Reported: IOPS and MB/s per job and target, cairn / bindfs and cairn / ext4 ratios; the
bytes the directory or repository grew (apparent size, like `du -sb`, after an unmount)
per byte the write jobs (6-9) wrote, and after `cairn gc` the repository's size per
logical byte (image + stream); the cairn daemon's peak RSS (VmHWM, max over its mounts)
against the budgets configured in its cairn.toml ([memory] budget, metadata_cache and
index_cache + [fs] cache and total_dirty). A "Targets" table marks each MET or NOT MET: every IOPS figure >= 1.0 x
bindfs; stretch: 4 KiB random write >= 0.3 x ext4; growth <= 1.5 x the bytes written before
gc and <= 1.1 x the logical size after; random-read drop under a sequential reader <= 20%
(DDFS); peak RSS within the budgets.

cairn settings. Every cairn repository is made with `cairn init`, then
fs.version_seconds = 0 is set (automatic versions would keep every overwritten chunk alive
past gc, so "after gc" would measure retention, not gc), then each --cairn-config
[LABEL:]KEY=VALUE is applied (KEY is SECTION.NAME of cairn.toml; VALUE is TOML, a bare word
is quoted). Settings without a label make the column "cairn" and apply to every cairn
column; each distinct LABEL adds a column "cairn[LABEL]" with its own settings on top, so
one run compares settings (here: cairn with a 1 GiB cache, cairn[small] with 64 MiB):

    --cairn-config fs.cache=1GiB --cairn-config small:fs.cache=64MiB

The report prints the settings each cairn column used. In a VALUE, `{tier}` becomes a
fresh directory of the column's own (per data variant), for `cache.dir`. Unless
--no-tier-ablation, the run adds the column cairn[tier] with `cache.dir={tier}`: the
persistent cache tier on, against "cairn" with it off (the DDFS Fig. 5-style ablation), in
the same run.

Usage (as root, from the repository root, after `cargo build --release`):

    python3 bench/random_io.py                               # 4 GiB image, 30 s per job
    python3 bench/random_io.py --size 512M --runtime 10      # about 10 minutes
    python3 bench/random_io.py --json /tmp/random.json --keep

fio, bindfs and fusermount3 are installed with apt-get when missing. Progress goes to
stderr, the table to stdout. Every step on a mount is bounded by --step-timeout (default
900 s): on overrun the mounts are aborted and the run fails. Exit status: 0 when every
command succeeded (targets NOT MET do not change it: this is a benchmark, not a test); 1
when a command (fio, a mount, cairn gc) failed or a step timed out (its stderr is
printed); 2 when the run finished but a job moved no data. Every mount this script made is
unmounted on the way out, also on failure. Standard library only (Python 3.11).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
import tomllib
import zlib

sys.dont_write_bytecode = True  # no bench/__pycache__ from importing the helpers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest  # noqa: E402  (shared helpers; importing runs nothing)
from ingest import (BenchError, CacheDropper, Runner, du_bytes, fmt_table, log,  # noqa: E402
                    mem_gib, mib, nb, parse_json_object)
from common import (Cairn, Interrupted, Mounts, Watchdog, _on_signal, ensure_tools,  # noqa: E402
                    f0, f1, f2, fs_of, mounted_paths, ratio, target, tool_version)

REPO_ROOT = ingest.REPO_ROOT
MIB = 1 << 20

TARGETS = {
    "iops_vs_bindfs": 1.0,
    "randwrite_vs_ext4": 0.3,
    "growth_per_written": 1.5,
    "after_gc_per_logical": 1.1,
    "stream_drop": 0.20,
    "rss_per_budget": 1.0,
}

# Data variants: extra fio options for every job of the variant.
VARIANTS = (("unique", {}), ("dedup50", {"dedupe_percentage": 50}))

# (name, label, fio options, what its IOPS count: read, write or both), in the order
# they run.
JOBS = (
    ("rr4k_cold", "4 KiB random read, cold", {"rw": "randread", "bs": "4k"}, "read"),
    ("rr4k_warm", "4 KiB random read, warm", {"rw": "randread", "bs": "4k"}, "read"),
    ("rr64k", "64 KiB random read", {"rw": "randread", "bs": "64k"}, "read"),
    ("rr4k_stream", "4 KiB random read + seq reader", {"rw": "randread", "bs": "4k"}, "read"),
    ("rw4k", "4 KiB random write", {"rw": "randwrite", "bs": "4k"}, "write"),
    ("mix4k", "4 KiB random 70/30 read/write", {"rw": "randrw", "rwmixread": 70, "bs": "4k"},
     "both"),
    ("rw64k", "64 KiB random write", {"rw": "randwrite", "bs": "64k"}, "write"),
    ("db16k", "database: 16 KiB 70/30, fsync/32",
     {"rw": "randrw", "rwmixread": 70, "bs": "16k", "fsync": 32}, "both"),
)
WRITE_JOBS = ("rw4k", "mix4k", "rw64k", "db16k")
BASE_CAIRN_SETTINGS = (("fs.version_seconds", "0"),)
# Every memory bound of a cairn.toml, with its default (docs/file-system.md, "Memory").
DEFAULT_BUDGETS = {"memory.budget": 256 * MIB, "fs.cache": 256 * MIB,
                   "fs.total_dirty": 256 * MIB, "memory.metadata_cache": 64 * MIB,
                   "memory.index_cache": 32 * MIB}


# --------------------------------------------------------------------------- sizes, settings

def parse_size(text: str | int) -> int:
    """"512M", "4GiB", "65536": bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", str(text), re.I)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 512M, 4GiB, 65536)")
    shift = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]
    return int(m.group(1)) << shift


def toml_value(value: str) -> str:
    """VALUE as a TOML value: as given when it parses as one, else a quoted string."""
    try:
        tomllib.loads(f"v = {value}")
        return value
    except tomllib.TOMLDecodeError:
        return json.dumps(value)


def parse_cairn_config(items: list[str]) -> list[dict]:
    """--cairn-config [LABEL:]KEY=VALUE items -> cairn columns, each {"key", "label",
    "settings": [(KEY, TOML value)]}: the base column "cairn" (unlabelled settings), then
    one per label (the base settings, then the label's)."""
    base, by_label = list(BASE_CAIRN_SETTINGS), {}
    for item in items:
        key, sep, value = item.partition("=")
        label, _, key = key.rpartition(":") if ":" in key else ("", "", key)
        section, _, name = key.strip().rpartition(".")
        if not sep or not section or not name or not value.strip():
            raise ValueError(f"--cairn-config {item!r}: expected [LABEL:]SECTION.NAME=VALUE "
                             f"(e.g. fs.cache=512MiB)")
        if label and not re.fullmatch(r"[A-Za-z0-9._-]+", label):
            raise ValueError(f"--cairn-config {item!r}: LABEL must be letters, digits, . _ -")
        entry = (key.strip(), toml_value(value.strip()))
        if label:
            by_label.setdefault(label, []).append(entry)
        else:
            base.append(entry)
    return [{"key": "cairn", "label": "cairn", "settings": base}] + [
        {"key": f"cairn[{lab}]", "label": f"cairn[{lab}]", "settings": base + extra}
        for lab, extra in by_label.items()]


def with_tier_dir(settings: list[tuple[str, str]], tier: str) -> list[tuple[str, str]]:
    """The settings with `{tier}` in a value replaced by `tier` (a directory of the
    column's own for the persistent cache tier, created here)."""
    if any("{tier}" in v for _, v in settings):
        os.makedirs(tier, exist_ok=True)
    return [(k, v.replace("{tier}", tier)) for k, v in settings]


def apply_settings(path: str, settings: list[tuple[str, str]]) -> None:
    """Sets each SECTION.NAME of the cairn.toml at path to its value: the key's line is
    replaced, or added at the end of its section (the section is added when missing).
    The result must still be TOML; cairn itself refuses unknown keys or bad values when
    it mounts."""
    with open(path) as f:
        lines = f.read().splitlines()
    for key, value in settings:
        section, _, name = key.rpartition(".")
        header = f"[{section}]"
        try:
            start = next(i for i, ln in enumerate(lines) if ln.strip() == header)
        except StopIteration:
            lines += ["", header]
            start = len(lines) - 1
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].lstrip().startswith("[")), len(lines))
        line = f"{name} = {value}"
        hit = next((i for i in range(start + 1, end)
                    if lines[i].split("=")[0].strip() == name), None)
        if hit is not None:
            lines[hit] = line
        else:
            last = max((i for i in range(start, end) if lines[i].strip()), default=start)
            lines.insert(last + 1, line)
    text = "\n".join(lines) + "\n"
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BenchError(f"{path}: not TOML after --cairn-config {settings}: {e}") from e
    with open(path, "w") as f:
        f.write(text)


def configured_budgets(path: str) -> dict[str, int]:
    """The memory budgets a cairn.toml sets (defaults where it does not)."""
    with open(path, "rb") as f:
        conf = tomllib.load(f)
    out = {}
    for key, default in DEFAULT_BUDGETS.items():
        section, name = key.split(".")
        value = conf.get(section, {}).get(name)
        out[key] = default if value is None else parse_size(value)
    return out


# --------------------------------------------------------------------------- fio

def seed(variant: str, job: str) -> int:
    """fio's randseed for one job of one variant: the same on every target, so they all get
    the same offsets and data, but different between jobs (with fio's one default seed,
    stream.bin would be a copy of image.img and each write job would repeat the last's
    data, which cairn would deduplicate)."""
    return zlib.crc32(f"{variant}/{job}".encode()) + 1


def fio_jobfile(path: str, size: int, opts: dict, data: dict, runtime: int | None,
                randseed: int, stream: str | None = None) -> str:
    """A fio job file: one job "main" on path (plus "stream", a sequential reader of
    stream, running alongside it, when given)."""
    glob = {"ioengine": "psync", "direct": 0, "refill_buffers": 1, "fallocate": "none",
            "invalidate": 0, "size": size, "randseed": randseed, **data}
    if runtime is not None:
        glob.update({"time_based": 1, "runtime": runtime})
    text = "[global]\n" + "".join(f"{k}={v}\n" for k, v in glob.items())
    text += "\n[main]\n" + f"filename={path}\n" + "".join(f"{k}={v}\n" for k, v in opts.items())
    if stream:
        text += f"\n[stream]\nfilename={stream}\nrw=read\nbs=1M\n"
    return text


def run_fio(ctx: dict, name: str, jobfile: str) -> dict:
    """Runs fio on jobfile; returns {jobname: {"read"|"write": {"iops", "bw_bytes",
    "io_bytes"}}} from its JSON output."""
    runner = ctx["runner"]
    base = os.path.join(runner.logdir, f"{runner.count + 1:03d}-{name}")
    with open(base + ".fio", "w") as f:
        f.write(jobfile)
    out = base + ".json"
    runner.run(["fio", "--output-format=json", f"--output={out}", base + ".fio"],
               name=f"fio-{name}")
    with open(out) as f:
        report = parse_json_object(f.read(), f"fio {base}.fio")
    jobs = {}
    for job in report.get("jobs", []):
        if job.get("error"):
            raise BenchError(f"fio job {job.get('jobname')} in {base}.fio failed: error "
                             f"{job['error']} ({os.strerror(job['error'])})")
        jobs[job["jobname"]] = {d: {k: job[d][k] for k in ("iops", "bw_bytes", "io_bytes")}
                                for d in ("read", "write")}
    return jobs


def figures(job: dict, direction: str) -> dict:
    dirs = ("read", "write") if direction == "both" else (direction,)
    iops = sum(job[d]["iops"] for d in dirs)
    return {"iops": iops, "mb_s": sum(job[d]["bw_bytes"] for d in dirs) / 1e6,
            "read_iops": job["read"]["iops"], "write_iops": job["write"]["iops"],
            "read_bytes": job["read"]["io_bytes"], "write_bytes": job["write"]["io_bytes"]}


# --------------------------------------------------------------------------- targets

class Target:
    """One column: where its files live, and how to make it cold."""

    def __init__(self, ctx: dict, key: str, kind: str, variant: str, settings=None):
        self.ctx, self.key, self.kind, self.variant = ctx, key, kind, variant
        self.settings = settings or []
        self.tag = tag = re.sub(r"[^A-Za-z0-9._-]", "_", f"{key}-{variant}")
        wd = ctx["workdir"]
        self.data = os.path.join(wd, "data", tag)      # directory or repository on disk
        self.mnt = os.path.join(wd, "mnt", tag)
        self.root = self.data if kind == "ext4" else self.mnt
        self.budgets = None

    def setup(self) -> None:
        """A fresh directory or repository (with the column's settings), mounted."""
        if self.kind == "ext4":
            os.makedirs(self.data)
        elif self.kind == "cairn":
            self.ctx["cairn"].init(self.data)
            toml = os.path.join(self.data, "cairn.toml")
            apply_settings(toml, with_tier_dir(self.settings,
                                               os.path.join(self.ctx["workdir"], "tier", self.tag)))
            self.budgets = configured_budgets(toml)
        self.mount()

    def unmount(self) -> dict | None:
        mounts = self.ctx["mounts"]
        if self.kind == "cairn":
            return mounts.cairn_umount(self.mnt)
        if self.kind == "bindfs":
            mounts.bindfs_umount(self.mnt)
        return None

    def mount(self) -> None:
        mounts = self.ctx["mounts"]
        if self.kind == "cairn":
            mounts.cairn_mount(self.data, self.mnt, f"{self.key} {self.variant}")
        elif self.kind == "bindfs":
            mounts.bindfs_mount(self.data, self.mnt)

    def teardown(self) -> None:
        shutil.rmtree(self.data)
        os.sync()


def preflight(ctx: dict, columns: list[dict]) -> None:
    """Fails before anything is measured when cairn refuses a column's settings (an unknown
    key, a bad value): `cairn stats` on a fresh repository with them loads its cairn.toml."""
    for col in columns:
        repo = os.path.join(ctx["workdir"], "preflight")
        ctx["cairn"].init(repo)
        apply_settings(os.path.join(repo, "cairn.toml"),
                       with_tier_dir(col["settings"], os.path.join(ctx["workdir"], "tier",
                                                                   "preflight")))
        try:
            ctx["cairn"].stats(repo)
        except BenchError as e:
            raise BenchError(f"cairn refuses the settings of column {col['label']} "
                             f"({', '.join(f'{k} = {v}' for k, v in col['settings'])}):\n{e}")
        shutil.rmtree(repo)


def run_variant(ctx: dict, t: Target, data: dict) -> dict:
    """Steps 1-9 on one target and data variant; see the module doc."""
    a, step, dropper = ctx["args"], ctx["watch"].step, ctx["dropper"]
    size, rt = a.size, a.runtime
    image, stream = os.path.join(t.root, "image.img"), os.path.join(t.root, "stream.bin")
    name = f"{t.key}-{t.variant}".replace("[", "_").replace("]", "")
    out: dict = {"jobs": {}, "mounts": []}
    seq = {"rw": "write", "bs": "1M", "end_fsync": 1}

    t.setup()
    with step(f"{t.key} {t.variant}: sequential image write"):
        log(f"{t.key} {t.variant}: writing {nb(size)} B image sequentially")
        jf = fio_jobfile(image, size, seq, data, None, seed(t.variant, "image"))
        job = run_fio(ctx, f"{name}-seqwrite", jf)
        out["seqwrite"] = figures(job["main"], "write")
        log(f"{t.key} {t.variant}: sequential write {out['seqwrite']['mb_s']:.1f} MB/s")
        jf = fio_jobfile(stream, size, seq, data, None, seed(t.variant, "stream"))
        run_fio(ctx, f"{name}-streamfile", jf)
        mrow = t.unmount()
    if mrow:
        out["mounts"].append(mrow)
    out["bytes_before_writes"] = du_bytes(t.data)
    dropper.drop()
    t.mount()

    for key, label, opts, direction in JOBS:
        with step(f"{t.key} {t.variant}: {label}"):
            jf = fio_jobfile(image, size, opts, data, rt, seed(t.variant, key),
                             stream if key == "rr4k_stream" else None)
            job = run_fio(ctx, f"{name}-{key}", jf)
        fig = figures(job["main"], direction)
        if "stream" in job:
            fig["stream_mb_s"] = job["stream"]["read"]["bw_bytes"] / 1e6
        moved = fig["read_bytes"] + fig["write_bytes"]
        if not moved:
            ctx["problems"].append(f"{t.key} {t.variant} {label}: fio moved no data")
        out["jobs"][key] = fig
        log(f"{t.key} {t.variant}: {label}: {fig['iops']:,.0f} IOPS, {fig['mb_s']:.1f} MB/s")

    with step(f"{t.key} {t.variant}: unmount"):
        mrow = t.unmount()
    if mrow:
        out["mounts"].append(mrow)
    out["written_bytes"] = sum(out["jobs"][k]["write_bytes"] for k in WRITE_JOBS)
    out["logical_bytes"] = 2 * size
    out["bytes_after_writes"] = du_bytes(t.data)
    if t.kind == "cairn":
        log(f"{t.key} {t.variant}: cairn gc")
        res = ctx["runner"].run([ctx["cairn"].bin, "--repo", t.data, "-q", "gc", "--json"],
                                name="cairn-gc", env={"CAIRN_REPO": None}, capture=True)
        out["gc"] = parse_json_object(res["stdout"], "cairn gc --json")
        out["gc_s"] = res["wall_s"]
        out["bytes_after_gc"] = du_bytes(t.data)
        out["budgets"] = t.budgets
    t.teardown()
    return out


# --------------------------------------------------------------------------- report

def pct(x) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"


def build_report(res: dict) -> tuple[str, list]:
    env, cols, runs = res["env"], res["columns"], res["runs"]
    cairns = [c for c in cols if c["kind"] == "cairn"]
    out, targets = [], []
    a = res["args"]
    out.append("cairn random-I/O benchmark (fio)")
    out.append(f"  machine: {env['cpus']} CPUs, {env['mem_gib']:.1f} GiB RAM, {env['kernel']}; "
               f"workdir {env['workdir']} on {env['workdir_fs']}")
    out.append(f"  cairn: {env['cairn_binary']} ({env['cairn_version']}); {env['fio_version']}; "
               f"bindfs {env['bindfs_version']}")
    if env["installed_now"]:
        out.append(f"  installed now with apt-get: {', '.join(env['installed_now'])}")
    cold = ("cold: page cache dropped, cairn unmounted and remounted" if res["cold"]
            else "WARM: caches could NOT be dropped, 'cold' figures are not cold")
    out.append(f"  image {nb(a['size'])} B, {a['runtime']} s per random job; fio psync, "
               f"direct=0, refill_buffers=1; MB/s = 10^6 B/s; {cold}")
    for c in cairns:
        out.append(f"  {c['label']} settings: "
                   + ", ".join(f"{k} = {v}" for k, v in c["settings"]))

    def r(col, variant):
        return runs[col["key"]][variant]

    out.append("")
    out.append("1. Jobs: IOPS (read + write for mixed jobs) and MB/s per target")
    headers = ["job", "data"]
    for c in cols:
        headers += [f"{c['label']} IOPS", "MB/s"]
    for c in cairns:
        headers += [f"{c['label']} x bindfs", "x ext4"]
    rows = []
    for variant, _ in VARIANTS:
        s = [r(c, variant)["seqwrite"] for c in cols]
        row = ["sequential image write (1 MiB)", variant]
        for f in s:
            row += [f0(f["iops"]), f1(f["mb_s"])]
        for c in cairns:
            mb = r(c, variant)["seqwrite"]["mb_s"]
            row += [f2(ratio(mb, r(cols[1], variant)["seqwrite"]["mb_s"])),
                    f2(ratio(mb, r(cols[0], variant)["seqwrite"]["mb_s"]))]
        rows.append(row)
        for key, label, _, _ in JOBS:
            row = [label, variant]
            for c in cols:
                f = r(c, variant)["jobs"][key]
                row += [f0(f["iops"]), f1(f["mb_s"])]
            ext4 = r(cols[0], variant)["jobs"][key]["iops"]
            bindfs = r(cols[1], variant)["jobs"][key]["iops"]
            for c in cairns:
                v = r(c, variant)["jobs"][key]["iops"]
                row += [f2(ratio(v, bindfs)), f2(ratio(v, ext4))]
                targets.append(target(f"{c['label']} IOPS / bindfs: {label} ({variant})",
                                      ratio(v, bindfs), TARGETS["iops_vs_bindfs"]))
            rows.append(row)
    out.append(fmt_table(headers, rows))
    out.append("   mixed jobs, read / write IOPS:")
    rows = []
    for v, _ in VARIANTS:
        for c in cols:
            jobs = r(c, v)["jobs"]
            rows.append([c["label"], v] + [f"{f0(jobs[k]['read_iops'])} / "
                                           f"{f0(jobs[k]['write_iops'])}"
                                           for k in ("mix4k", "db16k")])
    out.append(fmt_table(["target", "data", "4 KiB 70/30", "database 16 KiB"], rows))
    for c in cairns:
        for variant, _ in VARIANTS:
            targets.append(target(
                f"(stretch) {c['label']} 4 KiB random write / ext4 ({variant})",
                ratio(r(c, variant)["jobs"]["rw4k"]["iops"],
                      r(cols[0], variant)["jobs"]["rw4k"]["iops"]),
                TARGETS["randwrite_vs_ext4"]))

    out.append("")
    out.append("2. 4 KiB random read alone (warm) and while a sequential reader streams "
               "stream.bin")
    rows = []
    for variant, _ in VARIANTS:
        for c in cols:
            j = r(c, variant)["jobs"]
            alone, with_s = j["rr4k_warm"]["iops"], j["rr4k_stream"]["iops"]
            drop = 1 - with_s / alone if alone else None
            rows.append([c["label"], variant, f0(alone), f0(with_s), pct(drop),
                         f1(j["rr4k_stream"].get("stream_mb_s"))])
            if c["kind"] == "cairn":
                targets.append(target(f"{c['label']} random-read drop under a sequential "
                                      f"reader ({variant})", drop, TARGETS["stream_drop"],
                                      kind="le", percent=True))
    out.append(fmt_table(["target", "data", "IOPS alone", "IOPS with reader", "drop",
                          "reader MB/s"], rows))

    out.append("")
    out.append("3. Bytes on disk (apparent size, du -sb, after an unmount) against bytes the "
               "write jobs wrote")
    rows = []
    for variant, _ in VARIANTS:
        for c in cols:
            x = r(c, variant)
            grown = x["bytes_after_writes"] - x["bytes_before_writes"]
            per = grown / x["written_bytes"] if x["written_bytes"] else None
            after_gc = x.get("bytes_after_gc")
            per_logical = after_gc / x["logical_bytes"] if after_gc is not None else None
            rows.append([c["label"], variant, nb(x["logical_bytes"]), nb(x["written_bytes"]),
                         nb(x["bytes_before_writes"]), nb(x["bytes_after_writes"]), f2(per),
                         nb(after_gc), f2(per_logical)])
            if c["kind"] == "cairn":
                targets.append(target(f"{c['label']} growth / bytes written, before gc "
                                      f"({variant})", per, TARGETS["growth_per_written"],
                                      kind="le"))
                targets.append(target(f"{c['label']} repository after gc / logical "
                                      f"({variant})", per_logical,
                                      TARGETS["after_gc_per_logical"], kind="le"))
    out.append(fmt_table(["target", "data", "logical", "written", "before writes",
                          "after writes", "grown / written", "after gc", "after gc / logical"],
                         rows))
    out.append("   logical = image + stream file; gc = `cairn gc` (default threshold) on the "
               "unmounted repository")

    out.append("")
    out.append("4. cairn mount daemon: peak RSS (VmHWM, max over the column's mounts, incl. "
               "unmount) against its configured budgets")
    rows = []
    for c in cairns:
        mrows = [m for v, _ in VARIANTS for m in r(c, v)["mounts"]]
        peak = max((max(m["vm_hwm_bytes"] or 0, m["vm_hwm_exit_bytes"] or 0)
                    for m in mrows), default=0)
        budgets = r(c, VARIANTS[0][0])["budgets"]
        total = sum(budgets.values())
        rows.append([c["label"], mib(peak), mib(total),
                     " + ".join(f"{k} {mib(v)}" for k, v in budgets.items()), f2(ratio(peak,
                                                                                    total))])
        targets.append(target(f"{c['label']} peak RSS / configured budgets", ratio(peak, total),
                              TARGETS["rss_per_budget"], kind="le"))
    out.append(fmt_table(["target", "peak RSS MiB", "budget MiB", "budget (MiB)",
                          "RSS / budget"], rows))

    out.append("")
    out.append("Targets")
    rows = []
    for t in targets:
        v = t["value"]
        if t["percent"]:
            vs, ts = pct(v), f"{100 * t['target']:g}%"
        else:
            vs, ts = f2(v), f"{t['target']:g}"
        rows.append([t["name"], vs, f"{'>=' if t['kind'] == 'ge' else '<='} {ts}", t["status"]])
    out.append(fmt_table(["target", "measured", "target", "status"], rows))
    met = sum(t["status"] == "MET" for t in targets)
    out.append(f"{met} of {len(targets)} targets MET")
    if res["problems"]:
        out.append("")
        out.append("PROBLEMS")
        out.extend(f"  - {p}" for p in res["problems"])
    return "\n".join(out), targets


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the top of bench/random_io.py or bench/README.md "
                                       "for what each step does.")
    p.add_argument("--cairn", default=os.path.join(REPO_ROOT, "target", "release", "cairn"),
                   help="cairn binary (default: %(default)s)")
    p.add_argument("--workdir", default="/var/tmp",
                   help="a fresh scratch dir is created inside this dir (default: %(default)s)")
    p.add_argument("--size", default="4G",
                   help="size of the image and of the stream file, e.g. 512M, 4G "
                        "(default: %(default)s)")
    p.add_argument("--runtime", type=int, default=30, metavar="SECONDS",
                   help="seconds per time-based random job (default: %(default)s)")
    p.add_argument("--cairn-config", action="append", default=[], metavar="[LABEL:]KEY=VALUE",
                   help="set KEY (SECTION.NAME) of cairn.toml before mounting; repeatable; a "
                        "LABEL makes an extra cairn column with its own settings")
    p.add_argument("--no-tier-ablation", action="store_true",
                   help="do not add the column cairn[tier] (cache.dir={tier}: the persistent "
                        "cache tier on)")
    p.add_argument("--step-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="abort the mounts and fail when one step on a mount (a fio job, an "
                        "unmount) takes longer (default: %(default)s)")
    p.add_argument("--json", metavar="OUT", help="also write all figures as JSON to OUT")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch dir (fio job files, fio JSON, logs); mounts are "
                        "always unmounted")
    a = p.parse_args(argv)
    try:
        a.size = parse_size(a.size)
        tier = [] if a.no_tier_ablation else ["tier:cache.dir={tier}"]
        a.columns = parse_cairn_config(a.cairn_config + tier)
    except ValueError as e:
        p.error(str(e))
    if a.size < 16 * MIB or a.size % (64 << 10):
        p.error("--size must be at least 16M and a multiple of 64K")
    if a.runtime < 1:
        p.error("--runtime must be >= 1")
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
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="cairn-randombench-", dir=args.workdir))
    log(f"workdir {workdir}")
    runner = Runner(os.path.join(workdir, "logs"))
    mounts = Mounts(runner, cairn_bin)
    ctx = {"args": args, "workdir": workdir, "runner": runner, "problems": [],
           "cairn": Cairn(runner, cairn_bin), "mounts": mounts, "dropper": CacheDropper(),
           "watch": Watchdog(mounts, args.step_timeout)}
    columns = ([{"key": "ext4", "label": "ext4 dir", "kind": "ext4"},
                {"key": "bindfs", "label": "bindfs", "kind": "bindfs"}]
               + [{**c, "kind": "cairn"} for c in args.columns])
    results: dict = {"args": {**vars(args), "columns": None}, "problems": ctx["problems"],
                     "targets_def": TARGETS, "columns": columns, "runs": {}}
    old_handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
    rc = 0
    try:
        installed = ensure_tools({"fio": "fio", "bindfs": "bindfs", "fusermount3": "fuse3"})
        results["env"] = {
            "cpus": os.cpu_count(), "mem_gib": mem_gib(), "kernel": platform.release(),
            "python": platform.python_version(), "cairn_binary": cairn_bin,
            "cairn_version": ctx["cairn"].version(), "workdir": workdir,
            "workdir_fs": fs_of(workdir), "fio_version": tool_version(["fio", "--version"]),
            "bindfs_version": tool_version(["bindfs", "--version"]), "installed_now": installed}
        preflight(ctx, [c for c in columns if c["kind"] == "cairn"])
        for col in columns:
            results["runs"][col["key"]] = {}
            for variant, data in VARIANTS:
                t = Target(ctx, col["key"], col["kind"], variant, col.get("settings"))
                results["runs"][col["key"]][variant] = run_variant(ctx, t, data)
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
