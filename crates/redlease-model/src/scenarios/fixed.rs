//! The fix ([`WriteBack::WhileHeld`]: the token is written back only while the lock is
//! held) with a plain counter, under one fault at a time, two at a time
//! ([`combined`]), and on a single Redis.

use super::scenario::{Expect, Scenario, restart, with};
use crate::config::{BeforeWrite, Config, Drift, PauseClock, Persistence, WriteBack};

/// The fix on top of `config`.
pub(super) fn fixed(config: &mut Config) {
    config.write_back = WriteBack::WhileHeld;
}

/// The fix ([`WriteBack::WhileHeld`]) under a pause.
pub fn fixed_pause() -> Scenario {
    let config = with("fix: pause (clock runs)", |c| {
        fixed(c);
        c.pauses = 1;
    });
    Scenario::new(config, Expect::Holds, Expect::Violated)
}

/// The fix under a crash of a node that persists everything.
pub fn fixed_crash() -> Scenario {
    let config = with("fix: crash (node persists everything)", |c| {
        fixed(c);
        c.crashes = 1;
    });
    Scenario::new(config, Expect::Holds, Expect::Holds)
}

/// The fix under a lost message.
pub fn fixed_lost_message() -> Scenario {
    let config = with("fix: lost message", |c| {
        fixed(c);
        c.lost_messages = 1;
    });
    Scenario::new(config, Expect::Holds, Expect::Holds)
}

/// The fix under drift beyond the allowance: the lock breaks, fencing holds.
pub fn fixed_drift_beyond_allowance() -> Scenario {
    let config = with("fix: drift beyond the allowance", |c| {
        fixed(c);
        c.drifting_clocks = 2;
        c.drift = Drift::Adversarial;
    });
    Scenario::new(config, Expect::Holds, Expect::Violated)
}

/// The fix under a pause that stops the client's clock.
pub fn fixed_suspend() -> Scenario {
    let config = with("fix: pause (clock stops)", |c| {
        fixed(c);
        c.pauses = 1;
        c.pause_clock = PauseClock::Stops;
    });
    Scenario::new(config, Expect::Holds, Expect::Violated)
}

/// The fix, with clients that write without checking `is_held()`.
pub fn fixed_no_check() -> Scenario {
    let config = with("fix: client skips is_held()", |c| {
        fixed(c);
        c.before_write = BeforeWrite::JustWrite;
    });
    Scenario::new(config, Expect::Holds, Expect::Unchecked)
}

/// The fix; a node without persistence crashes and stays down for a whole lease
/// (Redlock's delayed restart): the lock stays safe.
pub fn fixed_delayed_restart() -> Scenario {
    let config = with("fix: crash, no persistence, delayed restart", |c| {
        fixed(c);
        c.crashes = 1;
        c.restart = restart(Persistence::Nothing, c.ttl);
    });
    Scenario::new(config, Expect::Unchecked, Expect::Holds)
}

/// As [`fixed_delayed_restart`], for the tokens: the counter came back at 0, so a later
/// holder can be handed a token already used.
pub fn fixed_delayed_restart_tokens() -> Scenario {
    let mut scenario = fixed_delayed_restart();
    scenario.config.name = "fix: crash, no persistence, delayed restart (tokens)";
    scenario.fenced = Expect::Violated;
    scenario.mutual_exclusion = Expect::Unchecked;
    scenario.test_spread = 1;
    scenario
}

/// The fix; a node loses its lock key in a crash but keeps its counter, and rejoins at
/// once. The lock breaks; fencing holds.
pub fn fixed_counter_only() -> Scenario {
    let config = with("fix: crash, key lost, counter kept", |c| {
        fixed(c);
        c.crashes = 1;
        c.restart = restart(Persistence::CounterOnly, 0);
    });
    Scenario::new(config, Expect::Holds, Expect::Violated)
}

/// The fix with a plain counter; a counter expires between two holders (a node holding
/// no key loses it, as `fence.lua`'s expiry would): it starts again at 1, and a
/// later holder can be handed a token already used.
pub fn fixed_counter_expires() -> Scenario {
    let config = with("fix: counter expires", |c| {
        fixed(c);
        c.counter_expiries = 1;
    });
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// A single Redis server (majority 1) with a plain counter: a crash without persistence,
/// restart a tick later. The counter starts again at 1: tokens go back.
pub fn single_restart() -> Scenario {
    let config = with(
        "single node: crash, no persistence, restart after a tick",
        |c| {
            fixed(c);
            c.nodes = 1;
            c.crashes = 1;
            c.restart = restart(Persistence::Nothing, 1);
        },
    );
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// Larger runs of the fix, faults two at a time, for the `explore` example. To stay
/// within [`STATE_LIMIT`](crate::STATE_LIMIT) every counter starts at 0.
pub fn combined() -> Vec<Scenario> {
    let both = |name, change: fn(&mut Config)| {
        let mut config = with(name, change);
        fixed(&mut config);
        config.counter_spread = 0;
        Scenario::new(config, Expect::Holds, Expect::Violated).slow()
    };
    vec![
        both("fix: pause + drift", |c| {
            c.pauses = 1;
            c.drifting_clocks = 1;
        }),
        both("fix: pause + crash", |c| {
            c.pauses = 1;
            c.crashes = 1;
        }),
        both("fix: pause + lost message", |c| {
            c.pauses = 1;
            c.lost_messages = 1;
        }),
        both("fix: retry + lost message", |c| {
            c.attempts = 2;
            c.lost_messages = 1;
        }),
    ]
}
