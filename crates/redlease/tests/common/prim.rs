//! The three primitives whose waiters queue for hand-offs (a lock, a semaphore of one
//! permit, a read-write lock's write side), behind one enum, so that a test of the
//! hand-off runs the same steps on each.

use std::time::Duration;

use redlease::{Client, Guard, LockKeys, Primitive, WriteGuard};
use redlease_local::{RedisServer, Reply};

/// The name every test of this module locks.
pub const NAME: &str = "prim";

/// One of the primitives that hand off.
#[derive(Debug, Clone, Copy)]
pub enum Prim {
    Lock,
    Semaphore,
    Write,
}

/// Every primitive that hands off.
pub const ALL: [Prim; 3] = [Prim::Lock, Prim::Semaphore, Prim::Write];

/// A held lease of any of the three.
pub enum Held {
    Guard(Guard),
    Write(WriteGuard),
}

impl Held {
    pub fn guard(&self) -> &Guard {
        match self {
            Self::Guard(g) => g,
            Self::Write(w) => w,
        }
    }

    pub async fn release(self) {
        // The lease may be gone by now (the test's servers moved); only its truth at
        // the grant is judged.
        let _ = match self {
            Self::Guard(g) => g.release().await,
            Self::Write(w) => w.release().await,
        };
    }
}

impl Prim {
    /// The primitive named `NAME`, taken for `ttl` with a wait of `wait`.
    pub async fn acquire(
        self,
        client: &Client,
        ttl: Duration,
        wait: Duration,
    ) -> redlease::Result<Held> {
        match self {
            Self::Lock => client
                .lock(NAME)
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await
                .map(Held::Guard),
            Self::Semaphore => client
                .semaphore(NAME, 1)
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await
                .map(Held::Guard),
            Self::Write => client
                .rwlock(NAME)
                .write()
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await
                .map(Held::Write),
        }
    }

    pub fn keys(self) -> LockKeys {
        let primitive = match self {
            Self::Lock => Primitive::Lock,
            Self::Semaphore => Primitive::Semaphore,
            Self::Write => Primitive::RwLock,
        };
        LockKeys::of("redlease:", NAME, primitive).unwrap()
    }

    /// Whether `server` holds a live lease of this primitive granted with `fence`.
    pub fn holds(self, server: &RedisServer, fence: u64) -> bool {
        let keys = self.keys();
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
