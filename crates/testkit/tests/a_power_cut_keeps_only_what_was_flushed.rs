//! The power-cut disks themselves: a file synced before a cut is there
//! after it, byte for byte; one written and never synced is not (the
//! cut keeps nothing unflushed), though a killed process would have kept
//! it. Without the first, power-loss tests would fail on sound programs;
//! without the second, they would pass on broken ones.

use std::io::Write;

use testkit::powercut::{Disks, Keep};

#[test]
fn a_power_cut_keeps_only_what_was_flushed() {
    let mut disks = Disks::new(2, 256 << 20);
    let synced: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for i in 0..2 {
        let mut f = std::fs::File::create(disks.path(i).join("synced")).unwrap();
        f.write_all(&synced).unwrap();
        f.sync_all().unwrap();
        std::fs::File::open(disks.path(i))
            .unwrap()
            .sync_all()
            .unwrap();
        std::fs::write(disks.path(i).join("unsynced"), b"never flushed").unwrap();
        assert!(disks.path(i).join("unsynced").exists());
    }
    disks.cut(Keep::Nothing);
    disks.power_on();
    for i in 0..2 {
        assert_eq!(
            std::fs::read(disks.path(i).join("synced")).unwrap(),
            synced,
            "disk {i}: a synced file reads back whole after the cut"
        );
        assert!(
            !disks.path(i).join("unsynced").exists(),
            "disk {i}: a file never synced is gone after the cut"
        );
    }
    // Writes after power-on are kept as before.
    std::fs::write(disks.path(0).join("after"), b"x").unwrap();
    assert_eq!(std::fs::read(disks.path(0).join("after")).unwrap(), b"x");
}
