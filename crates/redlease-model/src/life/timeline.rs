//! A discovery path of the lease-life model told as a numbered timeline. The path is
//! replayed without the canonical form (`LifeModel::apply`), so every age becomes a time
//! `t` on the holder's clock (global ticks from 0); Redis' clock reads `t` plus the ticks
//! it gained.

use super::config::{LifeConfig, Rule};
use super::model::{Action, LifeModel};
use super::state::{Key, State, Step};
use crate::path::{self, Replay, numbered};

/// The numbered timeline of `steps` (a path the checker found in a model of `config`).
pub fn timeline(config: &LifeConfig, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let trace = replay(config, steps);
    let start = format!(
        "{:>3}. t=0   start: the holder holds the lock, key until t={}, claim until t={} \
         (ttl {}, drift {}; {})",
        1,
        config.ttl,
        config.ttl.saturating_sub(config.drift),
        config.ttl,
        config.drift,
        rule_text(config.rule)
    );
    numbered(config, start, &trace, Action::Tick, time_passes, describe)
}

/// What the last state of `steps` shows.
pub fn verdict_of(
    config: &LifeConfig,
    _property: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let Replay { states, actions } = replay(config, steps);
    let t = path::ticks(&actions, &Action::Tick);
    let Some(last) = states.last() else {
        return String::new();
    };
    let claim = t + u32::from(last.holder.claim);
    if last.belief_beyond_truth() {
        format!(
            "at t={t} the holder's claim says held until t={claim}, but {}",
            key_text(last.key, t)
        )
    } else {
        format!("at t={t}: claim until t={claim}; {}", key_text(last.key, t))
    }
}

fn key_text(key: Key, t: u32) -> String {
    match key {
        Key::Free => String::from("Redis' key is gone (expired)"),
        Key::Ours { left } => format!("Redis' key holds its token until t={}", t + u32::from(left)),
        Key::Theirs => String::from("Redis' key holds the other client's token"),
    }
}

/// The states along `steps`, replayed from its first without the canonical form, and
/// the actions between them.
fn replay(config: &LifeConfig, steps: &[(State, Option<Action>)]) -> Replay<State, Action> {
    let model = LifeModel::new(config.clone());
    path::replay(steps, |state, action| model.apply(state, action))
}

fn rule_text(rule: Rule) -> &'static str {
    match rule {
        Rule::SendOrder => {
            "the rule before the fix: steps overlap, a reply applied unless sent before the \
             last setter, an extend sets the claim only on its reply"
        }
        Rule::OneStepLowerFirst => {
            "the fix: one step at a time, a shortening extend lowers the claim before it is sent"
        }
        Rule::OneStep => "the fix without lowering first",
        Rule::LowerFirst => "the fix without one step at a time",
    }
}

fn step_text(step: Step) -> &'static str {
    match step {
        Step::Renewal => "renewal",
        Step::Extend => "extend",
    }
}

fn time_passes(from: u32, to: u32, before: &State, after: &State) -> String {
    let mut text = format!("time passes (t={from} -> t={to})");
    if matches!(before.key, Key::Ours { .. }) && after.key == Key::Free {
        text.push_str("; the key expires in Redis");
    }
    if before.holder.claim > 0 && after.holder.claim == 0 {
        text.push_str("; the holder's claim runs out");
    }
    text
}

fn describe(config: &LifeConfig, t: u32, action: Action, before: &State, after: &State) -> String {
    let claim = |s: &State| t + u32::from(s.holder.claim);
    match action {
        Action::Tick => String::new(),
        Action::Skew => format!(
            "Redis' clock gains a tick on the holder's (within the drift allowance): {}",
            key_text(after.key, t)
        ),
        Action::Renew => format!(
            "the renewer sends a renewal (ttl {}){}",
            before.holder.ttl,
            queued_behind(after)
        ),
        Action::Extend(ttl) => {
            let kind = if ttl < before.holder.ttl {
                "shorter"
            } else {
                "longer"
            };
            let lowered = if after.holder.claim < before.holder.claim
                || after.holder.ttl != before.holder.ttl
            {
                format!(
                    "; first lowers its claim to t={} and its ttl to {ttl}",
                    claim(after)
                )
            } else {
                String::new()
            };
            format!(
                "the holder calls extend({ttl}) ({kind} than the lease's {}): sends it{lowered}{}",
                before.holder.ttl,
                queued_behind(after)
            )
        }
        Action::Run | Action::Retry => run_text(t, action, before, after),
        Action::Reload => reload_text(t, before),
        Action::Read(index) => read_text(t, index, before, after),
        Action::Cancel(step) => {
            let ran = !before.queue.iter().any(|r| r.waited && r.step == step);
            format!(
                "the client stops waiting for its {} (cancelled, or its response timeout): {}; \
                 the claim stays until t={}",
                step_text(step),
                if ran {
                    "it ran, its reply is lost"
                } else {
                    "it is still on its way to Redis"
                },
                claim(after)
            )
        }
        Action::Late(index) => {
            let r = before.queue[index];
            format!(
                "the {} sent at t={} (nobody waits for it) is held back on a dead connection: \
                 it will reach Redis after everything sent since",
                step_text(r.step),
                t - u32::from(r.age)
            )
        }
        Action::Take => format!(
            "another client takes the free key (SET NX PX {})",
            config.ttl
        ),
    }
}

fn queued_behind(after: &State) -> String {
    let ahead = after.queue.len().saturating_sub(1);
    if ahead == 0 {
        String::new()
    } else {
        format!(" (behind {ahead} request(s) on the connection)")
    }
}

fn run_text(t: u32, action: Action, before: &State, after: &State) -> String {
    let r = before.queue[0];
    let what = format!(
        "Redis runs the {}{} sent at t={} (ttl {})",
        if r.resent { "re-sent " } else { "" },
        step_text(r.step),
        t - u32::from(r.age),
        r.ttl
    );
    let result = match after.key {
        Key::Ours { .. } => key_text(after.key, t),
        _ => format!("not our token: 0 ({})", key_text(after.key, t)),
    };
    let tail = if action == Action::Retry {
        "; the connection drops before its reply: the client reconnects and re-sends it"
    } else if r.waited {
        ""
    } else {
        "; nobody waits for its reply"
    };
    format!("{what}: {result}{tail}")
}

fn reload_text(t: u32, before: &State) -> String {
    let r = before.queue[0];
    format!(
        "Redis answers NOSCRIPT to the {} sent at t={}: {}",
        step_text(r.step),
        t - u32::from(r.age),
        if r.waited {
            "the client loads the script and re-sends it, behind what was sent since"
        } else {
            "nobody waits for it, it is not re-sent"
        }
    )
}

fn read_text(t: u32, index: usize, before: &State, after: &State) -> String {
    let r = before.replies[index];
    let head = format!(
        "the holder reads the reply to the {} sent at t={} (ttl {})",
        step_text(r.step),
        t - u32::from(r.age),
        r.ttl
    );
    let claim = t + u32::from(after.holder.claim);
    if !r.ok {
        return format!("{head}: the token is gone, the lease is lost");
    }
    if after.holder.set_by != Some(r.order) {
        return format!(
            "{head}: ignored, sent before the request that last set the validity; the claim \
             stays until t={claim}"
        );
    }
    format!("{head}: claim until t={claim}")
}
