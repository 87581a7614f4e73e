//! Listing the entries a tier directory holds when it is opened.

use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use ids::ChunkId;

/// The extension of a file being written (never an entry).
pub(crate) const TMP: &str = "tmp";

/// Every entry under `dir` (`<2 hex>/<64 hex>`), with its length, least
/// recently modified first; temporary files a crash left are deleted and
/// anything else is left alone.
pub(crate) fn entries(dir: &Path) -> io::Result<Vec<(ChunkId, u64)>> {
    let mut found: Vec<(SystemTime, ChunkId, u64)> = Vec::new();
    for fan in fs::read_dir(dir)? {
        let fan = fan?;
        if !fan.file_type()?.is_dir() {
            continue;
        }
        for entry in fs::read_dir(fan.path())? {
            let entry = entry?;
            let path = entry.path();
            if path.extension().is_some_and(|e| e == TMP) {
                let _ = fs::remove_file(&path);
                continue;
            }
            let Some(id) = entry.file_name().to_str().and_then(ChunkId::from_hex) else {
                continue;
            };
            let meta = entry.metadata()?;
            if meta.is_file() {
                let at = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                found.push((at, id, meta.len()));
            }
        }
    }
    found.sort_by_key(|(at, _, _)| *at);
    Ok(found.into_iter().map(|(_, id, len)| (id, len)).collect())
}
