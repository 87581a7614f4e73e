//! A refused, missing or taken name comes back as a typed error: the name
//! or path as its own field, the reason as an enum, the errno a POSIX
//! caller sees, and the message a user reads.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Existing, Fs, FsError, FsSettings, Missing, NameProblem};

#[test]
fn named_errors_carry_their_name_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let fs = Fs::new(
        Arc::new(meta),
        store,
        ChunkerParams::default(),
        FsSettings::default(),
    )
    .unwrap();

    let e = fs.snapshot_create("a/b").unwrap_err();
    assert!(
        matches!(&e, FsError::BadName { name, reason: NameProblem::SnapshotName } if name == "a/b"),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(
        e.to_string().contains("invalid snapshot name \"a/b\""),
        "{e}"
    );

    fs.snapshot_create("one").unwrap();
    let e = fs.snapshot_create("one").unwrap_err();
    assert!(
        matches!(&e, FsError::Exists { name, holder: Existing::Snapshot } if name == "one"),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::EEXIST);
    assert_eq!(e.to_string(), "snapshot \"one\" exists");

    let e = fs.resolve("nowhere/file").unwrap_err();
    assert!(
        matches!(&e, FsError::NotFoundNamed { name, missing: Missing::Path } if name == "nowhere/file"),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::ENOENT);
    assert_eq!(e.to_string(), "nowhere/file: no such file or directory");

    let e = fs.restore("one", "missing", None, false).unwrap_err();
    assert!(
        matches!(&e, FsError::NotFoundNamed { name, missing: Missing::InSnapshot(s) } if name == "missing" && s == "one"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "missing is not in snapshot \"one\"");
}
