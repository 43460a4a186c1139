//! Faults aimed at the hand-off: a waiter paused while the lock is handed to it, and Redis
//! cut off while waiters give up.
//!
//! - [`pause_waiter`]: a holder stays inside long enough for the runner to SIGSTOP a worker
//!   queued behind it (the oldest waiter, the queue's head most likely; a writer for a
//!   read-write lock). The holder leaves, the lock is handed to the paused waiter, its
//!   lease runs out in Redis, the next holder takes over and stays inside; the waiter gets
//!   SIGCONT while it does. Awake, the waiter must not believe it holds a lease that Redis
//!   gave to another: the claims (`crate::claims` in the library) and the sections show it
//!   if it does.
//! - [`cut_waiter`]: the same round with the waiter cut off silently instead of paused:
//!   its own link to Redis drops every byte and closes nothing, so Redis still counts its
//!   grant subscription and hands it the lock. The hand-off lasts its claim window only
//!   (a tenth of the ttl, 50 ms to 1 s), then the next waiter must be served: the round
//!   measures the time from the holder's release to the next holder's acquisition, and,
//!   once the link heals, how soon the cut waiter acquires again. It must never believe
//!   it holds a lease it did not confirm: the claims show it if it does.
//! - [`outage_while_waiters_quit`]: a holder stays inside across a Redis outage (SIGKILL,
//!   restart from the AOF) longer than the workers' response timeout, while the other
//!   workers' short waits end during it (they give up their queue places, or try to).
//!   The holder releases once Redis is back: the lock is handed to the head of the queue,
//!   and if that is a place its waiter left, the lock must not sit with it (a stall).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use redlease_chaos::{Event, Judge, Kind, Mode, Primitive};
use redlease_local::{Proxy, RedisServer};
use tokio::time::Instant;

use crate::runner::Runner;

/// The lease of the outage rows: longer than the outage, so that the holder's lease
/// survives it and is released into the queue afterwards.
pub(crate) const OUTAGE_TTL: Duration = Duration::from_secs(2);
/// The workers' wait in the outage rows: shorter than the outage, so that waits end
/// during it.
pub(crate) const OUTAGE_WAIT: Duration = Duration::from_millis(200);
/// The workers' response timeout in the outage rows: shorter than the outage, so that a
/// give-back retried for a response timeout gives up before Redis is back.
pub(crate) const OUTAGE_RESPONSE_TIMEOUT: Duration = Duration::from_millis(300);
/// How long Redis is down in the outage rows.
pub(crate) const OUTAGE: Duration = Duration::from_millis(800);

/// The workers waiting now (a `WAIT` not yet ended by `ACQ`, `TIMEOUT`, `ERR`, `CANCEL`,
/// death or departure), oldest wait first, with the mode they want.
fn waiters(history: &[Event]) -> Vec<(u32, Option<Mode>)> {
    let mut waiting: HashMap<u32, (Duration, Option<Mode>)> = HashMap::new();
    for e in history {
        match e.kind {
            Kind::Wait => {
                waiting.insert(e.worker, (e.at, e.mode));
            }
            Kind::Acquire | Kind::Timeout | Kind::Error | Kind::Cancel | Kind::Kill | Kind::Bye => {
                waiting.remove(&e.worker);
            }
            _ => {}
        }
    }
    let mut waiting: Vec<_> = waiting.into_iter().collect();
    waiting.sort_by_key(|&(worker, (at, _))| (at, worker));
    waiting
        .into_iter()
        .map(|(worker, (_, mode))| (worker, mode))
        .collect()
}

/// Whether `worker`'s wait ended (`ACQ`, `TIMEOUT`, `ERR`, `CANCEL`) since its last
/// `RESUME`.
fn woke_and_ended_wait(history: &[Event], worker: u32) -> bool {
    history
        .iter()
        .rev()
        .take_while(|e| !(e.kind == Kind::Resume && e.worker == worker))
        .any(|e| {
            e.worker == worker
                && matches!(
                    e.kind,
                    Kind::Acquire | Kind::Timeout | Kind::Error | Kind::Cancel
                )
        })
}

/// How many holders [`pause_waiter`] tries to find a waiter behind before it gives up the
/// round.
const PICK_TRIES: usize = 8;

/// One round of [`pause_waiter`](self): returns how many waiters it paused (0 when no
/// holder or no waiter showed up in time).
pub(crate) async fn pause_waiter(runner: &mut Runner, ttl: Duration) -> anyhow::Result<usize> {
    let bound = ttl * 5 + Duration::from_secs(5);
    let writers_only = runner.primitive() == Primitive::RwLock;
    // A holder that stays inside half a lease: time to find a waiter behind it and pause
    // it before the hand-off. A read-write lock's writer waits only behind some holders
    // (1 section in 3 writes): holders are tried until one has a writer behind it.
    let mut found = None;
    for _ in 0..PICK_TRIES {
        runner.hold_next_section(ttl / 2);
        let Some(holder) = runner.held_by(bound).await else {
            return Ok(0);
        };
        let pick = |j: &Judge| {
            waiters(j.history())
                .into_iter()
                .find(|&(w, mode)| w != holder && (!writers_only || mode == Some(Mode::Write)))
                .map(|(w, _)| w)
        };
        if runner.wait_for(ttl / 2, |j| pick(j).is_some()).await {
            found = runner.with_judge(pick);
        }
        if found.is_some() {
            break;
        }
    }
    let Some(waiter) = found else {
        return Ok(0);
    };
    runner.signal(waiter, Kind::Pause)?;
    let paused = Instant::now();
    // The next section to begin (another worker's, once the paused waiter's grant ran out,
    // or once the holder left if the waiter was not the head) stays open past the
    // waiter's wake-up: the lock is busy when it wakes.
    runner.hold_next_section(ttl * 2);
    let _ = runner.held_by(bound).await;
    tokio::time::sleep_until(paused + ttl + ttl / 2).await;
    runner.signal(waiter, Kind::Resume)?;
    runner
        .wait_for(bound, |j| woke_and_ended_wait(j.history(), waiter))
        .await;
    Ok(1)
}

/// What one round of [`cut_waiter`] measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CutWaiter {
    /// From the holder's release (or the later release of a reader that shared the lock
    /// with it) to the next acquisition by a worker other than the cut waiter (their own
    /// send times); `None`: none within the bound.
    pub(crate) stall: Option<Duration>,
    /// From the heal to the cut waiter's next acquisition; `None`: none within the bound.
    pub(crate) back: Option<Duration>,
    /// The worker that released to the cut waiter.
    pub(crate) holder: u32,
}

/// How long a hand-off lasts until its waiter confirms it, as `scripts/lib/grants.lua`
/// (`claim_window`) sets it for every primitive: a tenth of the ttl, at least 50 ms (the ttl if shorter), at
/// most 1 s.
pub(crate) fn claim_window(ttl: Duration) -> Duration {
    let floor = ttl.min(Duration::from_millis(50));
    (ttl / 10).max(floor).min(Duration::from_secs(1))
}

/// The library's keys of the workers' lease.
pub(crate) fn keys_of(primitive: Primitive) -> anyhow::Result<redlease::LockKeys> {
    Ok(redlease::LockKeys::of(
        redlease::DEFAULT_PREFIX,
        crate::worker::LOCK,
        match primitive {
            Primitive::Semaphore { .. } => redlease::Primitive::Semaphore,
            Primitive::RwLock => redlease::Primitive::RwLock,
            _ => redlease::Primitive::Lock,
        },
    )?)
}

/// One round of [`cut_waiter`](self): a holder stays inside while a worker queued behind
/// it (the oldest waiter) is cut off silently through its own link (`link` gives each
/// worker's proxy to `server`); the holder releases; the lock must go on to the next
/// waiter. The link heals two leases after the cut. With `exit`, every holder kept inside
/// ends its process right after its release (the caller reaps it). Returns what the round
/// measured (`None` when no holder, waiter or release showed up in time).
pub(crate) async fn cut_waiter<'a>(
    runner: &Runner,
    server: &RedisServer,
    link: impl Fn(u32) -> Option<&'a Proxy>,
    ttl: Duration,
    exit: bool,
) -> anyhow::Result<Option<CutWaiter>> {
    let bound = ttl * 5 + Duration::from_secs(5);
    let mut found = None;
    for tries in 0..PICK_TRIES {
        runner.hold_next_section_of(ttl / 2, None, exit);
        let Some(holder) = runner.held_by(bound).await else {
            return Ok(None);
        };
        // The oldest waiter (the queue's head most likely, the one handed the lock),
        // unless it was cut off in the last round: a client whose grant subscription
        // lived through a silence keeps it muted until its health check replaces it (up
        // to 5 s), and cutting it again meanwhile would cut nothing new. Another holder
        // has another waiter behind it; after the last try, the head is taken anyway.
        let last_try = tries + 1 == PICK_TRIES;
        let pick = |j: &Judge| {
            let last_cut = j
                .history()
                .iter()
                .rev()
                .find(|e| e.kind == Kind::Fault)
                .map(|e| e.worker);
            waiters(j.history())
                .into_iter()
                .find(|&(w, _)| w != holder)
                .map(|(w, _)| w)
                .filter(|&w| last_try || last_cut != Some(w))
        };
        if runner.wait_for(ttl / 2, |j| pick(j).is_some()).await {
            found = runner.with_judge(pick).map(|waiter| (holder, waiter));
        }
        if found.is_some() {
            break;
        }
    }
    let Some((holder, waiter)) = found else {
        return Ok(None);
    };
    let Some(proxy) = link(waiter) else {
        return Ok(None);
    };
    // A `WAIT` is sent before the attempt that queues: the cut comes once Redis' queue
    // holds as many places as the history has waiters (bounded), so that the waiter's
    // place and grant subscription reached Redis before its link went silent.
    let keys = keys_of(runner.primitive())?;
    let queued = |n: usize| {
        matches!(
            tokio::task::block_in_place(|| server.query(&["LLEN", keys.queue()])),
            Ok(redlease_local::Reply::Integer(len)) if usize::try_from(len).is_ok_and(|len| len >= n)
        )
    };
    let deadline = Instant::now() + ttl / 4;
    loop {
        let waiting = runner.with_judge(|j| {
            waiters(j.history())
                .iter()
                .filter(|&&(w, _)| w != holder)
                .count()
        });
        if queued(waiting) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    runner.record(Kind::Fault, waiter);
    let cut_at = runner.with_judge(Judge::now);
    let cut = Instant::now();
    proxy.silence();
    // The holder's release, then the next acquisition by another worker than the cut one.
    let released = |j: &Judge| {
        since(j.history(), cut_at)
            .iter()
            .find(|e| e.kind == Kind::Release && e.worker == holder)
            .map(Event::time)
    };
    runner.wait_for(bound, |j| released(j).is_some()).await;
    let next = |j: &Judge| stall_after(since(j.history(), cut_at), released(j)?, waiter);
    runner.wait_for(bound, |j| next(j).is_some()).await;
    let stall = runner.with_judge(next);
    tokio::time::sleep_until(cut + ttl * 2).await;
    proxy.heal();
    let healed_at = runner.with_judge(Judge::now);
    let again = |j: &Judge| {
        since(j.history(), healed_at)
            .iter()
            .find(|e| e.worker == waiter && e.kind == Kind::Acquire)
            .map(|e| e.at.saturating_sub(healed_at))
    };
    runner.wait_for(bound, |j| again(j).is_some()).await;
    let back = runner.with_judge(again);
    Ok(Some(CutWaiter {
        stall,
        back,
        holder,
    }))
}

/// How long the lease sat with nobody but the cut `waiter` after the holder's release at
/// `at`: from the last release before the next acquisition by another worker (the
/// holder's, or that of a reader that shared the lock with it and left later) to that
/// acquisition; `None` before that acquisition.
fn stall_after(events: &[Event], at: Duration, waiter: u32) -> Option<Duration> {
    let acquired = events
        .iter()
        .find(|e| e.kind == Kind::Acquire && e.worker != waiter && e.time() >= at)?
        .time();
    let free_from = events
        .iter()
        .filter(|e| e.kind == Kind::Release && e.worker != waiter)
        .map(Event::time)
        .filter(|&t| t >= at && t <= acquired)
        .max()
        .unwrap_or(at);
    Some(acquired.saturating_sub(free_from))
}

/// The events of `history` the judge received at or after `from`.
fn since(history: &[Event], from: Duration) -> &[Event] {
    &history[history.partition_point(|e| e.at < from)..]
}

/// `d` in whole milliseconds, for notes.
pub(crate) fn millis(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

/// Writes the range of sorted `stalls` into `note`: "min-max ms in n of m rounds", or that
/// no round of `rounds` had a next holder.
pub(crate) fn write_stalls(note: &mut String, stalls: &[Duration], rounds: usize) {
    if let (Some(min), Some(max)) = (stalls.first(), stalls.last()) {
        let _ = write!(
            note,
            "{}-{} ms in {} of {} rounds",
            millis(*min),
            millis(*max),
            stalls.len(),
            rounds
        );
    } else {
        let _ = write!(note, "no next holder in {rounds} rounds");
    }
}

/// One sentence for the row's note: the rounds' stalls from the holder's release to the
/// next holder (min-max, each), against the ttl and the claim window, and how soon the cut
/// waiter acquired again after the heal.
pub(crate) fn describe_cut_waiters(rounds: &[CutWaiter], ttl: Duration, note: &mut String) {
    if rounds.is_empty() {
        return;
    }
    let ms = millis;
    let mut stalls: Vec<Duration> = rounds.iter().filter_map(|r| r.stall).collect();
    let each: Vec<String> = rounds
        .iter()
        .map(|r| r.stall.map_or_else(|| "none".to_owned(), ms))
        .collect();
    stalls.sort();
    let _ = write!(
        note,
        "from the last release (the holder's, or a later one of a reader sharing with it) to the next holder (ttl {} ms, claim window {} ms): ",
        ms(ttl),
        ms(claim_window(ttl))
    );
    crate::handoff::write_stalls(note, &stalls, rounds.len());
    let _ = write!(note, " ({} ms)", each.join(", "));
    let long = stalls.iter().filter(|&&d| d >= ttl / 2).count();
    if long > 0 {
        let _ = write!(
            note,
            ", **{long} of them half a lease or more: the hand-off outlived its window**"
        );
    }
    let mut back: Vec<Duration> = rounds.iter().filter_map(|r| r.back).collect();
    back.sort();
    let _ = write!(
        note,
        "; after the heal the cut waiter acquired again in {} of {} rounds",
        back.len(),
        rounds.len()
    );
    if let (Some(min), Some(max)) = (back.first(), back.last()) {
        let _ = write!(note, ", {}-{} ms after it", ms(*min), ms(*max));
    }
    note.push_str(". ");
}

/// One round of [`outage_while_waiters_quit`](self) on `server` (which keeps its data
/// across a restart: an AOF); returns 1, or 0 when no holder showed up in time. In the
/// first round, `note` gets what Redis held 100 ms after the holder's release.
pub(crate) async fn outage_while_waiters_quit(
    runner: &mut Runner,
    server: &mut RedisServer,
    ttl: Duration,
    round: usize,
    note: &mut String,
) -> anyhow::Result<usize> {
    let bound = ttl * 5 + Duration::from_secs(5);
    // Long enough for the waiters to queue behind the holder, for the outage, and for
    // their clients to be back when the holder releases.
    let queued = Duration::from_millis(100);
    let back = Duration::from_millis(300);
    runner.hold_next_section(queued + OUTAGE + back);
    let Some(holder) = runner.held_by(bound).await else {
        return Ok(0);
    };
    tokio::time::sleep(queued).await;
    runner.record(Kind::Fault, 0);
    runner.record(Kind::Down, 0);
    tokio::task::block_in_place(|| server.kill());
    tokio::time::sleep(OUTAGE).await;
    tokio::task::block_in_place(|| server.restart())?;
    runner.record(Kind::Up, 0);
    if round == 0 {
        let released = |j: &Judge| {
            j.history()
                .iter()
                .rev()
                .take_while(|e| e.kind != Kind::Up)
                .any(|e| e.kind == Kind::Release && e.worker == holder)
        };
        if runner.wait_for(bound, released).await {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let holding = runner.with_judge(|j| holders(j.history()));
            let keys = tokio::task::block_in_place(|| leases(server));
            let _ = write!(
                note,
                "round 1, 100 ms after the holder's release: workers holding by the history {holding:?}; \
                 Redis' keys with their PTTL (fencing counter aside): {keys}. "
            );
        }
    }
    // Until the holder has let go and another worker holds.
    runner
        .wait_for(bound, |j| {
            j.history()
                .iter()
                .rev()
                .take_while(|e| e.kind != Kind::Up)
                .any(|e| e.kind == Kind::Acquire && e.worker != holder)
        })
        .await;
    Ok(1)
}

/// Moves `holding`, the workers holding by the history, past `e`: a worker holds from its
/// `ACQ` to its `REL`, `LOST`, `KILL` or `BYE`.
pub(crate) fn step_holders(holding: &mut BTreeSet<u32>, e: &Event) {
    match e.kind {
        Kind::Acquire => {
            holding.insert(e.worker);
        }
        Kind::Release | Kind::Lost | Kind::Kill | Kind::Bye => {
            holding.remove(&e.worker);
        }
        _ => {}
    }
}

/// The workers holding at the end of `history` (see [`step_holders`]).
fn holders(history: &[Event]) -> BTreeSet<u32> {
    let mut holding = BTreeSet::new();
    for e in history {
        step_holders(&mut holding, e);
    }
    holding
}

/// Every key of `server` but the fencing counters, with its PTTL: `key (N ms)`, comma
/// separated.
fn leases(server: &RedisServer) -> String {
    use redlease_local::Reply;
    let Ok(Reply::Array(keys)) = server.query(&["KEYS", "*"]) else {
        return "(KEYS failed)".to_owned();
    };
    let mut out = Vec::new();
    for key in keys {
        let Reply::Bulk(key) = key else { continue };
        let key = String::from_utf8_lossy(&key).into_owned();
        if key.ends_with(":fence") {
            continue;
        }
        let pttl = match server.query(&["PTTL", key.as_str()]) {
            Ok(Reply::Integer(ms)) => format!("{ms} ms"),
            other => format!("{other:?}"),
        };
        out.push(format!("`{key}` ({pttl})"));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ms: u64, kind: Kind, worker: u32) -> Event {
        Event::new(Duration::from_millis(ms), kind, worker, 0)
    }

    #[test]
    fn waiters_are_listed_oldest_first() {
        let h = vec![
            ev(0, Kind::Wait, 1),
            ev(1, Kind::Acquire, 1),
            ev(2, Kind::Wait, 3).mode(Mode::Write),
            ev(3, Kind::Wait, 2),
            ev(4, Kind::Wait, 4),
            ev(5, Kind::Timeout, 4),
        ];
        assert_eq!(waiters(&h), vec![(3, Some(Mode::Write)), (2, None)]);
        let woke = vec![
            ev(0, Kind::Wait, 2),
            ev(1, Kind::Pause, 2),
            ev(2, Kind::Resume, 2),
        ];
        assert!(!woke_and_ended_wait(&woke, 2));
        let mut ended = woke.clone();
        ended.push(ev(3, Kind::Acquire, 2));
        assert!(woke_and_ended_wait(&ended, 2));
    }

    #[test]
    fn the_claim_window_is_a_tenth_of_the_ttl_within_50_ms_and_1_s() {
        let ms = Duration::from_millis;
        assert_eq!(claim_window(ms(1000)), ms(100));
        assert_eq!(claim_window(ms(200)), ms(50));
        assert_eq!(claim_window(ms(30)), ms(30));
        assert_eq!(claim_window(ms(20_000)), ms(1000));
    }

    #[test]
    fn a_cut_waiter_note_flags_a_hand_off_that_outlived_its_window() {
        let ms = Duration::from_millis;
        let round = |stall| CutWaiter {
            stall: Some(ms(stall)),
            back: Some(ms(300)),
            holder: 1,
        };
        let mut kept = String::new();
        describe_cut_waiters(&[round(104), round(103)], ms(1000), &mut kept);
        assert!(kept.contains("103-104 ms in 2 of 2 rounds"), "{kept}");
        assert!(!kept.contains("**"), "{kept}");
        let mut outlived = String::new();
        describe_cut_waiters(&[round(104), round(1003)], ms(1000), &mut outlived);
        assert!(outlived.contains("**1 of them half a lease"), "{outlived}");
    }
}
