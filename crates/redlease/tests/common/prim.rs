//! The primitives whose waiters queue (a lock, a one-permit semaphore, a read-write
//! lock's write hold), for tests that run the same steps on each.

use std::time::Duration;

use redlease::{Client, Guard, LockKeys, Primitive, WriteGuard};
use redlease_local::{RedisServer, Reply};

/// A primitive whose waiters queue.
#[derive(Debug, Clone, Copy)]
pub enum Prim {
    Lock,
    /// A permit of a one-permit semaphore.
    Semaphore,
    /// A read-write lock's write hold.
    Write,
}

/// Every [`Prim`].
pub const ALL: [Prim; 3] = [Prim::Lock, Prim::Semaphore, Prim::Write];

/// A hold of one of [`Prim`].
pub enum Held {
    Guard(Guard),
    Write(WriteGuard),
}

impl std::ops::Deref for Held {
    type Target = Guard;
    fn deref(&self) -> &Guard {
        match self {
            Self::Guard(g) => g,
            Self::Write(w) => w,
        }
    }
}

impl Held {
    pub async fn release(self) -> redlease::Result<()> {
        match self {
            Self::Guard(g) => g.release().await,
            Self::Write(w) => w.release().await,
        }
    }
}

impl Prim {
    /// The keys of the primitive named `name` (the default prefix).
    pub fn keys(self, name: &str) -> LockKeys {
        let primitive = match self {
            Self::Lock => Primitive::Lock,
            Self::Semaphore => Primitive::Semaphore,
            Self::Write => Primitive::RwLock,
        };
        LockKeys::of("redlease:", name, primitive).unwrap()
    }

    /// Acquires the primitive named `name` with a 30 s ttl, waiting up to `wait`.
    pub async fn acquire(
        self,
        client: &Client,
        name: &str,
        wait: Duration,
    ) -> redlease::Result<Held> {
        self.acquire_for(client, name, Duration::from_secs(30), wait)
            .await
    }

    /// Acquires the primitive named `name` for `ttl`, waiting up to `wait`.
    pub async fn acquire_for(
        self,
        client: &Client,
        name: &str,
        ttl: Duration,
        wait: Duration,
    ) -> redlease::Result<Held> {
        match self {
            Self::Lock => client
                .lock(name)
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await
                .map(Held::Guard),
            Self::Semaphore => {
                let pool = client.semaphore(name, 1).ttl(ttl).wait(wait);
                pool.acquire().await.map(Held::Guard)
            }
            Self::Write => {
                let write = client.rwlock(name).write().ttl(ttl).wait(wait);
                write.acquire().await.map(Held::Write)
            }
        }
    }

    /// Whether `server` holds a live lease of the primitive named `name` granted with
    /// `fence`.
    pub fn holds(self, server: &RedisServer, name: &str, fence: u64) -> bool {
        let keys = self.keys(name);
        let fence = fence.to_string();
        if matches!(self, Self::Lock) {
            let Reply::Bulk(details) = server.query(&["GET", keys.holder()]).unwrap() else {
                return false;
            };
            let details = String::from_utf8(details).unwrap();
            return server.query(&["EXISTS", keys.key()]).unwrap() == Reply::Integer(1)
                && details.split(' ').next() == Some(fence.as_str());
        }
        // The holders hash: token -> [fence, details]; the leases' ZSET: token -> expiry.
        let leases = keys.holds().unwrap_or(keys.key()).to_owned();
        let Reply::Array(entries) = server.query(&["HGETALL", keys.holder()]).unwrap() else {
            return false;
        };
        let now = match server.query(&["TIME"]).unwrap() {
            Reply::Array(t) => t[0].text().unwrap().parse::<u64>().unwrap() * 1000,
            other => panic!("TIME: {other:?}"),
        };
        entries.chunks(2).any(|pair| {
            let (token, entry) = (pair[0].text().unwrap(), pair[1].text().unwrap());
            entry.starts_with(&format!("[\"{fence}\""))
                && match server.query(&["ZSCORE", &leases, &token]).unwrap() {
                    // Scores are whole ms since 1970.
                    Reply::Bulk(score) => {
                        String::from_utf8(score).unwrap().parse::<u64>().unwrap() > now
                    }
                    _ => false,
                }
        })
    }
}

/// Waits until the queue at `keys` holds `n` places, each queued for grants (a place kept
/// while its waiter's grant subscription was still coming up has no grant channel, and no
/// hand-off reaches it).
pub async fn queued_for_grants(server: &RedisServer, keys: &LockKeys, n: i64) {
    crate::common::eventually("the places queued for grants", || async {
        let queued = server.query(&["LLEN", keys.queue()]).unwrap() == Reply::Integer(n);
        let Reply::Array(entries) = server.query(&["HVALS", keys.waiters()]).unwrap() else {
            return false;
        };
        queued
            && entries
                .iter()
                .all(|e| e.text().is_some_and(|e| e.contains("\"redlease:grant:")))
    })
    .await;
}
