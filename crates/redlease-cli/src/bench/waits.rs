//! Wait times of the multi-process runs, as a histogram that worker processes send to the
//! parent and that merges exactly: thousands of samples per slice become a few dozen
//! buckets, and the percentiles of the merged histogram are those of all the samples to
//! within the bucket width (1/32 of a power of two, about 3%). The longest wait is exact.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::stats::Summary;

/// Sub-buckets per power of two; values below this are exact (in nanoseconds).
const SUB: u64 = 32;
/// `log2(SUB)`.
const SUB_BITS: u32 = 5;

/// A log-linear histogram of durations (nanoseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Waits {
    /// Samples per bucket index (see [`bucket`]); sparse.
    buckets: BTreeMap<u32, u64>,
    count: u64,
    max_ns: u64,
}

/// The bucket of `ns`: exact below [`SUB`], then [`SUB`] buckets per power of two.
fn bucket(ns: u64) -> u32 {
    if ns < SUB {
        // Below 32: fits.
        return u32::try_from(ns).unwrap_or(0);
    }
    let exp = ns.ilog2(); // >= SUB_BITS
    let mantissa = (ns >> (exp - SUB_BITS)) & (SUB - 1);
    // At most 32 + 59 * 32 + 31: fits.
    u32::try_from(SUB + u64::from(exp - SUB_BITS) * SUB + mantissa).unwrap_or(u32::MAX)
}

/// The middle of bucket `index`'s range of nanoseconds.
fn middle(index: u32) -> u64 {
    let index = u64::from(index);
    if index < SUB {
        return index;
    }
    let shift = (index - SUB) / SUB;
    let low = (SUB + (index - SUB) % SUB) << shift;
    low + (1u64 << shift) / 2
}

/// `d` in nanoseconds (saturating).
pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Waits {
    pub(super) fn record(&mut self, wait: Duration) {
        let ns = nanos(wait);
        *self.buckets.entry(bucket(ns)).or_default() += 1;
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    pub(super) fn merge(&mut self, other: &Self) {
        for (&index, &n) in &other.buckets {
            *self.buckets.entry(index).or_default() += n;
        }
        self.count += other.count;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub(super) fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The `permille`-th per-mille (nearest rank, rounded down, as [`Summary::of`]).
    fn percentile(&self, permille: u64) -> Duration {
        let Some(last) = self.count.checked_sub(1) else {
            return Duration::ZERO;
        };
        let rank = last * permille / 1000;
        let mut seen = 0;
        for (&index, &n) in &self.buckets {
            seen += n;
            if seen > rank {
                return Duration::from_nanos(middle(index).min(self.max_ns));
            }
        }
        self.max()
    }

    pub(super) fn summary(&self) -> Summary {
        Summary {
            samples: usize::try_from(self.count).unwrap_or(usize::MAX),
            p50: self.percentile(500),
            p99: self.percentile(990),
            max: self.max(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_three_percent_and_ordered() {
        let mut previous = 0;
        for ns in (0..200_000u64).chain([1 << 40, u64::MAX / 3]) {
            let b = bucket(ns);
            assert!(b >= previous, "bucket of {ns} went back");
            previous = b;
            let mid = middle(b);
            #[allow(clippy::cast_precision_loss)]
            let error = (mid as f64 - ns as f64).abs() / (ns.max(1) as f64);
            assert!(error <= 1.0 / 32.0, "{ns}: middle {mid}, error {error}");
        }
    }

    #[test]
    fn merged_percentiles_match_the_samples() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
        let (mut a, mut b) = (Waits::default(), Waits::default());
        for (i, s) in samples.iter().enumerate() {
            if i % 3 == 0 { &mut a } else { &mut b }.record(*s);
        }
        a.merge(&b);
        let exact = Summary::of(samples);
        let approx = a.summary();
        assert_eq!(approx.samples, 1000);
        assert_eq!(approx.max, exact.max);
        for (got, want) in [(approx.p50, exact.p50), (approx.p99, exact.p99)] {
            let error = (got.as_secs_f64() - want.as_secs_f64()).abs() / want.as_secs_f64();
            assert!(error <= 1.0 / 32.0, "{got:?} vs {want:?}");
        }
        let wire = serde_json::to_string(&a).map_err(|e| e.to_string());
        let back: Result<Waits, String> =
            wire.and_then(|w| serde_json::from_str(&w).map_err(|e| e.to_string()));
        assert_eq!(back, Ok(a));
        assert_eq!(Waits::default().summary().max, Duration::ZERO);
    }
}
