//! What the demo's steps found, for the report. A leaf of `demo/`.

use std::time::Duration;

/// The outcome of one sale (steps 1 and 2).
pub(super) struct Sale {
    pub(super) sold: u64,
    pub(super) stock: i64,
    pub(super) tokens: Vec<u64>,
    pub(super) took: Duration,
}

impl Sale {
    pub(super) fn increasing(&self) -> bool {
        self.tokens.windows(2).all(|w| w[0] < w[1])
    }
}

/// What steps 3 and 4 found.
pub(super) struct Step {
    /// Coupons sold in the step (the next holder's, plus the stale holder's if let through).
    pub(super) sold: u64,
    /// Stock left after the step.
    pub(super) stock: i64,
    pub(super) old_fence: u64,
    pub(super) next_fence: u64,
    pub(super) next_applied: bool,
    pub(super) next_waited: Duration,
    pub(super) lease_left: Duration,
    pub(super) stale_refused: Option<bool>,
    pub(super) stale_release_lost: Option<bool>,
}
