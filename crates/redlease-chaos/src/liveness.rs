//! Liveness of a history: *stalls* (the lock free of any live holder while a worker wants
//! it) and *wait overruns* (waits that ended well past their bound).
//!
//! The history cannot see Redis, so "held by a token nobody holds" (an orphan left by a
//! cancelled attempt, a release that never happened) and "free, but nobody took it" look
//! the same: no worker between `ACQ` and `REL`/`LOST`, while another wants the lock. Both
//! are stalls.
//!
//! Exactly, replaying the events in the judge's order, each at the time it happened: a
//! worker's when the worker sent it ([`Event::time`]: both are readings of one clock, so
//! a judge that did not run for a while, on a loaded machine, does not lengthen a stall by
//! stamping the lines that waited meanwhile late; that lag is reported apart, as
//! [`Liveness::judge_lag`]), the runner's when the judge recorded it:
//! - a worker **holds** from its `ACQ` to its `REL`, `LOST`, `KILL` or `BYE`;
//! - a worker **wants** the lock from its `WAIT` to its `ACQ`, `KILL` or `BYE`; a wait that
//!   ends in `TIMEOUT`, `ERR` or `CANCEL` does not end the want, since every worker loops
//!   straight into its next wait (or sleeps 20 ms after an error);
//! - a **stall** is a maximal interval during which nobody holds and somebody wants; its
//!   length is that interval minus the time Redis was down on purpose (between the runner's
//!   `DOWN` and `UP`: nothing can be acquired from a dead server, so only the time it takes
//!   to come back into service after `UP` counts);
//! - a stall that begins after the last holder was killed with SIGKILL (`KILL` while it held, no
//!   `ACQ` since) is **after a death**: its lease had to run out, so up to one ttl is
//!   expected; those are counted apart;
//! - for a **semaphore** of N permits ([`measure_as`]), "nobody holds" becomes "fewer than N
//!   hold": a stall is a maximal interval during which fewer than N workers hold and
//!   somebody wants a permit. A killed holder's permit is *dead* until an acquisition
//!   shows it came back (more live holders than the permits not dead); a stall that
//!   begins while dead permits make up the shortfall is after a death;
//! - for a **read-write lock** a stall stays "nobody holds while someone waits" (a writer
//!   waiting behind readers, or readers behind a queued writer, is not one); a killed
//!   holder's hold is dead until an acquisition it would have kept out (any, after a dead
//!   writer; a write, after a dead reader);
//! - for a **multi-lock** a stall is "nobody holds any name while someone waits" (not
//!   per name: a worker announces one wait for all its names and takes them one by one in
//!   sorted order, holding the first while it waits for the second, so the history cannot
//!   tell when it began to want each name); a worker holds from its first `ACQ` until it
//!   has released or lost every name; a killed holder's names are dead until each is
//!   acquired again;
//! - a **wait overrun** is a wait (`WAIT` → `ACQ`/`TIMEOUT`/`ERR`/`CANCEL` of that worker)
//!   that lasted more than [`LIMIT`] past the bound its `WAIT` carried.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;

use crate::event::{Event, Kind, Mode};
use crate::primitive::Primitive;

/// The liveness target's slack: no stall longer than this (unless a holder died), no wait
/// ending later than this past its bound.
pub const LIMIT: Duration = Duration::from_millis(100);

/// How many stalls longer than [`LIMIT`] a [`Liveness`] lists.
const LISTED: usize = 20;

/// One stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stall {
    /// When it began (judge's clock).
    pub at: Duration,
    /// How long it lasted, outages excluded.
    pub length: Duration,
    /// It began after the holder was killed with SIGKILL (nobody acquired since).
    pub after_death: bool,
    /// Redis was down during part of it (that part is not in `length`).
    pub outage: bool,
}

/// What [`measure`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Liveness {
    /// Stalls of any length, deaths excluded (every hand-off is one, of a millisecond or
    /// so).
    pub stalls: usize,
    /// The longest of them.
    pub longest: Option<Duration>,
    /// How many of them lasted longer than [`LIMIT`].
    pub over_limit: usize,
    /// Stalls after a holder's death.
    pub after_death: usize,
    /// The longest of those (at most one ttl is expected).
    pub longest_after_death: Option<Duration>,
    /// Waits that ended (`ACQ`, `TIMEOUT`, `ERR` or `CANCEL` after a `WAIT`).
    pub waits: usize,
    /// Waits that ended more than [`LIMIT`] past their bound.
    pub overruns: usize,
    /// Waits that ended with `TIMEOUT` (their bound passed without the lock).
    pub timed_out: usize,
    /// The largest amount by which a wait passed its bound (overruns or not), if any did.
    pub worst_overrun: Option<Duration>,
    /// The first stalls longer than [`LIMIT`], deaths included, in order.
    pub long: Vec<Stall>,
    /// The longest a worker's line waited before the judge stamped it (pipe, and the
    /// judge's process not running on a loaded machine); the measures above date worker
    /// events from their sending, so this lag is not in them.
    pub judge_lag: Option<Duration>,
}

impl Liveness {
    /// The target met: no stall longer than [`LIMIT`] except after a death, none after a
    /// death longer than `ttl` + [`LIMIT`], no wait ended more than [`LIMIT`] past its
    /// bound.
    pub fn meets_target(&self, ttl: Duration) -> bool {
        self.over_limit == 0
            && self.overruns == 0
            && self.longest_after_death.is_none_or(|d| d <= ttl + LIMIT)
    }
}

/// A stall under way.
#[derive(Clone, Copy)]
struct Open {
    at: Duration,
    length: Duration,
    /// Up to when `length` was accrued.
    counted_to: Duration,
    after_death: bool,
    outage: bool,
}

/// Measures the liveness of a history of a mutex (in the judge's order of receipt).
pub fn measure(history: &[Event]) -> Liveness {
    measure_as(history, Primitive::Mutex)
}

/// Measures the liveness of a history of workers holding `primitive` (in the judge's
/// order of receipt).
#[expect(
    clippy::too_many_lines,
    reason = "one replay of the history, one arm per event"
)]
pub fn measure_as(history: &[Event], primitive: Primitive) -> Liveness {
    let capacity = primitive.capacity();
    let mut l = Liveness::default();
    // Per worker and lock (the name of a multi-lock's, else `None`).
    let mut holding: HashMap<(u32, Option<char>), Mode> = HashMap::new();
    let mut wanting: BTreeSet<u32> = BTreeSet::new();
    let mut waits: HashMap<u32, (Duration, Duration)> = HashMap::new();
    let mut down = 0usize;
    // Holds of killed workers not yet shown to be back.
    let mut dead: Vec<(Mode, Option<char>)> = Vec::new();
    let mut open: Option<Open> = None;
    // When the events happened, kept from going back (runner events are stamped by the
    // judge, worker events are dated from their sending: see `Event::time`).
    let mut clock = Duration::ZERO;
    for e in history {
        // The lock the event concerns: one of a multi-lock's names, else the only one.
        let lock = primitive.lane(e.lock);
        let now = e.time().max(clock);
        clock = now;
        if let Some(sent) = e.sent {
            l.judge_lag = l.judge_lag.max(Some(e.at.saturating_sub(sent)));
        }
        if let Some(stall) = &mut open {
            if down == 0 {
                stall.length += now.saturating_sub(stall.counted_to);
            }
            stall.counted_to = now;
        }
        match e.kind {
            Kind::Wait => {
                wanting.insert(e.worker);
                waits.insert(e.worker, (now, e.bound.unwrap_or(Duration::MAX)));
            }
            Kind::Acquire => {
                end_wait(&mut waits, e.worker, now, &mut l);
                wanting.remove(&e.worker);
                let mode = primitive.mode(e.mode);
                holding.insert((e.worker, lock), mode);
                match primitive {
                    Primitive::Mutex | Primitive::Election => dead.clear(),
                    Primitive::MultiLock { .. } => dead.retain(|&(_, name)| name != lock),
                    Primitive::Semaphore { .. } => {
                        while !dead.is_empty() && holding.len() + dead.len() > capacity {
                            dead.pop();
                        }
                    }
                    Primitive::RwLock if mode == Mode::Write => dead.clear(),
                    Primitive::RwLock => dead.retain(|&(m, _)| m == Mode::Read),
                }
            }
            Kind::Timeout => {
                l.timed_out += 1;
                end_wait(&mut waits, e.worker, now, &mut l);
            }
            Kind::Error | Kind::Cancel => end_wait(&mut waits, e.worker, now, &mut l),
            Kind::Release | Kind::Lost => {
                holding.remove(&(e.worker, lock));
            }
            Kind::Kill => {
                waits.remove(&e.worker);
                wanting.remove(&e.worker);
                holding.retain(|&(worker, name), &mut mode| {
                    if worker == e.worker {
                        dead.push((mode, name));
                    }
                    worker != e.worker
                });
            }
            Kind::Bye => {
                waits.remove(&e.worker);
                wanting.remove(&e.worker);
                holding.retain(|&(worker, _), _| worker != e.worker);
            }
            Kind::Down => {
                down += 1;
                if let Some(stall) = &mut open {
                    stall.outage = true;
                }
            }
            Kind::Up => down = down.saturating_sub(1),
            Kind::Begin
            | Kind::Claim
            | Kind::Write
            | Kind::End
            | Kind::Pause
            | Kind::Resume
            | Kind::Fault => {}
        }
        let stalled = holding.len() < capacity && !wanting.is_empty();
        // A stall that began without a death (a permit between two holders) and that a
        // dead holder's lease keeps open now (the free permit was taken, the dead one is
        // not): it is waited out like one that began after the death.
        if let Some(stall) = &mut open
            && stalled
            && !dead.is_empty()
            && holding.len() + dead.len() >= capacity
        {
            stall.after_death = true;
        }
        match (&mut open, stalled) {
            (Some(_), false) => {
                if let Some(stall) = open.take() {
                    close(stall, &mut l);
                }
            }
            (None, true) => {
                open = Some(Open {
                    at: now,
                    length: Duration::ZERO,
                    counted_to: now,
                    after_death: !dead.is_empty() && holding.len() + dead.len() >= capacity,
                    outage: down > 0,
                });
            }
            _ => {}
        }
    }
    if let Some(stall) = open.take() {
        close(stall, &mut l);
    }
    l
}

/// Ends `worker`'s wait at `now`, if it had one, and judges its length against its bound.
fn end_wait(
    waits: &mut HashMap<u32, (Duration, Duration)>,
    worker: u32,
    now: Duration,
    l: &mut Liveness,
) {
    let Some((start, bound)) = waits.remove(&worker) else {
        return;
    };
    l.waits += 1;
    let past = now.saturating_sub(start).checked_sub(bound);
    if let Some(past) = past.filter(|p| !p.is_zero()) {
        l.worst_overrun = l.worst_overrun.max(Some(past));
        if past > LIMIT {
            l.overruns += 1;
        }
    }
}

/// Counts a finished stall.
fn close(stall: Open, l: &mut Liveness) {
    let s = Stall {
        at: stall.at,
        length: stall.length,
        after_death: stall.after_death,
        outage: stall.outage,
    };
    if s.after_death {
        l.after_death += 1;
        l.longest_after_death = l.longest_after_death.max(Some(s.length));
    } else {
        l.stalls += 1;
        l.longest = l.longest.max(Some(s.length));
        if s.length > LIMIT {
            l.over_limit += 1;
        }
    }
    if s.length > LIMIT && l.long.len() < LISTED {
        l.long.push(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn ev(ms: u64, kind: Kind, worker: u32) -> Event {
        Event::new(at(ms), kind, worker, u64::from(worker))
    }

    fn wait(ms: u64, worker: u32, bound: u64) -> Event {
        ev(ms, Kind::Wait, worker).bound(at(bound))
    }

    #[test]
    fn prompt_hand_offs_are_short_stalls() {
        let h = vec![
            wait(0, 1, 2000),
            ev(1, Kind::Acquire, 1),
            wait(2, 2, 2000),
            ev(10, Kind::Release, 1),
            ev(12, Kind::Acquire, 2),
            ev(20, Kind::Release, 2),
            ev(21, Kind::Bye, 1),
            ev(22, Kind::Bye, 2),
        ];
        let l = measure(&h);
        assert_eq!(l.stalls, 2, "{l:?}");
        assert_eq!(l.longest, Some(at(2)));
        assert_eq!((l.over_limit, l.overruns, l.waits), (0, 0, 2));
        assert!(l.meets_target(at(1000)));
    }

    /// A release that never reached Redis (its future dropped): the lock sits with a
    /// token nobody holds while the other worker keeps waiting, timing out and waiting
    /// again, until the lease expires.
    #[test]
    fn an_orphaned_lease_is_one_long_stall_across_retries() {
        let h = vec![
            wait(0, 1, 500),
            ev(1, Kind::Acquire, 1),
            wait(2, 2, 500),
            ev(10, Kind::Release, 1),
            ev(502, Kind::Timeout, 2),
            wait(503, 2, 500),
            ev(1010, Kind::Acquire, 2),
            ev(1020, Kind::Release, 2),
        ];
        let l = measure(&h);
        assert_eq!(l.stalls, 2, "the first wait, then the orphan: {l:?}");
        assert_eq!(l.longest, Some(at(1000)));
        assert_eq!(l.over_limit, 1);
        assert_eq!(l.after_death, 0);
        assert_eq!(l.long.first().map(|s| s.at), Some(at(10)));
        assert!(!l.meets_target(at(1000)));
    }

    /// The judge stamps two lines 140 ms late (it did not run): the stall is measured from
    /// when they were sent, and the lag is reported.
    #[test]
    fn a_judge_that_did_not_run_does_not_stretch_a_stall() {
        let h = vec![
            wait(0, 2, 2000).sent(at(0)),
            ev(1, Kind::Acquire, 1).sent(at(1)),
            ev(10, Kind::Release, 1).sent(at(10)),
            ev(152, Kind::Wait, 1).sent(at(11)),
            ev(152, Kind::Acquire, 2).sent(at(12)),
        ];
        let l = measure(&h);
        assert_eq!((l.longest, l.over_limit), (Some(at(2)), 0), "{l:?}");
        assert_eq!(l.judge_lag, Some(at(141)));
        assert_eq!(l.waits, 1, "2's wait ended after 12 ms: {l:?}");
        assert_eq!(l.worst_overrun, None);
    }

    #[test]
    fn nobody_waiting_is_no_stall() {
        let h = vec![
            ev(0, Kind::Acquire, 1),
            ev(10, Kind::Release, 1),
            wait(900, 2, 500),
            ev(901, Kind::Acquire, 2),
        ];
        let l = measure(&h);
        assert_eq!((l.stalls, l.longest), (1, Some(at(1))), "{l:?}");
        assert!(l.meets_target(at(1000)));
    }

    #[test]
    fn a_killed_holder_is_allowed_one_ttl() {
        let h = vec![
            ev(0, Kind::Acquire, 1),
            wait(1, 2, 5000),
            ev(5, Kind::Kill, 1),
            ev(1004, Kind::Acquire, 2),
            ev(1010, Kind::Release, 2),
        ];
        let l = measure(&h);
        assert_eq!((l.stalls, l.after_death), (0, 1), "{l:?}");
        assert_eq!(l.longest_after_death, Some(at(999)));
        assert!(l.long.first().is_some_and(|s| s.after_death));
        assert!(l.meets_target(at(1000)));
        assert!(!l.meets_target(at(800)), "longer than an 800 ms ttl");
    }

    #[test]
    fn only_time_with_redis_up_counts() {
        let h = vec![
            ev(0, Kind::Acquire, 1),
            wait(1, 2, 5000),
            ev(10, Kind::Release, 1),
            ev(20, Kind::Down, 0),
            ev(1020, Kind::Up, 0),
            ev(1050, Kind::Acquire, 2),
            // A second outage, then 150 ms to come back into service.
            ev(1060, Kind::Release, 2),
            wait(1060, 1, 5000),
            ev(1070, Kind::Down, 0),
            ev(1270, Kind::Up, 0),
            ev(1420, Kind::Acquire, 1),
        ];
        let l = measure(&h);
        assert_eq!(l.stalls, 2, "{l:?}");
        assert_eq!(l.longest, Some(at(160)), "10 ms before, 150 ms after");
        assert_eq!(l.over_limit, 1);
        assert!(l.long.iter().all(|s| s.outage));
    }

    #[test]
    fn waits_past_their_bound_are_overruns() {
        let h = vec![
            ev(0, Kind::Acquire, 1),
            wait(1, 2, 300),
            // 300 ms bound, returned after 20.1 s.
            ev(20_101, Kind::Error, 2),
            wait(20_102, 2, 300),
            // 50 ms late: within the slack.
            ev(20_452, Kind::Timeout, 2),
            wait(20_453, 3, 200),
            ev(20_460, Kind::Cancel, 3),
            ev(20_500, Kind::Release, 1),
            ev(20_501, Kind::Acquire, 2),
        ];
        let l = measure(&h);
        assert_eq!((l.waits, l.overruns, l.timed_out), (3, 1, 1), "{l:?}");
        assert_eq!(l.worst_overrun, Some(at(19_800)));
        assert!(!l.meets_target(at(1000)));
    }

    /// With 2 permits, one free permit and a waiter is a stall; a killed holder's permit
    /// keeps the stall "after a death" until 2 hold again, across a hand-off of the other.
    #[test]
    fn a_semaphore_stalls_below_capacity() {
        let sem = Primitive::Semaphore { permits: 2 };
        let h = vec![
            ev(0, Kind::Acquire, 1),
            wait(1, 2, 5000),
            ev(2, Kind::Acquire, 2),
            wait(3, 3, 5000),
            // One permit free and 3 waits 200 ms: a stall.
            ev(10, Kind::Release, 1),
            ev(210, Kind::Acquire, 3),
            // 2 dies holding; 1 wants.
            wait(211, 1, 5000),
            ev(212, Kind::Kill, 2),
            // 3 hands its permit to 1: still one short, the dead permit.
            ev(300, Kind::Release, 3),
            ev(301, Kind::Acquire, 1),
            wait(302, 3, 5000),
            // The dead permit expired: 2 hold again.
            ev(1212, Kind::Acquire, 3),
            wait(1213, 2, 5000),
        ];
        let l = measure_as(&h, sem);
        // 1 ms before 2 first acquired, then 200 ms.
        assert_eq!((l.stalls, l.over_limit), (2, 1), "{l:?}");
        assert_eq!(l.longest, Some(at(200)));
        // 212..301 (nobody waits at 301), then 302..1212 although 1 acquired at 301.
        assert_eq!(l.after_death, 2);
        assert_eq!(l.longest_after_death, Some(at(910)));
        // The permit is back: a wait now with 2 holding is no stall.
        assert!(l.long.iter().all(|s| s.at < at(1212)));
    }

    /// A holder killed during a stall that had begun before (one permit between two
    /// holders): its dead permit keeps that stall open for a ttl, which is waited out as
    /// after any death, not counted as a stall of the library.
    #[test]
    fn a_death_during_a_stall_makes_it_one_after_a_death() {
        let sem = Primitive::Semaphore { permits: 2 };
        let h = vec![
            ev(0, Kind::Acquire, 1),
            ev(1, Kind::Acquire, 2),
            wait(2, 3, 5000),
            wait(3, 4, 5000),
            // 1 releases: a stall; before 3 gets the free permit, 2 dies holding.
            ev(10, Kind::Release, 1),
            ev(11, Kind::Kill, 2),
            ev(12, Kind::Acquire, 3),
            // 4 still waits, for 2's permit, which expires a ttl after 2's last renewal.
            ev(1009, Kind::Acquire, 4),
        ];
        let l = measure_as(&h, sem);
        assert_eq!((l.stalls, l.over_limit), (0, 0), "{l:?}");
        assert_eq!(l.after_death, 1, "{l:?}");
        assert_eq!(l.longest_after_death, Some(at(999)));
        assert!(l.meets_target(at(1000)));
    }

    /// A dead reader blocks a writer until its hold runs out: after a death; reads
    /// granted meanwhile do not end it.
    #[test]
    fn a_dead_reader_blocks_writers_until_a_write_is_granted() {
        let read = |ms, kind, worker| ev(ms, kind, worker).mode(Mode::Read);
        let h = vec![
            read(0, Kind::Acquire, 1),
            read(1, Kind::Acquire, 2),
            ev(2, Kind::Kill, 1),
            wait(3, 3, 5000).mode(Mode::Write),
            ev(10, Kind::Release, 2),
            read(20, Kind::Acquire, 4),
            ev(30, Kind::Release, 4),
            ev(1002, Kind::Acquire, 3).mode(Mode::Write),
            wait(1003, 4, 5000).mode(Mode::Read),
            ev(1010, Kind::Release, 3),
            read(1011, Kind::Acquire, 4),
        ];
        let l = measure_as(&h, Primitive::RwLock);
        assert_eq!(l.after_death, 2, "{l:?}");
        assert_eq!(l.longest_after_death, Some(at(972)));
        assert_eq!((l.stalls, l.over_limit), (1, 0), "the last hand-off");
    }

    /// A multi-lock stalls when nobody holds any name while someone waits; a killed
    /// holder's names stay dead (the stall after a death) until each is acquired again,
    /// whatever other names are granted meanwhile.
    #[test]
    fn a_multilock_stalls_when_nobody_holds_any_name() {
        let multi = Primitive::MultiLock { names: 4 };
        let named = |ms, kind, worker, name| ev(ms, kind, worker).lock(name);
        let h = vec![
            wait(0, 1, 5000),
            named(1, Kind::Acquire, 1, 'a'),
            named(1, Kind::Acquire, 1, 'b'),
            wait(2, 2, 5000),
            // 1 releases a: it still holds b, no stall.
            named(200, Kind::Release, 1, 'a'),
            // Nobody holds anything, 2 waits 150 ms: a stall.
            named(201, Kind::Release, 1, 'b'),
            named(351, Kind::Acquire, 2, 'c'),
            named(351, Kind::Acquire, 2, 'd'),
            wait(352, 1, 5000),
            named(360, Kind::Acquire, 1, 'a'),
            named(360, Kind::Acquire, 1, 'b'),
            wait(361, 3, 5000),
            // 2 dies holding {c, d}; 1 releases.
            ev(370, Kind::Kill, 2),
            named(380, Kind::Release, 1, 'a'),
            named(380, Kind::Release, 1, 'b'),
            // {a, b} granted meanwhile: c and d are still dead.
            named(390, Kind::Acquire, 1, 'a'),
            named(390, Kind::Acquire, 1, 'b'),
            named(400, Kind::Release, 1, 'a'),
            named(400, Kind::Release, 1, 'b'),
            // c comes back; d is still dead.
            named(1370, Kind::Acquire, 3, 'c'),
            named(1370, Kind::Acquire, 3, 'a'),
            named(1380, Kind::Release, 3, 'c'),
            named(1380, Kind::Release, 3, 'a'),
            wait(1381, 1, 5000),
            named(1390, Kind::Acquire, 1, 'd'),
            named(1390, Kind::Acquire, 1, 'b'),
            named(1400, Kind::Release, 1, 'd'),
            named(1400, Kind::Release, 1, 'b'),
            wait(1401, 3, 5000),
            named(1700, Kind::Acquire, 3, 'd'),
        ];
        let l = measure_as(&h, multi);
        // 0..1 and 201..351 before the death; 1401..1700 once every name is back.
        assert_eq!((l.stalls, l.over_limit), (3, 2), "{l:?}");
        assert_eq!(l.longest, Some(at(299)));
        // 380..390, 400..1370 (3 waits) and 1381..1390 (d still dead).
        assert_eq!(l.after_death, 3, "{l:?}");
        assert_eq!(l.longest_after_death, Some(at(970)));
    }
}
