//! A waiting acquisition's standing in the lease's queue, as one protocol: where it stands
//! between two attempts ([`Standing`]), what holds it there (its grant [`Registration`]
//! and queue [`Place`], or its release-notice [`Watch`]), and how its wait ends (granted,
//! claimed, or given back: [`Waiter`]).

use std::sync::Arc;

use tokio::time::Instant;

use crate::engine::GiveBack;
use crate::keys::LockKeys;
use crate::notify::{Notifier, Place, Registration, Watch};
use crate::scripts::Kind;
use crate::token::OwnerToken;

use super::queue::Queue;

/// Where a waiter stands in the lease's queue for its next attempt: the [`Queue`] that
/// attempt joins as.
///
/// In the hand-off model (`redlease-model`'s `handoff`), a waiter is a client in
/// `Phase::Attempting` or `Phase::Waiting`; its standing is whether its token is in the
/// model's `State::queue` and its `Client::subscribed`:
/// - [`NotQueued`](Standing::NotQueued): not in `State::queue`;
/// - [`QueuedForGrants`](Standing::QueuedForGrants): in `State::queue` with `subscribed`;
///   a release hands it the lock (`Action::Release`, then `Action::Take`);
/// - [`QueuedSilently`](Standing::QueuedSilently): in the queue with no grant channel (a
///   read-write lock's place; the model, of the mutex, has none: there a queued waiter
///   whose subscription is down is skipped by a release);
/// - [`Listening`](Standing::Listening): for release notices (a quorum's, a Cluster's);
///   not in the model.
///
/// Its wait ends as the model's client leaves `Phase::Waiting`: **granted** (it read a
/// grant it can use, `Action::Take` to `Phase::Holding`), **claimed** (an attempt found
/// the lease free or already its own, `Action::Read` of `Reply::Fresh` / `Reply::Ours` to
/// `Phase::Holding`), or **given back** (it gave up, or its attempt failed, with
/// something perhaps left in Redis: `Action::GiveUp` to `Phase::Done`): see [`Waiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// In no queue: an attempt only tries (and withdraws a place an earlier attempt may
    /// have left).
    NotQueued,
    /// Queued with its client's grant channel, which is up: a release hands it the lock.
    QueuedForGrants,
    /// Queued with no grant channel (nothing can hand it the lock): its place keeps later
    /// waiters out until its waiter comes back for the lock itself.
    QueuedSilently,
    /// Subscribed to the lease's release notices: a mark in Redis that it listens, and
    /// it tries again when one comes.
    Listening,
}

impl Standing {
    /// How the attempt that keeps this standing joins the queue.
    pub(super) fn queue(self) -> Queue {
        match self {
            Self::NotQueued => Queue::No,
            Self::QueuedForGrants => Queue::Grants,
            Self::QueuedSilently => Queue::Silent,
            Self::Listening => Queue::Listen,
        }
    }
}

/// One waiting acquisition of `token`: what holds its standing (registration, place,
/// watch) and the give-back of whatever its attempts may have left in Redis.
///
/// Its ends: [`granted`](Waiter::granted) and [`claimed`](Waiter::claimed) settle its
/// place and disarm the give-back (the lease passes to a guard); **given back** is its
/// drop while the give-back is armed (a dropped or failed acquisition): the give-back
/// runs the release script with its token, and an unsettled place gives back a grant
/// that comes later.
pub(super) struct Waiter {
    // Dropped in this order: the watch, the registration, the place, the give-back.
    /// Subscribed to the lease's release notices (a quorum's, a Cluster's).
    watch: Option<Watch>,
    /// Registered for grants to its token (from its first registration on, always).
    registration: Option<Registration>,
    /// Its token's queue place, from its first registration on: a grant for it after the
    /// acquisition ended is given back, unless settled.
    place: Option<Place>,
    /// Armed while something of ours may be left in Redis.
    give_back: GiveBack,
    notifier: Arc<Notifier>,
    keys: Arc<LockKeys>,
    token: OwnerToken,
    kind: Kind,
    /// Whether it keeps a silent place where no hand-off can reach it.
    keeps_silent: bool,
}

impl Waiter {
    /// A waiter not queued yet, its give-back armed.
    pub(super) fn new(
        notifier: &Arc<Notifier>,
        give_back: GiveBack,
        keys: &Arc<LockKeys>,
        token: &OwnerToken,
        kind: Kind,
        keeps_silent: bool,
    ) -> Self {
        Self {
            watch: None,
            registration: None,
            place: None,
            give_back,
            notifier: Arc::clone(notifier),
            keys: Arc::clone(keys),
            token: token.clone(),
            kind,
            keeps_silent,
        }
    }

    /// Where the next attempt puts it: queued for grants while hand-offs can reach it
    /// (registered, its client's grant subscription up), else silently where places are
    /// kept so, else listening for release notices when it listens, else nowhere.
    pub(super) fn standing(&self) -> Standing {
        if self.registered() && self.notifier.subscribed(&self.keys) {
            Standing::QueuedForGrants
        } else if self.keeps_silent {
            Standing::QueuedSilently
        } else if self.listening() {
            Standing::Listening
        } else {
            Standing::NotQueued
        }
    }

    /// Whether it is registered for grants (whether or not they can reach it now).
    pub(super) fn registered(&self) -> bool {
        self.registration.is_some()
    }

    /// Whether it listens for the lease's release notices.
    pub(super) fn listening(&self) -> bool {
        self.watch.is_some()
    }

    /// Registers for grants, and holds its queue place from then on.
    pub(super) fn register(&mut self) {
        let (notifier, token, keys) = (&self.notifier, &self.token, &self.keys);
        self.place
            .get_or_insert_with(|| notifier.place(token, keys, self.kind));
        self.registration = Some(notifier.register(token, keys));
    }

    /// A grant was read: later ones (after another queue place) need a new registration.
    /// The old one goes first: its drop removes our token's entry.
    pub(super) fn reregister(&mut self) {
        drop(self.registration.take());
        self.registration = Some(self.notifier.register(&self.token, &self.keys));
    }

    /// Listens with `watch` (`None`: the subscription did not come in time); whether it
    /// listens now.
    pub(super) fn listen(&mut self, watch: Option<Watch>) -> bool {
        self.watch = watch;
        self.watch.is_some()
    }

    /// Its watch, if it listens.
    pub(super) fn watch(&self) -> Option<&Watch> {
        self.watch.as_ref()
    }

    /// Its registration, if registered.
    pub(super) fn registration_mut(&mut self) -> Option<&mut Registration> {
        self.registration.as_mut()
    }

    /// An attempt is about to be sent: whatever it leaves is given back if the acquisition
    /// ends without the lease (the give-back is armed before every attempt, and disarmed
    /// only by a reply that proves nothing of ours is left), and may be granted until
    /// `until`, which a give-back that cannot reach Redis keeps trying for.
    pub(super) fn attempting(&mut self, until: Instant) {
        self.give_back.arm();
        self.give_back.keep_trying_until(until);
    }

    /// An attempt found the lease busy: when it is in no queue and keeps no silent place,
    /// nothing of ours is left in Redis, and nothing is to be given back.
    pub(super) fn busy(&mut self) {
        if !self.registered() && !self.keeps_silent {
            self.give_back.disarm();
        }
    }

    /// Ends its wait **claimed**: an attempt found the lease free or already its own.
    pub(super) fn claimed(&mut self) {
        self.settle();
    }

    /// Ends its wait **granted**: a grant it read hands it the lease.
    pub(super) fn granted(&mut self) {
        self.settle();
    }

    /// The lease passes to a guard: nothing is left to give back, and its queue place (if
    /// any) is settled.
    fn settle(&mut self) {
        self.give_back.disarm();
        if let Some(place) = self.place.take() {
            place.settle();
        }
    }
}
