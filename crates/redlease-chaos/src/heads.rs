//! Faults at the head of the hand-off queue (issue 42: one hand-off for every primitive),
//! each run for the lock, a semaphore and a read-write lock on one Redis whose every
//! worker has a link of its own (`crate::partition::Partitioned` with one node):
//!
//! - [`quit_behind_crashed_holder`]: a holder (a writer, for a read-write lock) stays inside
//!   while three workers queue behind it; its link goes silent (a crash: no renewal, no
//!   release), and the first two waiters of Redis' queue give up their waits (SIGUSR1: the
//!   worker drops its `acquire`, as a timeout or a `select!` does). The third must get the
//!   lease within a claim window and 0.5 s of the crashed lease's end in Redis (its PTTL
//!   read right after the silence).
//! - The releaser that exits right after a hand-off to a cut waiter is
//!   [`crate::handoff::cut_waiter`] with the holder's process ended after its release.
//! - [`kill_queued_head`]: a queued head that keeps others out while a holder stays inside
//!   (a writer behind a reader; a request for 2 permits of a semaphore of 2 with one
//!   held) is killed with SIGKILL; the first worker queued behind it must get in within a
//!   claim window and 0.5 s of the kill.
//!
//! Each round measures one stall, from its event (the lease's end, the release, the kill)
//! to the next acquisition; a round over [`bound`], or with no next holder, is *late* and
//! fails the row.

use std::fmt::Write as _;
use std::time::Duration;

use redlease_chaos::{Event, Judge, Kind, Mode, Primitive};
use redlease_local::{Proxy, RedisServer, Reply};
use tokio::time::Instant;

use crate::handoff::keys_of;
use crate::link::Next;
use crate::runner::Runner;

/// What one round measured: from its event to the next holder (`None`: none within the
/// round's bound), and a remark for the note.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    pub(crate) stall: Option<Duration>,
    pub(crate) remark: Option<String>,
}

/// The most a round may take from its event to the next holder: the claim window of `ttl`
/// and 0.5 s (the bound of `crates/redlease/tests/handoff_liveness.rs`).
pub(crate) fn bound(ttl: Duration) -> Duration {
    crate::handoff::claim_window(ttl) + Duration::from_millis(500)
}

/// The workers queued in Redis, head first: each place's waiter details name its process
/// (`pid=N`), which the runner knows; places of no worker of the runner's are left out.
fn queued(runner: &Runner, server: &RedisServer, keys: &redlease::LockKeys) -> Vec<u32> {
    let Ok(Reply::Array(places)) =
        tokio::task::block_in_place(|| server.query(&["LRANGE", keys.queue(), "0", "-1"]))
    else {
        return Vec::new();
    };
    let mut workers = Vec::new();
    for place in places {
        let Reply::Bulk(token) = place else { continue };
        let token = String::from_utf8_lossy(&token).into_owned();
        let Ok(Reply::Bulk(entry)) =
            tokio::task::block_in_place(|| server.query(&["HGET", keys.waiters(), token.as_str()]))
        else {
            continue;
        };
        let entry = String::from_utf8_lossy(&entry);
        let pid = entry
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '=')
            .find_map(|w| w.strip_prefix("pid="))
            .and_then(|p| p.parse().ok());
        if let Some(worker) = pid.and_then(|pid| runner.worker_of_pid(pid)) {
            workers.push(worker);
        }
    }
    workers
}

/// Polls Redis' queue (every 2 ms: Redis tells nobody) until `ready` holds of it, at most
/// `timeout`; returns the last queue read.
async fn queue_until(
    runner: &Runner,
    server: &RedisServer,
    keys: &redlease::LockKeys,
    timeout: Duration,
    ready: impl Fn(&[u32]) -> bool,
) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let queue = queued(runner, server, keys);
        if ready(&queue) || Instant::now() >= deadline {
            return queue;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The events of `history` the judge received at or after `from`.
fn since(history: &[Event], from: Duration) -> &[Event] {
    &history[history.partition_point(|e| e.at < from)..]
}

/// When one of `workers` first acquired after `from` (its own send time), and who.
fn acquired_after(history: &[Event], from: Duration, workers: &[u32]) -> Option<(u32, Duration)> {
    since(history, from)
        .iter()
        .find(|e| e.kind == Kind::Acquire && workers.contains(&e.worker))
        .map(|e| (e.worker, e.time()))
}

/// One round of [`quit_behind_crashed_holder`](self); `link` gives each worker's proxy.
pub(crate) async fn quit_behind_crashed_holder<'a>(
    runner: &Runner,
    server: &RedisServer,
    link: impl Fn(u32) -> Option<&'a Proxy>,
    ttl: Duration,
) -> anyhow::Result<Option<Measured>> {
    let wait = ttl * 5 + Duration::from_secs(5);
    let keys = keys_of(runner.primitive())?;
    // A writer of a read-write lock: every waiter queues behind it.
    let mode = (runner.primitive() == Primitive::RwLock).then_some(Mode::Write);
    runner.hold_next_section_of(ttl * 3, mode, false);
    let Some(holder) = runner.held_by(wait).await else {
        return Ok(None);
    };
    let queue = queue_until(runner, server, &keys, ttl, |q| {
        q.iter().filter(|&&w| w != holder).count() >= 3
    })
    .await;
    let order: Vec<u32> = queue.into_iter().filter(|&w| w != holder).collect();
    let (Some(&first), Some(&second), Some(&third), Some(proxy)) =
        (order.first(), order.get(1), order.get(2), link(holder))
    else {
        return Ok(None);
    };
    runner.record(Kind::Fault, holder);
    proxy.silence();
    let pttl = match tokio::task::block_in_place(|| server.query(&["PTTL", keys.key()])) {
        Ok(Reply::Integer(ms)) => u64::try_from(ms).ok(),
        _ => None,
    };
    let Some(pttl) = pttl else {
        proxy.heal();
        return Ok(Some(Measured {
            stall: None,
            remark: Some("the lease had no PTTL at the crash".to_owned()),
        }));
    };
    let ends = runner.with_judge(Judge::now) + Duration::from_millis(pttl);
    let cut_at = runner.with_judge(Judge::now);
    runner.give_up(first)?;
    runner.give_up(second)?;
    let gave_up = |j: &Judge| {
        since(j.history(), cut_at)
            .iter()
            .filter(|e| e.kind == Kind::Cancel && (e.worker == first || e.worker == second))
            .map(Event::time)
            .collect::<Vec<_>>()
    };
    runner.wait_for(wait, |j| gave_up(j).len() >= 2).await;
    let quit = runner.with_judge(gave_up);
    runner
        .wait_for(wait, |j| {
            acquired_after(j.history(), cut_at, &[third]).is_some()
        })
        .await;
    let next = runner.with_judge(|j| acquired_after(j.history(), cut_at, &[third]));
    proxy.heal();
    let before = quit.iter().filter(|&&t| t < ends).count();
    Ok(Some(Measured {
        stall: next.map(|(_, at)| at.saturating_sub(ends)),
        remark: (before < 2)
            .then(|| format!("only {before} of the 2 waits ended before the lease did")),
    }))
}

/// One round of [`kill_queued_head`](self) (a read-write lock or a semaphore of 2); returns
/// the killed worker with what the round measured. The caller starts a worker in its
/// place.
pub(crate) async fn kill_queued_head(
    runner: &mut Runner,
    server: &RedisServer,
    ttl: Duration,
) -> anyhow::Result<Option<Measured>> {
    let wait = ttl * 5 + Duration::from_secs(5);
    let primitive = runner.primitive();
    let keys = keys_of(primitive)?;
    let rw = primitive == Primitive::RwLock;
    if rw {
        // Every worker reads first: no writer already queued behind the reader to come.
        let asked = runner.with_judge(Judge::now);
        let ids = runner.ids();
        runner.reads_only(true);
        runner
            .wait_for(wait, |j| {
                ids.iter().all(|&w| {
                    since(j.history(), asked).iter().any(|e| {
                        e.worker == w && e.kind == Kind::Wait && e.mode == Some(Mode::Read)
                    })
                })
            })
            .await;
    }
    runner.hold_next_section_of(ttl * 2, rw.then_some(Mode::Read), false);
    let Some(holder) = runner.held_by(wait).await else {
        runner.reads_only(false);
        return Ok(None);
    };
    let others: Vec<u32> = runner.ids().into_iter().filter(|&w| w != holder).collect();
    // The head to be: its next attempt (the last round's holder has left: see below).
    let Some(&head) = others.first() else {
        runner.reads_only(false);
        return Ok(None);
    };
    runner.direct(head, if rw { Next::Write } else { Next::Many });
    let queue = queue_until(runner, server, &keys, ttl * 2, |q| {
        q.first() == Some(&head) && q.len() >= 2
    })
    .await;
    if queue.first() != Some(&head) || queue.len() < 2 {
        runner.reads_only(false);
        return Ok(Some(Measured {
            stall: None,
            remark: Some(format!(
                "the head was not queued in front of a waiter in time (queue {queue:?})"
            )),
        }));
    }
    runner.kill(head).await?;
    let killed = runner
        .with_judge(|j| {
            j.history()
                .iter()
                .rev()
                .find(|e| e.kind == Kind::Kill && e.worker == head)
                .map(|e| e.at)
        })
        .unwrap_or_default();
    let behind: Vec<u32> = others.into_iter().filter(|&w| w != head).collect();
    runner
        .wait_for(wait, |j| {
            acquired_after(j.history(), killed, &behind).is_some()
        })
        .await;
    let next = runner.with_judge(|j| acquired_after(j.history(), killed, &behind));
    runner.reads_only(false);
    // The holder's hold ends before the next round picks its own.
    runner
        .wait_for(wait, |j| {
            since(j.history(), killed)
                .iter()
                .any(|e| e.worker == holder && matches!(e.kind, Kind::Release | Kind::Lost))
        })
        .await;
    Ok(Some(Measured {
        stall: next.map(|(_, at)| at.saturating_sub(killed)),
        remark: None,
    }))
}

/// How many of `rounds` were late: no next holder, or one later than [`bound`].
pub(crate) fn late(rounds: &[Measured], ttl: Duration) -> usize {
    rounds
        .iter()
        .filter(|r| r.stall.is_none_or(|s| s > bound(ttl)))
        .count()
}

/// One sentence for the row's note: each round's stall from `from` (what the row measures
/// from) to the next holder, against [`bound`].
pub(crate) fn describe(rounds: &[Measured], from: &str, ttl: Duration, note: &mut String) {
    if rounds.is_empty() {
        return;
    }
    let ms = crate::handoff::millis;
    let mut stalls: Vec<Duration> = rounds.iter().filter_map(|r| r.stall).collect();
    stalls.sort();
    let _ = write!(
        note,
        "from {from} to the next holder (ttl {} ms, bound: claim window {} ms + 500 ms): ",
        ms(ttl),
        ms(crate::handoff::claim_window(ttl))
    );
    crate::handoff::write_stalls(note, &stalls, rounds.len());
    let each: Vec<String> = rounds
        .iter()
        .map(|r| r.stall.map_or_else(|| "none".to_owned(), ms))
        .collect();
    let _ = write!(note, " ({} ms)", each.join(", "));
    let late = late(rounds, ttl);
    if late > 0 {
        let _ = write!(note, ", **{late} past the bound or without a next holder**");
    }
    for (i, remark) in rounds
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.remark.as_ref().map(|m| (i, m)))
    {
        let _ = write!(note, "; round {}: {remark}", i + 1);
    }
    note.push_str(". ");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_past_the_bound_or_without_a_holder_is_late() {
        let ms = Duration::from_millis;
        let round = |stall: Option<u64>| Measured {
            stall: stall.map(ms),
            remark: None,
        };
        let ttl = ms(1000);
        assert_eq!(bound(ttl), ms(600));
        let rounds = [
            round(Some(120)),
            round(Some(600)),
            round(Some(601)),
            round(None),
        ];
        assert_eq!(late(&rounds, ttl), 2);
        let mut note = String::new();
        describe(&rounds, "the kill", ttl, &mut note);
        assert!(note.contains("120-601 ms in 3 of 4 rounds"), "{note}");
        assert!(note.contains("**2 past the bound"), "{note}");
    }
}
