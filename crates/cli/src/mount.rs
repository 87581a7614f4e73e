//! `cairn mount`, `umount` and `serve`: the file system in the foreground
//! (with `serve`, the S3 gateway on the same file system).

use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use repo::Repo;
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::args::{GatewayArgs, MountArgs};

/// Clears a dead cairn mount at `dir` (left by a daemon that was killed:
/// nothing there can be read or written any more, so detaching it loses
/// nothing), then checks `dir` can take a mount; all before the repository
/// is opened.
fn prepare_mountpoint(dir: &Path, nonempty: bool, quiet: bool) -> Result<()> {
    if let Ok(fuse::MountState::Dead(entry)) = fuse::mount_state(dir) {
        if entry.is_cairn() {
            fuse::detach(dir)?;
            if !quiet {
                say!(
                    "cairn: cleared the dead mount at {} (its daemon ended without unmounting)",
                    dir.display()
                );
            }
        }
    }
    fuse::check_mountpoint(dir, nonempty)?;
    Ok(())
}

/// `cairn mount --background`: this same command line without the flag,
/// started as the daemon, returning once it has mounted.
fn mount_in_background(root: &Path, dir: &Path) -> Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find the cairn executable")?;
    let mut cmd = Process::new(exe);
    cmd.args(std::env::args_os().skip(1).filter(|a| a != "--background"));
    crate::mount_helper::start_in_background(cmd, dir, root)?;
    Ok(ExitCode::SUCCESS)
}

/// What serves HTTP beside a mount: the S3 gateway (with `/metrics` and
/// the dashboard), or `/metrics` alone.
enum Http {
    Gateway(gateway::Running),
    Metrics(gateway::Scrapes),
}

/// Mounts `root` at `args.mountpoint` in the foreground; with `gateway`,
/// serves the same file system over S3 there too until the unmount, else
/// with `args.metrics` its figures alone at that address.
pub fn mount(
    root: &Path,
    args: &MountArgs,
    gateway: Option<&GatewayArgs>,
    quiet: bool,
) -> Result<ExitCode> {
    let mut args = args.clone();
    crate::mount_helper::apply_options(&mut args)?;
    let args = &args;
    if args.background {
        return mount_in_background(root, &args.mountpoint);
    }
    fuse::check_fuse_available()?;
    prepare_mountpoint(&args.mountpoint, args.nonempty, quiet)?;
    let mut repo = crate::ops::open(root, quiet)?;
    if args.read_only {
        // Nothing changes, so no version is due; without this the timer
        // and the unmount would still write version records.
        repo.config.fs.version_interval = std::time::Duration::ZERO;
    }
    let fs = match (&args.meta, &args.cluster) {
        (Some(url), _) => service::open_fs_on_etcd(&repo, url)?,
        (None, Some(url)) => service::open_fs_on_etcd_cluster(&repo, url)?,
        (None, None) => service::open_fs(&repo)?,
    };
    crate::alloc::govern(repo.config.memory_limit(), Arc::downgrade(&fs));
    // Before anything is served: a collection by another client running
    // now must see this client's writes from the first.
    service::participate_in_collections(&fs)?;
    // Listening first: an address in use is refused before anything is
    // mounted.
    let control_served = Arc::new(service::control::Served {
        fs: fs.clone(),
        chunking: repo.config.chunking,
        mountpoint: args.mountpoint.clone(),
        read_only: args.read_only,
        jobs: Arc::default(),
    });
    let mut fuse_metrics = None;
    let served = match gateway {
        Some(args) => {
            let figures =
                crate::gateway::metrics(&fs, Some(&control_served.jobs), Some(&mut fuse_metrics));
            let console = Arc::new(dashboard::Dashboard::start(
                repo.root.clone(),
                control_served.clone(),
            ));
            Some(Http::Gateway(crate::gateway::start(
                fs.clone(),
                &repo.root,
                args,
                figures,
                Some(console),
                quiet,
            )?))
        }
        None => match args.metrics {
            Some(addr) => {
                let figures =
                    crate::gateway::registry(&fs, &control_served.jobs, &mut fuse_metrics);
                let scrapes = gateway::serve_metrics(addr, gateway::Metrics::alone(figures))?;
                if !quiet {
                    say!("cairn: metrics at http://{}/metrics", scrapes.addr());
                }
                Some(Http::Metrics(scrapes))
            }
            None => None,
        },
    };
    // SAFETY: a plain getter.
    let is_root = unsafe { libc::geteuid() } == 0;
    let opts = fuse::MountOptions {
        allow_other: args.allow_other || is_root,
        threads: args.threads.max(1),
        page_cache_max: repo.config.page_cache_max,
        writeback_cache: repo.config.writeback_cache,
        kernel_dirty: repo.config.kernel_dirty,
        nonempty: args.nonempty,
        metrics: fuse_metrics,
        read_only: args.read_only,
        // A namespace in etcd (one cluster or several) may be shared with
        // other clients.
        close_to_open: args.meta.is_some() || args.cluster.is_some(),
        fsname: fuse::fsname_for(&std::path::absolute(root).unwrap_or_else(|_| root.into())),
    };
    let mounted = fuse::mount(fs.clone(), &args.mountpoint, &opts)?;
    // Names the gateway changes are dropped from the kernel's entry cache,
    // so the mount sees them at once.
    if let (Some(Http::Gateway(g)), Some(inval)) = (&served, mounted.invalidator()) {
        g.on_name_change(Box::new(move |dir, name| inval.entry(dir, name)));
    }
    let mountpoint = mounted.mountpoint().to_path_buf();
    repo.announce_mount(&mountpoint)?;
    // Collections across clients are an operator's to start.
    let shared = args.meta.is_some() || args.cluster.is_some();
    let auto_gc = if shared {
        None
    } else {
        service::autogc::spawn(
            control_served.clone(),
            repo.root.clone(),
            repo.config.auto_gc,
        )
    };
    let control = service::control::serve(&repo.root, control_served)?;
    tracing::info!(repo = %repo.root.display(), mountpoint = %mountpoint.display(), pid = std::process::id(), "mounted");
    if !quiet {
        say!(
            "cairn: mounted {} at {}{} (Ctrl-C or `cairn umount {}` to unmount)",
            repo.root.display(),
            args.mountpoint.display(),
            if args.read_only { " read-only" } else { "" },
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
    match served {
        Some(Http::Gateway(g)) => g.stop(),
        Some(Http::Metrics(m)) => m.stop(),
        None => {}
    }
    drop(mounted);
    drop(auto_gc);
    drop(control);
    if let Err(e) = fs.shutdown() {
        tracing::error!(mountpoint = %mountpoint.display(), error = %e, "making written data durable at unmount failed");
        if let Err(r) = repo.record_unmount(Err(&e.to_string())) {
            tracing::error!(error = %r, "cannot record the failed unmount for `cairn umount`");
        }
        return Err(anyhow::Error::new(e).context("making written data durable at unmount"));
    }
    if let Err(r) = repo.record_unmount(Ok(())) {
        tracing::warn!(error = %r, "cannot record the unmount for `cairn umount`");
    }
    // The file system's own threads keep it alive to the end of the
    // process, so its drop cannot be what takes the mark away.
    service::leave_shared_namespace(&fs);
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    if !quiet {
        say!("cairn: unmounted {}", args.mountpoint.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// [`prepare_mountpoint`] for a mount point that may not exist yet.
fn prepare_mountpoint_if_present(dir: &Path, nonempty: bool, quiet: bool) -> Result<()> {
    // A dead mount does not "exist" either: every look at it fails.
    let unmounted = fuse::mount_state(dir).map_or(true, |s| s == fuse::MountState::NotMounted);
    if unmounted && !dir.exists() {
        return Ok(());
    }
    prepare_mountpoint(dir, nonempty, quiet)
}

/// Tries of an unmount the kernel calls busy, 200 ms apart.
const BUSY_TRIES: u32 = 10;

fn umount_path(mountpoint: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        let out = Process::new("fusermount3")
            .arg("-u")
            .arg(mountpoint)
            .output()
            .context("cannot run fusermount3 (install the fuse3 package)")?;
        if out.status.success() {
            return Ok(());
        }
        let err = String::from_utf8_lossy(&out.stderr);
        tries += 1;
        // A mount whose last files were closed a moment ago can look busy
        // for an instant (seen under load); one still in use stays busy.
        if err.contains("busy") && tries < BUSY_TRIES {
            tracing::debug!(mountpoint = %mountpoint.display(), "the mount is busy; unmounting again");
            std::thread::sleep(std::time::Duration::from_millis(200));
            continue;
        }
        bail!(
            "fusermount3 -u {} failed: {}",
            mountpoint.display(),
            err.trim()
        );
    }
}

/// Unmounts a cairn mount; a dead one (its daemon was killed) is detached.
pub fn umount(mountpoint: &Path, quiet: bool) -> Result<ExitCode> {
    let state = fuse::mount_state(mountpoint)
        .with_context(|| format!("cannot look at {}", mountpoint.display()))?;
    match state {
        fuse::MountState::NotMounted => {
            refuse!(
                "{} is not mounted: nothing to unmount",
                mountpoint.display()
            )
        }
        fuse::MountState::Live(entry) | fuse::MountState::Dead(entry) if !entry.is_cairn() => {
            refuse!(
                "{} is not a cairn mount (it is {entry}); use umount or fusermount3 -u",
                mountpoint.display()
            )
        }
        fuse::MountState::Dead(_) => {
            fuse::detach(mountpoint)?;
            if !quiet {
                say!(
                    "cairn: {} was a dead mount (its daemon ended without unmounting); detached it",
                    mountpoint.display()
                );
            }
        }
        fuse::MountState::Live(entry) => {
            umount_path(mountpoint)?;
            if let Some(root) = entry.repository() {
                wait_for_daemon(&root, mountpoint)?;
                if let repo::Unmounted::Failed(why) = repo::last_unmount(&root) {
                    bail!(
                        "unmounted {}, but its daemon could not make everything written durable: \
                         {why} (see {}/log/cairn.log)",
                        mountpoint.display(),
                        root.display()
                    );
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// How long `umount` waits for a daemon to finish after its unmount (the
/// systemd unit's stop timeout: slow branches may take that long).
const DAEMON_EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Waits until the daemon that served `mountpoint` has made everything
/// written durable and let go of the repository at `root`, so the next
/// command (`check`, another mount) finds it free.
fn wait_for_daemon(root: &Path, mountpoint: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let mut said = false;
    while repo::is_locked(root)? {
        if !said && started.elapsed() > std::time::Duration::from_secs(1) {
            let pid = repo::holder_of(root).map_or("?".into(), |h| h.pid.to_string());
            say!(
                "cairn: unmounted {}; waiting for its daemon (pid {pid}) to make everything \
                 written durable",
                mountpoint.display()
            );
            said = true;
        }
        if started.elapsed() > DAEMON_EXIT_WAIT {
            bail!(
                "unmounted {}, but its daemon still holds {} after {} minutes: see {}/log/cairn.log",
                mountpoint.display(),
                root.display(),
                DAEMON_EXIT_WAIT.as_secs() / 60,
                root.display()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// Where and how `cairn serve` mounts.
pub struct Serving {
    pub mountpoint: Option<PathBuf>,
    pub nonempty: bool,
    pub meta: Option<String>,
    pub cluster: Option<String>,
}

pub fn serve(root: &Path, at: Serving, gateway: &GatewayArgs, quiet: bool) -> Result<ExitCode> {
    let Serving {
        mountpoint,
        nonempty,
        meta,
        cluster,
    } = at;
    let mountpoint = match mountpoint {
        Some(m) => m,
        None => dirs::home_dir()
            .context("no home directory; name a mount point")?
            .join("cairn"),
    };
    prepare_mountpoint_if_present(&mountpoint, nonempty, quiet)?;
    if !Repo::exists(root) {
        service::init(root, crate::ops::lock_wait())?;
        if !quiet {
            say!("cairn: created a repository at {}", root.display());
            say!("cairn: {}", crate::ui::key_backup(root));
        }
    }
    std::fs::create_dir_all(&mountpoint)
        .with_context(|| format!("cannot create the mount point {}", mountpoint.display()))?;
    let args = MountArgs {
        mountpoint,
        nonempty,
        allow_other: false,
        threads: 4,
        read_only: false,
        metrics: None,
        options: Vec::new(),
        meta,
        cluster,
        background: false,
    };
    mount(root, &args, Some(gateway), quiet)
}
