//! The blocking multi-lock against real Redis: transfers between random pairs of accounts
//! by several OS threads keep the total exact and never deadlock (A,B and B,A at once);
//! the guard's surface, its release on drop, loss of one name.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::accounts::{Ledger, account, random_transfer};
use redlease::Error;
use redlease::blocking::Client;

#[test]
fn blocking_transfers_keep_the_total_and_never_deadlock() {
    const THREADS: usize = 4;
    const TRANSFERS: usize = 25;
    let server = common::server();
    let resource = common::server();
    let client = Client::connect(&server.url()).unwrap();
    Ledger::connect(&resource.admin_url()).open_accounts();
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (client, url) = (client.clone(), resource.admin_url());
            s.spawn(move || {
                let mut ledger = Ledger::connect(&url);
                for _ in 0..TRANSFERS {
                    // Named in a random order: A,B and B,A at once. A deadlock would end
                    // in a timeout after the wait, failing the thread.
                    let (from, to, amount) = random_transfer();
                    let multi = client
                        .multi_lock([account(from), account(to)])
                        .wait(Duration::from_secs(60));
                    if thread % 2 == 0 {
                        let guard = multi.acquire().unwrap();
                        assert!(guard.is_held());
                        ledger.transfer(from, to, amount);
                        guard.release().unwrap();
                    } else {
                        multi
                            .run(|guard| {
                                assert!(guard.is_held());
                                ledger.transfer(from, to, amount);
                                Ok::<_, Error>(())
                            })
                            .unwrap();
                    }
                }
            });
        }
    });
    Ledger::connect(&resource.admin_url()).check_total();
}

#[test]
fn the_guard_holds_every_name_and_drop_releases_them_at_once() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    assert!(matches!(
        client.multi_lock(Vec::<String>::new()).try_acquire(),
        Err(Error::InvalidOption {
            option: "names",
            ..
        })
    ));
    let multi = client.multi_lock(["b", "a", "b"]);
    assert_eq!(multi.names().collect::<Vec<_>>(), ["a", "b"]);
    let mut guard = multi.try_acquire().unwrap().unwrap();
    let names: Vec<_> = guard.guards().iter().map(redlease::Guard::name).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(guard.fencing_token("a").unwrap().get() > 0);
    assert!(guard.fencing_token("c").is_none());
    assert!(guard.is_held());
    guard.extend(Duration::from_secs(60)).unwrap();
    assert!(guard.remaining() > Duration::from_secs(30));
    // Each name excludes a plain lock, and the reverse.
    assert!(client.lock("b").try_acquire().unwrap().is_none());
    assert!(
        client
            .multi_lock(["a", "z"])
            .try_acquire()
            .unwrap()
            .is_none()
    );
    // Nothing of the failed attempt stays held.
    client
        .lock("z")
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
    // Dropped: both are free before the drop returns.
    drop(guard);
    let mut raw = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    for key in ["redlease:a", "redlease:b"] {
        let exists: bool = redis::cmd("EXISTS").arg(key).query(&mut raw).unwrap();
        assert!(!exists, "{key} was still held after the drop");
    }
    client
        .multi_lock(["a", "b"])
        .try_acquire()
        .unwrap()
        .unwrap()
        .release()
        .unwrap();
}

#[test]
fn losing_one_name_is_losing_the_multi_lock() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let guard = client
        .multi_lock(["x", "y"])
        .ttl(Duration::from_millis(300))
        .acquire()
        .unwrap();
    let mut raw = redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("DEL")
        .arg("redlease:y")
        .query(&mut raw)
        .map(|_: i64| ())
        .unwrap();
    guard.lost().unwrap();
    assert!(!guard.is_held());
    assert!(matches!(guard.release(), Err(Error::Lost { .. })));

    // `run` cannot stop synchronous work, but reports the loss when it ends.
    let ran = client
        .multi_lock(["x", "y"])
        .ttl(Duration::from_millis(300))
        .run(|guard| {
            let () = redis::cmd("DEL")
                .arg("redlease:x")
                .query(&mut raw)
                .map(|_: i64| ())
                .unwrap();
            guard.lost()?;
            Ok::<_, Error>("finished")
        });
    assert!(matches!(ran, Err(Error::Lost { .. })), "{ran:?}");
}
