//! Running the checker over one configuration, and what it found.

use std::collections::BTreeSet;
use std::fmt::{self, Debug};
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model};

use crate::config::Config;
use crate::model::QuorumModel;
use crate::timeline::{timeline, verdict_of};

/// A path the checker found for one property: a counterexample for an `always` property,
/// an example for a `sometimes` one.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The numbered timeline of the path.
    pub steps: Vec<String>,
    /// What the last state shows.
    pub verdict: String,
}

/// One property's result.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The property's name.
    pub property: &'static str,
    /// `true` for an `always` property (a discovery is a violation), `false` for a
    /// `sometimes` one (a discovery is the example sought).
    pub always: bool,
    /// What the checker found, if anything.
    pub discovery: Option<Discovery>,
}

/// The result of one checker run over a configuration `C` (the quorum model's [`Config`]
/// unless said otherwise).
#[derive(Debug, Clone)]
pub struct Report<C = Config> {
    /// What was explored.
    pub config: C,
    /// Distinct states visited.
    pub unique_states: usize,
    /// States generated, repeats included.
    pub generated_states: usize,
    /// The longest path explored.
    pub max_depth: usize,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Whether every reachable state within the bounds was visited (false when the run
    /// stopped at its first discovery or at [`STATE_LIMIT`]).
    pub exhaustive: bool,
    /// Each property's result.
    pub outcomes: Vec<Outcome>,
}

/// A configuration a [`Report`] can name.
pub trait Named {
    /// A short label for reports.
    fn name(&self) -> &str;
}

impl Named for Config {
    fn name(&self) -> &str {
        self.name
    }
}

/// How many states (repeats included) one run may generate before it is stopped and
/// reported as not exhaustive: a bound on its time and memory.
pub const STATE_LIMIT: usize = 30_000_000;

/// Explores every reachable state of `config` within its bounds (one thread, breadth
/// first, so each discovery is a shortest path).
pub fn check(config: Config) -> Report {
    check_limited(config, &[], STATE_LIMIT)
}

/// Explores `config` until `property` has a discovery (or the space is exhausted).
pub fn check_until(config: Config, property: &'static str) -> Report {
    check_limited(config, &[property], STATE_LIMIT)
}

/// Explores `config` until every property in `stop_at` (when not empty) has a discovery,
/// the space is exhausted, or `state_limit` states were generated.
pub fn check_limited(config: Config, stop_at: &[&'static str], state_limit: usize) -> Report {
    let model = QuorumModel::new(config.clone());
    explore(model, config, stop_at, state_limit, timeline, verdict_of)
}

/// Runs the checker over `model` (one thread, breadth first) until every property in
/// `stop_at` (when not empty) has a discovery, the space is exhausted, or `state_limit`
/// states were generated. A discovery's path is told by the model's `timeline` and what
/// its last state shows by its `verdict`.
pub(crate) fn explore<M, C>(
    model: M,
    config: C,
    stop_at: &[&'static str],
    state_limit: usize,
    timeline: impl Fn(&C, &[(M::State, Option<M::Action>)]) -> Vec<String>,
    verdict: impl Fn(&C, &str, &[(M::State, Option<M::Action>)]) -> String,
) -> Report<C>
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + Debug + PartialEq + Hash + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let properties = model.properties();
    let mut builder = model.checker().threads(1).target_state_count(state_limit);
    if !stop_at.is_empty() {
        let wanted: BTreeSet<&'static str> = stop_at.iter().copied().collect();
        builder = builder.finish_when(HasDiscoveries::AllOf(wanted));
    }
    let started = Instant::now();
    let checker = builder.spawn_bfs().join();
    let elapsed = started.elapsed();
    let mut discoveries = checker.discoveries();
    let outcomes: Vec<Outcome> = properties
        .iter()
        .map(|p| Outcome {
            property: p.name,
            always: p.expectation == Expectation::Always,
            discovery: discoveries.remove(p.name).map(|path| {
                let steps = path.into_vec();
                Discovery {
                    steps: timeline(&config, &steps),
                    verdict: verdict(&config, p.name, &steps),
                }
            }),
        })
        .collect();
    let stopped_early = !stop_at.is_empty()
        && stop_at.iter().all(|p| {
            outcomes
                .iter()
                .any(|o| o.property == *p && o.discovery.is_some())
        });
    Report {
        config,
        unique_states: checker.unique_state_count(),
        generated_states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        exhaustive: !stopped_early && checker.state_count() < state_limit,
        outcomes,
    }
}

impl<C> Report<C> {
    /// The result for `property`.
    pub fn outcome(&self, property: &str) -> Option<&Outcome> {
        self.outcomes.iter().find(|o| o.property == property)
    }

    /// Whether an `always` property held in every state explored.
    pub fn holds(&self, property: &str) -> bool {
        self.outcome(property)
            .is_some_and(|o| o.always && o.discovery.is_none())
    }

    /// The discovery for `property`, if any.
    pub fn discovery(&self, property: &str) -> Option<&Discovery> {
        self.outcome(property).and_then(|o| o.discovery.as_ref())
    }
}

impl<C: Named> fmt::Display for Report<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}: {} distinct states ({} generated, depth {}) in {:.2?}{}",
            self.config.name(),
            self.unique_states,
            self.generated_states,
            self.max_depth,
            self.elapsed,
            if self.exhaustive {
                ", exhaustive"
            } else {
                ", stopped early"
            }
        )?;
        for o in &self.outcomes {
            let result = match (o.always, &o.discovery, self.exhaustive) {
                (true, None, true) => "HOLDS",
                (true, None, false) => "no violation found (not exhaustive)",
                (true, Some(_), _) => "VIOLATED",
                (false, Some(_), _) => "example found",
                (false, None, _) => "NO EXAMPLE",
            };
            writeln!(f, "  {:<48} {result}", o.property)?;
        }
        Ok(())
    }
}

impl fmt::Display for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.steps {
            writeln!(f, "{line}")?;
        }
        writeln!(f, "  => {}", self.verdict)
    }
}
