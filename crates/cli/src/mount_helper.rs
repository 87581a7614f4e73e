//! `mount -t fuse.cairn REPO DIR -o OPTS` and fstab: the cairn binary
//! called as `mount.fuse.cairn` (or `mount.cairn`), or as `cairn REPO DIR
//! -o OPTS` by fuse3's own helper, and the `-o` options that `cairn mount`
//! shares with it.
//!
//! mount(8) runs `/sbin/mount.fuse.cairn REPO DIR [-sfnv] [-o OPTS]` and
//! waits for it; the helper starts `cairn --repo REPO mount DIR -o OPTS`
//! in the background (its own process group, so it outlives the shell), returns
//! once the mount answers, and fails with the daemon's own error when it
//! ends before mounting.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::args::MountArgs;

/// The names under which the binary is the mount helper.
const HELPER_NAMES: [&str; 2] = ["mount.fuse.cairn", "mount.cairn"];
/// How long the helper waits for the daemon to mount (opening a large
/// repository reads its index) before giving up on it.
const MOUNT_WAIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(20);
/// The most of the daemon's stderr kept to explain a failed mount.
const STDERR_KEPT: usize = 64 << 10;
/// Mount options every file system takes, which mean nothing to cairn
/// (mount(8) and the kernel's own flags, fstab's bookkeeping).
const GENERIC: [&str; 18] = [
    "defaults",
    "rw",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "atime",
    "noatime",
    "relatime",
    "strictatime",
    "auto",
    "noauto",
    "user",
    "nouser",
    "_netdev",
    "nofail",
];

/// Whether this process was started as the mount helper: under one of
/// [`HELPER_NAMES`], or by fuse3's `mount.fuse3` for type `fuse.cairn`,
/// which runs `cairn REPO DIR -o OPTS`: a first argument that is a path,
/// not a subcommand, and a second that is a directory.
pub fn called_as_helper(argv: &[OsString], subcommands: &[&str]) -> bool {
    let name = argv
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str());
    if name.is_some_and(|n| HELPER_NAMES.contains(&n)) {
        return true;
    }
    match (argv.get(1).and_then(|a| a.to_str()), argv.get(2)) {
        (Some(first), Some(second)) => {
            !first.starts_with('-')
                && first.contains('/')
                && !subcommands.contains(&first)
                && Path::new(second).is_dir()
        }
        _ => false,
    }
}

/// Folds `args.options` (`-o ro,allow_other,threads=2`) into the other
/// fields of `args`; refuses an option cairn does not know.
pub fn apply_options(args: &mut MountArgs) -> Result<()> {
    let options = std::mem::take(&mut args.options);
    for opt in options.iter().flat_map(|o| o.split(',')) {
        let opt = opt.trim();
        match opt.split_once('=') {
            _ if opt.is_empty() || GENERIC.contains(&opt) || opt.starts_with("x-") => {}
            _ if opt.starts_with("comment=") => {}
            None if opt == "ro" => args.read_only = true,
            None if opt == "allow_other" => args.allow_other = true,
            None if opt == "nonempty" => args.nonempty = true,
            Some(("threads", n)) => {
                args.threads = n
                    .parse()
                    .with_context(|| format!("mount option {opt:?}: not a number"))?;
            }
            Some(("metrics", addr)) => {
                args.metrics = Some(addr.parse().with_context(|| {
                    format!("mount option {opt:?}: not an address such as 127.0.0.1:9100")
                })?);
            }
            _ => bail!(
                "unknown mount option {opt:?} (cairn takes ro, rw, allow_other, nonempty, \
                 threads=N, metrics=ADDR and the generic ones: see `cairn mount --help`)"
            ),
        }
    }
    Ok(())
}

/// What mount(8) passes the helper.
struct HelperArgs {
    source: PathBuf,
    dir: PathBuf,
    options: Vec<String>,
    /// `-f`: do everything but the mount.
    fake: bool,
}

fn parse(args: &[OsString]) -> Result<HelperArgs> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut fake = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => options.push(
                it.next()
                    .and_then(|o| o.to_str())
                    .context("-o needs a list of options")?
                    .to_string(),
            ),
            Some(o) if o.starts_with("-o") => options.push(o[2..].to_string()),
            // mount(8)'s type and namespace: already decided.
            Some("-t" | "-N") => {
                it.next();
            }
            Some(flags) if flags.starts_with('-') && flags.len() > 1 => {
                fake |= flags.contains('f');
            }
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [source, dir] = <[PathBuf; 2]>::try_from(positional).map_err(|p| {
        anyhow::anyhow!(
            "usage: mount.fuse.cairn REPO DIR [-o OPTIONS] (got {} paths)",
            p.len()
        )
    })?;
    Ok(HelperArgs {
        source,
        dir,
        options,
        fake,
    })
}

/// Runs as mount(8)'s helper: checks the options, starts the daemon and
/// waits until it has mounted.
pub fn run(args: &[OsString]) -> Result<ExitCode> {
    let h = parse(args)?;
    let mut check = MountArgs {
        mountpoint: h.dir.clone(),
        nonempty: false,
        allow_other: false,
        threads: 4,
        read_only: false,
        metrics: None,
        options: h.options.clone(),
        meta: None,
        cluster: None,
        background: false,
    };
    apply_options(&mut check)?;
    if h.fake {
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg0("cairn")
        .arg("--repo")
        .arg(&h.source)
        .arg("mount")
        .arg(&h.dir);
    for o in &h.options {
        cmd.arg("-o").arg(o);
    }
    start_in_background(cmd, &h.dir, &h.source)?;
    Ok(ExitCode::SUCCESS)
}

/// Starts `cmd` (a `cairn mount` in the foreground) in its own process
/// group and waits until `dir` is a live cairn mount: `mount -t
/// fuse.cairn` and `cairn mount --background`. Fails with the daemon's own
/// words when it ends before mounting.
pub fn start_in_background(mut cmd: Command, dir: &Path, repo: &Path) -> Result<()> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("cannot start cairn mount")?;
    // What the daemon says before it mounts; once this process has
    // returned, the pipe is closed and the daemon's stderr goes nowhere
    // (its log file has everything).
    let said = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = err.read(&mut buf) {
                let room = STDERR_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            String::from_utf8_lossy(&kept).into_owned()
        })
    });
    let started = Instant::now();
    loop {
        if let Ok(fuse::MountState::Live(e)) = fuse::mount_state(dir) {
            if e.is_cairn() {
                return Ok(());
            }
        }
        if let Some(status) = child.try_wait().context("cannot wait for cairn mount")? {
            let said = said.and_then(|t| t.join().ok()).unwrap_or_default();
            bail!(
                "cairn mount {} ended ({status}) without mounting: {}",
                dir.display(),
                said.trim().trim_start_matches("cairn: error: ")
            );
        }
        if started.elapsed() > MOUNT_WAIT {
            bail!(
                "{} is not mounted after {} s; cairn mount (pid {}) may still be opening the \
                 repository: see {}/log/cairn.log",
                dir.display(),
                MOUNT_WAIT.as_secs(),
                child.id(),
                repo.display()
            );
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(opts: &[&str]) -> MountArgs {
        MountArgs {
            mountpoint: "/m".into(),
            nonempty: false,
            allow_other: false,
            threads: 4,
            read_only: false,
            metrics: None,
            options: opts.iter().map(|s| s.to_string()).collect(),
            meta: None,
            cluster: None,
            background: false,
        }
    }

    #[test]
    fn options_map_to_flags_and_unknown_ones_are_refused() {
        let mut a = args(&[
            "defaults,ro,allow_other",
            "threads=2,_netdev,x-systemd.automount,metrics=127.0.0.1:9100",
        ]);
        apply_options(&mut a).unwrap();
        assert!(a.read_only && a.allow_other && !a.nonempty);
        assert_eq!(a.threads, 2);
        assert_eq!(a.metrics, Some("127.0.0.1:9100".parse().unwrap()));
        assert!(apply_options(&mut args(&["metrics=localhost"])).is_err());
        let e = apply_options(&mut args(&["rw,bogus"])).unwrap_err();
        assert!(e.to_string().contains("\"bogus\""), "{e}");
        assert!(apply_options(&mut args(&["threads=x"])).is_err());
    }

    #[test]
    fn helper_arguments_as_mount_passes_them() {
        let argv: Vec<OsString> = ["/r", "/m", "-n", "-o", "ro", "-t", "fuse.cairn"]
            .iter()
            .map(OsString::from)
            .collect();
        let h = parse(&argv).unwrap();
        assert_eq!(h.source, Path::new("/r"));
        assert_eq!(h.dir, Path::new("/m"));
        assert_eq!(h.options, ["ro"]);
        assert!(!h.fake);
        assert!(parse(&argv[..1]).is_err());
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let subs = ["mount", "stats"];
        assert!(called_as_helper(&os(&["/sbin/mount.fuse.cairn"]), &subs));
        assert!(!called_as_helper(&os(&["/usr/bin/cairn"]), &subs));
        // mount.fuse3's way: cairn REPO DIR -o OPTS.
        assert!(called_as_helper(
            &os(&["cairn", "/r", "/", "-o", "rw"]),
            &subs
        ));
        assert!(!called_as_helper(&os(&["cairn", "mount", "/"]), &subs));
        assert!(!called_as_helper(&os(&["cairn", "--repo", "/"]), &subs));
        assert!(!called_as_helper(
            &os(&["cairn", "/r", "/no/such/dir"]),
            &subs
        ));
    }
}
