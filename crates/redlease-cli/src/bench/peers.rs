//! rslock, the fastest Rust peer, as a side of the uncontended and quorum comparisons
//! (the `peers` feature): the same loop as the bare floor's, acquire + release by rslock's
//! `LockManager`, compared with redlease in interleaved slice pairs of their own.
//!
//! rslock's release answers nothing, so a release that did not release shows as the next
//! acquire failing (rslock retries 3 times, up to 200 ms apart, then gives up).

use std::time::Duration;

use super::looped::Bare;
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
