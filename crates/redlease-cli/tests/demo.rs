//! `redlease demo`, small: the same four steps against its own private redis-server.
#![cfg(feature = "local")]

mod common;

use common::{output, redlease, text};

#[test]
fn the_demo_oversells_without_a_lock_and_not_with_one() {
    let mut cmd = redlease();
    cmd.args(["demo", "--workers", "2", "--tasks", "4", "--coupons", "30"])
        .args(["--crash-ttl", "500ms"]);
    let out = output(cmd);
    let stdout = text(&out.stdout);
    // Compare words, not column widths.
    let words: String = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    for needle in [
        "1. without a lock",
        "2. with redlease 30 0",
        "exactly 30; 30 fencing tokens, strictly increasing",
        "3. holder SIGKILLed 1 0",
        "lock freed by its TTL",
        "4. holder paused 1 0",
        "REFUSED",
        "lock lost",
        "every check held",
    ] {
        assert!(words.contains(needle), "no {needle:?} in:\n{stdout}");
    }
}

#[test]
fn the_demo_refuses_bad_options_in_one_line() {
    for args in [
        &["demo", "--workers", "0"][..],
        &["demo", "--crash-ttl", "1ms"],
    ] {
        let mut cmd = redlease();
        cmd.args(args);
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(text(&out.stderr).lines().count(), 1, "{args:?}");
    }
}
