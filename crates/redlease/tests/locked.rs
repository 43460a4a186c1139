//! `#[redlease::locked]` against real Redis: exclusion on keys built from arguments,
//! reentrancy, `on_busy`, synchronous functions, methods, generics, and cancellation on loss.
#![cfg(feature = "macros")]
#![cfg(feature = "macros")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::{bounded, client, evalsha_calls, get, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, FencingToken};
use tokio::sync::{Barrier, Notify};

/// An application error type, as a service would have.
#[derive(Debug)]
enum AppError {
    Lock(Error),
    Refused,
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        Self::Lock(e)
    }
}

/// A balance updated with a non-atomic read-modify-write: only the lock keeps it exact.
struct Account {
    id: u32,
    balance: AtomicU64,
}

#[redlease::locked(key = "account:{account.id}", client = client, wait = "30s")]
async fn deposit(client: &Client, account: &Account) -> Result<u64, AppError> {
    let seen = account.balance.load(Ordering::SeqCst);
    // Another holder would read the same balance while this one is away.
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_micros(100)).await;
    account.balance.store(seen + 1, Ordering::SeqCst);
    Ok(seen + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excludes_on_a_key_built_from_the_arguments() {
    let server = server();
    let c = client(&server).await;
    let account = Arc::new(Account {
        id: 7,
        balance: AtomicU64::new(0),
    });
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (c, account) = (c.clone(), Arc::clone(&account));
            tokio::spawn(async move {
                for _ in 0..10 {
                    deposit(&c, &account).await.unwrap();
                }
            })
        })
        .collect();
    bounded("eight depositors", async {
        for task in tasks {
            task.await.unwrap();
        }
    })
    .await;
    assert_eq!(account.balance.load(Ordering::SeqCst), 80);
    let key = c.lock("account:7").keys().unwrap().key().to_owned();
    assert_eq!(
        get(&mut raw(&server).await, &key).await,
        None,
        "not released"
    );
}

#[redlease::locked(key = "room:{room}", client = client, wait = "0s")]
async fn meet(client: &Client, room: u32, everyone: &Barrier) -> Result<u32, AppError> {
    everyone.wait().await;
    Ok(room)
}

#[tokio::test]
async fn different_argument_values_do_not_exclude_each_other() {
    let server = server();
    let c = client(&server).await;
    // Both must be inside at once to pass the barrier; a lock shared between them would
    // make the second one time out at once (`wait = "0s"`).
    let everyone = Barrier::new(2);
    let (a, b) = bounded("both rooms at once", async {
        tokio::join!(meet(&c, 1, &everyone), meet(&c, 2, &everyone))
    })
    .await;
    assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
}

#[redlease::locked(key = "ledger:{id}", client = client, guard = guard)]
async fn outer(
    client: &Client,
    id: u32,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(FencingToken, FencingToken, u64), AppError> {
    let before = evalsha_calls(conn).await;
    let nested = inner(client, id).await?;
    let round_trips = evalsha_calls(conn).await - before;
    Ok((guard.fencing_token(), nested, round_trips))
}

#[redlease::locked(key = "ledger:{id}", client = client, guard = guard, wait = "0s")]
async fn inner(client: &Client, id: u32) -> Result<FencingToken, AppError> {
    Ok(guard.fencing_token())
}

#[tokio::test]
async fn nested_calls_on_the_same_key_re_enter_without_a_round_trip() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let (outer_token, inner_token, round_trips) =
        bounded("depth 2", outer(&c, 3, &mut conn)).await.unwrap();
    assert_eq!(
        outer_token, inner_token,
        "the nested call took a fresh lock"
    );
    assert_eq!(round_trips, 0, "the nested call went to Redis");
    let key = c.lock("ledger:3").keys().unwrap().key().to_owned();
    assert_eq!(get(&mut conn, &key).await, None, "not released");
}

#[redlease::locked(key = "coupon:{user}", client = client, wait = "0s", on_busy = sold_out)]
async fn grab(client: &Client, user: &str) -> Result<&'static str, AppError> {
    Ok("coupon")
}

#[allow(
    clippy::unused_async,
    reason = "a fallback has the locked function's shape"
)]
async fn sold_out(_client: &Client, _user: &str) -> Result<&'static str, AppError> {
    Ok("try again later")
}

#[redlease::locked(key = "coupon:{user}", client = client, wait = "0s")]
async fn grab_or_fail(client: &Client, user: &str) -> Result<&'static str, AppError> {
    Ok("coupon")
}

#[tokio::test]
async fn on_busy_calls_the_fallback_instead_of_returning_the_timeout() {
    let server = server();
    let c = client(&server).await;
    assert_eq!(grab(&c, "alice").await.unwrap(), "coupon");
    let held = c.lock("coupon:alice").acquire().await.unwrap();
    assert_eq!(grab(&c, "alice").await.unwrap(), "try again later");
    assert!(matches!(
        grab_or_fail(&c, "alice").await,
        Err(AppError::Lock(Error::Timeout { .. }))
    ));
    assert_eq!(grab(&c, "bob").await.unwrap(), "coupon");
    held.release().await.unwrap();
    assert_eq!(grab(&c, "alice").await.unwrap(), "coupon");
}

#[redlease::locked(key = "job:{id}", client = client, ttl = "300ms")]
async fn job(
    client: &Client,
    id: u32,
    inside: &Notify,
    resume: &Notify,
    finished: &AtomicBool,
) -> Result<(), AppError> {
    inside.notify_one();
    resume.notified().await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn the_body_is_cancelled_when_the_lease_is_lost() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("job:9").keys().unwrap().key().to_owned();
    let (inside, resume, finished) = (Notify::new(), Notify::new(), AtomicBool::new(false));
    let (result, ()) = bounded("the lost job", async {
        tokio::join!(job(&c, 9, &inside, &resume, &finished), async {
            inside.notified().await;
            // Someone deletes the lock under the holder's feet.
            let () = conn.del(&key).await.unwrap();
        })
    })
    .await;
    assert!(
        matches!(result, Err(AppError::Lock(Error::Lost { .. }))),
        "{result:?}"
    );
    // The body's future is gone: resuming it can no longer reach the flag.
    resume.notify_one();
    tokio::task::yield_now().await;
    assert!(!finished.load(Ordering::SeqCst));
}

/// A service holding its client, locked per method call.
struct Shop {
    locks: Client,
    sold: AtomicU64,
}

impl Shop {
    #[redlease::locked(key = "shop:{sku}:{self.name()}", client = self.locks)]
    async fn sell(&self, sku: &str) -> Result<u64, AppError> {
        if sku.is_empty() {
            return Err(AppError::Refused);
        }
        Ok(self.sold.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn name(&self) -> &'static str {
        let _ = self;
        "main-street"
    }
}

#[redlease::locked(key = "label:{item}", client = client, guard = guard)]
async fn label<'a, T: Display + Sync>(client: &Client, item: &'a T) -> Result<String, AppError> {
    Ok(format!("{item} under {}", guard.name()))
}

#[redlease::locked(key = "first:{words.len()}", client = client)]
async fn first_word<'w>(client: &Client, words: &'w [&'w str]) -> Result<&'w str, AppError> {
    words.first().copied().ok_or(AppError::Refused)
}

#[tokio::test]
async fn methods_generics_and_lifetimes_pass_through() {
    let server = server();
    let c = client(&server).await;
    let shop = Shop {
        locks: c.clone(),
        sold: AtomicU64::new(0),
    };
    assert_eq!(shop.sell("apple").await.unwrap(), 1);
    assert!(matches!(shop.sell("").await, Err(AppError::Refused)));
    assert_eq!(
        label(&c, &42).await.unwrap(),
        "42 under label:42".to_owned()
    );
    let words = ["lock", "free"];
    assert_eq!(first_word(&c, &words).await.unwrap(), "lock");
}

mod sync {
    use std::sync::atomic::{AtomicU64, Ordering};

    use redlease::blocking::Client;
    use redlease::{Error, FencingToken};

    use super::{Account, AppError, common};

    #[redlease::locked(key = "account:{account.id}", client = client, wait = "30s")]
    fn deposit(client: &Client, account: &Account) -> Result<u64, AppError> {
        let seen = account.balance.load(Ordering::SeqCst);
        std::thread::yield_now();
        std::thread::sleep(std::time::Duration::from_micros(100));
        account.balance.store(seen + 1, Ordering::SeqCst);
        Ok(seen + 1)
    }

    #[redlease::locked(key = "nested:{id}", client = client, guard = guard)]
    fn outer(client: &Client, id: u8) -> Result<(FencingToken, FencingToken), AppError> {
        Ok((guard.fencing_token(), inner(client, id)?))
    }

    #[redlease::locked(key = "nested:{id}", client = client, guard = guard, wait = "0s")]
    fn inner(client: &Client, id: u8) -> Result<FencingToken, AppError> {
        Ok(guard.fencing_token())
    }

    #[redlease::locked(key = "busy", client = client, wait = "0s", on_busy = later)]
    fn busy(client: &Client, n: u8) -> Result<u8, AppError> {
        Ok(n)
    }

    #[allow(
        clippy::unnecessary_wraps,
        reason = "a fallback has the locked function's shape"
    )]
    fn later(_client: &Client, n: u8) -> Result<u8, AppError> {
        Ok(n + 100)
    }

    #[test]
    fn synchronous_functions_lock_through_the_blocking_api() {
        let server = common::server();
        let c = Client::connect(&server.url()).unwrap();
        let account = Account {
            id: 1,
            balance: AtomicU64::new(0),
        };
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10 {
                        deposit(&c, &account).unwrap();
                    }
                });
            }
        });
        assert_eq!(account.balance.load(Ordering::SeqCst), 40);

        let (outer_token, inner_token) = outer(&c, 5).unwrap();
        assert_eq!(
            outer_token, inner_token,
            "the nested call took a fresh lock"
        );

        assert_eq!(busy(&c, 1).unwrap(), 1);
        let held = c.lock("busy").acquire().unwrap();
        assert_eq!(busy(&c, 1).unwrap(), 101);
        held.release().unwrap();
        assert!(!matches!(
            busy(&c, 2),
            Err(AppError::Lock(Error::Timeout { .. }))
        ));
    }
}
