//! What one run of the failover model explores, and the rule a waiter follows when a
//! grant is pushed to it.

/// When a waiter trusts a grant pushed over its pub/sub link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The code before the fix behind a single URL (`trusts_grants()` true): a pushed grant
    /// is trusted whichever server the link that carried it is on.
    TrustAnyLink,
    /// Mutation of the fix: the link's role is checked when it is made (as a classic link
    /// does when sharded), not again: a grant is trusted from a link that was on the
    /// primary when it was made.
    TrustLinkCheckedOnce,
    /// The fix: a grant is trusted only from a link on the server that holds the data
    /// (role and run id checked, as of the grant); otherwise it is confirmed by an
    /// attempt on the primary.
    TrustLinkOnPrimary,
}

/// One configuration of the failover model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FailoverConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// Clients: the first holds the lock, the second waits with its link on the first
    /// primary, the others call `acquire` at any moment (through the endpoint: their
    /// links go to the primary of the moment).
    pub clients: usize,
    /// The rule.
    pub rule: Rule,
}

impl FailoverConfig {
    /// A holder, a waiter and a third client, under `rule`.
    pub fn code(rule: Rule) -> Self {
        FailoverConfig {
            name: "failover",
            clients: 3,
            rule,
        }
    }
}

impl crate::check::Named for FailoverConfig {
    fn name(&self) -> &str {
        self.name
    }
}
