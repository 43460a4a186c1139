//! rslock, the fastest Rust peer, as a side of the uncontended and quorum comparisons
//! (the `peers` feature): the same loop as the bare floor's, acquire + release by rslock's
//! `LockManager`, compared with redlease in interleaved slice pairs of their own.
//!
//! rslock's release answers nothing, so a release that did not release shows as the next
//! acquire failing (rslock retries 3 times, up to 200 ms apart, then gives up).

use std::time::Duration;

use redis::aio::ConnectionManager;

use super::env::Env;
use super::looped::{self, Bare, LoopResult, Runner, Subject};
use super::pairs::Comparison;
use super::stats::LoopChecks;

/// The lease rslock's loops ask for, as long as the bare floor's.
const TTL: Duration = Duration::from_millis(super::bare::BARE_TTL_MS);

/// rslock's acquire + release of one resource on the servers at `urls` (a quorum when
/// more than one).
pub(super) struct Rslock {
    manager: rslock::LockManager,
    resource: String,
}

impl Rslock {
    pub(super) fn new(urls: &[String], resource: String) -> Self {
        Self {
            manager: rslock::LockManager::new(urls.to_vec()),
            resource,
        }
    }
}

impl Bare for Rslock {
    async fn pair(&mut self, checks: &mut LoopChecks) {
        match self.manager.lock(self.resource.as_bytes(), TTL).await {
            Ok(lock) => self.manager.unlock(&lock).await,
            Err(e) => checks.acquire_failed(format!("rslock `{}`: {e}", self.resource)),
        }
    }
}

/// The names of one comparison with rslock: the comparison's, redlease's side's and
/// rslock's.
pub(super) struct Names {
    pub(super) comparison: &'static str,
    pub(super) redlease: &'static str,
    pub(super) rslock: &'static str,
}

/// `lock` against rslock's lock of `key` on the servers at `urls`, in `pairs` interleaved
/// slice pairs of their own, `duration` in all per side; commands counted on `servers`.
/// Both sides' results (redlease's first) and the comparison.
pub(super) async fn compare(
    env: &Env,
    names: Names,
    (duration, pairs): (Duration, u32),
    lock: redlease::Lock,
    (urls, key): (&[String], String),
    servers: Vec<ConnectionManager>,
) -> anyhow::Result<([LoopResult; 2], Comparison)> {
    env.clean_up(&key);
    let mut ours = Runner::new(names.redlease, Subject::Redlease(lock), servers.clone());
    let mut peer = Runner::new(names.rslock, Subject::Bare(Rslock::new(urls, key)), servers);
    let comparison =
        looped::compare(env, names.comparison, duration, pairs, &mut ours, &mut peer).await?;
    Ok(([ours.finish(), peer.finish()], comparison))
}
