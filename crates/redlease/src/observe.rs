//! What operators see of the engine: metrics through the [`metrics`] facade (feature
//! `metrics`; without it every function here is an empty inline function, so the engine
//! pays nothing) and the tracing span of each hold.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `redlease_acquire_wait_seconds` | histogram | `kind`, `outcome` (`acquired`, `busy`, `timeout`, `failed`, `cancelled`) |
//! | `redlease_acquired_total` | counter | `kind` |
//! | `redlease_timeouts_total` | counter | `kind` |
//! | `redlease_waiting` | gauge | `kind` |
//! | `redlease_held` | gauge | `kind` |
//! | `redlease_hold_seconds` | histogram | `kind`, `outcome` (`released`, `lost`, `closed`) |
//! | `redlease_lost_total` | counter | `kind` |
//! | `redlease_renewal_failures_total` | counter | `kind` |
//!
//! `kind` is `lock`, `election`, `semaphore`, `read`, `write` or `multi_lock`; a builder's
//! `name_in_metrics` adds a `name` label (off by default: one series per name).

use crate::scripts::Kind;
use crate::token::{FencingToken, OwnerToken};

/// The `kind` label of a multi-lock's acquisitions and of the leases of its names.
pub(crate) const MULTI_LOCK: &str = "multi_lock";

/// The `kind` label of a lease of `kind` (its word: `Kind::word`).
pub(crate) fn kind_label(kind: Kind) -> &'static str {
    kind.word()
}

/// The tracing span of one hold: every event of the lease (acquired, renewed, renewal
/// failing or recovered, lost, released) is recorded inside it. The owner token appears
/// as its prefix only (the whole token is the holder's secret).
pub(crate) fn hold_span(
    name: &str,
    kind: &'static str,
    fence: FencingToken,
    token: &OwnerToken,
) -> tracing::Span {
    tracing::info_span!("redlease.hold", lock = %name, kind, fence = fence.get(), token = %token)
}

/// How acquisitions and holds end (the `outcome` labels).
mod ends {
    /// How an acquisition ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Outcome {
        /// Got the lease.
        Acquired,
        /// One attempt found it busy (`try_acquire`).
        Busy,
        /// The wait ran out.
        Timeout,
        /// An error other than a timeout.
        Failed,
    }

    /// How a hold ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum HoldEnd {
        Released,
        Lost,
        Closed,
    }
}

pub(crate) use ends::{HoldEnd, Outcome};

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use metrics::{Label, counter, gauge, histogram};
    use tokio::time::Instant;

    use super::ends::{HoldEnd, Outcome};

    /// The labels of one primitive's metrics.
    #[derive(Debug, Clone)]
    pub(crate) struct Labels {
        kind: &'static str,
        name: Option<Arc<str>>,
    }

    impl Labels {
        pub(crate) fn new(kind: &'static str, name: &Arc<str>, with_name: bool) -> Self {
            Self {
                kind,
                name: with_name.then(|| Arc::clone(name)),
            }
        }

        fn with(&self, outcome: Option<&'static str>) -> Vec<Label> {
            let mut labels = Vec::with_capacity(3);
            labels.push(Label::from_static_parts("kind", self.kind));
            if let Some(name) = &self.name {
                labels.push(Label::new("name", name.to_string()));
            }
            if let Some(outcome) = outcome {
                labels.push(Label::from_static_parts("outcome", outcome));
            }
            labels
        }
    }

    /// One acquisition, from its start; dropped unfinished, it was cancelled.
    #[derive(Debug)]
    pub(crate) struct Acquisition {
        labels: Labels,
        started: Instant,
        waiting: AtomicBool,
        /// Finished, or not measured at all (part of a larger acquisition).
        done: bool,
    }

    impl Acquisition {
        /// Measured from now; `measured` false for a part of an acquisition that is
        /// measured as a whole (a multi-lock's names).
        pub(crate) fn start(labels: Labels, measured: bool) -> Self {
            Self {
                labels,
                started: Instant::now(),
                waiting: AtomicBool::new(false),
                done: !measured,
            }
        }

        /// The lease was busy: the acquisition waits from now on (counted once).
        pub(crate) fn waiting(&self) {
            if !self.done && !self.waiting.swap(true, Ordering::Relaxed) {
                gauge!("redlease_waiting", self.labels.with(None)).increment(1.0);
            }
        }

        pub(crate) fn finish(mut self, outcome: Outcome) {
            if self.done {
                return;
            }
            self.done = true;
            self.record(match outcome {
                Outcome::Acquired => "acquired",
                Outcome::Busy => "busy",
                Outcome::Timeout => "timeout",
                Outcome::Failed => "failed",
            });
            match outcome {
                Outcome::Acquired => {
                    counter!("redlease_acquired_total", self.labels.with(None)).increment(1);
                }
                Outcome::Timeout => {
                    counter!("redlease_timeouts_total", self.labels.with(None)).increment(1);
                }
                Outcome::Busy | Outcome::Failed => {}
            }
        }

        fn record(&self, outcome: &'static str) {
            if self.waiting.load(Ordering::Relaxed) {
                gauge!("redlease_waiting", self.labels.with(None)).decrement(1.0);
            }
            histogram!(
                "redlease_acquire_wait_seconds",
                self.labels.with(Some(outcome))
            )
            .record(self.started.elapsed().as_secs_f64());
        }
    }

    impl Drop for Acquisition {
        fn drop(&mut self) {
            if !self.done {
                self.record("cancelled");
            }
        }
    }

    /// One hold, from its acquisition to its end.
    #[derive(Debug)]
    pub(crate) struct Hold {
        labels: Labels,
        started: Instant,
        ended: AtomicBool,
    }

    impl Hold {
        pub(crate) fn start(labels: Labels) -> Self {
            gauge!("redlease_held", labels.with(None)).increment(1.0);
            Self {
                labels,
                started: Instant::now(),
                ended: AtomicBool::new(false),
            }
        }

        /// Records the end of the hold (the first call only).
        pub(crate) fn end(&self, end: HoldEnd) {
            if self.ended.swap(true, Ordering::AcqRel) {
                return;
            }
            gauge!("redlease_held", self.labels.with(None)).decrement(1.0);
            let outcome = match end {
                HoldEnd::Released => "released",
                HoldEnd::Lost => {
                    counter!("redlease_lost_total", self.labels.with(None)).increment(1);
                    "lost"
                }
                HoldEnd::Closed => "closed",
            };
            histogram!("redlease_hold_seconds", self.labels.with(Some(outcome)))
                .record(self.started.elapsed().as_secs_f64());
        }

        pub(crate) fn renewal_failed(&self) {
            counter!("redlease_renewal_failures_total", self.labels.with(None)).increment(1);
        }
    }

    impl Drop for Hold {
        fn drop(&mut self) {
            // A lease dropped while still counted as held (its guard dropped outside any
            // runtime ends it first; this is the last resort): it is no longer held here.
            self.end(HoldEnd::Released);
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use std::sync::Arc;

    use super::ends::{HoldEnd, Outcome};

    /// The labels of one primitive's metrics (nothing without the `metrics` feature).
    #[derive(Debug, Clone)]
    pub(crate) struct Labels;

    impl Labels {
        #[inline]
        pub(crate) fn new(_kind: &'static str, _name: &Arc<str>, _with_name: bool) -> Self {
            Self
        }
    }

    /// One acquisition (nothing without the `metrics` feature).
    #[derive(Debug)]
    pub(crate) struct Acquisition;

    #[allow(
        clippy::unused_self,
        reason = "the same calls as with the feature, doing nothing"
    )]
    impl Acquisition {
        #[inline]
        pub(crate) fn start(_labels: Labels, _measured: bool) -> Self {
            Self
        }

        #[inline]
        pub(crate) fn waiting(&self) {}

        #[inline]
        pub(crate) fn finish(self, _outcome: Outcome) {}
    }

    /// One hold (nothing without the `metrics` feature).
    #[derive(Debug)]
    pub(crate) struct Hold;

    #[allow(
        clippy::unused_self,
        reason = "the same calls as with the feature, doing nothing"
    )]
    impl Hold {
        #[inline]
        pub(crate) fn start(_labels: Labels) -> Self {
            Self
        }

        #[inline]
        pub(crate) fn end(&self, _end: HoldEnd) {}

        #[inline]
        pub(crate) fn renewal_failed(&self) {}
    }
}

pub(crate) use on::{Acquisition, Hold, Labels};
