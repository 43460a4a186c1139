//! The judge: stamps events with its monotonic clock and plays a fenced resource.

use std::time::{Duration, Instant};

use crate::event::{Event, Kind, Verdict, WorkerLine};

/// Receives every event of a run, in one order, stamped by one monotonic clock; decides
/// each `WRITE` the way a fenced resource would: accepted when its token is no lower than
/// the highest accepted so far.
///
/// Accepting an *equal* token keeps the judge honest about counters that go backwards: if
/// a fencing counter is reset (Redis restarted without persistence), a later holder can be
/// handed a token equal to an older holder's, the judge accepts it, and [`crate::check`]
/// counts it as a stale write accepted.
#[derive(Debug)]
pub struct Judge {
    start: Instant,
    events: Vec<Event>,
    highest: Option<u64>,
}

impl Default for Judge {
    fn default() -> Self {
        Self::new()
    }
}

impl Judge {
    /// A judge whose clock starts now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Vec::new(),
            highest: None,
        }
    }

    /// The judge's clock: time since it started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Stamps and records a worker's event; for a `WRITE`, decides it and returns the
    /// verdict.
    pub fn receive(&mut self, line: WorkerLine) -> Option<Verdict> {
        let verdict = (line.kind == Kind::Write).then(|| {
            if self.highest.is_some_and(|h| line.token < h) {
                Verdict::Rejected
            } else {
                self.highest = Some(line.token);
                Verdict::Accepted
            }
        });
        self.events.push(Event {
            at: self.now(),
            kind: line.kind,
            worker: line.worker,
            token: line.token,
            seq: line.seq,
            verdict,
            bound: line.bound,
        });
        verdict
    }

    /// Stamps and records an event of the runner (a fault).
    pub fn record(&mut self, kind: Kind, worker: u32) {
        let at = self.now();
        self.events.push(Event::new(at, kind, worker, 0));
    }

    /// The history so far, in the order received.
    pub fn history(&self) -> &[Event] {
        &self.events
    }

    /// How many events of `kind` were recorded so far.
    pub fn count(&self, kind: Kind) -> usize {
        self.events.iter().filter(|e| e.kind == kind).count()
    }

    /// The worker that holds the lock as far as the history says (its last `Acquire` has
    /// no `Release`, `Lost` or `Kill` after it), if it is inside its critical section.
    pub fn in_section(&self) -> Option<u32> {
        let last = self.events.iter().rev().find(|e| {
            matches!(
                e.kind,
                Kind::Begin | Kind::End | Kind::Release | Kind::Lost | Kind::Kill
            )
        })?;
        (last.kind == Kind::Begin).then_some(last.worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(worker: u32, token: u64) -> WorkerLine {
        WorkerLine::new(Kind::Write, worker, token, 0)
    }

    #[test]
    fn fences_lower_tokens_accepts_equal_ones() {
        let mut judge = Judge::new();
        assert_eq!(judge.receive(write(1, 5)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(2, 4)), Some(Verdict::Rejected));
        assert_eq!(judge.receive(write(2, 5)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(3, 6)), Some(Verdict::Accepted));
        assert_eq!(judge.history().len(), 4);
        assert!(judge.history().windows(2).all(|w| w[0].at <= w[1].at));
    }
}
