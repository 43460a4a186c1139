//! `redlease run` stopped (SIGSTOP, as Ctrl-Z or a debugger stop it) while its command
//! runs: it no longer renews the lease, and cannot stop the command itself. Its supervisor
//! must end the command's process group before Redis can expire the lease, and `run`,
//! resumed, must report the lease lost.

mod common;

use std::time::{Duration, Instant};

use common::{Leftovers, STEP, TestResult, gone, pid_in, server, signal, start_run, wait_for_file};
use nix::sys::signal::Signal;

#[test]
fn a_stopped_run_has_its_command_killed_before_redis_can_expire_the_lease() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // The command ignores SIGTERM: only a SIGKILL ends it. It says when it has run for
    // 3 s (at least four renewals of a 2 s lease: its supervisor let it run), then runs on.
    let body = "trap '' TERM; echo $$ > DIR/command.tmp; mv DIR/command.tmp DIR/command; \
        i=0; while [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done; touch DIR/renewed; \
        while :; do sleep 0.05; done";
    let mut job = start_run(
        &server,
        dir.path(),
        &["--key", "paused", "--ttl", "2s"],
        body,
    );
    let command = pid_in(&dir.path().join("command"))?;
    let _leftovers = Leftovers(vec![command]);
    wait_for_file(&dir.path().join("renewed"));
    assert!(!gone(command), "a renewed lease's command was ended");

    signal(job.id(), Signal::SIGSTOP);
    let stopped = Instant::now();
    let pttl = || -> Result<i64, Box<dyn std::error::Error>> {
        let reply = server.command(&["PTTL", "redlease:paused"])?;
        Ok(reply.trim_start_matches(':').parse()?)
    };
    // Whichever comes first: the command's end, or the key's.
    loop {
        if gone(command) {
            // Read after the command was seen gone: the key outlived it.
            let left = pttl()?;
            assert!(
                left > 0,
                "the command ended only with its lease (PTTL {left}, {:?} after the stop)",
                stopped.elapsed()
            );
            break;
        }
        let left = pttl()?;
        assert!(
            left > 0,
            "Redis expired the lease while the command (pid {command}, gone: {}) still ran, \
             {:?} after redlease was stopped",
            gone(command),
            stopped.elapsed()
        );
        assert!(stopped.elapsed() < STEP, "the command ran on");
        std::thread::sleep(Duration::from_millis(5));
    }

    signal(job.id(), Signal::SIGCONT);
    let status = job.wait();
    let stderr = job.stderr();
    assert_eq!(status.code(), Some(79), "{stderr}");
    assert!(
        stderr.contains("did not renew its lease in time")
            && stderr.contains("lock `paused` was not renewed in time"),
        "{stderr}"
    );
    Ok(())
}
