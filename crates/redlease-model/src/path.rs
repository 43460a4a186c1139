//! A discovery path replayed and told line by line: the parts that the models' timelines
//! share (each says what its own states and actions mean).

/// A path replayed: its states, and the actions between them.
#[derive(Debug)]
pub(crate) struct Replay<S, A> {
    /// The states, from the path's first.
    pub(crate) states: Vec<S>,
    /// The action from each state to the next (one fewer than the states).
    pub(crate) actions: Vec<A>,
}

/// `steps` replayed from its first state by `apply` (a model's step without the
/// canonical form, so that values are real rather than normalised). The replay stops at
/// an action `apply` finds impossible.
pub(crate) fn replay<S: Clone, A: Copy>(
    steps: &[(S, Option<A>)],
    apply: impl Fn(&S, A) -> Option<S>,
) -> Replay<S, A> {
    let actions: Vec<A> = steps.iter().filter_map(|(_, a)| *a).collect();
    let mut states: Vec<S> = steps.first().map(|(s, _)| s.clone()).into_iter().collect();
    for action in &actions {
        let Some(last) = states.last() else { break };
        match apply(last, *action) {
            Some(next) => states.push(next),
            None => break,
        }
    }
    let actions = actions
        .into_iter()
        .take(states.len().saturating_sub(1))
        .collect();
    Replay { states, actions }
}

/// The last state of `steps`, replayed from its first by `apply` (a model's step that is
/// always possible, without the canonical form); `None` for an empty path.
pub(crate) fn last<S: Clone, A: Copy>(
    steps: &[(S, Option<A>)],
    apply: impl Fn(&S, A) -> S,
) -> Option<S> {
    let (first, _) = steps.first()?;
    let actions = steps.iter().filter_map(|(_, a)| *a);
    Some(actions.fold(first.clone(), |s, a| apply(&s, a)))
}

/// The ticks of model time among `actions`.
pub(crate) fn ticks<A: PartialEq>(actions: &[A], tick: &A) -> u32 {
    u32::try_from(actions.iter().filter(|a| *a == tick).count()).unwrap_or(0)
}

/// The numbered timeline of a `replayed` path in a model of `config`, after its first line `start`: each run of `tick` actions is one
/// line, `time_passes(from, to, before, after)`; every other action one line,
/// `describe(config, t, action, before, after)`; each at its time `t` in ticks.
pub(crate) fn numbered<C, S, A: Copy + PartialEq>(
    config: &C,
    start: String,
    replayed: &Replay<S, A>,
    tick: A,
    time_passes: impl Fn(u32, u32, &S, &S) -> String,
    describe: impl Fn(&C, u32, A, &S, &S) -> String,
) -> Vec<String> {
    let Replay { states, actions } = replayed;
    let mut lines = vec![start];
    let mut t = 0u32;
    let mut k = 0;
    while k < actions.len() {
        let before = &states[k];
        if actions[k] == tick {
            let from = t;
            while k < actions.len() && actions[k] == tick {
                t += 1;
                k += 1;
            }
            let text = time_passes(from, t, before, &states[k]);
            lines.push(format!("{:>3}. t={t:<3} {text}", lines.len() + 1));
            continue;
        }
        let text = describe(config, t, actions[k], before, &states[k + 1]);
        lines.push(format!("{:>3}. t={t:<3} {text}", lines.len() + 1));
        k += 1;
    }
    lines
}
