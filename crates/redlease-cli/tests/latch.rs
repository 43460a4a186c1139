//! `redlease latch`: count (run holding a latch's count), wait, expect, barrier and status,
//! against a real redis-server.

mod common;

use std::process::Stdio;

use common::{Job, TestResult, output, redlease, redlease_on, server, signal, text, wait_for_file};
use nix::sys::signal::Signal;
use redlease_local::RedisServer;

/// `redlease latch count --key NAME ARGS -- sh -c BODY` in the background.
fn count(
    server: &RedisServer,
    dir: &std::path::Path,
    name: &str,
    args: &[&str],
    body: &str,
) -> std::io::Result<Job> {
    let mut cmd = redlease();
    cmd.args(["latch", "count", "--key", name])
        .args(args)
        .arg("--redis")
        .arg(server.url())
        .args(["--", "sh", "-c", &common::script(dir, body)])
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    cmd.spawn().map(Job)
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

#[test]
fn counts_hold_the_latch_closed_until_their_commands_end() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let hold = "touch DIR/$$.up; while [ ! -e DIR/stop ]; do sleep 0.05; done; exit 3";
    let mut a = count(&server, dir.path(), "import", &[], hold)?;
    let mut b = count(&server, dir.path(), "import", &[], hold)?;
    common::eventually("both counts up", || {
        let out = output(redlease_on(
            &server,
            &["latch", "status", "--key", "import", "--json"],
        ));
        (json(&out)["outstanding"] == 2).then_some(())
    });
    let out = output(redlease_on(
        &server,
        &["latch", "status", "--key", "import"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("2 outstanding"),
        "{}",
        text(&out.stdout)
    );
    // Still closed: the wait runs out (75).
    let out = output(redlease_on(
        &server,
        &["latch", "wait", "--key", "import", "--wait", "300ms"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("still closed"),
        "{}",
        text(&out.stderr)
    );
    // A waiter in the background wakes when the commands end; their exit code passes.
    let waiter = redlease_on(&server, &["latch", "wait", "--key", "import", "--json"]);
    let waiter = std::thread::spawn(move || output(waiter));
    std::fs::write(dir.path().join("stop"), "")?;
    for job in [&mut a, &mut b] {
        assert_eq!(job.wait().code(), Some(3), "{}", job.stderr());
    }
    let out = waiter.join().map_err(|_| "waiter panicked")?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let opened = json(&out);
    assert_eq!(opened["opened"], true, "{opened}");
    assert_eq!(opened["counted_down"], 2, "{opened}");
    assert_eq!(opened["broken"], false, "{opened}");
    let out = output(redlease_on(
        &server,
        &["latch", "status", "--key", "import"],
    ));
    assert_eq!(
        out.status.code(),
        Some(1),
        "no live count: {}",
        text(&out.stdout)
    );
    Ok(())
}

#[test]
fn a_count_whose_runner_was_killed_expires_and_the_latch_opens_broken() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let mut job = count(
        &server,
        dir.path(),
        "part",
        &["--ttl", "1s"],
        "touch DIR/up; sleep 60",
    )?;
    wait_for_file(&dir.path().join("up"));
    signal(job.id(), Signal::SIGKILL);
    job.wait();
    let out = output(redlease_on(
        &server,
        &["latch", "wait", "--key", "part", "--wait", "30s"],
    ));
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(79), "{said} {}", text(&out.stderr));
    assert!(
        said.contains("opened broken") && said.contains("1 expired"),
        "{said}"
    );
    Ok(())
}

#[test]
fn expect_presets_arrivals_and_a_barrier_opens_for_every_party() -> TestResult {
    let server = server();
    let out = output(redlease_on(
        &server,
        &["latch", "expect", "--key", "batch", "2", "--if-idle"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("preset 2 arrivals"),
        "{}",
        text(&out.stdout)
    );
    let out = output(redlease_on(
        &server,
        &["latch", "expect", "--key", "batch", "2", "--if-idle"],
    ));
    assert_eq!(
        out.status.code(),
        Some(1),
        "a round is open: {}",
        text(&out.stdout)
    );
    // The preset arrivals are outstanding.
    let out = output(redlease_on(
        &server,
        &["latch", "status", "--key", "batch", "--json"],
    ));
    assert_eq!(json(&out)["outstanding"], 2, "{}", text(&out.stdout));
    // Nobody counted up yet: the round waits for its arrivals.
    let out = output(redlease_on(
        &server,
        &["latch", "wait", "--key", "batch", "--wait", "300ms"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    for _ in 0..2 {
        let out = output(redlease_on(
            &server,
            &["latch", "count", "--key", "batch", "--", "true"],
        ));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = output(redlease_on(
        &server,
        &["latch", "wait", "--key", "batch", "--wait", "10s"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Two parties: each returns once both arrived.
    let parties: Vec<_> = (0..2)
        .map(|_| {
            let cmd = redlease_on(
                &server,
                &[
                    "latch",
                    "barrier",
                    "--key",
                    "gate",
                    "--parties",
                    "2",
                    "--wait",
                    "30s",
                ],
            );
            std::thread::spawn(move || output(cmd))
        })
        .collect();
    for party in parties {
        let out = party.join().map_err(|_| "party panicked")?;
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("opened: 2 counted down"),
            "{}",
            text(&out.stdout)
        );
    }
    // Alone, a barrier of 2 runs out of time.
    let out = output(redlease_on(
        &server,
        &[
            "latch",
            "barrier",
            "--key",
            "gate",
            "--parties",
            "2",
            "--wait",
            "300ms",
        ],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    // Usage errors.
    for args in [
        &["latch", "expect", "--key", "x", "0"][..],
        &["latch", "barrier", "--key", "x", "--parties", "0"],
    ] {
        let out = output(redlease_on(&server, args));
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    Ok(())
}
