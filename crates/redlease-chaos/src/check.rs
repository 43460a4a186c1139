//! The checker: what a history says about safety, exclusion and timing.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;

use crate::event::{Event, Kind, Mode, Verdict};
use crate::liveness::{Liveness, measure_as};
use crate::primitive::Primitive;
use crate::stats::Percentiles;

/// What [`check`] found in a history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Critical sections completed (`END` events; for a multi-lock, the last `END` of a
    /// section, when its worker has left every name).
    pub sections: usize,
    /// Acquisitions (`ACQ` events: one per name for a multi-lock).
    pub acquisitions: usize,
    /// Faults injected by the runner (`KILL`, `PAUSE`, `FAULT` events).
    pub faults: usize,
    /// Writes accepted although their token was lower than one accepted before, or equal
    /// to it but from another holder (another worker): the fenced resource was fooled. A
    /// multi-lock has one fenced resource per name, written with that name's token.
    /// Must be 0 wherever redlease promises fenced safety.
    pub stale_accepted: usize,
    /// Writes the fenced resource refused (fencing caught a stale holder).
    pub stale_rejected: usize,
    /// `BEGIN`s that broke the primitive's exclusion given the workers between their
    /// `BEGIN` and `END` (and alive): for a mutex, another worker was inside; for a
    /// semaphore of N permits, N others were (a *capacity violation*: more than N
    /// holders); for a read-write lock, a writer began with anyone inside or a reader with a
    /// writer inside (a *writer overlap*); for a multi-lock, another worker was inside one
    /// of the names the `BEGIN` names. Unfenced exclusion was broken.
    pub overlaps: usize,
    /// Acquisitions whose token was not greater than every earlier acquisition's. For a
    /// semaphore or read-write lock, whose holders are granted concurrently and may report
    /// their acquisitions out of grant order: acquisitions whose token was not greater
    /// than that of every acquisition reported before the worker began to wait, or equal
    /// to an earlier one. For a multi-lock, per name: acquisitions of a name whose token was
    /// not greater than every earlier acquisition's of that name.
    pub tokens_backwards: usize,
    /// Departures from a model of the primitive fed with the `ACQ`/`REL`/`LOST`/`KILL`
    /// history: an acquisition the rule forbids given the workers still holding (no
    /// release, loss or death recorded), or a release by a worker that did not hold it (a
    /// release after the holder reported its loss is not one). For a mutex, the new holder
    /// replaces the old one in the model; a multi-lock is one mutex per name.
    pub mutex_violations: usize,
    /// `BEGIN`s that carried the guard's claim (its `valid_until` at entry; see
    /// `crate::claims`).
    pub claims: usize,
    /// Claims that broke the primitive's rule given the other workers' claims running when
    /// they began: two holders *believed* at once (for a semaphore of N permits, N + 1; for
    /// a read-write lock, a writer and anyone), whatever fencing caught. Claims end at
    /// their `valid_until` or with their hold, so a holder paused past its lease makes
    /// none: this is 0 wherever a guard's `valid_until` is true, data loss aside.
    pub claim_overlaps: usize,
    /// Claims already run out at entry: `acquire` returned a lease with no validity left.
    pub claims_expired: usize,
    /// The most workers seen inside their sections at once (N reached for a semaphore;
    /// readers sharing a read-write lock; multi-lock sections over disjoint names).
    pub most_inside: usize,
    /// Leases reported lost (`LOST` events: one per name for a multi-lock).
    pub lost: usize,
    /// Failed acquisitions (`ERR` events).
    pub errors: usize,
    /// From each `KILL` of a holder to the next `ACQ` by another worker (for a multi-lock,
    /// of a name the victim held).
    pub takeover: Percentiles,
    /// From each `RESUME` of a paused holder (holding when resumed) to its `LOST`.
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

    /// No two claims overlapping: what each guard said it held was true.
    pub fn is_truthful(&self) -> bool {
        self.claim_overlaps == 0
    }

    /// Fenced safety, no overlap of sections or claims, no departure from the mutex model:
    /// exclusion held even without fencing.
    pub fn is_safe(&self) -> bool {
        self.is_fenced_safe()
            && self.is_truthful()
            && self.overlaps == 0
            && self.mutex_violations == 0
    }
}

/// Checks a history of a mutex (in the judge's order of receipt).
pub fn check(history: &[Event]) -> Findings {
    check_as(history, Primitive::Mutex)
}

/// The lock an event concerns: `None` but for a multi-lock, whose every name is a lock
/// of its own.
type Lane = Option<char>;

/// Checks a history of workers holding `primitive` (in the judge's order of receipt).
///
/// For a [`Primitive::MultiLock`], each name is checked as a mutex of its own (exclusion,
/// the mutex model, tokens strictly increasing, one fenced resource), from the events that
/// name it; a worker's section counts once, when it has left every name.
#[expect(
    clippy::too_many_lines,
    reason = "one replay of the history, one arm per event"
)]
pub fn check_as(history: &[Event], primitive: Primitive) -> Findings {
    let mut f = Findings::default();
    // Fenced resources (see `Judge`): the highest accepted token and who wrote it, per
    // resource, and the highest write of a read-write lock.
    let mut highest: HashMap<(Lane, u32), (u64, u32)> = HashMap::new();
    let mut highest_write: Option<(u64, u32)> = None;
    // Workers between BEGIN and END, per lock.
    let mut inside: BTreeMap<Lane, BTreeMap<u32, Mode>> = BTreeMap::new();
    // The primitive's model: who holds each lock.
    let mut holders: BTreeMap<Lane, BTreeMap<u32, Mode>> = BTreeMap::new();
    // Holds (worker, lock, token) that ended in a reported loss: their release is
    // legitimate.
    let mut lost_holds: BTreeSet<(u32, Lane, u64)> = BTreeSet::new();
    let mut last_token: HashMap<Lane, u64> = HashMap::new();
    // Concurrent grants: every token seen, and per worker the highest token reported
    // before its last WAIT (its grant came after theirs).
    let mut seen: HashSet<(Lane, u64)> = HashSet::new();
    let mut floor: HashMap<u32, u64> = HashMap::new();
    // Pending measurements: killed holder -> kill time and the locks it held; paused
    // worker -> resume time.
    let mut killed: Vec<(u32, Duration, Vec<Lane>)> = Vec::new();
    let mut resumed: HashMap<u32, Duration> = HashMap::new();
    // Workers paused while they held (detection is measured for them: a paused waiter
    // has nothing to lose).
    let mut paused_holders: HashSet<u32> = HashSet::new();
    let (mut takeovers, mut detections) = (Vec::new(), Vec::new());
    // Workers killed so far. The runner records a `Kill` before it sends the signal, so a
    // line the worker wrote just before it died (the second `Begin` of a multi-lock's
    // two names, say) can still arrive after it: such a line is no step of a live
    // process, and counting it would leave the dead worker inside (and holding) forever.
    // Its writes are still judged: the fenced resource saw them.
    let mut dead: HashSet<u32> = HashSet::new();
    for e in history {
        if dead.contains(&e.worker) && !matches!(e.kind, Kind::Write | Kind::Kill) {
            continue;
        }
        let lane = primitive.lane(e.lock);
        match e.kind {
            Kind::Acquire => {
                f.acquisitions += 1;
                let last = last_token.get(&lane).copied();
                let backwards = match primitive {
                    Primitive::Mutex | Primitive::Election | Primitive::MultiLock { .. } => {
                        last.is_some_and(|t| e.token <= t)
                    }
                    Primitive::Semaphore { .. } | Primitive::RwLock => {
                        floor.get(&e.worker).is_some_and(|&t| e.token <= t)
                            || seen.contains(&(lane, e.token))
                    }
                };
                if backwards {
                    f.tokens_backwards += 1;
                }
                seen.insert((lane, e.token));
                last_token.insert(lane, last.map_or(e.token, |t| t.max(e.token)));
                let holding = holders.entry(lane).or_default();
                if primitive.conflicts(e.worker, e.mode, holding) {
                    f.mutex_violations += 1;
                }
                if matches!(
                    primitive,
                    Primitive::Mutex | Primitive::Election | Primitive::MultiLock { .. }
                ) {
                    holding.clear();
                }
                holding.insert(e.worker, primitive.mode(e.mode));
                killed.retain(|(victim, at, lanes)| {
                    if *victim == e.worker || !(lanes.is_empty() || lanes.contains(&lane)) {
                        return true;
                    }
                    takeovers.push(e.at.saturating_sub(*at));
                    false
                });
            }
            Kind::Begin => {
                let here = inside.entry(lane).or_default();
                if primitive.conflicts(e.worker, e.mode, here) {
                    f.overlaps += 1;
                }
                here.insert(e.worker, primitive.mode(e.mode));
                let workers: BTreeSet<u32> =
                    inside.values().flat_map(|m| m.keys()).copied().collect();
                f.most_inside = f.most_inside.max(workers.len());
            }
            Kind::Write => match e.verdict {
                Some(Verdict::Accepted) => {
                    let resource = match primitive {
                        Primitive::Semaphore { .. } => (lane, e.worker),
                        Primitive::Mutex
                        | Primitive::Election
                        | Primitive::RwLock
                        | Primitive::MultiLock { .. } => (lane, 0),
                    };
                    let mode = primitive.mode(e.mode);
                    let against = match mode {
                        Mode::Write => highest.get(&resource).copied(),
                        Mode::Read => highest_write,
                    };
                    if let Some((token, writer)) = against
                        && (e.token < token || (e.token == token && e.worker != writer))
                    {
                        f.stale_accepted += 1;
                    }
                    let top = highest.entry(resource).or_insert((e.token, e.worker));
                    if e.token >= top.0 {
                        *top = (e.token, e.worker);
                    }
                    if mode == Mode::Write && highest_write.is_none_or(|(t, _)| e.token >= t) {
                        highest_write = Some((e.token, e.worker));
                    }
                }
                Some(Verdict::Rejected) => f.stale_rejected += 1,
                None => {}
            },
            Kind::End => {
                if let Some(here) = inside.get_mut(&lane) {
                    here.remove(&e.worker);
                }
                // A section ends when its worker has left every lock.
                if !inside.values().any(|m| m.contains_key(&e.worker)) {
                    f.sections += 1;
                }
            }
            Kind::Release => {
                let held = holders
                    .get_mut(&lane)
                    .and_then(|m| m.remove(&e.worker))
                    .is_some();
                if !held && !lost_holds.remove(&(e.worker, lane, e.token)) {
                    f.mutex_violations += 1;
                }
            }
            Kind::Lost => {
                f.lost += 1;
                if holders
                    .get_mut(&lane)
                    .and_then(|m| m.remove(&e.worker))
                    .is_some()
                {
                    lost_holds.insert((e.worker, lane, e.token));
                }
                if let Some(at) = resumed.remove(&e.worker) {
                    detections.push(e.at.saturating_sub(at));
                }
            }
            Kind::Error => f.errors += 1,
            Kind::Kill => {
                f.faults += 1;
                dead.insert(e.worker);
                for here in inside.values_mut() {
                    here.remove(&e.worker);
                }
                let mut lanes = Vec::new();
                for (&lane, holding) in &mut holders {
                    if holding.remove(&e.worker).is_some() {
                        lanes.push(lane);
                    }
                }
                killed.push((e.worker, e.at, lanes));
            }
            Kind::Pause => {
                f.faults += 1;
                if holders.values().any(|m| m.contains_key(&e.worker)) {
                    paused_holders.insert(e.worker);
                }
            }
            Kind::Fault => f.faults += 1,
            Kind::Wait => {
                if let Some(&t) = last_token.get(&lane) {
                    floor.insert(e.worker, t);
                }
            }
            // (A `CLAIM` is judged by `crate::claims`.)
            Kind::Timeout | Kind::Cancel | Kind::Bye | Kind::Down | Kind::Up | Kind::Claim => {}
            Kind::Resume => {
                if paused_holders.remove(&e.worker) {
                    resumed.insert(e.worker, e.at);
                }
            }
        }
    }
    f.undetected = resumed.len();
    f.takeover = Percentiles::of(&takeovers);
    f.detect = Percentiles::of(&detections);
    f.liveness = measure_as(history, primitive);
    let claims = crate::claims::judge(history, primitive);
    f.claims = claims.made;
    f.claim_overlaps = claims.overlaps;
    f.claims_expired = claims.expired;
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

    fn rw(ms: u64, kind: Kind, worker: u32, token: u64, mode: Mode) -> Event {
        Event::new(at(ms), kind, worker, token).mode(mode)
    }

    /// Two permit holders inside at once are fine; a third is a capacity violation.
    #[test]
    fn a_semaphore_admits_n_holders_and_flags_one_more() {
        let sem = Primitive::Semaphore { permits: 2 };
        let mut h = vec![
            Event::new(at(0), Kind::Wait, 1, 0),
            Event::new(at(0), Kind::Wait, 2, 0),
            Event::new(at(0), Kind::Wait, 3, 0),
            // Granted 5 then 6, reported in the other order: concurrent grants.
            Event::new(at(1), Kind::Acquire, 2, 6),
            Event::new(at(2), Kind::Acquire, 1, 5),
            Event::new(at(3), Kind::Begin, 1, 5),
            Event::new(at(4), Kind::Begin, 2, 6),
            Event::new(at(5), Kind::Write, 1, 5).verdict(Verdict::Accepted),
            Event::new(at(6), Kind::Write, 2, 6).verdict(Verdict::Accepted),
        ];
        let two = check_as(&h, sem);
        assert!(two.is_safe(), "{two:?}");
        assert_eq!(two.most_inside, 2);
        assert!(!check(&h).is_safe(), "a mutex would have overlapped");
        h.extend([
            Event::new(at(7), Kind::Acquire, 3, 7),
            Event::new(at(8), Kind::Begin, 3, 7),
        ]);
        let three = check_as(&h, sem);
        assert_eq!(
            (three.overlaps, three.mutex_violations),
            (1, 1),
            "{three:?}"
        );
        assert_eq!(three.most_inside, 3);
        assert!(!three.is_safe());
    }

    /// A token at or below one reported before its holder began to wait, or one seen
    /// before, goes backwards; out-of-order reports of concurrent grants do not.
    #[test]
    fn concurrent_grants_may_be_reported_out_of_order_but_not_reused() {
        let sem = Primitive::Semaphore { permits: 2 };
        let h = vec![
            Event::new(at(0), Kind::Wait, 1, 0),
            Event::new(at(0), Kind::Wait, 2, 0),
            Event::new(at(1), Kind::Acquire, 2, 6),
            Event::new(at(2), Kind::Acquire, 1, 5),
            Event::new(at(3), Kind::Release, 1, 5),
            Event::new(at(4), Kind::Wait, 1, 0),
            // Granted after 6 was reported: must be above it.
            Event::new(at(5), Kind::Acquire, 1, 6),
        ];
        let f = check_as(&h, sem);
        assert_eq!(f.tokens_backwards, 1, "{f:?}");
        let mut ok = h.clone();
        ok[6] = Event::new(at(5), Kind::Acquire, 1, 7);
        assert_eq!(check_as(&ok, sem).tokens_backwards, 0);
    }

    /// Readers overlap freely; a writer with a reader inside, or a reader with the writer
    /// inside, is a writer overlap.
    #[test]
    fn a_rwlock_shares_reads_and_flags_writer_overlaps() {
        let (r, w) = (Mode::Read, Mode::Write);
        let readers = vec![
            rw(0, Kind::Acquire, 1, 5, r),
            rw(1, Kind::Acquire, 2, 6, r),
            rw(2, Kind::Begin, 1, 5, r),
            rw(3, Kind::Begin, 2, 6, r),
            rw(4, Kind::Write, 2, 6, r).verdict(Verdict::Accepted),
            rw(5, Kind::Write, 1, 5, r).verdict(Verdict::Accepted),
            rw(6, Kind::End, 1, 5, r),
            rw(7, Kind::End, 2, 6, r),
            rw(8, Kind::Release, 1, 5, r),
            rw(9, Kind::Release, 2, 6, r),
            rw(10, Kind::Acquire, 3, 7, w),
            rw(11, Kind::Begin, 3, 7, w),
            rw(12, Kind::Write, 3, 7, w).verdict(Verdict::Accepted),
        ];
        let f = check_as(&readers, Primitive::RwLock);
        assert!(f.is_safe(), "{f:?}");
        assert_eq!(f.most_inside, 2, "readers overlapped");
        // A reader comes in while the writer is inside.
        let mut reader_in = readers.clone();
        reader_in.extend([rw(13, Kind::Acquire, 1, 8, r), rw(14, Kind::Begin, 1, 8, r)]);
        let f = check_as(&reader_in, Primitive::RwLock);
        assert_eq!((f.overlaps, f.mutex_violations), (1, 1), "{f:?}");
        // A writer comes in while a reader is inside.
        let mut writer_in = readers[..4].to_vec();
        writer_in.extend([rw(5, Kind::Acquire, 3, 7, w), rw(6, Kind::Begin, 3, 7, w)]);
        let f = check_as(&writer_in, Primitive::RwLock);
        assert_eq!((f.overlaps, f.mutex_violations), (1, 1), "{f:?}");
    }

    /// A stale read (a reader older than a write) the resource accepted is counted.
    #[test]
    fn a_rwlock_stale_read_accepted_is_counted() {
        let (r, w) = (Mode::Read, Mode::Write);
        let h = vec![
            rw(0, Kind::Write, 3, 7, w).verdict(Verdict::Accepted),
            rw(1, Kind::Write, 1, 6, r).verdict(Verdict::Accepted),
            rw(2, Kind::Write, 2, 8, r).verdict(Verdict::Accepted),
        ];
        let f = check_as(&h, Primitive::RwLock);
        assert_eq!(f.stale_accepted, 1, "{f:?}");
    }

    fn named(ms: u64, kind: Kind, worker: u32, token: u64, name: char) -> Event {
        Event::new(at(ms), kind, worker, token).lock(name)
    }

    /// One multi-lock section of `worker` over `names` (with their tokens), all steps at
    /// `start`.., one event per name.
    fn multi(start: u64, worker: u32, names: &[(char, u64)]) -> Vec<Event> {
        let mut h = Vec::new();
        for (step, kind) in [
            Kind::Acquire,
            Kind::Begin,
            Kind::Write,
            Kind::End,
            Kind::Release,
        ]
        .into_iter()
        .enumerate()
        {
            for &(name, token) in names {
                let e = named(start + step as u64, kind, worker, token, name);
                h.push(if kind == Kind::Write {
                    e.verdict(Verdict::Accepted)
                } else {
                    e
                });
            }
        }
        h
    }

    const MULTI: Primitive = Primitive::MultiLock { names: 4 };

    /// Sections over disjoint names run together; one sharing a name with a section still
    /// inside is an overlap (and an acquisition of a held name a mutex violation).
    #[test]
    fn a_multilock_excludes_per_name() {
        // {a, b} and {c, d} interleaved: no name shared.
        let mut h = Vec::new();
        for (x, y) in
            multi(0, 1, &[('a', 1), ('b', 1)])
                .into_iter()
                .zip(multi(0, 2, &[('c', 1), ('d', 1)]))
        {
            h.extend([x, y]);
        }
        h.extend(multi(10, 3, &[('b', 2), ('c', 2)]));
        let f = check_as(&h, MULTI);
        assert!(f.is_safe(), "{f:?}");
        assert_eq!((f.sections, f.most_inside), (3, 2), "{f:?}");
        assert!(!check(&h).is_safe(), "one lock would have overlapped");
        // {b, c} while 1 still holds {a, b} and is inside.
        let mut clash = multi(20, 1, &[('a', 3), ('b', 3)])[..4].to_vec();
        clash.extend(multi(30, 3, &[('c', 4), ('b', 4)])[..4].to_vec());
        let f = check_as(&clash, MULTI);
        assert_eq!((f.overlaps, f.mutex_violations), (1, 1), "{f:?}");
        // The same with {c, d}: none.
        let mut apart = multi(20, 1, &[('a', 3), ('b', 3)])[..4].to_vec();
        apart.extend(multi(30, 3, &[('c', 4), ('d', 4)])[..4].to_vec());
        let f = check_as(&apart, MULTI);
        assert!(f.is_safe(), "{f:?}");
    }

    /// A line a killed worker wrote before it died but that arrived after its `Kill` was
    /// recorded (the second name's `Begin`) leaves it neither inside nor holding.
    #[test]
    fn lines_of_a_killed_worker_arriving_after_its_kill_are_not_steps() {
        let mut h = multi(0, 1, &[('a', 1), ('b', 1)])[..3].to_vec();
        h.push(Event::new(at(3), Kind::Kill, 1, 0));
        h.push(named(4, Kind::Begin, 1, 1, 'b'));
        h.extend(multi(1000, 2, &[('b', 2), ('c', 2)]));
        h.extend(multi(1010, 3, &[('a', 3), ('b', 3)]));
        let f = check_as(&h, MULTI);
        assert!(f.is_safe(), "{f:?}");
        assert_eq!((f.overlaps, f.most_inside, f.faults), (0, 1, 1), "{f:?}");
        // Before its Kill the same Begin counts: 2 takes b while 1 is inside.
        let mut h = multi(0, 1, &[('a', 1), ('b', 1)])[..4].to_vec();
        h.extend(multi(1000, 2, &[('b', 2), ('c', 2)]));
        assert!(!check_as(&h, MULTI).is_safe());
    }

    /// Tokens strictly increase per name, not across names; a stale write is judged
    /// against its own name's resource.
    #[test]
    fn a_multilock_orders_tokens_and_writes_per_name() {
        let mut h = multi(0, 1, &[('a', 5), ('b', 9)]);
        // a: 5 then 6 is fine although b has seen 9.
        h.extend(multi(10, 2, &[('a', 6), ('c', 1)]));
        let f = check_as(&h, MULTI);
        assert!(f.is_safe(), "{f:?}");
        // b: 9 then 8 goes backwards.
        h.extend(multi(20, 3, &[('b', 8), ('d', 2)]));
        let f = check_as(&h, MULTI);
        assert_eq!(f.tokens_backwards, 1, "{f:?}");
        // A write to a with 5 after 6 was accepted there: stale; to d with 2 again, by
        // the worker that wrote it: not.
        let stale = vec![
            named(0, Kind::Write, 1, 6, 'a').verdict(Verdict::Accepted),
            named(1, Kind::Write, 1, 2, 'd').verdict(Verdict::Accepted),
            named(2, Kind::Write, 2, 5, 'a').verdict(Verdict::Accepted),
            named(3, Kind::Write, 1, 2, 'd').verdict(Verdict::Accepted),
            named(4, Kind::Write, 3, 3, 'b').verdict(Verdict::Accepted),
        ];
        let f = check_as(&stale, MULTI);
        assert_eq!(f.stale_accepted, 1, "{f:?}");
    }

    /// A takeover after a killed multi-lock holder is the next acquisition of one of its
    /// names, not of another name.
    #[test]
    fn a_multilock_takeover_is_of_the_victims_names() {
        let mut h = multi(0, 1, &[('a', 1), ('b', 1)])[..4].to_vec();
        h.extend([
            Event::new(at(10), Kind::Kill, 1, 0),
            named(20, Kind::Acquire, 2, 1, 'c'),
            named(21, Kind::Acquire, 2, 1, 'd'),
            named(1010, Kind::Acquire, 3, 2, 'b'),
        ]);
        let f = check_as(&h, MULTI);
        assert_eq!(f.takeover.p50, Some(at(1000)), "{f:?}");
        assert!(f.is_safe(), "{f:?}");
    }

    /// Terms of an election: a leader deposed while paused (its lease ran out) is overlapped
    /// by the next one, which is an overlap and a mutex violation as two holders of a lock
    /// are; its stale write, once it wakes, is rejected (or counted when accepted); a term
    /// not above the last one goes backwards. Leaders one after the other are fine.
    #[test]
    fn an_election_is_a_mutex_over_the_leadership() {
        let mut h = section(0, 1, 1, Verdict::Accepted);
        h.extend(section(10, 2, 2, Verdict::Accepted));
        let f = check_as(&h, Primitive::Election);
        assert!(f.is_safe(), "{f:?}");
        let deposed = |stale| {
            vec![
                Event::new(at(0), Kind::Acquire, 1, 7),
                Event::new(at(1), Kind::Begin, 1, 7),
                Event::new(at(2), Kind::Pause, 1, 0),
                Event::new(at(1500), Kind::Acquire, 2, 8),
                Event::new(at(1501), Kind::Begin, 2, 8),
                Event::new(at(1502), Kind::Write, 2, 8).verdict(Verdict::Accepted),
                Event::new(at(1600), Kind::Resume, 1, 0),
                Event::new(at(1601), Kind::Write, 1, 7).verdict(stale),
                Event::new(at(1602), Kind::Lost, 1, 7),
                Event::new(at(1603), Kind::End, 1, 7),
                Event::new(at(1604), Kind::End, 2, 8),
                Event::new(at(1605), Kind::Release, 2, 8),
            ]
        };
        let f = check_as(&deposed(Verdict::Rejected), Primitive::Election);
        assert_eq!((f.overlaps, f.mutex_violations), (1, 1), "{f:?}");
        assert_eq!((f.stale_rejected, f.stale_accepted), (1, 0), "{f:?}");
        assert_eq!((f.undetected, f.detect.p50), (0, Some(at(2))), "{f:?}");
        assert!(f.is_fenced_safe() && !f.is_safe(), "{f:?}");
        let f = check_as(&deposed(Verdict::Accepted), Primitive::Election);
        assert_eq!(f.stale_accepted, 1, "{f:?}");
        let mut again = section(0, 1, 5, Verdict::Accepted);
        again.extend(section(10, 2, 5, Verdict::Accepted));
        let f = check_as(&again, Primitive::Election);
        assert_eq!(f.tokens_backwards, 1, "a term not above the last: {f:?}");
    }
}
