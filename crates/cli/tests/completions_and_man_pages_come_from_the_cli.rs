//! `cairn completions SHELL` prints a script that the shell accepts and
//! that completes every subcommand; `cairn man` prints cairn(1) and `cairn
//! man DIR` writes one page per subcommand, each made from its --help.

mod common;

use std::fs;
use std::process::Command;

use common::CAIRN;

fn cairn(args: &[&str]) -> String {
    let out = Command::new(CAIRN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "cairn {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_and_man_pages_come_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = cairn(&["completions", shell]);
        for sub in ["doctor", "mount", "snapshot", "completions"] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
    }
    // bash parses its script, and the completion it defines offers the
    // subcommands for `cairn do<TAB>`.
    let script = dir.path().join("cairn.bash");
    fs::write(&script, cairn(&["completions", "bash"])).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(cairn do); COMP_CWORD=1; _cairn cairn do cairn; \
             echo \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(offered.trim(), "doctor");

    let page = cairn(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH cairn 1"),
        "{page}"
    );
    assert!(page.contains("doctor"), "cairn(1) does not list doctor");

    let pages = dir.path().join("man1");
    let written = cairn(&["man", pages.to_str().unwrap()]);
    for name in [
        "cairn",
        "cairn-doctor",
        "cairn-mount",
        "cairn-snapshot-create",
    ] {
        let path = pages.join(format!("{name}.1"));
        assert!(
            written.contains(path.to_str().unwrap()),
            "{name} not printed"
        );
        let text = fs::read_to_string(&path).unwrap();
        assert!(text.contains(&format!(".TH {name} 1")), "{name}: {text}");
    }
    // The page carries the --help text: mount's says what --read-only does.
    let mount = fs::read_to_string(pages.join("cairn-mount.1")).unwrap();
    assert!(mount.contains("EROFS"), "{mount}");
    // Every subcommand cairn --help lists has its page.
    let count = fs::read_dir(&pages).unwrap().count();
    assert_eq!(count, written.lines().count());
    assert!(count > 40, "only {count} pages");
}
