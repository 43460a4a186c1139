//! The lease-life configurations checked by the tests and the `explore` example, each
//! with what it is expected to show.

use super::check_limited;
use super::config::{LifeConfig, Rule};
use super::model::{BELIEF_WITHIN_TRUTH, ORPHAN_RAN, RAISED, RESENT_RAN, SHORTENED, TAKEN};
use super::state::Step;
use crate::check::Report;
use crate::scenarios::{Expect, judge};

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: LifeConfig,
    /// The expectation for [`BELIEF_WITHIN_TRUTH`].
    pub belief: Expect,
    /// The examples (`sometimes` properties) a run that visits every state must find.
    pub examples: Vec<&'static str>,
}

impl Scenario {
    fn new(config: LifeConfig, belief: Expect) -> Self {
        Scenario {
            config,
            belief,
            examples: Vec::new(),
        }
    }

    fn examples(mut self, examples: &[&'static str]) -> Self {
        self.examples = examples.to_vec();
        self
    }

    /// Runs the checker as far as the expectation needs: every state when the property
    /// is expected to hold, else until its counterexample is found.
    pub fn run(&self, state_limit: usize) -> Report<LifeConfig> {
        let stop_at: &[&'static str] = if self.belief == Expect::Violated {
            &[BELIEF_WITHIN_TRUTH]
        } else {
            &[]
        };
        check_limited(self.config.clone(), stop_at, state_limit)
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report<LifeConfig>) -> Result<(), String> {
        judge(report, &[(BELIEF_WITHIN_TRUTH, self.belief)])?;
        if let Some(missing) = (self.examples.iter()).find(|e| report.discovery(e).is_none()) {
            return Err(format!("{missing}: no example found"));
        }
        Ok(())
    }
}

fn with(name: &'static str, rule: Rule, change: impl FnOnce(&mut LifeConfig)) -> LifeConfig {
    let mut config = LifeConfig::code(rule);
    config.name = name;
    change(&mut config);
    config
}

/// The rule before the fix, a shortening extend cancelled or failing after it ran: the
/// claim keeps its old value while Redis expires the key at the short ttl. Replies are
/// read as soon as they come (a slow reply alone breaks the rule too: the claim is
/// lowered only when the reply is read).
pub fn before_cancelled_shortening() -> Scenario {
    Scenario::new(
        with(
            "lease life before the fix: a shortening extend cancelled after it ran",
            Rule::SendOrder,
            |c| {
                c.long = None;
                c.cancels = 1;
                c.cancelled_step = Some(Step::Extend);
                c.prompt_replies = true;
            },
        ),
        Expect::Violated,
    )
}

/// The rule before the fix, a shortening extend re-sent after NOSCRIPT: a renewal sent
/// after it runs first, and its reply (the old ttl) wins.
pub fn before_reload_reorder() -> Scenario {
    Scenario::new(
        with(
            "lease life before the fix: a renewal overtakes an extend re-sent after NOSCRIPT",
            Rule::SendOrder,
            |c| {
                c.long = None;
                c.reloads = 1;
                c.prompt_replies = true;
            },
        ),
        Expect::Violated,
    )
}

/// The rule before the fix, a lengthening extend and a renewal (the old ttl) sent while
/// it was on its way: the renewal runs after it and cuts the key back, and fails (its
/// reply is lost) while the extend's reply raised the claim.
pub fn before_lengthening_overlap() -> Scenario {
    Scenario::new(
        with(
            "lease life before the fix: a failed renewal cuts back a lengthening extend",
            Rule::SendOrder,
            |c| {
                c.short = None;
                c.cancels = 1;
                c.cancelled_step = Some(Step::Renewal);
                c.prompt_replies = true;
            },
        ),
        Expect::Violated,
    )
}

/// The fix under every fault at once: two extends (shorter or longer), a cancellation, a
/// NOSCRIPT reload, a retry across a reconnect and Redis' clock running fast within the
/// allowance.
pub fn fixed_everything() -> Scenario {
    Scenario::new(
        with(
            "lease life fix: cancel, NOSCRIPT, retry, fast Redis clock",
            Rule::OneStepLowerFirst,
            |c| {
                c.extends = 2;
                c.cancels = 2;
                c.reloads = 1;
                c.retries = 1;
                c.skew = true;
            },
        ),
        Expect::Holds,
    )
    .examples(&[SHORTENED, RESENT_RAN, ORPHAN_RAN, RAISED, TAKEN])
}

/// The fix, a cancelled request reaching Redis after a later step (held back on a dead
/// connection while the client went on over a new one): a shortening extend cancelled,
/// then a lengthening one whose reply raises the claim, then the first one runs. The fix
/// assumes that a request the client stopped waiting for runs before anything it sends
/// later, or never.
pub fn fixed_late_orphan() -> Scenario {
    Scenario::new(
        with(
            "lease life fix: a cancelled request arrives after a later step",
            Rule::OneStepLowerFirst,
            |c| {
                c.extends = 2;
                c.cancels = 1;
                c.late_orphans = 1;
            },
        ),
        Expect::Violated,
    )
}

/// The fix without the drift allowance, Redis' clock running fast: the claim outlives the
/// key by the tick Redis' clock gained (the allowance is needed).
pub fn fixed_without_drift() -> Scenario {
    Scenario::new(
        with(
            "lease life fix, no drift allowance: Redis' clock runs fast",
            Rule::OneStepLowerFirst,
            |c| {
                c.drift = 0;
                c.skew = true;
            },
        ),
        Expect::Violated,
    )
}

/// Mutation: one step at a time, but a shortening extend lowers nothing before its reply.
pub fn mutation_one_step() -> Scenario {
    Scenario::new(
        with(
            "lease life mutation: one step at a time, no lowering first",
            Rule::OneStep,
            |c| {
                c.cancels = 1;
            },
        ),
        Expect::Violated,
    )
}

/// Mutation: a shortening extend lowers the claim first, but steps overlap.
pub fn mutation_lower_first() -> Scenario {
    Scenario::new(
        with(
            "lease life mutation: lowering first, steps overlap",
            Rule::LowerFirst,
            |c| {
                c.cancels = 1;
                c.reloads = 1;
            },
        ),
        Expect::Violated,
    )
}

/// Every lease-life scenario.
pub fn all() -> Vec<Scenario> {
    vec![
        before_cancelled_shortening(),
        before_reload_reorder(),
        before_lengthening_overlap(),
        fixed_everything(),
        fixed_late_orphan(),
        fixed_without_drift(),
        mutation_one_step(),
        mutation_lower_first(),
    ]
}
