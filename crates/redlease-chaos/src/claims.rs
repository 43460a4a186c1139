//! Claims: what the workers' guards said they held, and where two of them broke the
//! primitive's rule.
//!
//! A worker sends, with each `BEGIN`, its guard's `valid_until` (see
//! [`WorkerLine::until`](crate::WorkerLine)), and again with a `CLAIM` now and then while
//! the runner keeps it inside: the guard claims the lock from that `BEGIN` until the latest
//! of them, or until the hold ends for the judge (its `REL`, sent before the release
//! request; its `LOST`; the worker's `KILL` or `BYE`), whichever comes first. A guard
//! whose `valid_until` is true (never later than the moment its lease ends in Redis)
//! makes claims that the next holder's cannot meet: the next grant comes after the lease
//! ended or was released, and the next `BEGIN` after the grant. So two claims that
//! intersect (more than N for a semaphore of N permits; a writer's with any other for a
//! read-write lock) are two holders who believed at once, fenced or not, whatever paused
//! whom. A worker's successive claims never meet each other: each ends with its hold.
//!
//! The judge's stamps and the claims are on one clock ([`crate::monotonic`], converted);
//! each claim begins at the judge's stamp of its `BEGIN`, a little after the worker read
//! its guard, so it is never longer than what the guard said.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use crate::event::{Event, Kind, Mode};
use crate::primitive::Primitive;

/// What [`judge`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claims {
    /// `BEGIN`s that carried a claim.
    pub(crate) made: usize,
    /// Claims that began while other workers' claims ran that the primitive's rule does
    /// not allow beside it.
    pub(crate) overlaps: usize,
    /// Claims already run out when their `BEGIN` was stamped: `acquire` returned a lease
    /// with no validity left.
    pub(crate) expired: usize,
}

/// One claim.
#[derive(Debug, Clone, Copy)]
struct Claim {
    worker: u32,
    /// The name of a multi-lock's lock the claim is about, else `None`.
    lane: Option<char>,
    mode: Mode,
    start: Duration,
    end: Duration,
}

impl Claim {
    /// The claim cut at `at` (the hold ended for the judge).
    fn cut(mut self, at: Duration) -> Self {
        self.end = self.end.min(at);
        self
    }
}

/// Reads the claims of a history (in the judge's order of receipt) of workers holding
/// `primitive`, and counts those that broke its rule.
pub(crate) fn judge(history: &[Event], primitive: Primitive) -> Claims {
    let mut found = Claims::default();
    let mut open: HashMap<(u32, Option<char>), Claim> = HashMap::new();
    let mut done: Vec<Claim> = Vec::new();
    // As in `check_as`: lines a killed worker wrote before it died but that arrived
    // after its `KILL` are no steps.
    let mut dead: HashSet<u32> = HashSet::new();
    for e in history {
        if dead.contains(&e.worker) {
            continue;
        }
        let lane = primitive.lane(e.lock);
        match e.kind {
            Kind::Begin => {
                let Some(until) = e.claimed_until else {
                    continue;
                };
                found.made += 1;
                if until <= e.at {
                    found.expired += 1;
                }
                let claim = Claim {
                    worker: e.worker,
                    lane,
                    mode: primitive.mode(e.mode),
                    start: e.at,
                    end: until,
                };
                if let Some(before) = open.insert((e.worker, lane), claim) {
                    done.push(before.cut(e.at));
                }
            }
            // Still inside, and the guard's claim moved on (renewals): it runs until then.
            // A claim lowered (a shortening extend), or run out, holds from this line on:
            // what the guard claimed before held until now, and from now on it claims less.
            Kind::Claim => {
                if let (Some(claim), Some(until)) =
                    (open.get_mut(&(e.worker, lane)), e.claimed_until)
                {
                    if until >= claim.end && until > e.at {
                        claim.end = until;
                    } else {
                        done.push(claim.cut(e.at));
                        claim.start = e.at;
                        claim.end = until;
                    }
                }
            }
            Kind::Release | Kind::Lost => {
                if let Some(claim) = open.remove(&(e.worker, lane)) {
                    done.push(claim.cut(e.at));
                }
            }
            Kind::Kill | Kind::Bye => {
                if e.kind == Kind::Kill {
                    dead.insert(e.worker);
                }
                let theirs: Vec<_> = open
                    .keys()
                    .filter(|&&(worker, _)| worker == e.worker)
                    .copied()
                    .collect();
                for key in theirs {
                    if let Some(claim) = open.remove(&key) {
                        done.push(claim.cut(e.at));
                    }
                }
            }
            _ => {}
        }
    }
    done.extend(open.into_values());
    done.retain(|c| c.end > c.start);
    done.sort_by_key(|c| c.start);
    // Any two claims that meet do so at the later one's start: judge each claim against
    // those running when it began.
    let mut running: Vec<Claim> = Vec::new();
    for claim in done {
        running.retain(|r| r.end > claim.start);
        let others: BTreeMap<u32, Mode> = running
            .iter()
            .filter(|r| r.lane == claim.lane)
            .map(|r| (r.worker, r.mode))
            .collect();
        if primitive.conflicts(claim.worker, Some(claim.mode), &others) {
            found.overlaps += 1;
        }
        running.push(claim);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn begin(ms: u64, worker: u32, until: u64) -> Event {
        Event::new(at(ms), Kind::Begin, worker, u64::from(worker)).claimed_until(at(until))
    }

    fn ev(ms: u64, kind: Kind, worker: u32) -> Event {
        Event::new(at(ms), kind, worker, u64::from(worker))
    }

    /// A holder whose claim outlives its release does not overlap the next holder: the
    /// release cuts it. Nor do a worker's own successive claims.
    #[test]
    fn a_release_ends_a_claim() {
        let h = vec![
            begin(0, 1, 1000),
            ev(10, Kind::Release, 1),
            begin(12, 2, 1012),
            ev(20, Kind::Release, 2),
            begin(21, 2, 1021),
            ev(30, Kind::Release, 2),
        ];
        let c = judge(&h, Primitive::Mutex);
        assert_eq!((c.made, c.overlaps, c.expired), (3, 0, 0));
    }

    /// A waiter that wakes from a pause believing it holds, while another holds: one
    /// overlap, whichever began first; a paused holder whose claim ran out before the next
    /// one began is none.
    #[test]
    fn two_believers_at_once_overlap() {
        let stale = vec![
            begin(0, 2, 1000),
            // Woken, with a fresh-looking lease the lock no longer backs.
            begin(500, 1, 1490),
            ev(510, Kind::Release, 1),
            ev(1000, Kind::Release, 2),
        ];
        assert_eq!(judge(&stale, Primitive::Mutex).overlaps, 1);
        let paused = vec![
            begin(0, 1, 990),
            ev(1, Kind::Pause, 1),
            begin(1005, 2, 2005),
            ev(1500, Kind::Resume, 1),
            ev(1510, Kind::Lost, 1),
            ev(1600, Kind::Release, 2),
        ];
        let c = judge(&paused, Primitive::Mutex);
        assert_eq!((c.made, c.overlaps), (2, 0));
    }

    /// A claim run out at entry is counted and overlaps nothing; a killed worker's claim
    /// ends with it.
    #[test]
    fn expired_and_killed_claims() {
        let h = vec![
            begin(0, 1, 1000),
            ev(5, Kind::Kill, 1),
            begin(6, 1, 900),
            begin(700, 2, 600),
            begin(701, 3, 1700),
        ];
        let c = judge(&h, Primitive::Mutex);
        assert_eq!((c.made, c.overlaps, c.expired), (3, 0, 1));
    }

    /// A holder kept inside renews its lease and says so: its claim runs on, and a waiter
    /// that wakes believing it holds overlaps it.
    #[test]
    fn a_renewed_claim_runs_on() {
        let h = vec![
            begin(0, 2, 1000),
            Event::new(at(900), Kind::Claim, 2, 2).claimed_until(at(1900)),
            begin(1500, 1, 2400),
            ev(1510, Kind::Release, 1),
            ev(2000, Kind::Release, 2),
        ];
        let c = judge(&h, Primitive::Mutex);
        assert_eq!((c.made, c.overlaps), (2, 1));
    }

    /// A claim lowered by a shortening extend holds from its line on: a next holder that
    /// begins after the lowered claim ended meets nothing; one that begins before it does.
    #[test]
    fn a_lowered_claim_ends_sooner() {
        let lowered = vec![
            begin(0, 1, 1000),
            Event::new(at(50), Kind::Claim, 1, 1).claimed_until(at(150)),
            begin(300, 2, 1300),
            ev(400, Kind::Release, 1),
            ev(500, Kind::Release, 2),
        ];
        assert_eq!(judge(&lowered, Primitive::Mutex).overlaps, 0);
        let kept = vec![
            begin(0, 1, 1000),
            Event::new(at(50), Kind::Claim, 1, 1).claimed_until(at(1000)),
            begin(300, 2, 1300),
            ev(400, Kind::Release, 1),
            ev(500, Kind::Release, 2),
        ];
        assert_eq!(judge(&kept, Primitive::Mutex).overlaps, 1);
        // A claim run out (no time left) is no raise, even above a lowered one.
        let ran_out = vec![
            begin(0, 1, 1000),
            Event::new(at(10), Kind::Claim, 1, 1).claimed_until(at(110)),
            begin(120, 2, 1120),
            Event::new(at(160), Kind::Claim, 1, 1).claimed_until(at(159)),
            ev(170, Kind::Release, 1),
            ev(500, Kind::Release, 2),
        ];
        assert_eq!(judge(&ran_out, Primitive::Mutex).overlaps, 0);
    }

    /// Semaphore of 2: two claims at once are fine, a third is an overlap; a read-write
    /// lock's readers share, a writer's claim with a reader's is an overlap; a multi-lock's
    /// names are apart.
    #[test]
    fn each_primitive_has_its_rule() {
        let three = vec![begin(0, 1, 100), begin(1, 2, 100), begin(2, 3, 100)];
        let sem = |permits| judge(&three, Primitive::Semaphore { permits }).overlaps;
        assert_eq!((sem(2), sem(3)), (1, 0));
        let rw = |worker, ms, mode| begin(ms, worker, 100).mode(mode);
        let readers = vec![rw(1, 0, Mode::Read), rw(2, 1, Mode::Read)];
        assert_eq!(judge(&readers, Primitive::RwLock).overlaps, 0);
        let writer = vec![rw(1, 0, Mode::Read), rw(2, 1, Mode::Write)];
        assert_eq!(judge(&writer, Primitive::RwLock).overlaps, 1);
        let multi = Primitive::MultiLock { names: 4 };
        let apart = vec![begin(0, 1, 100).lock('a'), begin(1, 2, 100).lock('b')];
        assert_eq!(judge(&apart, multi).overlaps, 0);
        let same = vec![begin(0, 1, 100).lock('a'), begin(1, 2, 100).lock('a')];
        assert_eq!(judge(&same, multi).overlaps, 1);
    }
}
