//! The conformance suite of [`MetaStore`]: every scenario is a function
//! over `&dyn MetaStore` given a fresh, empty store, so that every engine
//! (redb here, etcd in `meta-etcd`) runs the same assertions. Built only
//! with the `conformance` feature (tests enable it).

use std::collections::{BTreeMap, HashMap};

use crate::{Content, FileKind, InodeId, MetaError, MetaStore, NewInode, RenameFlags, Timestamp};

pub mod attributes_content_and_xattrs;
pub mod counting;
pub mod create_and_lookup;
pub mod links_unlinks_and_orphans;
pub mod readdir;
pub mod rename;

/// A scenario: run on a fresh store, panics on a failed assertion.
pub type Scenario = fn(&dyn MetaStore);

/// Every scenario, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    (
        "create_and_lookup::create_sets_attributes_links_and_times",
        create_and_lookup::create_sets_attributes_links_and_times,
    ),
    (
        "create_and_lookup::create_errors_change_nothing",
        create_and_lookup::create_errors_change_nothing,
    ),
    (
        "create_and_lookup::create_stores_the_xattrs_it_is_given",
        create_and_lookup::create_stores_the_xattrs_it_is_given,
    ),
    (
        "create_and_lookup::names_are_checked_everywhere",
        create_and_lookup::names_are_checked_everywhere,
    ),
    (
        "create_and_lookup::lookup_and_get_errors",
        create_and_lookup::lookup_and_get_errors,
    ),
    (
        "create_and_lookup::get_many_answers_as_get",
        create_and_lookup::get_many_answers_as_get,
    ),
    (
        "attributes_content_and_xattrs::set_attr_changes_only_what_is_given",
        attributes_content_and_xattrs::set_attr_changes_only_what_is_given,
    ),
    (
        "attributes_content_and_xattrs::set_content_and_for_each_content",
        attributes_content_and_xattrs::set_content_and_for_each_content,
    ),
    (
        "attributes_content_and_xattrs::xattrs",
        attributes_content_and_xattrs::xattrs,
    ),
    (
        "attributes_content_and_xattrs::update_changes_attributes_and_xattrs_in_one_step",
        attributes_content_and_xattrs::update_changes_attributes_and_xattrs_in_one_step,
    ),
    (
        "links_unlinks_and_orphans::link_raises_nlink_and_ctime",
        links_unlinks_and_orphans::link_raises_nlink_and_ctime,
    ),
    (
        "links_unlinks_and_orphans::link_of_an_orphan_is_refused",
        links_unlinks_and_orphans::link_of_an_orphan_is_refused,
    ),
    (
        "links_unlinks_and_orphans::unlink_lowers_nlink_then_deletes",
        links_unlinks_and_orphans::unlink_lowers_nlink_then_deletes,
    ),
    (
        "links_unlinks_and_orphans::unlink_errors",
        links_unlinks_and_orphans::unlink_errors,
    ),
    (
        "links_unlinks_and_orphans::orphans_live_until_dropped_or_purged",
        links_unlinks_and_orphans::orphans_live_until_dropped_or_purged,
    ),
    (
        "links_unlinks_and_orphans::rmdir_removes_an_empty_directory",
        links_unlinks_and_orphans::rmdir_removes_an_empty_directory,
    ),
    (
        "readdir::readdir_is_ordered_and_pages",
        readdir::readdir_is_ordered_and_pages,
    ),
    (
        "readdir::readdir_keeps_directories_apart_past_255_inodes",
        readdir::readdir_keeps_directories_apart_past_255_inodes,
    ),
    (
        "rename::rename_moves_a_file_and_sets_times",
        rename::rename_moves_a_file_and_sets_times,
    ),
    (
        "rename::rename_of_a_directory_moves_one_nlink_and_its_parent_pointer",
        rename::rename_of_a_directory_moves_one_nlink_and_its_parent_pointer,
    ),
    (
        "rename::rename_into_its_own_subtree_is_invalid",
        rename::rename_into_its_own_subtree_is_invalid,
    ),
    (
        "rename::rename_replacing_a_file_follows_unlink",
        rename::rename_replacing_a_file_follows_unlink,
    ),
    (
        "rename::rename_replacing_a_directory",
        rename::rename_replacing_a_directory,
    ),
    ("rename::rename_noreplace", rename::rename_noreplace),
    ("rename::rename_exchange", rename::rename_exchange),
    (
        "rename::rename_onto_the_same_inode_is_a_no_op",
        rename::rename_onto_the_same_inode_is_a_no_op,
    ),
    ("rename::rename_errors", rename::rename_errors),
    (
        "counting::counts_follow_every_operation",
        counting::counts_follow_every_operation,
    ),
    (
        "counting::concurrent_mutations_from_many_threads",
        counting::concurrent_mutations_from_many_threads,
    ),
];

/// Runs every scenario, each on a store `make` gives fresh, then checks
/// it with [`consistent`]; the panic of a failed one names it.
pub fn run_all(make: &dyn Fn() -> Box<dyn MetaStore>) {
    for (name, scenario) in SCENARIOS {
        let m = make();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scenario(m.as_ref());
            consistent(m.as_ref());
        }));
        if let Err(e) = ran {
            eprintln!("conformance scenario {name} failed");
            std::panic::resume_unwind(e);
        }
    }
}

/// The invariants any engine keeps, checked through the trait alone: a
/// walk from the root finds every directory once, a directory's `nlink`
/// is 2 + its subdirectories and its parent is the directory holding it,
/// a file's `nlink` is its number of names, every entry's kind is its
/// inode's, `path_of` of a directory names it, and `counts` agree.
pub fn consistent(m: &dyn MetaStore) {
    let mut names: HashMap<InodeId, u32> = HashMap::new();
    let mut dirs = 0u64;
    let mut todo = vec![InodeId::ROOT];
    let mut seen_dirs = std::collections::HashSet::new();
    while let Some(dir) = todo.pop() {
        assert!(seen_dirs.insert(dir), "directory {dir:?} reached twice");
        dirs += 1;
        let entries = m.readdir(dir, None, usize::MAX).unwrap();
        let mut subdirs = 0;
        for e in &entries {
            let inode = m
                .get(e.ino)
                .unwrap_or_else(|err| panic!("entry {e:?}: {err}"));
            assert_eq!(inode.attr.kind, e.kind, "kind of entry {e:?}");
            if e.kind == FileKind::Dir {
                subdirs += 1;
                assert_eq!(m.parent(e.ino).unwrap(), dir, "parent of {e:?}");
                todo.push(e.ino);
            } else {
                *names.entry(e.ino).or_default() += 1;
            }
        }
        assert_eq!(
            m.get(dir).unwrap().attr.nlink,
            2 + subdirs,
            "nlink of {dir:?}"
        );
        let path = m.path_of(dir).unwrap().expect("a directory has a path");
        let mut at = InodeId::ROOT;
        for part in &path {
            at = m.lookup(at, part).unwrap().id;
        }
        assert_eq!(at, dir, "path_of {dir:?} names it");
    }
    let mut by_ino = BTreeMap::new();
    for (ino, n) in &names {
        assert_eq!(m.get(*ino).unwrap().attr.nlink, *n, "nlink of {ino:?}");
        by_ino.insert(*ino, *n);
    }
    let counts = m.counts().unwrap();
    assert_eq!(counts.dirs, dirs, "directories counted");
    assert!(
        counts.files >= by_ino.len() as u64,
        "files counted (orphans too)"
    );
}

pub const ROOT: InodeId = InodeId::ROOT;

pub fn t(secs: i64) -> Timestamp {
    Timestamp { secs, nanos: 7 }
}

pub fn new(kind: FileKind) -> NewInode {
    NewInode {
        kind,
        perm: 0o644,
        uid: 1000,
        gid: 100,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

pub fn symlink(target: &[u8]) -> NewInode {
    NewInode {
        content: Content::Inline(target.to_vec()),
        ..new(FileKind::Symlink)
    }
}

pub fn mkfile(m: &dyn MetaStore, parent: InodeId, name: &str) -> InodeId {
    m.create(parent, name.as_bytes(), new(FileKind::File), t(1))
        .unwrap()
        .id
}

pub fn mkdir(m: &dyn MetaStore, parent: InodeId, name: &str) -> InodeId {
    m.create(parent, name.as_bytes(), new(FileKind::Dir), t(1))
        .unwrap()
        .id
}

pub fn nlink(m: &dyn MetaStore, ino: InodeId) -> u32 {
    m.get(ino).unwrap().attr.nlink
}

/// Every name in `dir`, in order.
pub fn names(m: &dyn MetaStore, dir: InodeId) -> Vec<String> {
    m.readdir(dir, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect()
}

/// A short name for an error's kind, to compare outcomes.
pub fn kind(e: &MetaError) -> &'static str {
    match e {
        MetaError::NotFound => "NotFound",
        MetaError::Exists => "Exists",
        MetaError::NotEmpty => "NotEmpty",
        MetaError::NotDir => "NotDir",
        MetaError::IsDir => "IsDir",
        MetaError::NameTooLong => "NameTooLong",
        MetaError::NoXattr => "NoXattr",
        MetaError::Invalid(_) => "Invalid",
        MetaError::Store(_) => "Store",
        MetaError::Open { .. } => "Open",
        MetaError::Busy(_) => "Busy",
        MetaError::NoSpace { .. } => "NoSpace",
        MetaError::RootMissing(_) => "RootMissing",
        MetaError::Remote(_) => "Remote",
    }
}

pub fn err<T: std::fmt::Debug>(r: crate::Result<T>) -> &'static str {
    kind(&r.expect_err("expected an error"))
}

pub const NOREPLACE: RenameFlags = RenameFlags {
    noreplace: true,
    exchange: false,
};

pub const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};

pub const PLAIN: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};

pub fn keep(_: InodeId) -> bool {
    true
}

pub fn nokeep(_: InodeId) -> bool {
    false
}

pub fn rename(
    m: &dyn MetaStore,
    p: InodeId,
    n: &str,
    np: InodeId,
    nn: &str,
    flags: RenameFlags,
) -> crate::Result<Option<crate::Inode>> {
    m.rename(p, n.as_bytes(), np, nn.as_bytes(), flags, &nokeep, t(50))
}
