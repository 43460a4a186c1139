//! What the scenarios measure: latency summaries and Redis command counts.

use std::collections::{BTreeMap, HashMap};
use std::ops::AddAssign;
use std::time::Duration;

use serde::{Serialize, Serializer};

/// Percentiles of a set of durations (all samples are kept and sorted; no histogram).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct Summary {
    pub(super) samples: usize,
    #[serde(rename = "p50_us", serialize_with = "micros")]
    pub(super) p50: Duration,
    #[serde(rename = "p99_us", serialize_with = "micros")]
    pub(super) p99: Duration,
    #[serde(rename = "max_us", serialize_with = "micros")]
    pub(super) max: Duration,
}

impl Summary {
    pub(super) fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self {
            samples: samples.len(),
            p50: percentile(&samples, 500),
            p99: percentile(&samples, 990),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// The `permille`-th per-mille of sorted samples (nearest rank, rounded down).
fn percentile(sorted: &[Duration], permille: usize) -> Duration {
    let Some(last) = sorted.len().checked_sub(1) else {
        return Duration::ZERO;
    };
    sorted
        .get(last * permille / 1000)
        .copied()
        .unwrap_or_default()
}

/// A duration as fractional microseconds, for JSON.
pub(super) fn micros<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e6)
}

/// `count` per second of `elapsed`.
#[allow(clippy::cast_precision_loss)] // counts stay far below 2^52
pub(super) fn per_second(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// `part / whole`, 0 when `whole` is not above 0 (rates, for ratios of them).
pub(super) fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// `count / units`, 0 when there are no units.
#[allow(clippy::cast_precision_loss)] // counts stay far below 2^52
pub(super) fn ratio(count: u64, units: u64) -> f64 {
    if units == 0 {
        0.0
    } else {
        count as f64 / units as f64
    }
}

/// `calls` of every `cmdstat_*` line of `INFO commandstats`.
#[derive(Debug, Clone, Default)]
pub(super) struct CommandStats(HashMap<String, u64>);

impl CommandStats {
    pub(super) fn parse(info: &str) -> Self {
        Self(
            info.lines()
                .filter_map(|line| {
                    let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                    let calls = fields
                        .split(',')
                        .find_map(|f| f.strip_prefix("calls="))?
                        .parse()
                        .ok()?;
                    Some((name.to_owned(), calls))
                })
                .collect(),
        )
    }

    /// Adds another server's counts (a quorum's nodes, summed).
    pub(super) fn add(&mut self, other: Self) {
        for (name, calls) in other.0 {
            *self.0.entry(name).or_default() += calls;
        }
    }

    /// What Redis executed between `self` (earlier) and `later`.
    pub(super) fn delta(&self, later: &Self) -> CommandDelta {
        let mut delta = CommandDelta::default();
        for (name, &calls) in &later.0 {
            let calls = calls.saturating_sub(self.0.get(name).copied().unwrap_or(0));
            if name == "info" || calls == 0 {
                continue; // the bench's own snapshots
            }
            *delta.by_command.entry(name.clone()).or_default() += calls;
            delta.total += calls;
            if client_only(name) {
                delta.client_only += calls;
            }
        }
        delta
    }
}

/// Commands that only a client connection sends (a script cannot call them), so that each
/// call is one client round trip. Everything else may also run inside a script.
fn client_only(name: &str) -> bool {
    let base = name.split('|').next().unwrap_or(name);
    matches!(
        base,
        "eval"
            | "evalsha"
            | "eval_ro"
            | "evalsha_ro"
            | "fcall"
            | "fcall_ro"
            | "script"
            | "function"
            | "subscribe"
            | "unsubscribe"
            | "psubscribe"
            | "punsubscribe"
            | "ssubscribe"
            | "sunsubscribe"
            | "hello"
            | "client"
            | "auth"
            | "select"
            | "multi"
            | "exec"
            | "wait"
    )
}

/// Commands Redis executed during a scenario.
#[derive(Debug, Clone, Default)]
pub(super) struct CommandDelta {
    /// All calls, including those made by scripts (`redis.call`), except `INFO`.
    pub(super) total: u64,
    /// Calls of client-only commands (EVALSHA, SCRIPT LOAD, SUBSCRIBE...).
    pub(super) client_only: u64,
    /// Calls per command (`INFO commandstats` names: `evalsha`, `set`, `client|setname`).
    pub(super) by_command: BTreeMap<String, u64>,
}

impl AddAssign for CommandDelta {
    fn add_assign(&mut self, other: Self) {
        self.total += other.total;
        self.client_only += other.client_only;
        for (name, calls) in other.by_command {
            *self.by_command.entry(name).or_default() += calls;
        }
    }
}

impl CommandDelta {
    /// Adds one slice's delta to a running sum; the sum becomes `None` (no counts) as soon
    /// as one slice has none.
    pub(super) fn accumulate(sum: &mut Option<Self>, slice: Option<Self>) {
        *sum = match (sum.take(), slice) {
            (Some(mut sum), Some(slice)) => {
                sum += slice;
                Some(sum)
            }
            _ => None,
        };
    }
}

/// Redis commands per unit of work (an acquire+release pair, or a critical section).
#[derive(Debug, Clone, Serialize)]
pub(super) struct CommandCost {
    /// Every command Redis executed, scripts' inner calls included.
    pub(super) total: f64,
    /// Client round trips: client-only commands plus plain commands the bench sent itself.
    pub(super) round_trips: f64,
    /// Round trips of the lock alone (the critical section's GET and SET left out).
    pub(super) lock_round_trips: f64,
    /// Commands run inside scripts (`total - round_trips`).
    pub(super) in_scripts: f64,
    /// Calls per unit of each command, scripts' inner calls included.
    pub(super) by_command: BTreeMap<String, f64>,
}

impl CommandCost {
    /// `plain` is the number of plain commands the bench itself sent (counted client side),
    /// `section` how many of those belong to critical sections rather than to the lock.
    pub(super) fn new(delta: CommandDelta, plain: u64, section: u64, units: u64) -> Self {
        let round_trips = (delta.client_only + plain).min(delta.total);
        Self {
            total: ratio(delta.total, units),
            round_trips: ratio(round_trips, units),
            lock_round_trips: ratio(round_trips.saturating_sub(section), units),
            in_scripts: ratio(delta.total - round_trips, units),
            by_command: delta
                .by_command
                .into_iter()
                .map(|(name, calls)| (name, ratio(calls, units)))
                .collect(),
        }
    }
}

/// The correctness of an acquire + release loop (uncontended, quorum): every acquire must
/// succeed and every release must find the lock still held and release it.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct LoopChecks {
    pub(super) acquires_failed: u64,
    pub(super) releases_failed: u64,
    /// The first few failures, in words.
    pub(super) errors: Vec<String>,
}

impl LoopChecks {
    /// Failures after which a loop stops measuring (all are reported).
    const STOP_AFTER: u64 = 20;

    pub(super) fn acquire_failed(&mut self, why: String) {
        self.acquires_failed += 1;
        self.keep(why);
    }

    pub(super) fn release_failed(&mut self, why: String) {
        self.releases_failed += 1;
        self.keep(why);
    }

    fn keep(&mut self, why: String) {
        if self.errors.len() < 5 {
            self.errors.push(why);
        }
    }

    /// Whether the loop should stop: too many failures to go on measuring.
    pub(super) fn stop(&self) -> bool {
        self.acquires_failed + self.releases_failed >= Self::STOP_AFTER
    }

    /// Whether every check passed.
    pub(super) fn passed(&self) -> bool {
        self.acquires_failed == 0 && self.releases_failed == 0
    }

    /// The failure for `Report::failures`, if any.
    pub(super) fn failure(&self, scenario: &str) -> Option<String> {
        (!self.passed()).then(|| {
            format!(
                "{scenario}: {} acquires failed, {} releases did not release ({})",
                self.acquires_failed,
                self.releases_failed,
                self.errors.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(samples);
        assert_eq!(s.samples, 100);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(Summary::of(Vec::new()).max, Duration::ZERO);
    }

    #[test]
    fn commandstats_deltas_split_client_and_script_calls() {
        let before = CommandStats::parse(
            "# Commandstats\r\ncmdstat_set:calls=10,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
             cmdstat_info:calls=1,usec=1\r\n",
        );
        let after = CommandStats::parse(
            "cmdstat_set:calls=12,usec=1\r\ncmdstat_evalsha:calls=2,usec=1\r\n\
             cmdstat_get:calls=2,usec=1\r\ncmdstat_script|load:calls=1,usec=1\r\n\
             cmdstat_info:calls=9,usec=1\r\n",
        );
        let d = before.delta(&after);
        assert_eq!(d.total, 7);
        assert_eq!(d.client_only, 3);
        assert_eq!(d.by_command.get("set"), Some(&2));
        assert_eq!(d.by_command.get("script|load"), Some(&1));
        assert!(!d.by_command.contains_key("info"));
        let cost = CommandCost::new(d, 1, 0, 1);
        assert!((cost.round_trips - 4.0).abs() < f64::EPSILON);
        assert!((cost.in_scripts - 3.0).abs() < f64::EPSILON);
    }
}
