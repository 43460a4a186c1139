//! `fence.lua`'s hybrid clock (`max(counter + 1, the node's clock)`) on top of the fix:
//! restarts without persistence, expiring counters, clocks stepping back or drifting, on
//! 3 nodes and on a single Redis.

use super::fixed::{fixed, single_restart};
use super::scenario::{Expect, Scenario, restart, with};
use crate::config::{BeforeWrite, Config, Drift, Fencing, Persistence};

/// `fence.lua`'s hybrid clock on top of the fix, as the code now runs.
fn hybrid(config: &mut Config) {
    fixed(config);
    config.fencing = Fencing::HYBRID;
}

/// The hybrid clock, no fault: both properties hold.
pub fn hybrid_no_fault() -> Scenario {
    let config = with("hybrid: no fault", hybrid);
    Scenario::new(config, Expect::Holds, Expect::Holds)
}

/// The hybrid clock; a node without persistence crashes and stays down for a whole lease
/// (Redlock's delayed restart, the row [`fixed_delayed_restart_tokens`](super::fixed_delayed_restart_tokens) breaks): its
/// counter is gone, but its clock went on, and every grant after the restart is past
/// every token it handed out before. Both properties hold.
pub fn hybrid_delayed_restart() -> Scenario {
    let config = with("hybrid: crash, no persistence, delayed restart", |c| {
        hybrid(c);
        c.crashes = 1;
        c.restart = restart(Persistence::Nothing, c.ttl);
    });
    let mut scenario = Scenario::new(config, Expect::Holds, Expect::Holds);
    // Some nodes may start with a grant at this instant: the tokens a plain counter
    // would reuse.
    scenario.test_spread = 1;
    scenario
}

/// The hybrid clock; a node without persistence crashes and restarts a tick later, while
/// the key it lost may still be live: the lock breaks, the tokens hold.
pub fn hybrid_quick_restart() -> Scenario {
    let config = with("hybrid: crash, no persistence, restart after a tick", |c| {
        hybrid(c);
        c.crashes = 1;
        c.restart = restart(Persistence::Nothing, 1);
    });
    let mut scenario = Scenario::new(config, Expect::Holds, Expect::Violated);
    // Some nodes may start with a grant at this instant: the tokens a plain counter
    // would reuse.
    scenario.test_spread = 1;
    scenario
}

/// The hybrid clock; a counter expires between two holders, as in
/// [`fixed_counter_expires`](super::fixed_counter_expires): fencing holds.
pub fn hybrid_counter_expires() -> Scenario {
    let config = with("hybrid: counter expires", |c| {
        hybrid(c);
        c.counter_expiries = 1;
    });
    let mut scenario = Scenario::new(config, Expect::Holds, Expect::Holds);
    // Some nodes may start with a grant at this instant: the tokens a plain counter
    // would reuse.
    scenario.test_spread = 1;
    scenario
}

/// The hybrid clock; a node's clock steps back two ticks, no crash: the stored counter
/// keeps that node's grants rising. Fencing holds (the lock may not: the key on that
/// node lives two ticks longer).
pub fn hybrid_step_back() -> Scenario {
    let config = with("hybrid: a clock steps back 2 ticks, no crash", |c| {
        hybrid(c);
        c.clock_step_back = 2;
        c.clocks_stepping_back = 1;
    });
    Scenario::new(config, Expect::Holds, Expect::Unchecked)
}

/// As [`single_restart`] with the hybrid clock: the server's clock went on while it was
/// down, so its first grant after the restart is past every token before. Fencing holds.
pub fn hybrid_single_restart() -> Scenario {
    let mut scenario = single_restart();
    scenario.config.name = "hybrid, single node: crash, no persistence, restart after a tick";
    scenario.config.fencing = Fencing::HYBRID;
    scenario.fenced = Expect::Holds;
    scenario.test_spread = 0;
    scenario
}

/// Mutation of the clock assumption, single server: down a tick, and its clock steps back
/// two, more than the outage and as much as the time since its last grant: after the
/// restart it grants a token it already handed out. Fencing breaks.
pub fn hybrid_single_step_back() -> Scenario {
    let mut scenario = hybrid_single_restart();
    scenario.config.name =
        "hybrid, single node: crash, no persistence, down 1 tick, clock steps back 2";
    scenario.config.clock_step_back = 2;
    scenario.config.clocks_stepping_back = 1;
    scenario.fenced = Expect::Violated;
    scenario.mutual_exclusion = Expect::Unchecked;
    scenario.test_spread = 1;
    scenario
}

/// The hybrid clock, 3 nodes: a node without persistence is down a tick and its clock
/// steps back two, more than the outage. Its own grants fall behind, but every majority
/// includes another node whose clock (or counter) is past the old tokens, and the token is
/// the majority's largest: fencing holds. The lock does not (the key lost in the crash).
/// Every node starts without a counter, to stay within [`STATE_LIMIT`](crate::STATE_LIMIT).
pub fn hybrid_one_clock_back() -> Scenario {
    let config = with(
        "hybrid: crash, no persistence, down 1 tick, one clock steps back 2",
        |c| {
            hybrid(c);
            c.crashes = 1;
            c.restart = restart(Persistence::Nothing, 1);
            c.clock_step_back = 2;
            c.clocks_stepping_back = 1;
            c.counter_spread = 0;
        },
    );
    Scenario::new(config, Expect::Holds, Expect::Violated).slow()
}

/// The fix's other rows with the hybrid clock, for the `explore` example and the ignored
/// test: the clock does not weaken what the counter guaranteed. Every counter starts
/// absent (as the tests' bounds).
pub fn hybrid_others() -> Vec<Scenario> {
    let run = |name, change: fn(&mut Config), lock| {
        let mut config = with(name, change);
        hybrid(&mut config);
        config.counter_spread = 0;
        Scenario::new(config, Expect::Holds, lock).slow()
    };
    vec![
        run(
            "hybrid: pause (clock runs)",
            |c| c.pauses = 1,
            Expect::Violated,
        ),
        run(
            "hybrid: drift within the allowance",
            |c| c.drifting_clocks = 1,
            Expect::Holds,
        ),
        run(
            "hybrid: drift beyond the allowance",
            |c| {
                c.drifting_clocks = 2;
                c.drift = Drift::Adversarial;
            },
            Expect::Violated,
        ),
        run(
            "hybrid: crash (node persists everything)",
            |c| c.crashes = 1,
            Expect::Holds,
        ),
        run(
            "hybrid: lost message",
            |c| c.lost_messages = 1,
            Expect::Holds,
        ),
        run(
            "hybrid: client skips is_held()",
            |c| c.before_write = BeforeWrite::JustWrite,
            Expect::Unchecked,
        ),
        run(
            "hybrid: crash, no persistence, down 2 ticks, one clock drifting a tick",
            |c| {
                c.crashes = 1;
                c.restart = restart(Persistence::Nothing, 2);
                c.drifting_clocks = 1;
            },
            Expect::Unchecked,
        ),
        hybrid_restart_within_skew(),
    ]
}

/// The hybrid clock, 3 nodes: one node's clock runs a tick ahead of the others, and a
/// node without persistence is down only a tick. A token taken from the fast clock and
/// written back to the node that then crashes is remembered by no node of the next
/// majority, whose clocks have just caught up with it: two holders get the same token.
/// The outage (the time a lost counter is not needed) must exceed the skew between node
/// clocks.
pub fn hybrid_restart_within_skew() -> Scenario {
    let config = with(
        "hybrid: crash, no persistence, down 1 tick, one clock drifting a tick",
        |c| {
            hybrid(c);
            c.crashes = 1;
            c.restart = restart(Persistence::Nothing, 1);
            c.drifting_clocks = 1;
            c.counter_spread = 0;
        },
    );
    Scenario::new(config, Expect::Violated, Expect::Unchecked).slow()
}

/// A single Redis whose last write is lost, down a tick (an asynchronous failover to a
/// replica that had not received the last grant, a restart from an `appendfsync everysec`
/// file or an RDB snapshot), under `fencing`: the counter comes back older than the last
/// token handed out.
pub(super) fn single_last_write_lost(
    name: &'static str,
    fencing: Fencing,
    fenced: Expect,
) -> Scenario {
    let config = with(name, |c| {
        fixed(c);
        c.fencing = fencing;
        c.nodes = 1;
        c.crashes = 1;
        c.restart = restart(Persistence::LastWriteLost, 1);
        // A counter from earlier grants (behind the clock or at it), which the lost write
        // changed.
        c.counter_spread = 2;
    });
    let mut scenario = Scenario::new(config, fenced, Expect::Unchecked);
    scenario.test_spread = 2;
    scenario
}

/// The hybrid clock, a single Redis losing its last write: the clock went on, and the
/// next grant is past the counter it came back with. Fencing holds.
pub fn hybrid_single_last_write_lost() -> Scenario {
    single_last_write_lost(
        "hybrid, single node: crash losing the last write (asynchronous failover), down 1 tick",
        Fencing::HYBRID,
        Expect::Holds,
    )
}
