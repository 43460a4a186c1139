//! The order of one token's commands to one node: a late give-back never undoes a later
//! grant.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use hashbrown::HashMap;
use tokio::sync::Notify;

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

/// Whether a turn is over, and who waits for it. Lighter than a watch channel (every
/// quorum command takes a turn: ten per acquire + release on five nodes): setting it wakes
/// one notifier, and only when someone waits.
#[derive(Default)]
struct Over {
    over: AtomicBool,
    notify: Notify,
}

impl Over {
    fn is_over(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    fn set(&self) {
        self.over.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read: a `set` in between wakes it.
            notified.as_mut().enable();
            if self.is_over() {
                return;
            }
            notified.await;
        }
    }
}

/// Turns handed out so far, and per key the latest command's: its number and whether it
/// is over.
#[derive(Default)]
struct Turns {
    last: u64,
    latest: HashMap<TurnKey, (u64, Arc<Over>)>,
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
/// release that followed it. Taken synchronously, in program order; over when dropped
/// (once the turn before it is over too).
pub(super) struct Turn {
    before: Option<Arc<Over>>,
    end: Option<End>,
}

impl Turn {
    pub(super) fn take(key: TurnKey) -> Self {
        let over = Arc::new(Over::default());
        let mut turns = turns();
        turns.last += 1;
        let seq = turns.last;
        let before = turns
            .latest
            .insert(key.clone(), (seq, Arc::clone(&over)))
            .map(|(_, before)| before);
        Self {
            before,
            end: Some(End { key, seq, over }),
        }
    }

    /// Waits until every command before this one is over.
    pub(super) async fn wait(&mut self) {
        if let Some(before) = &self.before {
            before.wait().await;
        }
        self.before = None;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(end) = self.end.take() else {
            return;
        };
        match self.before.take() {
            Some(before) if !before.is_over() => {
                // Called off before its turn: over once the turn before it is.
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        before.wait().await;
                        drop(end);
                    });
                }
                // Without a runtime, or when the runtime drops the task unfinished, `end`
                // is dropped at once: nothing would ever run the commands waiting for it.
            }
            _ => drop(end),
        }
    }
}

/// The end of a turn: when dropped, the turn is over (and forgotten when it was its key's
/// latest).
struct End {
    key: TurnKey,
    seq: u64,
    over: Arc<Over>,
}

impl Drop for End {
    fn drop(&mut self) {
        {
            let mut turns = turns();
            if turns
                .latest
                .get(&self.key)
                .is_some_and(|(latest, _)| *latest == self.seq)
            {
                turns.latest.remove(&self.key);
            }
        }
        self.over.set();
    }
}
