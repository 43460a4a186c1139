//! A lost lease is reported once: the "lock lost" warning when the loss is found, and no
//! second warning when the dropped guard's background release then finds it gone.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{bounded, client, raw, server};

/// Every WARN line logged by this test binary.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<u8>>>);

impl Write for Warnings {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_warns_once_also_when_its_guard_is_dropped() {
    let warnings = Warnings::default();
    let writer = warnings.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .try_init()
        .unwrap();
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let lock = client.lock("lost-once").ttl(Duration::from_secs(1));
    let guard = lock.acquire().await.unwrap();
    // Someone deletes the key: the next renewal finds the lease gone.
    let () = redis::cmd("DEL")
        .arg(lock.keys().unwrap().key())
        .query_async(&mut conn)
        .await
        .unwrap();
    bounded("the loss is found", guard.lost()).await;
    drop(guard);
    // Waits for the dropped guard's background release.
    bounded("shutdown", client.shutdown()).await.unwrap();
    let text = String::from_utf8(warnings.0.lock().unwrap().clone()).unwrap();
    let warned: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(
        warned.len(),
        1,
        "one loss, warned of more than once: {warned:#?}"
    );
    assert!(warned[0].contains("lock lost"), "{warned:#?}");
}
