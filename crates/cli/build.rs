//! Links the `cairn` binary with its debug sections compressed (zlib, as
//! the ELF gABI defines): a panic's backtrace still names files and lines
//! (Rust's symbolizer reads compressed sections), and the release binary
//! is a normal size instead of carrying ~60 MiB of line and range tables
//! uncompressed (docs/building.md). GNU ld, gold, lld and mold all take
//! the flag; other targets' linkers are left alone.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
