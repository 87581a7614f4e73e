//! A big file read in place (fixed-size chunks: a VM image or a database,
//! by rule or by xattr) keeps the kernel's page cache for its readers, so
//! repeated small random reads of it never reach the daemon; other big
//! files opened read-only still stream past the cache.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;

use common::{cached_pages, random, Mount};

#[test]
fn a_big_image_read_in_place_keeps_the_page_cache() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let len = 20 << 20; // over fs.page_cache_max (16 MiB)
    let image = random(len, 1);
    let stream = random(len, 2);
    let tagged = random(len, 3);
    fs::write(m.path("disk.img"), &image).unwrap(); // fixed by the default rule
    fs::write(m.path("stream.bin"), &stream).unwrap();
    fs::write(m.path("tagged.bin"), &tagged).unwrap();
    let path =
        std::ffi::CString::new(m.path("tagged.bin").into_os_string().into_encoded_bytes()).unwrap();
    let value = b"fixed:16K";
    // SAFETY: NUL-terminated strings and a buffer that outlive the call.
    let set = unsafe {
        libc::setxattr(
            path.as_ptr(),
            c"user.cairn.chunking".as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
    for name in ["disk.img", "stream.bin", "tagged.bin"] {
        assert_eq!(
            cached_pages(&m.path(name)),
            0,
            "{name}: a write-only handle cached"
        );
    }

    // Small random reads through read-only handles, as a VM or a database
    // reader does them.
    let mut got = vec![0u8; 4096];
    for (name, want) in [
        ("disk.img", &image),
        ("stream.bin", &stream),
        ("tagged.bin", &tagged),
    ] {
        let f = fs::File::open(m.path(name)).unwrap();
        for i in 0..64u64 {
            let at = (i * 7919 * 4096) % (len as u64 - 4096);
            f.read_exact_at(&mut got, at).unwrap();
            assert!(
                got == want[at as usize..at as usize + 4096],
                "{name} at {at}"
            );
        }
    }
    assert!(
        cached_pages(&m.path("disk.img")) >= 64,
        "an image's reads were not cached"
    );
    assert!(
        cached_pages(&m.path("tagged.bin")) >= 64,
        "a fixed-chunk file's reads were not cached"
    );
    assert_eq!(
        cached_pages(&m.path("stream.bin")),
        0,
        "a big streamed file's reads were cached"
    );

    // A cached reader still sees a write through another handle.
    let w = fs::OpenOptions::new()
        .write(true)
        .open(m.path("disk.img"))
        .unwrap();
    w.write_all_at(b"new bytes", 4096).unwrap();
    drop(w);
    let f = fs::File::open(m.path("disk.img")).unwrap();
    f.read_exact_at(&mut got, 4096).unwrap();
    assert_eq!(&got[..9], b"new bytes");
    assert!(got[9..] == image[4096 + 9..8192]);
    drop(f);
    m.unmount();
}
