//! `redlease run` killed with SIGKILL (the OOM killer, `kill -9`) while its command runs:
//! the command's whole process group must end (SIGTERM, then SIGKILL after --kill-after),
//! never run on without the lock.

mod common;

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Leftovers, STEP, TestResult, gone, pid_in, server, signal, start_run, wait, wait_for_file,
};
use nix::sys::signal::Signal;

#[test]
fn sigkill_of_redlease_ends_the_command_and_its_children() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let kill_after = Duration::from_millis(500);
    // The command notes SIGTERM and exits; its child ignores SIGTERM, so only the SIGKILL
    // after --kill-after ends it.
    let body = "trap 'echo term >> DIR/marks; exit 0' TERM; \
        sh -c 'trap \"\" TERM; echo $$ > DIR/grandchild.tmp; mv DIR/grandchild.tmp DIR/grandchild; \
               while :; do sleep 0.05; done' & \
        echo $$ > DIR/command.tmp; mv DIR/command.tmp DIR/command; \
        while :; do sleep 0.05; done";
    let mut job = start_run(
        &server,
        dir.path(),
        &["--key", "oom", "--ttl", "30s", "--kill-after", "500ms"],
        body,
    );
    let command = pid_in(&dir.path().join("command"))?;
    let grandchild = pid_in(&dir.path().join("grandchild"))?;
    let _leftovers = Leftovers(vec![command, grandchild]);
    assert!(!gone(command) && !gone(grandchild));

    signal(job.id(), Signal::SIGKILL);
    let killed = Instant::now();
    let status = wait(&mut job.0);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    // Gone within --kill-after and a generous margin for a loaded machine (the lease is
    // 30 s: nothing here waits for it to expire).
    let bound = kill_after + Duration::from_secs(15);
    while !(gone(command) && gone(grandchild)) {
        assert!(
            killed.elapsed() < bound,
            "after SIGKILL of redlease, its command (pid {command}, gone: {}) and the \
             command's child (pid {grandchild}, gone: {}) ran on for {bound:?}",
            gone(command),
            gone(grandchild)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let marks = std::fs::read_to_string(dir.path().join("marks"))?;
    assert!(marks.contains("term"), "SIGTERM came first: {marks}");
    // --kill-after is well below the lease left: the command ended before anyone else could
    // take the lock, which frees itself (nobody renews it).
    assert_eq!(server.command(&["EXISTS", "redlease:oom"])?, ":1");
    Ok(())
}

#[test]
fn without_kill_after_a_short_lease_ends_the_command_before_the_lease_does() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // The command ignores SIGTERM: only the SIGKILL after the default --kill-after (a
    // third of --ttl: 2s) ends it. The lease has at least 4s left when redlease dies.
    let body = "trap '' TERM; echo $$ > DIR/command.tmp; mv DIR/command.tmp DIR/command; \
        while :; do sleep 0.05; done";
    let mut job = start_run(
        &server,
        dir.path(),
        &["--key", "short", "--ttl", "6s"],
        body,
    );
    let command = pid_in(&dir.path().join("command"))?;
    let _leftovers = Leftovers(vec![command]);

    signal(job.id(), Signal::SIGKILL);
    let killed = Instant::now();
    wait(&mut job.0);
    while !gone(command) {
        assert!(
            killed.elapsed() < STEP,
            "the command (pid {command}) ran on"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Still within the lease that nobody renews: no next holder could have started yet.
    let left = server.command(&["PTTL", "redlease:short"])?;
    let left: i64 = left.trim_start_matches(':').parse()?;
    assert!(
        left > 0,
        "the command ran on past the lease ({:?} after the SIGKILL of redlease)",
        killed.elapsed()
    );
    Ok(())
}

/// `redlease __supervise ARGS -- sh -c BODY`, as `redlease run` starts it: leading a new
/// process group, which is what it ends. The lease's deadline, in `dir`, is a minute away
/// (nothing here moves it).
fn supervisor(parent: u32, dir: &Path, body: &str) -> std::io::Result<Command> {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(Duration::from)
        .unwrap_or_default();
    let deadline = (now + STEP).as_nanos();
    std::fs::write(dir.join("deadline"), format!("{deadline}\n"))?;
    let mut cmd = common::redlease();
    cmd.args(["__supervise", "--parent", &parent.to_string()])
        .args(["--kill-after", "1s", "--margin", "100ms", "--deadline"])
        .arg(dir)
        .args(["--", "sh", "-c"])
        .arg(common::script(dir, body))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    Ok(cmd)
}

#[test]
fn a_supervisor_whose_redlease_already_died_does_not_start_the_command() -> TestResult {
    let dir = tempfile::tempdir()?;
    // Its parent is this test, not the pid it is told: as if `redlease run` had died
    // between starting it and its first look.
    let out = common::output(supervisor(1, dir.path(), "touch DIR/ran")?);
    assert_eq!(out.status.code(), Some(79), "{}", common::text(&out.stderr));
    assert!(common::text(&out.stderr).contains("died before `sh` started"));
    assert!(!dir.path().join("ran").exists());
    Ok(())
}

#[test]
fn the_end_of_the_thread_that_started_the_supervisor_is_not_the_death_of_redlease() -> TestResult {
    // PR_SET_PDEATHSIG fires when the thread that started the process ends, not the
    // process: the supervisor must check that its parent really died.
    let dir = tempfile::tempdir()?;
    let body = "trap 'touch DIR/term; exit 1' TERM; touch DIR/started; \
        while [ ! -e DIR/go ]; do sleep 0.05; done; exit 5";
    let started = dir.path().join("started");
    let mut cmd = supervisor(std::process::id(), dir.path(), body)?;
    let child = std::thread::spawn(move || {
        let child = cmd.spawn();
        // The command runs, so the supervisor set its parent-death signal; this thread's
        // end now sends it.
        wait_for_file(&started);
        child
    })
    .join()
    .map_err(|_| "the spawning thread panicked")??;
    let _leftovers = Leftovers(vec![child.id()]);
    // No event says the supervisor ignored the signal: give it time to act wrongly.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(dir.path().join("go"), "")?;
    let mut child = child;
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(5), "the command's own exit code");
    assert!(!dir.path().join("term").exists(), "the command got SIGTERM");
    Ok(())
}
