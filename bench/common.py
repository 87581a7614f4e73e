"""Helpers the mount benchmarks share (bench/fs.py, bench/random.py, bench/gc.py):
mounting and unmounting cairn and bindfs, the daemon's peak RSS (VmHWM), a watchdog that
bounds every step on a mount, the cairn CLI, installing Debian tools, and the Targets
table's formatting. Standard library only; importing runs nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

sys.dont_write_bytecode = True  # no bench/__pycache__
from ingest import BenchError, Runner, log, mib, parse_json_object  # noqa: E402

MOUNT_TIMEOUT_S = 30.0

def mbps(nbytes: int, secs: float) -> float:
    return nbytes / secs / 1e6 if secs > 0 else float("inf")


class Interrupted(Exception):
    pass


def _on_signal(signum, _frame):
    raise Interrupted(f"signal {signum}")


# --------------------------------------------------------------------------- mounts

def _unescape_mount_field(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounted_paths() -> dict[str, str]:
    """Mount point -> file-system type, from /proc/mounts."""
    out = {}
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                out[_unescape_mount_field(parts[1])] = parts[2]
    return out


def is_mounted(path: str) -> bool:
    return path in mounted_paths()


def wait_mounted(path: str, proc: subprocess.Popen | None, what: str, err_path: str) -> float:
    """Wait (max MOUNT_TIMEOUT_S) until path shows up in /proc/mounts; returns seconds."""
    t0 = time.monotonic()
    while True:
        if is_mounted(path):
            return time.monotonic() - t0
        if proc is not None and proc.poll() is not None:
            raise BenchError(f"{what} exited with status {proc.returncode} before {path} was "
                             f"mounted\n--- stderr ---\n{read_tail(err_path)}\n--- end stderr ---")
        if time.monotonic() - t0 > MOUNT_TIMEOUT_S:
            raise BenchError(f"{what}: {path} not in /proc/mounts after {MOUNT_TIMEOUT_S:.0f} s"
                             f"\n--- stderr ---\n{read_tail(err_path)}\n--- end stderr ---")
        time.sleep(0.02)


def read_tail(path: str, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            return f.read()[-limit:].decode(errors="replace").rstrip()
    except OSError:
        return "(no stderr captured)"


def vm_hwm_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"^VmHWM:\s+(\d+)\s*kB", f.read(), re.M)
        return int(m.group(1)) * 1024 if m else None
    except OSError:
        return None


class Mounts:
    """Every mount this script makes, so that all of them can be taken down on failure."""

    def __init__(self, runner: Runner, cairn_bin: str):
        self.r = runner
        self.bin = cairn_bin
        self.active: dict[str, dict] = {}   # mount point -> {"kind", "proc"?, ...}
        self.cairn_log: list[dict] = []     # one row per cairn mount, filled at unmount
        self.killed: list[dict] = []        # cairn mounts the watchdog killed
        self.seq = 0

    def kill_cairn(self) -> None:
        """SIGKILL every cairn mount process this script started that is still running
        (the kernel then fails the mount's pending requests)."""
        for m in list(self.active.values()):
            proc = m.get("proc")
            if proc is not None and proc.returncode is None and proc.poll() is None:
                log(f"TIMEOUT: SIGKILL cairn mount pid {proc.pid}")
                proc.kill()
                self.killed.append(m)

    # ---- cairn
    def cairn_mount(self, repo: str, mnt: str, purpose: str, extra: tuple = ()) -> None:
        """`cairn mount` of repo on mnt, with `extra` options (e.g. `--meta URL`)."""
        self.seq += 1
        os.makedirs(mnt, exist_ok=True)
        err_path = os.path.join(self.r.logdir, f"mount-{self.seq:02d}-cairn.err")
        cmd = [self.bin, "--repo", repo, "-q", "mount", *extra, mnt]
        env = dict(os.environ)
        env.pop("CAIRN_REPO", None)
        err = open(err_path, "wb")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                    env=env, close_fds=True)
        except OSError as e:
            err.close()
            raise BenchError(f"cannot start {self.bin!r}: {e}") from e
        err.close()
        self.active[mnt] = {"kind": "cairn", "proc": proc, "err": err_path, "cmd": cmd,
                            "purpose": purpose, "t_start": time.monotonic()}
        secs = wait_mounted(mnt, proc, " ".join(cmd), err_path)
        self.active[mnt]["mount_s"] = secs
        log(f"mounted cairn on {mnt} (pid {proc.pid}, {secs:.2f} s) for {purpose}")

    def cairn_umount(self, mnt: str) -> dict:
        m = self.active[mnt]
        proc = m["proc"]
        hwm = vm_hwm_bytes(proc.pid)
        t0 = time.monotonic()
        self.r.run([self.bin, "-q", "umount", mnt], name="cairn-umount")
        # The mount process makes data durable, then exits 0.
        hwm_exit = hwm
        while True:
            h = vm_hwm_bytes(proc.pid)  # keeps growing while the unmount flushes
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if h:
                hwm_exit = max(hwm_exit or 0, h)
            time.sleep(0.01)  # bounded by the watchdog around every unmount
        secs = time.monotonic() - t0
        del self.active[mnt]
        if proc.returncode != 0:
            raise BenchError(f"cairn mount process ({' '.join(m['cmd'])}) exited with status "
                             f"{proc.returncode} after unmount\n--- stderr ---\n"
                             f"{read_tail(m['err'])}\n--- end stderr ---")
        if is_mounted(mnt):
            raise BenchError(f"{mnt} is still mounted after `cairn umount` and process exit")
        row = {"purpose": m["purpose"], "pid": proc.pid, "vm_hwm_bytes": hwm,
               "vm_hwm_exit_bytes": hwm_exit, "cpu_s": ru.ru_utime + ru.ru_stime,
               "mount_s": m.get("mount_s"), "umount_s": secs,
               "lifetime_s": time.monotonic() - m["t_start"]}
        self.cairn_log.append(row)
        log(f"unmounted cairn {mnt} in {secs:.2f} s (VmHWM {mib(hwm)} MiB)")
        return row

    # ---- bindfs
    def bindfs_mount(self, src: str, mnt: str) -> None:
        self.seq += 1
        os.makedirs(src, exist_ok=True)
        os.makedirs(mnt, exist_ok=True)
        self.active[mnt] = {"kind": "bindfs"}
        self.r.run(["bindfs", src, mnt], name="bindfs-mount")  # daemonizes once mounted
        wait_mounted(mnt, None, f"bindfs {src} {mnt}",
                     os.path.join(self.r.logdir, f"{self.r.count:03d}-bindfs-mount.err"))
        log(f"mounted bindfs {src} on {mnt}")

    def bindfs_umount(self, mnt: str) -> None:
        self.r.run(["fusermount3", "-u", mnt], name="bindfs-umount")
        t0 = time.monotonic()
        while is_mounted(mnt):
            if time.monotonic() - t0 > MOUNT_TIMEOUT_S:
                raise BenchError(f"{mnt} still mounted after fusermount3 -u")
            time.sleep(0.02)
        del self.active[mnt]

    # ---- failure path
    def dead_daemons(self) -> str:
        """Exit status and stderr of cairn mount processes that died while mounted."""
        text = ""
        for mnt, m in self.active.items():
            proc = m.get("proc")
            if proc is not None and m not in self.killed and proc.poll() is not None:
                text += (f"\ncairn mount process for {mnt} exited with status "
                         f"{proc.returncode} while mounted\n--- stderr of "
                         f"`{' '.join(m['cmd'])}` ---\n{read_tail(m['err']) or '(empty)'}\n"
                         f"--- end stderr ---")
        return text

    def cleanup(self) -> None:
        """Lazy-unmount everything still mounted; stop cairn mount processes we started."""
        for mnt, m in list(self.active.items()):
            if is_mounted(mnt):
                log(f"cleanup: fusermount3 -u -z {mnt}")
                subprocess.run(["fusermount3", "-u", "-z", mnt], stdout=sys.stderr,
                               stderr=sys.stderr)
            proc = m.get("proc")
            if proc is not None and proc.poll() is None:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    log(f"cleanup: cairn mount pid {proc.pid} did not exit; SIGTERM")
                    proc.terminate()
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        log(f"cleanup: SIGKILL pid {proc.pid}")
                        proc.kill()
                        proc.wait()
            del self.active[mnt]


def fuse_conn_id(mnt: str) -> str | None:
    """The /sys/fs/fuse/connections entry of a mount (its anonymous device number), from
    /proc/self/mountinfo, so that a hung mount point need not be touched."""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 4 and _unescape_mount_field(parts[4]) == mnt:
                    major, minor = (int(x) for x in parts[2].split(":"))
                    return str((major << 20) | minor)
    except (OSError, ValueError):
        pass
    return None


class Watchdog:
    """Bounds every step that touches a mount. When a step overruns, the FUSE connections
    of the active mounts are aborted (through fusectl when it is mounted), the cairn mount
    processes and the registered child (postmark) are killed, so the blocked system call
    fails and the step raises BenchError. If the main thread is still stuck 60 s later, the
    mounts are cleaned up and the script exits 1."""

    def __init__(self, mounts: "Mounts", timeout: float):
        self.mounts = mounts
        self.timeout = timeout
        self.fired: str | None = None
        self.child: subprocess.Popen | None = None
        self.done = threading.Event()

    @contextmanager
    def step(self, label: str):
        self.done.clear()
        timer = threading.Timer(self.timeout, self._fire, args=(label,))
        timer.daemon = True
        timer.start()
        try:
            yield
        except BaseException as e:
            if self.fired:
                raise BenchError(self._message(label)) from e
            raise
        finally:
            timer.cancel()
            self.done.set()
        if self.fired:
            raise BenchError(self._message(label))

    def _message(self, label: str) -> str:
        msg = (f"step '{label}' did not finish within {self.timeout:.0f} s (--step-timeout); "
               f"its mounts were aborted")
        for m in self.mounts.killed:
            msg += (f"\n--- stderr of `{' '.join(m['cmd'])}` ---\n"
                    f"{read_tail(m['err']) or '(empty)'}\n--- end stderr ---")
        return msg

    def _fire(self, label: str) -> None:
        self.fired = label
        log(f"TIMEOUT: step '{label}' still running after {self.timeout:.0f} s; aborting")
        for mnt in list(self.mounts.active):
            conn = fuse_conn_id(mnt)
            abort = f"/sys/fs/fuse/connections/{conn}/abort"
            if conn and os.path.exists(abort):
                try:
                    with open(abort, "w") as f:
                        f.write("1")
                    log(f"TIMEOUT: aborted the FUSE connection of {mnt}")
                except OSError as e:
                    log(f"TIMEOUT: cannot abort {abort}: {e}")
        self.mounts.kill_cairn()
        if self.child is not None and self.child.poll() is None:
            log(f"TIMEOUT: SIGKILL {self.child.args[0]} pid {self.child.pid}")
            self.child.kill()
        if not self.done.wait(60):
            print(f"\nFAILED: {self._message(label)}\nthe main thread is still blocked; "
                  "cleaning up and exiting", file=sys.stderr, flush=True)
            try:
                self.mounts.cleanup()
            finally:
                os._exit(1)


# --------------------------------------------------------------------------- cairn CLI

class Cairn:
    def __init__(self, runner: Runner, binary: str):
        self.r = runner
        self.bin = binary
        self.env = {"CAIRN_REPO": None}

    def version(self) -> str:
        try:
            out = subprocess.run([self.bin, "--version"], capture_output=True, text=True,
                                 timeout=30)
            return (out.stdout.strip() or out.stderr.strip() or "unknown").splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    def init(self, repo: str) -> dict:
        os.makedirs(os.path.dirname(repo), exist_ok=True)
        return self.r.run([self.bin, "--repo", repo, "init"], name="cairn-init", env=self.env)

    def put(self, repo: str, path: str, label: str) -> dict:
        return self.r.run([self.bin, "--repo", repo, "-q", "put", path, "--name", label],
                          name=f"cairn-put-{label}", env=self.env)

    def get(self, repo: str, label: str, out: str) -> dict:
        return self.r.run([self.bin, "--repo", repo, "-q", "get", label, "-o", out, "--force"],
                          name=f"cairn-get-{label}", env=self.env)

    def stats(self, repo: str) -> dict:
        res = self.r.run([self.bin, "--repo", repo, "stats", "--json"], name="cairn-stats",
                         env=self.env, capture=True)
        return parse_json_object(res["stdout"], "cairn stats --json")



# --------------------------------------------------------------------------- tools

def ensure_tools(need: dict[str, str]) -> list[str]:
    """Installs the Debian packages (need: tool -> package) of the tools not on PATH with
    apt-get; returns the packages installed."""
    missing = [t for t in need if shutil.which(t) is None]
    if not missing:
        return []
    pkgs = sorted({need[t] for t in missing})
    cmd = ["apt-get", "install", "-y", *pkgs]
    log(f"{', '.join(missing)} not found: running `{' '.join(cmd)}`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
        log("apt-get install failed; running `apt-get update` and retrying")
        subprocess.run(["apt-get", "update"], env=env, stdout=sys.stderr)
        if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode != 0:
            raise BenchError(f"{' '.join(cmd)} failed (see above)")
    still = [t for t in need if shutil.which(t) is None]
    if still:
        raise BenchError(f"still missing after apt-get install: {still}")
    return pkgs


def tool_version(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        text = (p.stdout.strip() or p.stderr.strip()).splitlines()
        return text[0] if text else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def dpkg_version(pkg: str) -> str:
    return tool_version(["dpkg-query", "-W", "-f=${Version}", pkg])


# --------------------------------------------------------------------------- report

def target(name: str, value, goal: float, kind: str = "ge", percent: bool = False) -> dict:
    t = {"name": name, "value": value, "target": goal, "kind": kind, "percent": percent}
    if value is None:
        return {**t, "status": "SKIPPED"}
    met = value >= goal if kind == "ge" else value <= goal
    return {**t, "status": "MET" if met else "NOT MET"}


def ratio(a, b):
    return a / b if a is not None and b else None


def f1(x) -> str:
    return f"{x:.1f}" if isinstance(x, (int, float)) else "-"


def f0(x) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) else "-"


def f2(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "-"


def fs_of(path: str) -> str:
    best, kind = "", "unknown"
    for mnt, t in mounted_paths().items():
        if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, kind = mnt, t
    return f"{kind} ({best})"
