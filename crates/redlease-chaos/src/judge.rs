//! The judge: stamps events with its monotonic clock and plays a fenced resource.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::event::{Event, Kind, Mode, Verdict, WorkerLine, monotonic};
use crate::primitive::Primitive;

/// Receives every event of a run, in one order, stamped by one monotonic clock; decides
/// each `WRITE` the way a fenced resource would: accepted when its token is no lower than
/// the highest accepted so far.
///
/// Accepting an *equal* token keeps the judge honest about counters that go backwards: if
/// a fencing counter is reset (Redis restarted without persistence), a later holder can be
/// handed a token equal to an older holder's, the judge accepts it, and [`crate::check`]
/// counts it as a stale write accepted.
///
/// The resource depends on the [`Primitive`]:
/// - a **mutex**'s holders share one resource, fenced as above;
/// - a **read-write lock**'s too: a writer's `WRITE` is accepted when its token is no lower
///   than the highest accepted read or write (a writer is alone, so it is newer than every
///   read before it), a reader's `WRITE` (a read) when it is no lower than the highest
///   accepted write (readers are concurrent: only writers order them);
/// - a **semaphore**'s holders are concurrent, so their tokens do not order their writes:
///   each holder (worker process) writes a resource of its own, fenced as above, as the
///   jobs a semaphore caps do. (Nothing else writes it, so no write is rejected; that
///   fencing tokens grow across holders is checked by [`crate::check_as`].)
/// - a **multi-lock**'s holders write one resource per name (the line's
///   [`lock`](WorkerLine::lock)), each with that name's token, each fenced as a mutex's.
#[derive(Debug)]
pub struct Judge {
    start: Instant,
    /// [`monotonic`] read together with `start`: converts the workers' claims (readings of
    /// that clock) to the judge's clock.
    start_monotonic: Option<Duration>,
    events: Vec<Event>,
    primitive: Primitive,
    /// The highest token accepted, per resource (a lock name of a multi-lock, a worker of
    /// a semaphore).
    highest: HashMap<(Option<char>, u32), u64>,
    /// The highest token of a write (not a read) accepted.
    highest_write: Option<u64>,
}

impl Default for Judge {
    fn default() -> Self {
        Self::new()
    }
}

impl Judge {
    /// A judge of a mutex whose clock starts now.
    pub fn new() -> Self {
        Self::of(Primitive::Mutex)
    }

    /// A judge of `primitive` whose clock starts now.
    pub fn of(primitive: Primitive) -> Self {
        Self {
            // In this order: the claims converted by `on_my_clock` are never later than
            // they were.
            start: Instant::now(),
            start_monotonic: monotonic(),
            events: Vec::new(),
            primitive,
            highest: HashMap::new(),
            highest_write: None,
        }
    }

    /// The judge's clock: time since it started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Stamps and records a worker's event; for a `WRITE`, decides it and returns the
    /// verdict.
    pub fn receive(&mut self, line: WorkerLine) -> Option<Verdict> {
        let verdict = (line.kind == Kind::Write).then(|| self.decide(&line));
        self.events.push(Event {
            at: self.now(),
            kind: line.kind,
            worker: line.worker,
            token: line.token,
            seq: line.seq,
            verdict,
            bound: line.bound,
            mode: line.mode,
            lock: line.lock,
            claimed_until: line.until.map(|until| self.on_my_clock(until)),
            sent: line.sent.map(|sent| self.on_my_clock(sent)),
        });
        verdict
    }

    /// A reading of [`monotonic`] on the judge's clock (zero if it came before the judge
    /// started). The clock was read just after `start`, so a claim converted here is never
    /// later than it was (earlier by the microseconds between the two readings).
    fn on_my_clock(&self, reading: Duration) -> Duration {
        self.start_monotonic
            .map_or(Duration::ZERO, |origin| reading.saturating_sub(origin))
    }

    /// The fenced resource's decision on a `WRITE` (see the type's docs).
    fn decide(&mut self, line: &WorkerLine) -> Verdict {
        let resource = match self.primitive {
            Primitive::Semaphore { .. } => (None, line.worker),
            Primitive::MultiLock { .. } => (line.lock, 0),
            Primitive::Mutex | Primitive::Election | Primitive::RwLock => (None, 0),
        };
        let mode = self.primitive.mode(line.mode);
        let floor = match mode {
            Mode::Write => self.highest.get(&resource).copied(),
            Mode::Read => self.highest_write,
        };
        if floor.is_some_and(|h| line.token < h) {
            return Verdict::Rejected;
        }
        let highest = self.highest.entry(resource).or_insert(line.token);
        *highest = (*highest).max(line.token);
        if mode == Mode::Write {
            self.highest_write = Some(line.token);
        }
        Verdict::Accepted
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

    #[test]
    fn a_rwlock_fences_reads_by_writes_and_writes_by_both() {
        let mut judge = Judge::of(Primitive::RwLock);
        let line = |worker, token, mode| WorkerLine {
            mode: Some(mode),
            ..write(worker, token)
        };
        let (r, w) = (Mode::Read, Mode::Write);
        assert_eq!(judge.receive(line(1, 5, w)), Some(Verdict::Accepted));
        // Concurrent readers, in any order.
        assert_eq!(judge.receive(line(2, 7, r)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(line(3, 6, r)), Some(Verdict::Accepted));
        // A writer older than a read: stale.
        assert_eq!(judge.receive(line(4, 6, w)), Some(Verdict::Rejected));
        assert_eq!(judge.receive(line(4, 8, w)), Some(Verdict::Accepted));
        // A reader older than a write: stale.
        assert_eq!(judge.receive(line(3, 6, r)), Some(Verdict::Rejected));
    }

    /// Each name of a multi-lock is a resource of its own: a token is judged only against
    /// that name's.
    #[test]
    fn a_multilock_fences_each_name_apart() {
        let mut judge = Judge::of(Primitive::MultiLock { names: 3 });
        let named = |worker, token, name| WorkerLine {
            lock: Some(name),
            ..write(worker, token)
        };
        assert_eq!(judge.receive(named(1, 9, 'a')), Some(Verdict::Accepted));
        // Lower than a's 9, but b has seen nothing higher.
        assert_eq!(judge.receive(named(2, 5, 'b')), Some(Verdict::Accepted));
        assert_eq!(judge.receive(named(2, 6, 'a')), Some(Verdict::Rejected));
        assert_eq!(judge.receive(named(3, 4, 'b')), Some(Verdict::Rejected));
        assert_eq!(judge.receive(named(3, 7, 'b')), Some(Verdict::Accepted));
    }

    #[test]
    fn semaphore_holders_write_their_own_resources() {
        let mut judge = Judge::of(Primitive::Semaphore { permits: 2 });
        assert_eq!(judge.receive(write(1, 9)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(2, 8)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(2, 7)), Some(Verdict::Rejected));
    }

    /// An election's leaders write one resource with their terms: a deposed leader's
    /// lower term is refused.
    #[test]
    fn an_election_fences_a_deposed_leaders_term() {
        let mut judge = Judge::of(Primitive::Election);
        assert_eq!(judge.receive(write(1, 7)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(2, 8)), Some(Verdict::Accepted));
        assert_eq!(judge.receive(write(1, 7)), Some(Verdict::Rejected));
    }
}
