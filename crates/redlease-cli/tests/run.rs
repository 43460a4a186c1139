//! `redlease run` against a real redis-server: exclusion between processes, exit codes,
//! busy, loss, signals.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    MARKS_BODY, STEP, TestResult, check_marks, output, redlease_on, script, server, signal,
    start_run, text, wait, wait_for_file,
};
use nix::sys::signal::Signal;

#[test]
fn runs_on_one_key_never_overlap_and_fencing_tokens_grow() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = script(dir.path(), MARKS_BODY);
    let runs = 5;
    let mut children = Vec::new();
    for _ in 0..runs {
        let mut cmd = redlease_on(
            &server,
            &[
                "run", "--key", "shared", "--wait", "60s", "--", "sh", "-c", &body,
            ],
        );
        children.push(cmd.stdin(Stdio::null()).spawn()?);
    }
    for child in &mut children {
        assert!(wait(child).success());
    }
    check_marks(dir.path(), runs)?;
    assert_eq!(server.command(&["EXISTS", "redlease:shared"])?, ":0");
    Ok(())
}

#[test]
fn exit_codes_pass_through_and_the_lock_is_released() -> TestResult {
    let server = server();
    for (body, code) in [("exit 0", 0), ("exit 42", 42), ("kill -TERM $$", 143)] {
        let out = output(redlease_on(
            &server,
            &["run", "--key", "codes", "--", "sh", "-c", body],
        ));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{body}: {}",
            text(&out.stderr)
        );
        assert_eq!(server.command(&["EXISTS", "redlease:codes"])?, ":0");
    }
    let out = output(redlease_on(
        &server,
        &["run", "--key", "codes", "--", "no-such-command-xyz"],
    ));
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("cannot run `no-such-command-xyz`"));
    assert_eq!(server.command(&["EXISTS", "redlease:codes"])?, ":0");
    Ok(())
}

#[test]
fn stdin_stdout_stderr_and_the_environment_reach_the_command() -> TestResult {
    let server = server();
    let mut cmd = redlease_on(
        &server,
        &[
            "run",
            "--key",
            "pipes",
            "--",
            "sh",
            "-c",
            "cat; echo \"key=$REDLEASE_KEY fence=$REDLEASE_FENCING_TOKEN\"; echo oops >&2; exit 3",
        ],
    );
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, b"from stdin\n")?;
    }
    let out = child.wait_with_output()?;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("from stdin"), "{stdout}");
    let env = lines.next().unwrap_or_default();
    assert!(env.starts_with("key=pipes fence="), "{stdout}");
    assert!(
        env["key=pipes fence=".len()..].parse::<u64>().is_ok(),
        "{stdout}"
    );
    assert_eq!(text(&out.stderr), "oops\n");
    assert_eq!(server.command(&["EXISTS", "redlease:pipes"])?, ":0");
    Ok(())
}

#[test]
fn a_command_that_is_not_executable_gives_126() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\ntrue\n")?;
    let out = output(redlease_on(
        &server,
        &["run", "--key", "noexec", "--", &file.display().to_string()],
    ));
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    // The path as given, as env(1) says it.
    let said = format!("cannot run `{}`", file.display());
    assert!(text(&out.stderr).contains(&said), "{}", text(&out.stderr));
    assert_eq!(server.command(&["EXISTS", "redlease:noexec"])?, ":0");
    Ok(())
}

#[test]
fn a_busy_lock_gives_exit_code_75_naming_the_key_and_the_time_left() -> TestResult {
    let server = server();
    // Another library's plain SET NX PX lock on the same key excludes us too.
    assert_eq!(
        server.command(&["SET", "redlease:busy", "0123456789abcdef", "PX", "60000"])?,
        "+OK"
    );
    let out = output(redlease_on(
        &server,
        &["run", "--key", "busy", "--no-wait", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("lock `busy` (key redlease:busy) is busy"),
        "{stderr}"
    );
    assert!(
        stderr.contains("s left") && stderr.contains("--no-wait"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("0123456789abcdef"),
        "never the whole token: {stderr}"
    );

    let out = output(redlease_on(
        &server,
        &["run", "--key", "busy", "--wait", "200ms", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75));
    assert!(text(&out.stderr).contains("gave up after waiting"));
    Ok(())
}

#[test]
fn deleting_the_key_terminates_the_command_with_exit_code_79() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // The command and its child (sleep) note the SIGTERM; the group gets it.
    let body = "trap 'echo term >> DIR/marks; exit 0' TERM; touch DIR/started; while :; do sleep 0.05; done";
    let mut child = start_run(
        &server,
        dir.path(),
        &["--key", "victim", "--ttl", "900ms"],
        body,
    );
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["DEL", "redlease:victim"])?, ":1");
    let status = child.wait();
    assert_eq!(status.code(), Some(79));
    let marks = std::fs::read_to_string(dir.path().join("marks"))?;
    assert!(marks.contains("term"), "the command got SIGTERM: {marks}");
    Ok(())
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_kill_after() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = "trap '' TERM; touch DIR/started; while :; do sleep 0.05; done";
    let mut child = start_run(
        &server,
        dir.path(),
        &[
            "--key",
            "stubborn",
            "--ttl",
            "900ms",
            "--kill-after",
            "300ms",
        ],
        body,
    );
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["DEL", "redlease:stubborn"])?, ":1");
    assert_eq!(child.wait().code(), Some(79));
    let stderr = child.stderr();
    assert!(stderr.contains("lock `stubborn` was lost"), "{stderr}");
    assert!(stderr.contains("SIGKILL in 300ms"), "{stderr}");
    Ok(())
}

#[test]
fn sigterm_to_redlease_reaches_the_command_and_the_key_is_gone() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = "trap 'echo got-term >> DIR/marks; exit 7' TERM; touch DIR/started; while :; do sleep 0.05; done";
    let mut child = start_run(&server, dir.path(), &["--key", "signalled"], body);
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["EXISTS", "redlease:signalled"])?, ":1");
    signal(child.id(), Signal::SIGTERM);
    let status = child.wait();
    assert_eq!(status.code(), Some(7), "the command's own exit code");
    assert!(std::fs::read_to_string(dir.path().join("marks"))?.contains("got-term"));
    assert_eq!(server.command(&["EXISTS", "redlease:signalled"])?, ":0");
    Ok(())
}

#[test]
fn sigint_while_waiting_for_the_lock_exits_130_without_running_the_command() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    assert_eq!(
        server.command(&["SET", "redlease:held", "someone-elses-token", "PX", "60000"])?,
        "+OK"
    );
    let mut child = start_run(
        &server,
        dir.path(),
        &["--key", "held", "--wait", "forever"],
        "touch DIR/ran",
    );
    // Waiting shows as a queued waiter in Redis: an event to poll for, not a sleep.
    let deadline = std::time::Instant::now() + STEP;
    let held = redlease::LockKeys::new("redlease:", "held")?;
    while server.command(&["LLEN", held.queue()])? != ":1" {
        assert!(std::time::Instant::now() < deadline, "never queued");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    signal(child.id(), Signal::SIGINT);
    assert_eq!(child.wait().code(), Some(130));
    assert!(!dir.path().join("ran").exists());
    Ok(())
}

#[test]
fn bad_arguments_give_one_line_and_a_nonzero_code() -> TestResult {
    let port = redlease_local::free_port()?;
    let nowhere = format!("redis://user:hunter2@127.0.0.1:{port}");
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["run", "--key", "k", "--bogus", "--", "true"],
            2,
            "unexpected argument '--bogus'",
        ),
        (
            &["run", "--key", "k", "--ttl", "5 parsecs", "--", "true"],
            2,
            "invalid value",
        ),
        (
            &["run", "--key", "k", "--wait", "soon", "--", "true"],
            2,
            "invalid value 'soon' for '--wait",
        ),
        (&["run", "--key", "k"], 2, "<CMD>"),
        (
            &["run", "--key", "k", "--redis", &nowhere, "--", "true"],
            69,
            "connecting to Redis at redis://user:***@",
        ),
        (
            &[
                "run", "--key", "k", "--redis", &nowhere, "--redis", &nowhere, "--", "true",
            ],
            69,
            "connecting to Redis at a quorum of 2 nodes (redis://user:***@",
        ),
    ];
    for (args, code, needle) in cases {
        let out = output({
            let mut cmd = common::redlease();
            cmd.args(args);
            cmd
        });
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.starts_with("redlease: ") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("hunter2") && !stderr.contains("panicked"),
            "{stderr}"
        );
    }
    Ok(())
}

#[test]
fn help_reads_like_a_man_page_and_hides_secrets() {
    for sub in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["list", "--help"],
        &["release", "--help"],
        #[cfg(feature = "local")]
        &["demo", "--help"],
        #[cfg(feature = "bench")]
        &["bench", "--help"],
    ] {
        let out = output({
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlease"));
            cmd.args(sub)
                .env("REDIS_URL", "redis://app:hunter2@10.0.0.1:6379");
            cmd
        });
        assert!(out.status.success(), "{sub:?}");
        let help = text(&out.stdout);
        for needle in ["Examples", "Exit codes", "redlease"] {
            assert!(
                help.contains(needle),
                "{sub:?} --help lacks {needle:?}:\n{help}"
            );
        }
        assert!(!help.contains("hunter2"), "{sub:?} --help shows a password");
    }
    let out = output({
        let mut cmd = common::redlease();
        cmd.args(["run", "--help"]);
        cmd
    });
    let help = text(&out.stdout);
    for needle in [
        "REDLEASE_FENCING_TOKEN",
        "75",
        "79",
        "--kill-after",
        "crontab",
        "SIGSTOP",
        "SIGKILL a margin of\nttl/20 before",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle:?}");
    }
}

#[test]
fn failing_renewals_give_one_warning_line_and_one_when_they_recover() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // Runs until the test creates DIR/done.
    let body = "touch DIR/started; while [ ! -e DIR/done ]; do sleep 0.05; done";
    // Renewed every 4 s; a silent Redis fails a renewal after the 2 s response timeout,
    // still 6 s before the lease could run out. A short --kill-after keeps the
    // supervisor, which ends CMD --kill-after plus ttl/20 before the lease's end when no
    // renewal moved it, out of the way of the recovery.
    let mut child = start_run(
        &server,
        dir.path(),
        &["--key", "shaky", "--ttl", "12s", "--kill-after", "1s"],
        body,
    );
    wait_for_file(&dir.path().join("started"));
    let stderr = child.0.stderr.take().ok_or("stderr is piped")?;
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let next_line = || seen.recv_timeout(Duration::from_secs(30));

    server.pause()?;
    let failing = next_line();
    server.resume()?;
    let failing = failing?;
    assert!(
        failing.starts_with("redlease: warning: renewing lock `shaky`")
            && failing.contains("is failing")
            && failing.contains("certain for another"),
        "{failing}"
    );
    let recovered = next_line()?;
    assert!(
        recovered.starts_with("redlease: renewing lock `shaky`") && recovered.contains("recovered"),
        "{recovered}"
    );

    std::fs::write(dir.path().join("done"), "")?;
    assert_eq!(child.wait().code(), Some(0));
    assert!(
        seen.recv_timeout(Duration::from_secs(5)).is_err(),
        "nothing more on stderr"
    );
    Ok(())
}

#[test]
fn a_kill_after_that_outlives_the_lease_is_refused_before_anything_is_taken() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = script(dir.path(), "touch DIR/ran");
    let run = |kill_after: &str| {
        output(redlease_on(
            &server,
            &[
                "run",
                "--key",
                "short",
                "--ttl",
                "3s",
                "--kill-after",
                kill_after,
                "--",
                "sh",
                "-c",
                &body,
            ],
        ))
    };
    // With --ttl 3s (renewed every 750ms) the lease may have 2s 250ms less the drift
    // allowance (32ms) left when redlease dies, and CMD must be gone a margin of ttl/20
    // (150ms) before that.
    for (too_long, said) in [("2200ms", "2s 200ms"), ("2100ms", "2s 100ms")] {
        let refused = run(too_long);
        let err = text(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("--kill-after {said} outlives the lease"))
                && err.contains("2s 218ms")
                && err.contains("below 2s 68ms"),
            "{err}"
        );
        assert!(!dir.path().join("ran").exists());
        assert_eq!(server.command(&["EXISTS", "redlease:short"])?, ":0");
    }

    let accepted = run("2s");
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{}",
        text(&accepted.stderr)
    );
    assert!(dir.path().join("ran").exists());
    Ok(())
}
