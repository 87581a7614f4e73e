//! Disks whose power a test cuts: each an ext4 file system on a loop
//! device over an image that keeps, at a cut, only what was flushed (plus
//! any subset of the writes since, chosen by a seed). A process killed
//! with SIGKILL loses nothing the kernel has accepted; a power cut loses
//! everything not flushed, so only it shows whether a program's `fsync`s
//! are where its promises need them.
//!
//! The images live in memory behind a small FUSE file system in the test
//! process (no device-mapper here). ext4 sends a flush at each commit and
//! `fsync`; the loop device turns it into an `fsync` of the image file,
//! which is what makes writes durable.

mod device;
mod image;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::{rngs::StdRng, Rng, SeedableRng};

use device::{image_name, Device, Power};

/// Which of the writes since the last flush a cut keeps.
#[derive(Debug, Clone, Copy)]
pub enum Keep {
    /// None: the disk holds exactly what was flushed.
    Nothing,
    /// Each one or not, at even odds, from this seed (a disk's volatile
    /// cache reaches the medium in any order).
    Random(u64),
}

/// `count` disks of one machine, mounted.
pub struct Disks {
    power: Arc<Mutex<Power>>,
    size: u64,
    dir: tempfile::TempDir,
    session: Option<fuser::BackgroundSession>,
    loops: Vec<String>,
    mounted: Vec<bool>,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (util-linux and e2fsprogs are needed)"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Disks {
    /// `count` fresh ext4 disks of `size` bytes each (sparse: only what is
    /// written takes memory).
    pub fn new(count: usize, size: u64) -> Disks {
        let power = Power {
            images: (0..count).map(|_| Default::default()).collect(),
            on: true,
        };
        let mut disks = Disks {
            power: Arc::new(Mutex::new(power)),
            size,
            dir: tempfile::tempdir().expect("a directory for the disks"),
            session: None,
            loops: Vec::new(),
            mounted: vec![false; count],
        };
        disks.attach();
        for dev in &disks.loops {
            run(Command::new("mkfs.ext4")
                .args(["-q", "-F", "-E", "nodiscard,lazy_itable_init=1"])
                .arg(dev));
        }
        disks.mount_all();
        disks
    }

    /// Where disk `i` is mounted.
    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("d{i}"))
    }

    fn images(&self) -> PathBuf {
        self.dir.path().join("images")
    }

    /// The power goes, on every disk at one instant: each write since its
    /// disk's last flush survives or not as `keep` says, and nothing
    /// written after reaches a disk. Returns (writes kept, writes dropped).
    /// Kill every process using the disks next, then [`Disks::power_on`].
    pub fn cut(&self, keep: Keep) -> (usize, usize) {
        let mut rng = match keep {
            Keep::Nothing => None,
            Keep::Random(seed) => Some(StdRng::seed_from_u64(seed)),
        };
        let mut power = self.power.lock();
        power.on = false;
        let (mut kept, mut dropped) = (0, 0);
        for img in &mut power.images {
            let (k, d) = img.cut(|| rng.as_mut().is_some_and(|r| r.gen_bool(0.5)));
            kept += k;
            dropped += d;
        }
        (kept, dropped)
    }

    /// The machine starts again: every disk is unmounted (nothing may use
    /// them any more), its loop device detached, and mounted again from
    /// what the cut left (ext4 replays its journal).
    pub fn power_on(&mut self) {
        self.detach();
        self.power.lock().on = true;
        self.attach();
        self.mount_all();
    }

    fn attach(&mut self) {
        let images = self.images();
        std::fs::create_dir_all(&images).expect("the images' mount point");
        let count = self.mounted.len();
        let fs = Device {
            power: self.power.clone(),
            size: self.size,
            count,
        };
        let mut config = fuser::Config::default();
        config.mount_options = vec![fuser::MountOption::FSName("cairn-powercut".into())];
        config.acl = fuser::SessionACL::All;
        let session = fuser::Session::new(fs, &images, &config)
            .and_then(|s| s.spawn())
            .expect("mount the power-cut images (FUSE: install fuse3)");
        self.session = Some(session);
        self.loops = (0..count)
            .map(|i| {
                run(Command::new("losetup")
                    .args(["--find", "--show"])
                    .arg(images.join(image_name(i))))
            })
            .collect();
    }

    fn mount_all(&mut self) {
        for (i, dev) in self.loops.iter().enumerate() {
            let at = self.dir.path().join(format!("d{i}"));
            std::fs::create_dir_all(&at).expect("a disk's mount point");
            // A journal commit only at a flush or every five minutes, so
            // what a program did not sync is still unsynced at a cut; and
            // metadata may reach the disk before data (as on XFS), so a
            // file whose data was not synced is caught even when a later
            // `fsync` commits its name.
            run(Command::new("mount")
                .args(["-o", "commit=300,data=writeback"])
                .arg(dev)
                .arg(&at));
            self.mounted[i] = true;
        }
    }

    fn detach(&mut self) {
        for i in 0..self.mounted.len() {
            if std::mem::take(&mut self.mounted[i]) {
                unmount(&self.path(i));
            }
        }
        for dev in self.loops.drain(..) {
            run(Command::new("losetup").args(["--detach", &dev]));
        }
        self.session.take();
    }
}

fn unmount(at: &Path) {
    run(Command::new("umount").arg(at));
}

impl Drop for Disks {
    fn drop(&mut self) {
        for i in 0..self.mounted.len() {
            if std::mem::take(&mut self.mounted[i]) {
                let _ = Command::new("umount").arg("-l").arg(self.path(i)).status();
            }
        }
        for dev in self.loops.drain(..) {
            let _ = Command::new("losetup").args(["--detach", &dev]).status();
        }
        self.session.take();
    }
}
