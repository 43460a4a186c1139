//! `#[redlease::locked(keys = [...])]`: a multi-lock of the templated keys for the body,
//! async and synchronous, against real Redis: transfers between random pairs of accounts
//! keep the total; duplicate keys are one lock.
#![cfg(feature = "macros")]
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use common::accounts::{self, Ledger, random_transfer};
use common::{bounded, client, server};
use redlease::{Client, Error};

#[redlease::locked(keys = ["account:{from}", "account:{to}"], client = client, wait = "60s")]
async fn transfer(
    client: &Client,
    conn: &mut redis::aio::MultiplexedConnection,
    from: u32,
    to: u32,
    amount: i64,
) -> Result<(), Error> {
    accounts::transfer(conn, from, to, amount).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_transfers_by_four_tasks_keep_the_total() {
    let server = server();
    let resource = common::server();
    let c = client(&server).await;
    let url = resource.admin_url();
    Ledger::connect(&url).open_accounts();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (c, url) = (c.clone(), url.clone());
            tokio::spawn(async move {
                let mut conn = redis::Client::open(url)
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap();
                for _ in 0..25 {
                    let (from, to, amount) = random_transfer();
                    transfer(&c, &mut conn, from, to, amount).await.unwrap();
                }
            })
        })
        .collect();
    bounded("four transfer tasks", async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    Ledger::connect(&url).check_total();
}

#[redlease::locked(keys = ["account:{from}", "account:{to}"], client = client, wait = "60s", guard = guard)]
fn transfer_blocking(
    client: &redlease::blocking::Client,
    ledger: &mut Ledger,
    from: u32,
    to: u32,
    amount: i64,
) -> Result<(), Error> {
    assert!(guard.is_held());
    ledger.transfer(from, to, amount);
    Ok(())
}

#[test]
fn locked_blocking_transfers_by_four_threads_keep_the_total() {
    let server = server();
    let resource = common::server();
    let client = redlease::blocking::Client::connect(&server.url()).unwrap();
    let url = resource.admin_url();
    Ledger::connect(&url).open_accounts();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let (client, url) = (&client, &url);
            s.spawn(move || {
                let mut ledger = Ledger::connect(url);
                for _ in 0..25 {
                    let (from, to, amount) = random_transfer();
                    transfer_blocking(client, &mut ledger, from, to, amount).unwrap();
                }
            });
        }
    });
    Ledger::connect(&url).check_total();
}

/// Holds `a:{x}` twice over: one lock, not a wait on itself.
#[redlease::locked(keys = ["a:{x}", "a:{x}"], client = client, wait = "0s", guard = guard)]
async fn twice(client: &Client, x: u32) -> Result<Vec<String>, Error> {
    // The one lock is held: a plain lock of the name, for another owner, is busy.
    let other = redlease::Owner::new();
    let plain = client.lock(format!("a:{x}")).owner(&other);
    assert!(plain.try_acquire().await?.is_none());
    assert!(guard.fencing_token(&format!("a:{x}")).is_some());
    Ok(guard.guards().iter().map(|g| g.name().to_owned()).collect())
}

#[redlease::locked(keys = ["a:{x}", "a:{x}"], client = client, wait = "0s", guard = guard)]
fn twice_blocking(client: &redlease::blocking::Client, x: u32) -> Result<Vec<String>, Error> {
    let other = redlease::Owner::new();
    let plain = client.lock(format!("a:{x}")).owner(&other);
    assert!(plain.try_acquire()?.is_none());
    Ok(guard.guards().iter().map(|g| g.name().to_owned()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_keys_are_one_lock() {
    let server = server();
    let c = client(&server).await;
    assert_eq!(bounded("twice", twice(&c, 7)).await.unwrap(), ["a:7"]);
    // Released at the end: free again, and busy while someone else holds it.
    let held = c.lock("a:7").acquire().await.unwrap();
    let busy = twice(&c, 7).await;
    assert!(matches!(busy, Err(Error::Timeout { .. })), "{busy:?}");
    held.release().await.unwrap();
}

#[test]
fn duplicate_keys_are_one_lock_in_a_synchronous_function() {
    let server = server();
    let client = redlease::blocking::Client::connect(&server.url()).unwrap();
    assert_eq!(twice_blocking(&client, 8).unwrap(), ["a:8"]);
    let held = client.lock("a:8").acquire().unwrap();
    let busy = twice_blocking(&client, 8);
    assert!(matches!(busy, Err(Error::Timeout { .. })), "{busy:?}");
    held.release().unwrap();
}
