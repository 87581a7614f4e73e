//! contrib/systemd/cairn.service, pointed at the cairn under test, passes
//! `systemd-analyze verify`, and what it runs exists: `cairn serve` and
//! `cairn doctor` with the options the unit gives them. It is sandboxed:
//! `systemd-analyze security --offline=yes` rates its exposure at most
//! [`EXPOSURE_MAX`] (9.6, "UNSAFE", without the sandboxing), and it sets
//! nothing that would give it a mount namespace of its own, where its FUSE
//! mount would stay out of the host's sight.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::CAIRN;

/// The exposure `systemd-analyze security` may rate the unit at most: it
/// rates it 4.1 ("OK"); running as root with CAP_SYS_ADMIN (to mount) and
/// without a mount namespace (for the mount to be seen) costs the rest.
const EXPOSURE_MAX: f64 = 4.5;

/// What the unit sets to confine the daemon.
const SANDBOXING: &[&str] = &[
    "CapabilityBoundingSet=CAP_SYS_ADMIN\n",
    "NoNewPrivileges=yes\n",
    "DevicePolicy=closed\n",
    "DeviceAllow=/dev/fuse rw\n",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n",
    "RestrictNamespaces=yes\n",
    "RestrictRealtime=yes\n",
    "RestrictSUIDSGID=yes\n",
    "LockPersonality=yes\n",
    "MemoryDenyWriteExecute=yes\n",
    "ProtectClock=yes\n",
    "SystemCallArchitectures=native\n",
    "SystemCallFilter=~@clock @cpu-emulation @debug @module @obsolete @raw-io @reboot @swap\n",
    "UMask=0077\n",
];

/// Settings that would give the service a mount namespace (a slave of the
/// host's), hiding its FUSE mount from the host.
const NAMESPACED: &[&str] = &[
    "ProtectSystem=",
    "ProtectHome=",
    "PrivateTmp=",
    "PrivateDevices=",
    "PrivateMounts=",
    "ProtectKernelTunables=",
    "ProtectKernelModules=",
    "ProtectKernelLogs=",
    "ProtectControlGroups=",
    "ProtectProc=",
    "ProcSubset=",
    "ReadWritePaths=",
    "ReadOnlyPaths=",
    "InaccessiblePaths=",
    "TemporaryFileSystem=",
    "BindPaths=",
    "MountFlags=",
];

#[test]
fn the_systemd_unit_verifies() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd/cairn.service");
    let text = fs::read_to_string(&unit).unwrap();
    assert!(text.contains("/usr/local/bin/cairn serve"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("cairn.service");
    fs::write(&ours, text.replace("/usr/local/bin/cairn", CAIRN)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&ours)
        .output()
        .expect("systemd-analyze not found: apt-get install -y systemd");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("cairn.service:"), "{said}");

    // The unit's commands parse as the unit gives them.
    for args in [
        &["serve", "--help"][..],
        &["doctor", "--min-free", "5", "--help"],
    ] {
        let out = Command::new(CAIRN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
    }
    let line = text.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(line.contains("--listen"), "{line}");
}

#[test]
fn the_systemd_unit_is_sandboxed_and_keeps_its_mount_visible() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd/cairn.service");
    let text = fs::read_to_string(&unit).unwrap();
    let settings: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    for want in SANDBOXING {
        assert!(text.contains(want), "the unit does not set {want}");
    }
    for namespaced in NAMESPACED {
        assert!(
            !settings.iter().any(|l| l.starts_with(namespaced)),
            "{namespaced} gives the service a mount namespace: its mount would not reach the host"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("cairn.service");
    fs::write(&ours, text.replace("/usr/local/bin/cairn", CAIRN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&ours)
        .output()
        .expect("systemd-analyze not found: apt-get install -y systemd");
    let said = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = said
        .lines()
        .find_map(|l| l.split("Overall exposure level for cairn.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level in {said}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .parse()
        .unwrap();
    assert!(exposure <= EXPOSURE_MAX, "exposure {exposure}:\n{said}");
}
