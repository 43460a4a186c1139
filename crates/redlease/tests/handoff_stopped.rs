//! Hand-off soundness for a whole process stopped while it waits (`SIGSTOP`, a VM stall),
//! through the blocking API: the stopped waiter is handed the lock, its lease runs out, a
//! third client takes the lock, and the waiter, continued, must not claim it.
#![cfg(feature = "blocking")]
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::print_stdout,
    reason = "tests fail loudly; the child answers on stdout"
)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{bounded, client, eventually, server};
use redlease::Wait;
use tokio::io::AsyncBufReadExt as _;

const URL_ENV: &str = "REDLEASE_TEST_STOPPED_URL";

/// The child's part: waits for the lock with the blocking API and prints what it got.
#[test]
#[ignore = "run by a_stopped_blocking_waiter_never_claims_a_stale_grant in a child process"]
fn stopped_waiter_child() {
    let url = std::env::var(URL_ENV).unwrap();
    let client = redlease::blocking::Client::connect(&url).unwrap();
    let outcome = client
        .lock("stopped")
        .ttl(Duration::from_millis(500))
        .wait(Duration::from_secs(3))
        .acquire();
    match outcome {
        Ok(guard) if guard.is_held() => println!("claimed {:?}", guard.remaining()),
        Ok(_) => println!("expired"),
        Err(redlease::Error::Timeout { .. }) => println!("timeout"),
        Err(e) => println!("error {e}"),
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

#[tokio::test]
async fn a_stopped_blocking_waiter_never_claims_a_stale_grant() {
    let server = server();
    let a = client(&server).await;
    let c = client(&server).await;
    let holder = a
        .lock("stopped")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "stopped_waiter_child",
            "--nocapture",
        ])
        .env(URL_ENV, server.url())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    eventually("the child to queue up", || async {
        a.inspect("stopped").await.unwrap().snapshot.waiters.len() == 1
    })
    .await;
    signal(pid, "-STOP");
    holder.release().await.unwrap();
    // The stopped child was handed the lock; C gets it once that lease ran out.
    let third = c
        .lock("stopped")
        .ttl(Duration::from_secs(30))
        .wait(Wait::For(Duration::from_secs(10)))
        .acquire()
        .await
        .unwrap();
    signal(pid, "-CONT");
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut said = Vec::new();
    bounded("the child's answer", async {
        while let Some(line) = lines.next_line().await.unwrap() {
            said.push(line);
        }
    })
    .await;
    let status = bounded("the child", child.wait()).await.unwrap();
    assert!(status.success(), "the child failed: {status}");
    assert!(third.is_held());
    assert!(
        said.iter().any(|l| l == "timeout"),
        "while C holds the lock, the continued waiter said {said:?}"
    );
    third.release().await.unwrap();
}
