//! The machine's side: FUSE and the cairn mounts on it.

use std::path::Path;

use super::{euid, CairnMount, Findings, FuseFacts, Severity};

pub(super) fn fuse_checks(f: &mut Findings, fuse: &FuseFacts) {
    use std::os::unix::fs::FileTypeExt;
    let dev = Path::new("/dev/fuse");
    match std::fs::metadata(dev) {
        Ok(m) if m.file_type().is_char_device() => {
            // Root opens it itself; anyone else goes through fusermount3.
            let usable = euid() != 0
                || std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(dev)
                    .is_ok();
            if usable {
                f.ok("fuse_device", None, "/dev/fuse is there".into());
            } else {
                f.push(
                    "fuse_device",
                    Severity::Problem,
                    None,
                    "/dev/fuse is there but cannot be opened".into(),
                    Some("in a container, start it with --device /dev/fuse".into()),
                );
            }
        }
        _ => f.push(
            "fuse_device",
            Severity::Problem,
            None,
            "/dev/fuse is missing: nothing can be mounted".into(),
            Some(
                "load the module (`modprobe fuse`); in a container, start it with \
                 --device /dev/fuse"
                    .into(),
            ),
        ),
    }
    match &fuse.fusermount {
        Some(p) => f.ok(
            "fuse_package",
            None,
            format!("{} is installed", p.display()),
        ),
        None => f.push(
            "fuse_package",
            Severity::Problem,
            None,
            "fusermount3 is not installed: mounts and unmounts need it".into(),
            Some("apt-get install fuse3".into()),
        ),
    }
}

pub(super) fn mounts(f: &mut Findings, root: &Path, fuse: &FuseFacts) {
    let ours = repo::holder_of(root).and_then(|h| h.mountpoint.map(|m| (h.pid, m)));
    let table = match &fuse.mounts {
        Ok(t) => t,
        Err(e) => {
            f.push(
                "mount",
                Severity::Warning,
                None,
                format!("cannot read the kernel's mount table: {e}"),
                None,
            );
            return;
        }
    };
    for CairnMount { point, dead } in table {
        let subject = Some(point.display().to_string());
        match dead {
            true => f.push(
                "mount",
                Severity::Problem,
                subject,
                format!(
                    "a dead cairn mount is at {} (\"Transport endpoint is not connected\"): its \
                     daemon ended without unmounting, and every access there fails",
                    point.display()
                ),
                Some(format!(
                    "`cairn umount {}` detaches it; then mount again and run `cairn check`",
                    point.display()
                )),
            ),
            false => {
                let whose = match &ours {
                    Some((pid, m)) if m == point => format!(" (this repository, pid {pid})"),
                    _ => String::new(),
                };
                f.ok(
                    "mount",
                    subject,
                    format!("cairn is mounted at {}{whose}", point.display()),
                );
            }
        }
    }
    if table.is_empty() {
        f.ok("mount", None, "no cairn mount, and none dead".into());
    }
}
