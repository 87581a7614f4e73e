//! Listing a directory: name order, pages, and directories kept apart.

use super::*;
use crate::{Counts, FileKind, MetaStore};

pub fn readdir_is_ordered_and_pages(m: &dyn MetaStore) {
    let d = mkdir(m, ROOT, "d");
    mkfile(m, ROOT, "zz"); // a sibling's entries must not show up
    let all: Vec<&[u8]> = vec![b"b", b"B", b"a", b"ab", b"aa", &[0xff], &[0x01], b"a\xffz"];
    for name in &all {
        m.create(d, name, new(FileKind::File), t(1)).unwrap();
    }
    mkdir(m, d, "sub");
    let mut want: Vec<Vec<u8>> = all.iter().map(|n| n.to_vec()).collect();
    want.push(b"sub".to_vec());
    want.sort();
    let listed = m.readdir(d, None, 100).unwrap();
    assert_eq!(
        listed.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        want
    );
    let sub = listed.iter().find(|e| e.name == b"sub").unwrap();
    assert_eq!(sub.kind, FileKind::Dir);
    assert_eq!(sub.ino, m.lookup(d, b"sub").unwrap().id);

    // Paging by 2 gives the same list.
    let mut paged = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = m.readdir(d, after.as_deref(), 2).unwrap();
        assert!(page.len() <= 2);
        if page.is_empty() {
            break;
        }
        after = Some(page.last().unwrap().name.clone());
        paged.extend(page.into_iter().map(|e| e.name));
    }
    assert_eq!(paged, want);
    // `after` is exclusive and need not exist.
    let page = m.readdir(d, Some(b"aa"), 2).unwrap();
    assert_eq!(
        page.iter().map(|e| e.name.as_slice()).collect::<Vec<_>>(),
        [&b"ab"[..], b"a\xffz"]
    );
    let page = m.readdir(d, Some(b"ac"), 1).unwrap();
    assert_eq!(page[0].name, b"a\xffz", "bytes, not characters");
    let page = m.readdir(d, Some(b"a\xff{"), 1).unwrap();
    assert_eq!(page[0].name, b"b");
    assert!(m.readdir(d, Some(&[0xff]), 10).unwrap().is_empty());
    assert!(m.readdir(d, None, 0).unwrap().is_empty());
    assert_eq!(names(m, ROOT), ["d", "zz"]);
}

pub fn readdir_keeps_directories_apart_past_255_inodes(m: &dyn MetaStore) {
    // Entry keys start with the parent in big-endian order: a directory's
    // entries are one range even when inode numbers cross byte boundaries.
    let mut dirs = Vec::new();
    for i in 0..300 {
        let d = mkdir(m, ROOT, &format!("d{i:03}"));
        let f = mkfile(m, d, &format!("f{i}"));
        dirs.push((d, f, i));
    }
    for (d, f, i) in dirs {
        let listed = m.readdir(d, None, 10).unwrap();
        assert_eq!(listed.len(), 1, "directory {d:?}");
        assert_eq!(
            (listed[0].ino, listed[0].name.clone()),
            (f, format!("f{i}").into_bytes())
        );
    }
    assert_eq!(m.readdir(ROOT, None, 1000).unwrap().len(), 300);
    assert_eq!(nlink(m, ROOT), 302);
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 300,
            dirs: 301
        }
    );
}
