//! Percentiles of measured durations.

use std::time::Duration;

use serde::Serialize;

/// The median and 99th percentile of a set of durations (nearest rank), and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Percentiles {
    /// How many samples.
    pub count: usize,
    /// The median, when there are samples.
    pub p50: Option<Duration>,
    /// The 99th percentile, when there are samples.
    pub p99: Option<Duration>,
}

impl Percentiles {
    /// The percentiles of `samples`.
    pub fn of(samples: &[Duration]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let rank = |p: usize| {
            // nearest rank: ceil(p/100 * n), 1-based
            let n = sorted.len();
            let k = (p * n).div_ceil(100).clamp(1, n.max(1));
            sorted.get(k - 1).copied()
        };
        Self {
            count: sorted.len(),
            p50: rank(50),
            p99: rank(99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let ms = Duration::from_millis;
        let p = Percentiles::of(&[ms(3), ms(1), ms(2)]);
        assert_eq!((p.count, p.p50, p.p99), (3, Some(ms(2)), Some(ms(3))));
        assert_eq!(Percentiles::of(&[]).p50, None);
    }
}
