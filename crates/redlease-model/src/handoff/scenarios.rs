//! The hand-off configurations checked by the tests and the `explore` example, each with
//! what it is expected to show.

use super::check_limited;
use super::config::{HandoffConfig, Rule};
use super::model::{
    CONFIRMED, HANDED_OFF, MUTUAL_EXCLUSION, PAUSED_HANDOFF, SHORT_LEASE, VOID_DISCARDED,
    WITHIN_LEASE,
};
use crate::check::Report;
use crate::scenarios::{Expect, judge};

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: HandoffConfig,
    /// The expectation for [`MUTUAL_EXCLUSION`].
    pub mutual_exclusion: Expect,
    /// The expectation for [`WITHIN_LEASE`].
    pub within_lease: Expect,
    /// The expectation for [`SHORT_LEASE`]: violated by today's rule, held by the fix
    /// (by construction), not asserted for the mutations (their runs stop early).
    pub short_lease: Expect,
    /// The examples (`sometimes` properties) a run that visits every state must find.
    pub examples: Vec<&'static str>,
}

/// The lease the tests use (the scenarios' own is [`HandoffConfig::code`]'s 3 ticks):
/// about a third of the states.
pub const TEST_TTL: u8 = 2;

impl Scenario {
    fn new(config: HandoffConfig, expect: Expect) -> Self {
        Scenario {
            mutual_exclusion: expect,
            within_lease: expect,
            short_lease: match config.rule {
                Rule::Today => Expect::Violated,
                Rule::Fixed => Expect::Holds,
                _ => Expect::Unchecked,
            },
            examples: Vec::new(),
            config,
        }
    }

    fn examples(mut self, examples: &[&'static str]) -> Self {
        self.examples = examples.to_vec();
        self
    }

    /// The same scenario with the tests' shorter lease ([`TEST_TTL`]).
    #[must_use]
    pub fn for_tests(&self) -> Scenario {
        let mut smaller = self.clone();
        smaller.config.ttl = TEST_TTL.min(self.config.ttl);
        smaller
    }

    fn expected(&self) -> [(&'static str, Expect); 3] {
        [
            (MUTUAL_EXCLUSION, self.mutual_exclusion),
            (WITHIN_LEASE, self.within_lease),
            (SHORT_LEASE, self.short_lease),
        ]
    }

    /// Runs the checker as far as the expectations need: every state when something is
    /// expected to hold, else until each expected counterexample is found.
    pub fn run(&self, state_limit: usize) -> Report<HandoffConfig> {
        let expected = self.expected();
        let holds = expected.iter().any(|(_, e)| *e == Expect::Holds);
        let stop_at: Vec<&'static str> = if holds {
            Vec::new()
        } else {
            (expected.iter())
                .filter(|(_, e)| *e == Expect::Violated)
                .map(|(p, _)| *p)
                .collect()
        };
        check_limited(self.config.clone(), &stop_at, state_limit)
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report<HandoffConfig>) -> Result<(), String> {
        judge(report, &self.expected())?;
        if let Some(missing) = (self.examples.iter()).find(|e| report.discovery(e).is_none()) {
            return Err(format!("{missing}: no example found"));
        }
        Ok(())
    }
}

fn with(name: &'static str, rule: Rule, change: impl FnOnce(&mut HandoffConfig)) -> HandoffConfig {
    let mut config = HandoffConfig::code(rule);
    config.name = name;
    change(&mut config);
    config
}

/// Today's rule, a waiter paused while the lock is handed to it: its stale grant, read
/// after a re-check found another client holding, is dated from that re-check (item 1).
pub fn today_pause() -> Scenario {
    Scenario::new(
        with("hand-off today: a paused waiter", Rule::Today, |_| {}),
        Expect::Violated,
    )
}

/// Today's rule, no pause: pub/sub alone holds a grant back past the lease.
pub fn today_slow_pubsub() -> Scenario {
    Scenario::new(
        with(
            "hand-off today: pub/sub slower than a lease",
            Rule::Today,
            |c| {
                c.pauses = 0;
                c.prompt_grants = false;
            },
        ),
        Expect::Violated,
    )
}

/// Today's rule where grants are confirmed by an attempt (Cluster, Sentinel, a quorum:
/// issue 24 saw no overlap there): the lock holds, but with no floor of validity a slow
/// reply, or a pause before a confirming `Ours` (dated from the latest busy attempt), makes
/// `acquire` return a lease already run out (issue 24, items 1 and 9).
pub fn today_confirming() -> Scenario {
    let mut scenario = Scenario::new(
        with(
            "hand-off today, grants confirmed by an attempt: a paused waiter",
            Rule::Today,
            |c| c.confirms_grants = true,
        ),
        Expect::Holds,
    )
    .examples(&[PAUSED_HANDOFF]);
    scenario.short_lease = Expect::Violated;
    scenario
}

/// The fix, a waiter paused at any moment for any time: both properties hold, and a
/// hand-off, a hand-off to a paused waiter, a void grant and a confirmation happen.
pub fn fixed_pause() -> Scenario {
    Scenario::new(
        with("hand-off fix: a paused waiter", Rule::Fixed, |_| {}),
        Expect::Holds,
    )
    .examples(&[HANDED_OFF, PAUSED_HANDOFF, VOID_DISCARDED, CONFIRMED])
}

/// The fix, pub/sub delivering grants at any later moment, no pause.
pub fn fixed_slow_pubsub() -> Scenario {
    Scenario::new(
        with(
            "hand-off fix: pub/sub slower than a lease",
            Rule::Fixed,
            |c| {
                c.pauses = 0;
                c.prompt_grants = false;
            },
        ),
        Expect::Holds,
    )
    .examples(&[HANDED_OFF, VOID_DISCARDED])
}

/// The fix, pub/sub slower than a lease and a data connection dropping (an attempt or
/// its reply lost).
pub fn fixed_link_drop() -> Scenario {
    Scenario::new(
        with(
            "hand-off fix: slow pub/sub and a dropped link",
            Rule::Fixed,
            |c| {
                c.pauses = 0;
                c.prompt_grants = false;
                c.link_drops = 1;
            },
        ),
        Expect::Holds,
    )
    .examples(&[HANDED_OFF, VOID_DISCARDED])
}

/// The fix, pub/sub slower than a lease and a grant subscription dropping (grants lost,
/// the waiter skipped until it is back).
pub fn fixed_subscription_drop() -> Scenario {
    Scenario::new(
        with(
            "hand-off fix: slow pub/sub and a dropped subscription",
            Rule::Fixed,
            |c| {
                c.pauses = 0;
                c.prompt_grants = false;
                c.subscription_drops = 1;
            },
        ),
        Expect::Holds,
    )
    .examples(&[HANDED_OFF, VOID_DISCARDED])
}

/// The fix, a pause and a waiter giving up (its give-back withdraws its place, or hands
/// on a lock handed to it).
pub fn fixed_give_up() -> Scenario {
    Scenario::new(
        with(
            "hand-off fix: a pause and a waiter giving up",
            Rule::Fixed,
            |c| {
                c.give_ups = 1;
            },
        ),
        Expect::Holds,
    )
    .examples(&[HANDED_OFF, VOID_DISCARDED])
}

/// Mutation: the fix without voiding stale grants (a stale grant dated from the floor).
pub fn mutation_no_void() -> Scenario {
    Scenario::new(
        with(
            "hand-off mutation: stale grants not void",
            Rule::NoVoid,
            |_| {},
        ),
        Expect::Violated,
    )
}

/// Mutation: the fix with grants dated from the latest attempt, which may be one that
/// failed after the grant.
pub fn mutation_latest_send() -> Scenario {
    Scenario::new(
        with(
            "hand-off mutation: grants dated from the latest attempt",
            Rule::LatestSend,
            |c| {
                c.pauses = 0;
                c.link_drops = 1;
                c.prompt_grants = false;
            },
        ),
        Expect::Violated,
    )
}

/// Mutation: `Ours` dated from its own send without the script refreshing the expiry.
pub fn mutation_no_refresh() -> Scenario {
    Scenario::new(
        with(
            "hand-off mutation: Ours without a refresh",
            Rule::NoRefresh,
            |_| {},
        ),
        Expect::Violated,
    )
}

/// Every hand-off scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        today_pause(),
        today_slow_pubsub(),
        today_confirming(),
        fixed_pause(),
        fixed_slow_pubsub(),
        fixed_link_drop(),
        fixed_subscription_drop(),
        fixed_give_up(),
        mutation_no_void(),
        mutation_latest_send(),
        mutation_no_refresh(),
    ]
}

/// How many states (repeats included) a run of a [`slow`] scenario may generate.
pub const SLOW_STATE_LIMIT: usize = 100_000_000;

/// The fix under two faults at once, a pause and a dropped data link (or an abandoned
/// attempt), with a lease of [`TEST_TTL`] ticks: more than [`STATE_LIMIT`](crate::STATE_LIMIT)
/// states generated, too slow for a debug `cargo test` (checked by `explore` and the
/// ignored test, with [`SLOW_STATE_LIMIT`]).
pub fn slow() -> Vec<Scenario> {
    vec![
        Scenario::new(
            with(
                "hand-off fix: a pause and a dropped link",
                Rule::Fixed,
                |c| {
                    c.ttl = TEST_TTL;
                    c.link_drops = 1;
                },
            ),
            Expect::Holds,
        )
        .examples(&[HANDED_OFF, PAUSED_HANDOFF, VOID_DISCARDED, CONFIRMED]),
    ]
}
