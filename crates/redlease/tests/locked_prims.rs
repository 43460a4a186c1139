//! `#[redlease::locked]` on a semaphore (`permits = N`) and on either side of a read-write
//! lock (`read`, `write`), async and synchronous, against real Redis.
#![cfg(feature = "macros")]
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::gauge::Gauge;
use common::{bounded, client, server};
use redlease::{Client, Error, FencingToken};

/// An application error type, as a service would have.
#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        Self::Lock(e)
    }
}

fn busy<T: std::fmt::Debug>(result: &Result<T, AppError>) -> bool {
    matches!(result, Err(AppError::Lock(Error::Timeout { .. })))
}

#[redlease::locked(key = "backup:{site}", client = client, permits = 2, wait = "60s")]
async fn backup(client: &Client, site: &str, gauge: &Gauge) -> Result<(), AppError> {
    gauge.enter();
    // Stay until a second holder came in (once), and a little longer, so that a third one
    // admitted wrongly would be seen.
    gauge.reached_async(2).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    gauge.leave();
    Ok(())
}

#[redlease::locked(key = "backup:{site}", client = client, permits = 2, wait = "0s", guard = permit)]
async fn try_backup(client: &Client, site: &str) -> Result<FencingToken, AppError> {
    Ok(permit.fencing_token())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_admit_two_tasks_of_four_at_once() {
    let server = server();
    let c = client(&server).await;
    let gauge = Arc::new(Gauge::default());
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (c, gauge) = (c.clone(), Arc::clone(&gauge));
            tokio::spawn(async move {
                for _ in 0..3 {
                    backup(&c, "eu", &gauge).await.unwrap();
                }
            })
        })
        .collect();
    bounded("four backup tasks", async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    assert_eq!(gauge.max(), 2, "at most 2 holders, and 2 reached");

    // The function holds one of the semaphore's 2 permits: free with one taken, busy with
    // both taken.
    let semaphore = c.semaphore("backup:eu", 2);
    let first = semaphore.acquire().await.unwrap();
    assert!(try_backup(&c, "eu").await.unwrap() > first.fencing_token());
    let second = semaphore.acquire().await.unwrap();
    let full = try_backup(&c, "eu").await;
    assert!(busy(&full), "{full:?}");
    first.release().await.unwrap();
    second.release().await.unwrap();
}

#[redlease::locked(key = "doc:{id}", client = client, read, wait = "60s")]
async fn read_doc(client: &Client, id: u32, gauge: &Gauge) -> Result<(), AppError> {
    gauge.enter();
    gauge.reached_async(2).await;
    gauge.leave();
    Ok(())
}

#[redlease::locked(key = "doc:{id}", client = client, read, wait = "0s")]
async fn try_read_doc(client: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

#[redlease::locked(key = "doc:{id}", client = client, write, wait = "0s")]
async fn try_write_doc(client: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn read_and_write_hold_the_sides_of_a_read_write_lock() {
    let server = server();
    let c = client(&server).await;
    // Two readers inside at once.
    let gauge = Gauge::default();
    let (a, b) = bounded("two readers", async {
        tokio::join!(read_doc(&c, 1, &gauge), read_doc(&c, 1, &gauge))
    })
    .await;
    a.unwrap();
    b.unwrap();
    assert_eq!(gauge.max(), 2, "the readers did not overlap");

    let doc = c.rwlock("doc:1");
    // Beside a reader: reading is free, writing busy.
    let read = doc.read().acquire().await.unwrap();
    try_read_doc(&c, 1).await.unwrap();
    let write = try_write_doc(&c, 1).await;
    assert!(busy(&write), "a writer got in beside a reader: {write:?}");
    read.release().await.unwrap();
    // Beside a writer: both busy.
    let held = doc.write().acquire().await.unwrap();
    let (read, write) = (try_read_doc(&c, 1).await, try_write_doc(&c, 1).await);
    assert!(busy(&read), "a reader got in beside a writer: {read:?}");
    assert!(busy(&write), "a writer got in beside a writer: {write:?}");
    held.release().await.unwrap();
    // Free again: the write side is taken and given back.
    try_write_doc(&c, 1).await.unwrap();
    try_write_doc(&c, 1).await.unwrap();
}

mod sync {
    use std::time::Duration;

    use redlease::blocking::Client;

    use super::{AppError, Gauge, busy, common};

    #[redlease::locked(key = "backup:{site}", client = client, permits = 2, wait = "60s")]
    fn backup(client: &Client, site: &str, gauge: &Gauge) -> Result<(), AppError> {
        gauge.enter();
        gauge.reached(2);
        std::thread::sleep(Duration::from_millis(5));
        gauge.leave();
        Ok(())
    }

    #[redlease::locked(key = "doc:{id}", client = client, read, wait = "0s", guard = guard)]
    fn try_read_doc(client: &Client, id: u32) -> Result<bool, AppError> {
        Ok(guard.is_held())
    }

    #[redlease::locked(key = "doc:{id}", client = client, write, wait = "0s")]
    fn try_write_doc(client: &Client, id: u32) -> Result<(), AppError> {
        Ok(())
    }

    #[test]
    fn synchronous_functions_hold_permits_and_sides() {
        let server = common::server();
        let c = Client::connect(&server.url()).unwrap();
        let gauge = Gauge::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..3 {
                        backup(&c, "us", &gauge).unwrap();
                    }
                });
            }
        });
        assert_eq!(gauge.max(), 2, "at most 2 holders, and 2 reached");

        let doc = c.rwlock("doc:2");
        let read = doc.read().acquire().unwrap();
        assert!(try_read_doc(&c, 2).unwrap(), "readers share");
        let write = try_write_doc(&c, 2);
        assert!(busy(&write), "a writer got in beside a reader: {write:?}");
        read.release().unwrap();
        let held = doc.write().acquire().unwrap();
        let read = try_read_doc(&c, 2);
        assert!(busy(&read), "a reader got in beside a writer: {read:?}");
        held.release().unwrap();
        try_write_doc(&c, 2).unwrap();
    }
}
