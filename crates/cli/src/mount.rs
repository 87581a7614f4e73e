//! `cairn mount`, `umount` and `serve`: the file system in the foreground.

use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use repo::Repo;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::args::MountArgs;

/// Opens the repository's file system, owned by whoever mounts it.
pub fn open_fs(repo: &Repo) -> Result<Arc<fs::Fs>> {
    // SAFETY: plain getters without preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Ok(Arc::new(repo.open_fs(uid, gid)?))
}

pub fn mount(root: &Path, args: &MountArgs, quiet: bool) -> Result<ExitCode> {
    fuse::check_fuse_available()?;
    let repo = crate::commands::open(root, quiet)?;
    let fs = open_fs(&repo)?;
    // SAFETY: a plain getter.
    let is_root = unsafe { libc::geteuid() } == 0;
    let opts = fuse::MountOptions {
        allow_other: args.allow_other || is_root,
        threads: args.threads.max(1),
        page_cache_max: repo.config.page_cache_max,
        ..Default::default()
    };
    let mounted = fuse::mount(fs.clone(), &args.mountpoint, &opts)?;
    let mountpoint = std::fs::canonicalize(&args.mountpoint).unwrap_or(args.mountpoint.clone());
    let control = crate::control::serve(&repo.root, fs.clone(), mountpoint.clone())?;
    tracing::info!(repo = %repo.root.display(), mountpoint = %mountpoint.display(), pid = std::process::id(), "mounted");
    if !quiet {
        say!(
            "cairn: mounted {} at {} (Ctrl-C or `cairn umount {}` to unmount)",
            repo.root.display(),
            args.mountpoint.display(),
            args.mountpoint.display()
        );
    }
    // A signal asks for an unmount, which ends the session below; a busy
    // mount stays mounted and says why.
    let unmounter = mounted.unmounter();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    let handle = signals.handle();
    let watcher = std::thread::spawn(move || {
        for _ in signals.forever() {
            if let Err(e) = unmounter.unmount() {
                say!("cairn: {e}");
            }
        }
    });
    mounted.wait();
    handle.close();
    let _ = watcher.join();
    drop(mounted);
    drop(control);
    if let Err(e) = fs.shutdown() {
        tracing::error!(mountpoint = %mountpoint.display(), error = %e, "making written data durable at unmount failed");
        return Err(anyhow::Error::new(e).context("making written data durable at unmount"));
    }
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    if !quiet {
        say!("cairn: unmounted {}", args.mountpoint.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn umount_path(mountpoint: &Path) -> Result<()> {
    let out = Process::new("fusermount3")
        .arg("-u")
        .arg(mountpoint)
        .output()
        .context("cannot run fusermount3 (install the fuse3 package)")?;
    if !out.status.success() {
        bail!(
            "fusermount3 -u {} failed: {}",
            mountpoint.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub fn umount(mountpoint: &Path) -> Result<ExitCode> {
    umount_path(mountpoint)?;
    Ok(ExitCode::SUCCESS)
}

pub fn serve(root: &Path, mountpoint: Option<PathBuf>, quiet: bool) -> Result<ExitCode> {
    if !Repo::exists(root) {
        Repo::init(root)?;
        say!("cairn: created a repository at {}", root.display());
    }
    let mountpoint = match mountpoint {
        Some(m) => m,
        None => dirs::home_dir()
            .context("no home directory; name a mount point")?
            .join("cairn"),
    };
    std::fs::create_dir_all(&mountpoint)
        .with_context(|| format!("cannot create the mount point {}", mountpoint.display()))?;
    let args = MountArgs {
        mountpoint,
        allow_other: false,
        threads: 4,
    };
    mount(root, &args, quiet)
}
