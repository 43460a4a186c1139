//! Scenarios 1 and 2: one task, one key, acquire + release in a loop, as fast as it goes.
//!
//! The two loops run in interleaved slice pairs (see [`super::pairs`]) so that drift in the
//! machine's speed during the run affects both alike. Every acquire must succeed and every
//! release must release (checked; a failure makes the run fail with exit code 1).

use std::time::Duration;

use redis::aio::ConnectionManager;

use super::bare::BareLock;
use super::env::Env;
use super::looped::{self, Bare, LoopResult, Runner, Subject};
use super::pairs::Comparison;
use super::stats::LoopChecks;

/// The result of one uncontended loop (commands per pair).
pub(super) type Uncontended = LoopResult;

/// The bare floor: `SET NX PX`, then compare-and-delete, on one connection.
struct BareLoop {
    conn: ConnectionManager,
    lock: BareLock,
    seq: u64,
}

impl Bare for BareLoop {
    async fn pair(&mut self, checks: &mut LoopChecks) {
        let Self { conn, lock, seq } = self;
        *seq += 1;
        let token = super::bare::bare_token(0, *seq);
        match lock.try_acquire(conn, &token).await {
            Ok(true) => match lock.release(conn, &token).await {
                Ok(true) => {}
                Ok(false) => checks.release_failed(format!(
                    "the bare lock `{}` was lost before release",
                    lock.key
                )),
                Err(e) => checks.release_failed(format!("{e:#}")),
            },
            Ok(false) => {
                checks.acquire_failed(format!("the bare lock `{}` was busy", lock.key));
            }
            Err(e) => checks.acquire_failed(format!("{e:#}")),
        }
    }
}

/// Runs scenarios 1 (redlease) and 2 (bare floor) in `pairs` interleaved slice pairs,
/// `duration` in all for each side; with the `peers` feature, redlease against rslock too,
/// in pairs of their own.
pub(super) async fn run(
    env: &Env,
    duration: Duration,
    pairs: u32,
) -> anyhow::Result<(Vec<Uncontended>, Vec<Comparison>)> {
    let client = env.client().await?;
    let lock = client.lock(env.name("uncontended"));
    env.clean_up_lock(&lock)?;
    let bare = BareLock::new(env.key("bare-uncontended"));
    env.clean_up(&bare.key);
    let servers = vec![env.admin.clone()];
    let mut ours = Runner::new(
        "redlease acquire + release",
        Subject::Redlease(lock.clone()),
        servers.clone(),
    );
    let mut floor = Runner::new(
        "bare SET NX PX + EVALSHA del",
        Subject::Bare(BareLoop {
            conn: env.connection().await?,
            lock: bare,
            seq: 0,
        }),
        servers.clone(),
    );
    let comparison =
        looped::compare(env, "uncontended", duration, pairs, &mut ours, &mut floor).await?;
    let sides = vec![ours.finish(), floor.finish()];
    let comparisons = vec![comparison];
    #[cfg(feature = "peers")]
    let (sides, comparisons) = {
        let (mut sides, mut comparisons) = (sides, comparisons);
        let names = super::peers::Names {
            comparison: "uncontended vs rslock",
            redlease: "redlease (pairs with rslock)",
            rslock: "rslock lock + unlock",
        };
        let on = (
            std::slice::from_ref(&env.url),
            env.key("rslock-uncontended"),
        );
        let (results, compared) =
            super::peers::compare(env, names, (duration, pairs), lock, on, servers).await?;
        sides.extend(results);
        comparisons.push(compared);
        (sides, comparisons)
    };
    Ok((sides, comparisons))
}
