//! The primitives whose waiters queue (a lock, a one-permit semaphore, a read-write
//! lock's write hold), for tests that run the same steps on each.

use std::time::Duration;

use redlease::{Client, Guard, LockKeys, Primitive, WriteGuard};

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
        let ttl = Duration::from_secs(30);
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
}
