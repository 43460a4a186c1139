//! A discovery path of the hand-off model told as a numbered timeline. The path is
//! replayed without the canonical form (`HandoffModel::apply`), so every fence is the
//! counter's real value and every age becomes a time `t` (global ticks from 0).

use std::fmt::Write as _;

use super::config::HandoffConfig;
use super::model::{
    Action, HandoffModel, IN_ORDER, MUTUAL_EXCLUSION, SERVED_AFTER_WINDOW, SHORT_LEASE,
    WINDOW_BOUND, believers, beyond_lease, silent_too_long,
};
use super::state::{Phase, Reply, Request, Run, SEEN_JUMP, SEEN_SHORT, State};
use crate::path::{self, Replay, numbered};
use crate::state::client_name;

/// The numbered timeline of `steps` (a path the checker found in a model of `config`).
pub fn timeline(config: &HandoffConfig, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let trace = replay(config, steps);
    let start = format!(
        "{:>3}. t=0   start: {} clients, the lock free, a lease of {} ticks ({})",
        1,
        config.clients,
        config.ttl,
        rule_text(config)
    );
    numbered(config, start, &trace, Action::Tick, time_passes, describe)
}

/// What the last state of `steps` shows for `property`.
pub fn verdict_of(
    config: &HandoffConfig,
    property: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let Replay { states, actions } = replay(config, steps);
    let t = path::ticks(&actions, &Action::Tick);
    let Some(last) = states.last() else {
        return String::new();
    };
    let until = |i: usize| match last.clients[i].phase {
        Phase::Holding { left, .. } => format!("t={}", t + u32::from(left)),
        _ => String::from("?"),
    };
    let key = match last.key {
        Some(k) => format!(
            "Redis' key holds {}'s token until t={}",
            client_name(k.holder),
            t + u32::from(k.left)
        ),
        None => String::from("Redis' key is free"),
    };
    let who = believers(last);
    if property == MUTUAL_EXCLUSION && who.len() > 1 {
        let names: Vec<String> = who
            .iter()
            .map(|&i| format!("{} (until {})", client_name(i), until(i)))
            .collect();
        let all = if names.len() == 2 { "both" } else { "all" };
        return format!(
            "at t={t} {} {all} believe they hold the lock; {key}",
            names.join(" and ")
        );
    }
    if property == SHORT_LEASE
        && let Some(found) = short_return(config, &states, &actions)
    {
        return found;
    }
    if property == WINDOW_BOUND
        && let Some(k) = silent_too_long(last, config.window)
    {
        return format!(
            "at t={t} {key}: handed to {} (cut off silently) at least {} tick(s) ago, a claim \
             window of {} tick(s), and never confirmed; the lock sits with nobody",
            client_name(k.holder),
            config.window,
            config.window
        );
    }
    if property == SERVED_AFTER_WINDOW && last.stranded.is_some_and(|n| n > 0) {
        return format!(
            "at t={t} {key} while {} is queued: the hand-off ran out unconfirmed at t={} \
             or before, and nobody served the queue",
            queue_text(last),
            t.saturating_sub(1)
        );
    }
    if property == IN_ORDER
        && let Some(found) = jumped(&states, &actions)
    {
        return found;
    }
    match beyond_lease(last) {
        Some(i) => format!(
            "at t={t} {} believes it holds the lock until {}, but {key}",
            client_name(i),
            until(i)
        ),
        None => format!("at t={t}: {key}"),
    }
}

/// The step at which an `acquire` first returned less than the floor of validity, told.
fn short_return(config: &HandoffConfig, states: &[State], actions: &[Action]) -> Option<String> {
    let mut t = 0u32;
    for (k, action) in actions.iter().enumerate() {
        let (before, after) = (&states[k], &states[k + 1]);
        if *action == Action::Tick {
            t += 1;
        }
        if before.seen & SEEN_SHORT != 0 || after.seen & SEEN_SHORT == 0 {
            continue;
        }
        let (Action::Read(i) | Action::Take { client: i, .. }) = *action else {
            continue;
        };
        let Phase::Holding { left } = after.clients[i].phase else {
            continue;
        };
        return Some(format!(
            "at t={t} {}'s acquire returned a guard valid until t={}, less than {} tick(s) of \
             validity",
            client_name(i),
            t + u32::from(left),
            config.min_validity
        ));
    }
    None
}

/// The step at which an attempt took a free lock past an older queued waiter, told.
fn jumped(states: &[State], actions: &[Action]) -> Option<String> {
    let mut t = 0u32;
    for (k, action) in actions.iter().enumerate() {
        let (before, after) = (&states[k], &states[k + 1]);
        if *action == Action::Tick {
            t += 1;
        }
        if before.seen & SEEN_JUMP != 0 || after.seen & SEEN_JUMP == 0 {
            continue;
        }
        let (Action::Run(i) | Action::RunOrphan(i)) = *action else {
            continue;
        };
        return Some(format!(
            "at t={t} {} took the free lock while {} was queued before it",
            client_name(i),
            queue_text(before)
        ));
    }
    None
}

/// The states along `steps`, replayed from its first without the canonical form, and
/// the actions between them.
fn replay(config: &HandoffConfig, steps: &[(State, Option<Action>)]) -> Replay<State, Action> {
    let model = HandoffModel::new(config.clone());
    path::replay(steps, |state, action| model.apply(state, action))
}

fn rule_text(config: &HandoffConfig) -> String {
    use super::config::Rule;
    match config.rule {
        Rule::AcceptStale => {
            String::from("the accept-stale rule: a grant dated from the latest attempt")
        }
        Rule::Fixed => format!(
            "the fix: stale grants void, dated from the latest busy attempt, Ours refreshes, \
             at least {} tick(s) of validity",
            config.min_validity
        ),
        Rule::NoVoid => String::from("the fix without voiding stale grants"),
        Rule::LatestSend => String::from("the fix, grants dated from the latest attempt"),
        Rule::NoRefresh => String::from("the fix without refreshing on Ours"),
        Rule::ConfirmInWindow => format!(
            "claim windows: a hand-off sets the key for {} tick(s), every grant is confirmed \
             by an attempt, the releaser follows up, a free lock serves the queue first",
            config.window
        ),
        Rule::HandOffWholeTtl => {
            String::from("claim windows, but a hand-off sets the key for the whole ttl")
        }
        Rule::NoFollowUp => String::from("claim windows without the releaser's follow-up"),
        Rule::TakesFreeLock => {
            String::from("claim windows, but an attempt takes a free lock past the queue")
        }
    }
}

fn time_passes(from: u32, to: u32, before: &State, after: &State) -> String {
    let mut text = format!("time passes (t={from} -> t={to})");
    if let (Some(k), None) = (before.key, after.key) {
        let _ = write!(
            text,
            "; {}'s lease expires in Redis at t={}",
            client_name(k.holder),
            from + u32::from(k.left)
        );
    }
    let paused: Vec<String> = (before.clients.iter().enumerate())
        .filter(|(_, c)| c.run == Run::Paused)
        .map(|(i, _)| client_name(i))
        .collect();
    if !paused.is_empty() {
        let _ = write!(text, "; {} paused", paused.join(", "));
    }
    let silent: Vec<String> = (before.clients.iter().enumerate())
        .filter(|(_, c)| c.cut_off())
        .map(|(i, _)| client_name(i))
        .collect();
    if !silent.is_empty() {
        let _ = write!(text, "; {} cut off", silent.join(", "));
    }
    text
}

fn reply_of(state: &State, i: usize) -> Option<(Request, Reply)> {
    match state.clients[i].phase {
        Phase::Attempting(request) => request.reply.map(|r| (request, r)),
        _ => None,
    }
}

fn describe(config: &HandoffConfig, t: u32, action: Action, prev: &State, next: &State) -> String {
    let ago = |age: Option<u8>| t.saturating_sub(u32::from(age.unwrap_or(0)));
    match action {
        Action::Tick => String::from("time passes"),
        Action::Begin(i) => format!("{} calls acquire: sends its first attempt", client_name(i)),
        Action::Run(i) => ran(config, t, prev, next, i),
        Action::Read(i) => {
            let who = client_name(i);
            let Some((request, reply)) = reply_of(prev, i) else {
                return format!("{who} reads a reply");
            };
            let name = match reply {
                Reply::Fresh(f) => format!("Fresh (fence {f})"),
                Reply::Ours(f) => format!("Ours (fence {f})"),
                Reply::Busy(f) if config.rule.voids_stale() => format!("busy (busy_fence {f})"),
                Reply::Busy(_) => String::from("busy"),
            };
            match next.clients[i].phase {
                Phase::Waiting => format!(
                    "{who} reads {name}: waits for a grant or its re-check timer (floor t={})",
                    ago(Some(request.age))
                ),
                _ => format!("{who} reads {name}: {}", outcome(t, prev, next, i)),
            }
        }
        Action::Recheck(i) => format!(
            "{}'s re-check timer fires: sends another attempt",
            client_name(i)
        ),
        Action::Take { client, index } => {
            let who = client_name(client);
            let c = &prev.clients[client];
            let fence = c.grants.get(index).copied().unwrap_or(0);
            if next.clients[client].phase == Phase::Waiting {
                return format!(
                    "{who} reads grant(fence {fence}) from its mailbox: void (not above its \
                     busy_fence {}): discarded, waits on",
                    c.busy_fence.unwrap_or(0)
                );
            }
            if config.confirms_grants || config.rule.confirms_every_grant() {
                return format!(
                    "{who} reads grant(fence {fence}) from its mailbox: confirms it with an \
                     attempt of its own"
                );
            }
            let (what, age) = if config.rule.grant_from_floor() {
                ("latest busy attempt", c.floor)
            } else {
                ("latest attempt", c.last_sent)
            };
            format!(
                "{who} reads grant(fence {fence}) from its mailbox, dated from its {what}, \
                 sent at t={}: {}",
                ago(age),
                outcome(t, prev, next, client)
            )
        }
        Action::Release(i) => format!(
            "{} releases: {}",
            client_name(i),
            released(t, prev, next, i)
        ),
        Action::GiveUp(i) => format!(
            "{} gives up: its give-back {}",
            client_name(i),
            released(t, prev, next, i)
        ),
        Action::RunOrphan(i) => orphan_ran(config, t, prev, next, i),
        _ => fault(t, action, prev, next),
    }
}

/// A step that is a fault, a timer or a client's life outside `acquire`, told.
fn fault(t: u32, action: Action, prev: &State, next: &State) -> String {
    match action {
        Action::Pause(i) => format!(
            "{} is paused (SIGSTOP, a blocked runtime): it does nothing, its clock runs on",
            client_name(i)
        ),
        Action::Resume(i) => format!("{} runs again", client_name(i)),
        Action::DropLink(i) => {
            let lost = if reply_of(prev, i).is_some() {
                "the reply to its attempt"
            } else {
                "its attempt, before it ran,"
            };
            format!(
                "{}'s data connection drops: {lost} is lost; it retries later",
                client_name(i)
            )
        }
        Action::Abandon(i) => format!(
            "{} stops waiting for its attempt (response timeout): the attempt is still on its \
             way; it retries later",
            client_name(i)
        ),
        Action::DropSubscription(i) => {
            let lost = &prev.clients[i].grants;
            let with = if lost.is_empty() {
                String::new()
            } else {
                format!(", losing grant(s) {lost:?}")
            };
            format!("{}'s grant subscription drops{with}", client_name(i))
        }
        Action::Resubscribe(i) => format!("{}'s grant subscription is back", client_name(i)),
        Action::CutOff(i) => format!(
            "{} is cut off silently (packets dropped, no RST): Redis still counts its \
             subscription; it never reads nor sends again",
            client_name(i)
        ),
        Action::FollowUp(i) => format!(
            "{}'s follow-up: the window of its hand-off is over; it runs release.lua with \
             its old token: {}",
            client_name(i),
            released(t, prev, next, i)
        ),
        _ => String::new(),
    }
}

/// What Redis answered client `i`'s attempt, and what that changed.
fn ran(config: &HandoffConfig, t: u32, prev: &State, next: &State, i: usize) -> String {
    let ago = |age: u8| t.saturating_sub(u32::from(age));
    let until = |left: u8| t + u32::from(left);
    let who = client_name(i);
    let Some((request, reply)) = reply_of(next, i) else {
        return format!("Redis runs {who}'s attempt");
    };
    let head = format!(
        "Redis runs {who}'s attempt (sent at t={})",
        ago(request.age)
    );
    match reply {
        Reply::Fresh(f) => format!(
            "{head}: the lock is free: {who} takes it, fence {f}, key until t={}",
            until(config.ttl)
        ),
        Reply::Ours(f) => {
            let refreshed = if next.key == prev.key {
                String::new()
            } else {
                format!(", expiry refreshed to t={}", until(config.ttl))
            };
            format!("{head}: the key holds {who}'s own token: Ours (fence {f}){refreshed}")
        }
        Reply::Busy(f) => {
            let served = match (prev.key, next.key) {
                (None, Some(k)) => format!(
                    "the lock is free: Redis serves the oldest waiter first, {} (fence {}, key \
                     until t={}, PUBLISH grant); ",
                    client_name(k.holder),
                    next.counter,
                    until(k.left)
                ),
                _ => String::new(),
            };
            let holder = next.key.map_or(String::from("?"), |k| {
                format!("{} until t={}", client_name(k.holder), until(k.left))
            });
            let fence = if config.rule.voids_stale() {
                format!(" with busy_fence {f}")
            } else {
                String::new()
            };
            let joined = if next.queue.len() > prev.queue.len() {
                format!("; {who} joins the queue {}", queue_text(next))
            } else {
                String::new()
            };
            format!("{head}: {served}held by {holder}: busy{fence}{joined}")
        }
    }
}

/// What Redis did with an attempt its client had abandoned.
fn orphan_ran(config: &HandoffConfig, t: u32, prev: &State, next: &State, i: usize) -> String {
    let what = match next.key {
        Some(k) if prev.key.is_none() && usize::from(k.holder) == i => format!(
            "the lock is free: it is {}'s now, key until t={} (no one reads the reply)",
            client_name(i),
            t + u32::from(config.ttl)
        ),
        _ if next.queue.len() > prev.queue.len() => {
            format!(
                "busy: {} joins the queue {}",
                client_name(i),
                queue_text(next)
            )
        }
        Some(_) if prev.key != next.key => format!(
            "the key holds {}'s own token: expiry refreshed to t={}",
            client_name(i),
            t + u32::from(config.ttl)
        ),
        _ => String::from("nothing changes that anyone reads"),
    };
    format!(
        "Redis runs the attempt {} abandoned: {what}",
        client_name(i)
    )
}

/// What a waiter does with a lease it was told of: returns, or confirms.
fn outcome(t: u32, prev: &State, next: &State, i: usize) -> String {
    match next.clients[i].phase {
        Phase::Holding { left } => {
            let holds = match next.key {
                Some(k) if usize::from(k.holder) == i => {
                    format!("Redis holds it until t={}", t + u32::from(k.left))
                }
                Some(k) => format!("Redis' key holds {}'s token", client_name(k.holder)),
                None => String::from("Redis' key is free"),
            };
            format!(
                "acquire returns, is_held() until t={} ({holds})",
                t + u32::from(left)
            )
        }
        Phase::Attempting(_) if prev.clients[i].phase != next.clients[i].phase => {
            String::from("less than the floor of validity left: confirms with an attempt")
        }
        _ => String::from("waits on"),
    }
}

fn released(t: u32, prev: &State, next: &State, i: usize) -> String {
    let mine = prev.key.is_some_and(|k| usize::from(k.holder) == i);
    if !mine {
        if let (None, Some(k)) = (prev.key, next.key) {
            return format!(
                "the lock is free with waiters queued {}: Redis serves the oldest, {}: fence \
                 {}, key until t={}, PUBLISH grant({}) to {}",
                queue_text(prev),
                client_name(k.holder),
                next.counter,
                t + u32::from(k.left),
                next.counter,
                client_name(k.holder)
            );
        }
        return if prev.queue.len() > next.queue.len() {
            String::from("withdraws its token from the queue")
        } else {
            String::from("finds the key not holding its token (nothing to do)")
        };
    }
    let skipped: Vec<String> = (prev.queue.iter())
        .take(prev.queue.len().saturating_sub(next.queue.len()))
        .filter(|q| next.key.is_none_or(|k| k.holder != **q))
        .map(|q| client_name(*q))
        .collect();
    let skipped = if skipped.is_empty() {
        String::new()
    } else {
        format!(" (skips {}: no subscriber)", skipped.join(", "))
    };
    match next.key {
        Some(k) => format!(
            "Redis hands the lock to {}{skipped}: fence {}, key until t={}, PUBLISH grant({}) \
             to {}",
            client_name(k.holder),
            next.counter,
            t + u32::from(k.left),
            next.counter,
            client_name(k.holder)
        ),
        None => format!("Redis deletes the key{skipped}"),
    }
}

fn queue_text(s: &State) -> String {
    let names: Vec<String> = s.queue.iter().map(|q| client_name(*q)).collect();
    format!("[{}]", names.join(", "))
}
