//! The order of one token's commands to one node: a late give-back never undoes a later
//! grant.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use tokio::sync::watch;

use crate::backend::deployment::Deployment;

/// The commands of one token to one node of one deployment.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct TurnKey {
    deployment: usize,
    node: usize,
    token: String,
}

impl TurnKey {
    pub(super) fn new(deployment: &Deployment, node: usize, token: &str) -> Self {
        Self {
            deployment: std::ptr::from_ref(deployment).addr(),
            node,
            token: token.to_owned(),
        }
    }
}

/// Turns handed out so far, and per key the latest command's: its number and whether it
/// is done.
#[derive(Default)]
struct Turns {
    last: u64,
    latest: HashMap<TurnKey, (u64, watch::Receiver<bool>)>,
}

static TURNS: LazyLock<Mutex<Turns>> = LazyLock::new(Mutex::default);

fn turns() -> std::sync::MutexGuard<'static, Turns> {
    // Inserts and removes only: a poisoned lock is still consistent.
    TURNS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One command's place in the order of a token's commands to a node: it goes after every
/// command whose turn was taken before it (an attempt whose reply was not awaited, the
/// give-back after it, the next attempt), however the tasks that run them are scheduled.
/// A late give-back can therefore never undo a later grant, nor a late grant outlive the
/// release that followed it. Taken synchronously, in program order; done when dropped
/// (once the turn before it is done too).
pub(super) struct Turn {
    key: TurnKey,
    seq: u64,
    before: Option<watch::Receiver<bool>>,
    done: Option<watch::Sender<bool>>,
}

impl Turn {
    pub(super) fn take(key: TurnKey) -> Self {
        let (done, rx) = watch::channel(false);
        let mut turns = turns();
        turns.last += 1;
        let seq = turns.last;
        let before = turns
            .latest
            .insert(key.clone(), (seq, rx))
            .map(|(_, rx)| rx);
        Self {
            key,
            seq,
            before,
            done: Some(done),
        }
    }

    /// Waits until every command before this one is done.
    pub(super) async fn wait(&mut self) {
        if let Some(before) = self.before.as_mut() {
            // An error means the sender went away: that turn is over too.
            let _ = before.wait_for(|done| *done).await;
        }
        self.before = None;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(done) = self.done.take() else {
            return;
        };
        let key = self.key.clone();
        let seq = self.seq;
        let finish = move || {
            let _ = done.send(true);
            let mut turns = turns();
            if turns
                .latest
                .get(&key)
                .is_some_and(|(latest, _)| *latest == seq)
            {
                turns.latest.remove(&key);
            }
        };
        match self.before.take() {
            Some(mut before) if !*before.borrow() => {
                // Called off before its turn: done once the turn before it is.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = before.wait_for(|done| *done).await;
                        finish();
                    });
                } else {
                    finish();
                }
            }
            _ => finish(),
        }
    }
}
