//! What the recipe tests share: a real store on a local-directory branch.

use std::sync::Arc;

use branch::LocalDir;
use cas::{RepoKey, Store, StoreSettings};

pub fn store(dir: &std::path::Path) -> Store {
    let (branch, _) = LocalDir::open("local", dir.join("b")).unwrap();
    Store::open(
        Arc::new(branch),
        dir,
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap()
}
