//! The page's static files, built into the binary.

/// The file at `path` (under `/-/`) and its Content-Type.
pub fn get(path: &str) -> Option<(&'static [u8], &'static str)> {
    Some(match path {
        "" | "index.html" => (
            include_bytes!("../assets/index.html"),
            "text/html; charset=utf-8",
        ),
        "app.js" => (
            include_bytes!("../assets/app.js"),
            "text/javascript; charset=utf-8",
        ),
        "style.css" => (
            include_bytes!("../assets/style.css"),
            "text/css; charset=utf-8",
        ),
        _ => return None,
    })
}
