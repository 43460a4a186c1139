//! The checker: what a history says about safety, exclusion and timing.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::event::{Event, Kind, Verdict};
use crate::liveness::{Liveness, measure};
use crate::stats::Percentiles;

/// What [`check`] found in a history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Critical sections completed (`END` events).
    pub sections: usize,
    /// Acquisitions (`ACQ` events).
    pub acquisitions: usize,
    /// Faults injected by the runner (`KILL`, `PAUSE`, `FAULT` events).
    pub faults: usize,
    /// Writes accepted although their token was lower than one accepted before, or equal
    /// to it but from another holder (another worker): the fenced resource was fooled.
    /// Must be 0 wherever redlease promises fenced safety.
    pub stale_accepted: usize,
    /// Writes the fenced resource refused (fencing caught a stale holder).
    pub stale_rejected: usize,
    /// `BEGIN`s stamped while another worker was between its `BEGIN` and `END` (and
    /// alive): unfenced mutual exclusion was broken.
    pub overlaps: usize,
    /// Acquisitions whose token was not greater than every earlier acquisition's.
    pub tokens_backwards: usize,
    /// Departures from a mutex model of the `ACQ`/`REL`/`LOST`/`KILL` history: an
    /// acquisition while another worker still held the lock (no release, loss or death
    /// recorded), or a release by a worker that did not hold it (a release after the
    /// holder reported its loss is not one).
    pub mutex_violations: usize,
    /// Leases reported lost (`LOST` events).
    pub lost: usize,
    /// Failed acquisitions (`ERR` events).
    pub errors: usize,
    /// From each `KILL` of a holder to the next `ACQ` by another worker.
    pub takeover: Percentiles,
    /// From each `RESUME` of a paused holder to its `LOST`.
    pub detect: Percentiles,
    /// Resumed holders that never reported their lease lost.
    pub undetected: usize,
    /// Stalls and wait overruns (see [`crate::liveness`]).
    pub liveness: Liveness,
}

impl Findings {
    /// No stale write accepted and no fencing token going backwards: the fenced resource
    /// was safe.
    pub fn is_fenced_safe(&self) -> bool {
        self.stale_accepted == 0 && self.tokens_backwards == 0
    }

    /// Fenced safety, and no overlap of sections nor departure from the mutex model:
    /// exclusion held even without fencing.
    pub fn is_safe(&self) -> bool {
        self.is_fenced_safe() && self.overlaps == 0 && self.mutex_violations == 0
    }
}

/// Checks a history (in the judge's order of receipt).
pub fn check(history: &[Event]) -> Findings {
    let mut f = Findings::default();
    // Fenced resource: the highest accepted token and who wrote it.
    let mut highest: Option<(u64, u32)> = None;
    // Workers between BEGIN and END.
    let mut inside: BTreeSet<u32> = BTreeSet::new();
    // Mutex model: who holds the lock.
    let mut holder: Option<u32> = None;
    // Holds (worker, token) that ended in a reported loss: their release is legitimate.
    let mut lost_holds: BTreeSet<(u32, u64)> = BTreeSet::new();
    let mut last_token: Option<u64> = None;
    // Pending measurements: killed holder -> kill time; paused worker -> resume time.
    let mut killed: Vec<(u32, Duration)> = Vec::new();
    let mut resumed: HashMap<u32, Duration> = HashMap::new();
    let (mut takeovers, mut detections) = (Vec::new(), Vec::new());
    for e in history {
        match e.kind {
            Kind::Acquire => {
                f.acquisitions += 1;
                if last_token.is_some_and(|t| e.token <= t) {
                    f.tokens_backwards += 1;
                }
                last_token = Some(last_token.map_or(e.token, |t| t.max(e.token)));
                if holder.is_some_and(|h| h != e.worker) {
                    f.mutex_violations += 1;
                }
                holder = Some(e.worker);
                killed.retain(|&(victim, at)| {
                    if victim == e.worker {
                        return true;
                    }
                    takeovers.push(e.at.saturating_sub(at));
                    false
                });
            }
            Kind::Begin => {
                if inside.iter().any(|&w| w != e.worker) {
                    f.overlaps += 1;
                }
                inside.insert(e.worker);
            }
            Kind::Write => match e.verdict {
                Some(Verdict::Accepted) => {
                    if let Some((token, writer)) = highest
                        && (e.token < token || (e.token == token && e.worker != writer))
                    {
                        f.stale_accepted += 1;
                    }
                    if highest.is_none_or(|(token, _)| e.token >= token) {
                        highest = Some((e.token, e.worker));
                    }
                }
                Some(Verdict::Rejected) => f.stale_rejected += 1,
                None => {}
            },
            Kind::End => {
                f.sections += 1;
                inside.remove(&e.worker);
            }
            Kind::Release => {
                if holder == Some(e.worker) {
                    holder = None;
                } else if !lost_holds.remove(&(e.worker, e.token)) {
                    f.mutex_violations += 1;
                }
            }
            Kind::Lost => {
                f.lost += 1;
                if holder == Some(e.worker) {
                    holder = None;
                    lost_holds.insert((e.worker, e.token));
                }
                if let Some(at) = resumed.remove(&e.worker) {
                    detections.push(e.at.saturating_sub(at));
                }
            }
            Kind::Error => f.errors += 1,
            Kind::Kill => {
                f.faults += 1;
                inside.remove(&e.worker);
                if holder == Some(e.worker) {
                    holder = None;
                }
                killed.push((e.worker, e.at));
            }
            Kind::Pause | Kind::Fault => f.faults += 1,
            Kind::Wait | Kind::Timeout | Kind::Cancel | Kind::Bye | Kind::Down | Kind::Up => {}
            Kind::Resume => {
                resumed.insert(e.worker, e.at);
            }
        }
    }
    f.undetected = resumed.len();
    f.takeover = Percentiles::of(&takeovers);
    f.detect = Percentiles::of(&detections);
    f.liveness = measure(history);
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn section(start: u64, worker: u32, token: u64, verdict: Verdict) -> Vec<Event> {
        vec![
            Event::new(at(start), Kind::Acquire, worker, token),
            Event::new(at(start + 1), Kind::Begin, worker, token),
            Event::new(at(start + 2), Kind::Write, worker, token).verdict(verdict),
            Event::new(at(start + 3), Kind::End, worker, token),
            Event::new(at(start + 4), Kind::Release, worker, token),
        ]
    }

    #[test]
    fn a_clean_history_is_safe() {
        let mut h = section(0, 1, 1, Verdict::Accepted);
        h.extend(section(10, 2, 2, Verdict::Accepted));
        h.extend(section(20, 1, 3, Verdict::Accepted));
        let f = check(&h);
        assert_eq!((f.sections, f.acquisitions), (3, 3));
        assert!(f.is_safe(), "{f:?}");
    }

    #[test]
    fn takeover_and_detection_are_measured() {
        let h = vec![
            Event::new(at(0), Kind::Acquire, 1, 1),
            Event::new(at(1), Kind::Begin, 1, 1),
            Event::new(at(2), Kind::Kill, 1, 0),
            Event::new(at(900), Kind::Acquire, 2, 2),
            Event::new(at(901), Kind::Begin, 2, 2),
            Event::new(at(902), Kind::Pause, 2, 0),
            Event::new(at(2000), Kind::Acquire, 3, 3),
            Event::new(at(2500), Kind::Resume, 2, 0),
            Event::new(at(2520), Kind::Lost, 2, 2),
        ];
        let f = check(&h);
        assert_eq!(f.takeover.p50, Some(at(898)));
        assert_eq!(f.detect.p50, Some(at(20)));
        assert_eq!(f.undetected, 0);
        assert_eq!(f.faults, 2);
        assert_eq!(f.mutex_violations, 1, "3 acquired while 2 was paused");
    }
}
