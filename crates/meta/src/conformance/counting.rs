//! Counts after every operation, and mutations from many threads at once.

use super::*;
use crate::{Counts, MetaStore};

pub fn counts_follow_every_operation(m: &dyn MetaStore) {
    let c = |files, dirs| Counts { files, dirs };
    let d = mkdir(m, ROOT, "d");
    let f = mkfile(m, d, "f");
    m.create(d, b"s", symlink(b"x"), t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(2, 2));
    m.link(f, ROOT, b"f2", t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(2, 2));
    m.unlink(d, b"s", false, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2));
    m.unlink(d, b"f", false, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2));
    m.unlink(ROOT, b"f2", true, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2), "an orphan still counts");
    m.drop_orphan(f).unwrap();
    assert_eq!(m.counts().unwrap(), c(0, 2));
    m.rmdir(ROOT, b"d", t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(0, 1));
}

pub fn concurrent_mutations_from_many_threads(m: &dyn MetaStore) {
    std::thread::scope(|s| {
        for th in 0..4 {
            s.spawn(move || {
                let dir = mkdir(m, ROOT, &format!("t{th}"));
                for i in 0..50 {
                    let f = mkfile(m, dir, &format!("f{i}"));
                    m.link(f, ROOT, format!("t{th}-{i}").as_bytes(), t(2))
                        .unwrap();
                    if i % 2 == 0 {
                        m.unlink(dir, format!("f{i}").as_bytes(), false, t(3))
                            .unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 200,
            dirs: 5
        }
    );
    assert_eq!(nlink(m, ROOT), 6);
    assert_eq!(m.readdir(ROOT, None, 1000).unwrap().len(), 204);
    let mut inos: Vec<u64> = m
        .readdir(ROOT, None, 1000)
        .unwrap()
        .iter()
        .map(|e| e.ino.0)
        .collect();
    inos.sort();
    inos.dedup();
    assert_eq!(inos.len(), 204, "every inode number was handed out once");
    consistent(m);
}
