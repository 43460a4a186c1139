//! A discovery path of the serve model told as a numbered timeline.

use super::model::{Action, ServeModel, unclaimed_too_long};
use super::state::{Kind, Phase, Rule, ServeConfig, State};
use crate::path;
use crate::state::client_name;

/// The numbered timeline of `steps` (a path the checker found in a model of `config`).
pub fn timeline(config: &ServeConfig, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let model = ServeModel::new(config.clone());
    let Some((first, _)) = steps.first() else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "{:>3}. t=0   start: {}; {}",
        1,
        setting(config),
        describe_state(config, first)
    )];
    let mut s = first.clone();
    let mut t = 0u32;
    for action in steps.iter().filter_map(|(_, a)| *a) {
        let next = model.apply(&s, action);
        if action == Action::Tick {
            t += 1;
        }
        let text = describe(config, action, &s, &next);
        lines.push(format!("{:>3}. t={t:<3} {text}", lines.len() + 1));
        s = next;
    }
    lines
}

/// The configuration in words: the primitive, the lease, the grants and the rules.
fn setting(config: &ServeConfig) -> String {
    let primitive = match config.kind {
        Kind::Semaphore(n) => format!("a semaphore of {n} permit(s)"),
        Kind::ReadWrite => String::from("a read-write lock"),
    };
    let rule = match config.rule {
        Rule::TraceOnly => "a grant for a token not waited for is only traced",
        Rule::GiveBack => "a grant for a token not waited for is given back",
    };
    let grants = match config.window {
        None => String::from("a pushed grant lasts the whole lease"),
        Some(w) => format!("a pushed grant lasts a claim window of {w} tick(s) until confirmed"),
    };
    let heads = if config.drop_dead_head {
        "a dead head that keeps others out is dropped"
    } else {
        "a dead head that keeps others out is kept"
    };
    let nudges = if config.nudges { "" } else { ", no nudges" };
    format!(
        "{primitive}, a lease of {} ticks, {grants}; {heads}; {rule}; {} watcher(s){nudges}",
        config.ttl, config.front
    )
}

/// What the last state of `steps` shows.
pub fn verdict_of(
    config: &ServeConfig,
    property: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let model = ServeModel::new(config.clone());
    let Some(last) = path::last(steps, |s, a| model.apply(s, a)) else {
        return String::new();
    };
    if property == super::LIVE_SERVED {
        return format!(
            "a live waiter could have been served for {} tick(s) (bound: a claim window of {} + {}); {}",
            last.overdue,
            config.claim,
            config.bound,
            describe_state(config, &last)
        );
    }
    let found = unclaimed_too_long(&last, config.bound, false)
        .map(|p| (p, config.bound))
        .or_else(|| {
            unclaimed_too_long(&last, config.cut_bound, true).map(|p| (p, config.cut_bound))
        });
    match found {
        Some((p, bound)) => format!(
            "{}'s lease, which nobody takes, has been taken for {} tick(s) (bound {bound}); \
             it runs out only {} tick(s) later; {}",
            client_name(p.token),
            p.unclaimed,
            p.left,
            describe_state(config, &last)
        ),
        None => describe_state(config, &last),
    }
}

/// A client's name with what it asks for ("C (write)").
fn named(config: &ServeConfig, token: u8) -> String {
    let want = match config.want_of(token) {
        super::Want::Permits(1) => return client_name(token),
        super::Want::Permits(n) => format!("{n} permits"),
        super::Want::Read => String::from("read"),
        super::Want::Write => String::from("write"),
    };
    format!("{} ({want})", client_name(token))
}

fn describe_state(config: &ServeConfig, s: &State) -> String {
    let leases: Vec<String> = (s.permits.iter())
        .map(|p| format!("{} for {}", named(config, p.token), p.left))
        .collect();
    let queue: Vec<String> = (s.queue.iter())
        .map(|&q| {
            let c = &s.clients[usize::from(q)];
            let note = match (c.phase, c.due) {
                (Phase::Waiting, Some(d)) => format!(" re-checks in {d}"),
                (Phase::Waiting, None) => String::from(" no timer"),
                (Phase::Crashed, _) => String::from(" crashed"),
                (Phase::Cut, _) => String::from(" cut"),
                (Phase::Abandoned, _) => String::from(" gave up"),
                _ => String::new(),
            };
            format!("{}{note}", named(config, q))
        })
        .collect();
    format!(
        "held by [{}], queue [{}]",
        leases.join(", "),
        queue.join(", ")
    )
}

fn describe(config: &ServeConfig, action: Action, before: &State, after: &State) -> String {
    let name = |i: usize| named(config, u8::try_from(i).unwrap_or(u8::MAX));
    let served = || {
        let newly: Vec<String> = (after.permits.iter())
            .filter(|p| !before.permits.iter().any(|b| b.token == p.token))
            .map(|p| named(config, p.token))
            .collect();
        let dropped: Vec<String> = (before.queue.iter())
            .filter(|&&q| !after.queue.contains(&q) && !after.permits.iter().any(|p| p.token == q))
            .filter(|&&q| after.clients[usize::from(q)].phase == Phase::Crashed)
            .map(|&q| client_name(q))
            .collect();
        let nudged: Vec<String> = (after.clients.iter().enumerate())
            .filter(|(i, c)| c.due.is_some() && c.due != before.clients[*i].due)
            .filter(|(i, _)| !matches!(action, Action::Recheck(j) | Action::Take(j) if j == *i))
            .map(|(i, c)| format!("{} to re-check in {}", name(i), c.due.unwrap_or_default()))
            .collect();
        let parts = [
            (dropped, " no longer listens: its place is dropped", ""),
            (newly, "", "serve grants "),
            (nudged, "", "nudges "),
        ];
        (parts.into_iter())
            .filter(|(names, _, _)| !names.is_empty())
            .map(|(names, after, before)| format!("{before}{}{after}", names.join(", ")))
            .fold(String::new(), |text, part| text + "; " + &part)
    };
    match action {
        Action::Tick => format!("time passes; {}", describe_state(config, after)),
        Action::Release(i) => format!("{} releases{}", name(i), served()),
        Action::Take(i) => format!("{} reads its grant and confirms it: it holds", name(i)),
        Action::Handle(i) => {
            if after.permits.iter().any(|p| usize::from(p.token) == i) {
                format!(
                    "{}'s client reads a grant for a token it no longer waits for: only traced",
                    name(i)
                )
            } else {
                format!(
                    "{}'s client reads a grant for a token it no longer waits for: gives it back{}",
                    name(i),
                    served()
                )
            }
        }
        Action::Recheck(i) => {
            let c = &before.clients[i];
            let why = match (c.phase, c.due) {
                (Phase::Idle, _) => "asks (its first attempt)",
                (_, Some(0)) => "re-checks (its timer is due)",
                _ => "re-checks early",
            };
            let outcome = match after.clients[i] {
                ref a if a.phase == Phase::Holding => String::from(": it holds"),
                ref a => match a.due {
                    Some(d) => format!(": queued, re-checks in {d}"),
                    None => String::from(": queued, no timer"),
                },
            };
            format!("{} {why}{}{outcome}", name(i), served())
        }
        Action::Crash(i) => format!(
            "{}'s client crashes: nothing listens on its grant channel",
            name(i)
        ),
        Action::Abandon(i) => format!(
            "{} gives up while cut off: its give-back is lost, its place stays, its client \
             listens on for other waits",
            name(i)
        ),
        Action::GiveUp(i) => format!("{} gives up: its place is withdrawn{}", name(i), served()),
        Action::Cut(i) => format!(
            "{}'s links are cut silently: Redis still counts its grant subscription, it hears \
             and sends nothing",
            name(i)
        ),
    }
}
