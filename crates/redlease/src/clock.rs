//! How fast the server's clock runs against ours (leaf module).
//!
//! A guard's claim assumes that Redis' clock, which expires the key, runs at most
//! `drift` (a hundredth of the ttl, plus 2 ms) faster than this process' monotonic clock
//! over one lease. Nothing else checks it; this module does, at no cost: every fresh
//! grant's fencing token is the server's `TIME` in microseconds (see `scripts/lib/fence.lua`),
//! read between the attempt's send and its reply. Two grants far enough apart bound the
//! server clock's rate from below: `(server₂ - server₁) / (received₂ - sent₁)`. When that
//! lower bound exceeds the allowance, claims may outlive keys: the client warns (a
//! `tracing` warning; the `redlease_server_clock_rate` gauge with the `metrics` feature) and
//! [`Client::server_clock_rate`](crate::Client::server_clock_rate) reports it.
//!
//! A fencing token is a clock reading only while grants come slower than one per
//! microsecond and the counter did not run ahead of the clock; a reading that goes back,
//! or forward far faster than any clock drifts (a failover to another server, a counter
//! set by hand), starts the estimate again.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The rate above which a server clock runs faster than the drift allowance covers (the
/// allowance is a hundredth of the ttl).
pub(crate) const FAST_RATE: f64 = 1.01;
/// The shortest span between two readings that gives an estimate: short spans are
/// dominated by the round trip's uncertainty.
const MIN_SPAN: Duration = Duration::from_secs(1);
/// How long a baseline serves before the latest reading replaces it, so that the
/// estimate follows a rate that changes.
const MAX_SPAN: Duration = Duration::from_secs(600);
/// A rate no clock discipline produces: the readings are not of one clock.
const IMPLAUSIBLE_RATE: f64 = 2.0;

/// One reading of the server's clock.
#[derive(Debug, Clone, Copy)]
struct Reading {
    server_us: u64,
    sent: Instant,
}

/// The estimate of one client's server clock rate.
#[derive(Debug, Default)]
pub(crate) struct ClockWatch {
    state: Mutex<Estimate>,
}

#[derive(Debug, Default)]
struct Estimate {
    baseline: Option<Reading>,
    /// The latest lower bound of the rate, once a span was long enough.
    rate: Option<f64>,
    /// Whether the fast clock was already warned about (once until it is in bounds again).
    warned: bool,
}

impl ClockWatch {
    /// Records a fresh grant's fencing token `server_us`, read by a request sent at `sent`
    /// whose reply came at `received`.
    pub(crate) fn observe(&self, server_us: u64, sent: Instant, received: Instant) {
        let reading = Reading { server_us, sent };
        let mut estimate = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(base) = estimate.baseline else {
            estimate.baseline = Some(reading);
            return;
        };
        let span = received.saturating_duration_since(base.sent);
        if span < MIN_SPAN {
            return;
        }
        let Some(server_span) = server_us.checked_sub(base.server_us) else {
            estimate.baseline = Some(reading);
            return;
        };
        #[allow(
            clippy::cast_precision_loss,
            reason = "microsecond spans far below 2^52; an estimate"
        )]
        let rate = server_span as f64 / span.as_micros() as f64;
        if rate > IMPLAUSIBLE_RATE {
            estimate.baseline = Some(reading);
            return;
        }
        estimate.rate = Some(rate);
        if span > MAX_SPAN {
            estimate.baseline = Some(reading);
        }
        #[cfg(feature = "metrics")]
        metrics::gauge!("redlease_server_clock_rate").set(rate);
        if rate > FAST_RATE && !estimate.warned {
            estimate.warned = true;
            tracing::warn!(
                rate,
                allowance = FAST_RATE,
                "the Redis server's clock runs faster than the drift allowance covers: a guard may claim a lease after Redis expired it; check the server's time synchronisation"
            );
        } else if rate <= FAST_RATE && estimate.warned {
            estimate.warned = false;
            tracing::info!(
                rate,
                "the Redis server's clock rate is within the drift allowance again"
            );
        }
    }

    /// The latest lower bound of the server clock's rate against ours (1.0: the same),
    /// once two grants were at least a second apart.
    pub(crate) fn rate(&self) -> Option<f64> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .rate
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_is_estimated_from_below_and_a_jump_starts_again() {
        let watch = ClockWatch::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        watch.observe(1_000_000, t0, t0 + ms(1));
        assert_eq!(watch.rate(), None);
        // 2 s later by our clock, 2.1 s by the server's.
        watch.observe(3_100_000, t0 + ms(2000), t0 + ms(2001));
        let rate = watch.rate().unwrap();
        assert!(rate > 1.04 && rate < 1.05, "{rate}");
        // A reading that goes back starts again: the rate stays what it was.
        watch.observe(10, t0 + ms(3000), t0 + ms(3001));
        watch.observe(1_000_010, t0 + ms(4000), t0 + ms(4001));
        assert!(watch.rate().unwrap() < 1.0);
    }
}
