//! A policy xattr the branches cannot give is refused with EINVAL, and the
//! daemon's log says which file and why.

mod common;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;

use common::Mount;

#[test]
fn a_refused_policy_xattr_is_logged_with_its_file() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::write(m.path("f"), b"data").unwrap();
    let path = CString::new(m.path("f").as_os_str().as_bytes()).unwrap();
    let name = CString::new("user.cairn.policy").unwrap();
    let value = b"mirror:5";
    // SAFETY: NUL-terminated strings and a buffer that outlive the call.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, -1, "mirror:5 on one branch was accepted");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EINVAL)
    );
    let log = fs::read_to_string(m.repo.join("log/cairn.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("refused a policy xattr")
            && l.contains("/f")
            && l.contains("mirror:5")),
        "{log}"
    );
    m.unmount();
}
