//! Mounts a repository (created if missing) and serves it until someone
//! unmounts it (`fusermount3 -u MOUNTPOINT`): a stand-in for `cairn mount`
//! while the command does not exist.
//!
//! `cargo run -p fuse --example mount -- REPO MOUNTPOINT [--allow-other]`

use std::path::PathBuf;
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(root), Some(mnt)) = (args.first(), args.get(1)) else {
        eprintln!("usage: mount REPO MOUNTPOINT [--allow-other]");
        std::process::exit(2);
    };
    let (root, mnt) = (PathBuf::from(root), PathBuf::from(mnt));
    fuse::check_fuse_available()?;
    if !repo::Repo::exists(&root) {
        repo::Repo::init(&root)?;
    }
    let repo = repo::Repo::open(&root)?;
    // SAFETY: plain libc getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let fs = Arc::new(repo.open_fs(uid, gid)?);
    let opts = fuse::MountOptions {
        allow_other: args.iter().any(|a| a == "--allow-other"),
        ..Default::default()
    };
    let m = fuse::mount(fs.clone(), &mnt, &opts)?;
    eprintln!(
        "mounted {} at {}; unmount with: fusermount3 -u {}",
        root.display(),
        m.mountpoint().display(),
        m.mountpoint().display()
    );
    m.wait();
    m.unmount()?;
    fs.shutdown()?;
    eprintln!("unmounted");
    Ok(())
}
