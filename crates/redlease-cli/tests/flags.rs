//! The flags `redlease` shares with flock(1) and its peers, through the real binary against
//! a real redis-server: `-q/--quiet`, `-E/--conflict-exit-code`, one way to name a lock in
//! every subcommand, and the exit codes documented once.

mod common;

use std::process::Output;

use common::{
    TestResult, hold_elsewhere, output, redlease, redlease_on, server, start_run, text,
    wait_for_file,
};
use redlease_local::RedisServer;

/// `redlease ARGS`, no Redis given.
fn cli(args: &[&str]) -> std::process::Command {
    let mut cmd = redlease();
    cmd.args(args);
    cmd
}

/// `redlease run FLAGS -- CMD` against `server` (FLAGS split at spaces).
fn run_on(server: &RedisServer, flags: &str, cmd: &[&str]) -> Output {
    let args: Vec<&str> = ["run"]
        .into_iter()
        .chain(flags.split_whitespace())
        .chain(["--"])
        .chain(cmd.iter().copied())
        .collect();
    output(redlease_on(server, &args))
}

/// `redlease run FLAGS -- true` against a Redis that refuses connections.
fn run_unreachable(flags: &str) -> Output {
    let args: Vec<&str> = ["run", "--redis", "redis://127.0.0.1:1"]
        .into_iter()
        .chain(flags.split_whitespace())
        .chain(["--", "true"])
        .collect();
    output(cli(&args))
}

#[test]
fn quiet_makes_a_busy_no_wait_run_exit_75_with_nothing_on_stderr() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    hold_elsewhere(&server, "nightly")?;
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for quiet in ["-q", "--quiet"] {
        let flags = format!("--key nightly --no-wait {quiet}");
        let out = run_on(&server, &flags, &["sh", "-c", &touch]);
        assert_eq!(out.status.code(), Some(75), "{quiet}");
        assert_eq!(text(&out.stderr), "", "{quiet}: nothing on stderr");
        assert_eq!(text(&out.stdout), "", "{quiet}");
        assert!(!marker.exists(), "{quiet}: the command did not run");
    }
    // Without it, the one line that says who holds it.
    let out = run_on(&server, "--key nightly --no-wait", &["true"]);
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(text(&out.stderr).lines().count(), 1);
    // Quiet is only about the busy line: an error is still said.
    let out = run_unreachable("-q --key nightly");
    assert_eq!(out.status.code(), Some(69));
    assert!(text(&out.stderr).contains("redlease: "), "an error is said");
    Ok(())
}

#[test]
fn conflict_exit_code_replaces_busy_lost_and_unreachable_but_not_the_commands_own() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;

    // Busy.
    hold_elsewhere(&server, "taken")?;
    let out = run_on(&server, "-E 42 --key taken --no-wait", &["true"]);
    assert_eq!(out.status.code(), Some(42), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is busy"), "still said");

    // Unreachable.
    let out = run_unreachable("--conflict-exit-code 42 --key x");
    assert_eq!(out.status.code(), Some(42), "{}", text(&out.stderr));

    // Lost while the command runs.
    let mut job = start_run(
        &server,
        dir.path(),
        &["-E", "42", "--key", "victim", "--ttl", "900ms"],
        "touch DIR/started; while :; do sleep 0.05; done",
    );
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["DEL", "redlease:victim"])?, ":1");
    assert_eq!(job.wait().code(), Some(42));

    // The command's own exit codes pass through, 75 and 79 included.
    for code in ["0", "3", "75", "79"] {
        let out = run_on(
            &server,
            "-E 42 --key free",
            &["sh", "-c", &format!("exit {code}")],
        );
        assert_eq!(out.status.code(), code.parse().ok(), "exit {code}");
    }

    // 0 would make a lost lease look like success: refused, as a usage error.
    let out = run_on(&server, "-E 0 --key free", &["true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--conflict-exit-code"));
    Ok(())
}

#[test]
fn every_subcommand_names_a_lock_with_key_and_an_election_with_elect() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let mut job = start_run(
        &server,
        dir.path(),
        &["--key", "job"],
        "touch DIR/started; while [ ! -e DIR/stop ]; do sleep 0.05; done",
    );
    wait_for_file(&dir.path().join("started"));
    for args in [
        &["status", "--key", "job"][..],
        &["status", "-k", "job"],
        // The older spelling, hidden from --help, still works.
        &["status", "job"],
    ] {
        let out = output(redlease_on(&server, args));
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(text(&out.stdout).starts_with("lock `job` (key redlease:job): held"));
    }
    let out = output(redlease_on(&server, &["status", "-k", "job", "other"]));
    assert_eq!(out.status.code(), Some(2), "one name, one way");
    let out = output(redlease_on(&server, &["status"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--key <NAME>"),
        "{}",
        text(&out.stderr)
    );
    let help = text(&output(redlease_on(&server, &["status", "--help"])).stdout);
    assert!(
        help.contains("--key <NAME>") && !help.contains("[NAME]"),
        "{help}"
    );

    let out = output(redlease_on(&server, &["release", "--force", "-k", "job"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(job.wait().code(), Some(79));

    for args in [&["leader", "--elect", "nobody"][..], &["leader", "nobody"]] {
        let out = output(redlease_on(&server, args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(text(&out.stdout).contains("nobody leads"), "{args:?}");
    }
    Ok(())
}

#[test]
fn the_exit_codes_are_listed_once_in_the_top_level_help() {
    let help = |args: &[&str]| text(&output(cli(args)).stdout);
    let top = help(&["--help"]);
    for needle in [
        "Exit codes",
        "69",
        "75",
        "79",
        "125",
        "128+N",
        "--conflict-exit-code",
    ] {
        assert!(top.contains(needle), "redlease --help lacks {needle:?}");
    }
    let mut subcommands = vec!["run", "status", "list", "release", "leader"];
    if cfg!(feature = "local") {
        subcommands.push("demo");
    }
    if cfg!(feature = "bench") {
        subcommands.push("bench");
    }
    for sub in subcommands {
        let text = help(&[sub, "--help"]);
        assert!(
            text.contains("Exit codes: redlease --help lists them"),
            "{sub} --help points at the table"
        );
        assert!(
            !text.contains("EX_TEMPFAIL") && !text.contains("EX_UNAVAILABLE"),
            "{sub} --help repeats the table"
        );
    }
}
