//! One contender's acquire -> critical section -> release, as the in-process contended
//! scenarios ([`super::contended`]) and the worker processes ([`super::worker`]) both run
//! it: redlease's `acquire()` / `release()`, or the busy-retry floor (`SET NX PX` retried
//! with a yield in between, compare-and-delete release); the section is a deliberately
//! non-atomic `GET` + `SET` of a counter.

use std::time::Duration;

use anyhow::Context as _;
use redis::aio::ConnectionManager;

use super::bare::BareLock;

/// How long a redlease contender may wait in `acquire()` before it counts as an error.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(10);
/// A contender stops after this many errors (they are all reported).
pub(super) const MAX_ERRORS: usize = 20;
/// Plain commands in one critical section (GET + SET).
pub(super) const SECTION_COMMANDS: u64 = 2;

/// The lock a contender takes.
#[derive(Clone)]
pub(super) enum Locker {
    Redlease(redlease::Lock),
    /// The busy-retry floor.
    Bare(BareLock),
}

/// What a contender holds between acquire and release.
pub(super) enum Held {
    Guard(redlease::Guard),
    /// The bare lock's token.
    Token(String),
}

impl Locker {
    /// Takes the lock. The outer error is a Redis failure under the busy-retry loop (the
    /// contender must stop); the inner one a failed redlease `acquire()` (an error to count
    /// before going on). The busy-retry loop counts its `SET NX` tries in `attempts` and
    /// takes the token of contender `id`'s next `seq`.
    pub(super) async fn acquire(
        &self,
        conn: &mut ConnectionManager,
        id: usize,
        seq: &mut u64,
        attempts: &mut u64,
    ) -> anyhow::Result<Result<Held, redlease::Error>> {
        match self {
            Self::Redlease(lock) => Ok(lock.acquire().await.map(Held::Guard)),
            Self::Bare(lock) => {
                *seq += 1;
                let token = super::bare::bare_token(id, *seq);
                loop {
                    *attempts += 1;
                    if lock.try_acquire(conn, &token).await? {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                Ok(Ok(Held::Token(token)))
            }
        }
    }

    /// Releases what [`Locker::acquire`] took; an error when the lock was lost.
    pub(super) async fn release(
        &self,
        held: Held,
        conn: &mut ConnectionManager,
    ) -> anyhow::Result<()> {
        match (held, self) {
            (Held::Guard(guard), _) => guard.release().await.map_err(anyhow::Error::from),
            (Held::Token(token), Self::Bare(lock)) => match lock.release(conn, &token).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(anyhow::anyhow!("the bare lock was lost before release")),
                Err(e) => Err(e),
            },
            (Held::Token(_), Self::Redlease(_)) => Ok(()),
        }
    }
}

/// The non-atomic increment that the lock must make exclusive.
pub(super) async fn critical_section(
    conn: &mut ConnectionManager,
    counter: &str,
) -> anyhow::Result<()> {
    let value: Option<u64> = redis::cmd("GET")
        .arg(counter)
        .query_async(conn)
        .await
        .context("reading the counter in the critical section")?;
    let () = redis::cmd("SET")
        .arg(counter)
        .arg(value.unwrap_or(0) + 1)
        .query_async(conn)
        .await
        .context("writing the counter in the critical section")?;
    Ok(())
}
