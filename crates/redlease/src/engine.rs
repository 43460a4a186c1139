//! The lease engine of one [`Client`](crate::Client): what every primitive built on it
//! shares (the deployment, the grant and release notifications, the renewal scheduler, the
//! holder details), the leases it holds ([`Holding`]), and giving leases back, also from
//! operations that were dropped half-way ([`GiveBack`]) and at shutdown.

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Deployment;
use crate::clock::ClockWatch;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::lease::{Lease, State, lost};
use crate::notify::{Notifier, Wakeups};
use crate::renew::{Renewal, Renewer};
use crate::replies::{Handoff, Released};
use crate::scripts::Kind;
use crate::token::OwnerToken;
use crate::wait::{Wait, jitter};
use crate::waiters::Waiters;

/// The client-wide options every primitive's builder starts from (each builder may
/// override them).
#[derive(Debug, Clone)]
pub(crate) struct Defaults {
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    pub(crate) renewal: Renewal,
}

/// What a client's primitives share; a [`Client`](crate::Client) is an `Arc` of it.
pub(crate) struct Engine {
    pub(crate) deployment: Arc<Deployment>,
    pub(crate) notifier: Arc<Notifier>,
    /// Release notifications for quorum waiters, and on a Cluster (sharded) for waiters
    /// that do not queue for a hand-off through `notifier` (semaphores, read-write locks,
    /// a lock waiter whose grant subscription is down) and election observers; none for a
    /// single Redis or Sentinel, or with notifications turned off.
    pub(crate) wakeups: Option<Arc<Wakeups>>,
    /// Release notices on a single Redis or Sentinel, for election observers only (lock
    /// waiters there are handed the lock).
    observers: Option<Arc<Wakeups>>,
    pub(crate) renewer: Arc<Renewer>,
    /// Holder details recorded beside each lock, for operators.
    pub(crate) holder: String,
    /// The options every primitive of the client starts from.
    pub(crate) defaults: Defaults,
    /// Every lease handed out and not yet dropped, for `shutdown`.
    leases: Registry,
    /// Every acquisition waiting now, for `shutdown` to end and withdraw.
    pub(crate) waiters: Waiters,
    /// The server clock's rate, estimated from fresh grants (one server's clock only).
    pub(crate) clock: Option<ClockWatch>,
    /// This client's hand-offs whose claim window is still open.
    followups: Arc<Followups>,
}

impl Engine {
    pub(crate) fn new(
        deployment: Arc<Deployment>,
        notifier: Arc<Notifier>,
        wakeups: Option<Arc<Wakeups>>,
        observers: Option<Arc<Wakeups>>,
        holder: String,
        defaults: Defaults,
    ) -> Self {
        Self {
            defaults,
            renewer: Renewer::new(Arc::clone(&deployment)),
            clock: deployment.one_clock().then(ClockWatch::default),
            followups: Arc::new(Followups {
                deployment: Arc::clone(&deployment),
                notifier: Arc::clone(&notifier),
                pending: Mutex::default(),
            }),
            deployment,
            notifier,
            wakeups,
            observers,
            holder,
            leases: Registry::default(),
            waiters: Waiters::default(),
        }
    }

    /// Release (and, for elections, grant) notices on any lock's channel, where the
    /// client can subscribe: `None` with notifications off.
    pub(crate) fn notices(&self) -> Option<&Arc<Wakeups>> {
        self.wakeups.as_ref().or(self.observers.as_ref())
    }

    /// Runs the release script of `token`'s lease at `keys` (see [`Followups::release`]).
    pub(crate) async fn release_script(
        &self,
        keys: &Arc<LockKeys>,
        kind: Kind,
        token: &str,
    ) -> Result<Released> {
        self.followups.release(keys, kind, token).await
    }

    pub(crate) fn deployment(&self) -> &Deployment {
        &self.deployment
    }

    /// Identifies this engine (its client and the client's clones) among others in one
    /// process.
    pub(crate) fn id(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// Tasks waiting for a busy lock right now.
    pub(crate) fn waiting(&self) -> usize {
        self.notifier.waiting() + self.wakeups.as_ref().map_or(0, |w| w.watched())
    }

    /// Runs `task` in the background as a task of this engine (which
    /// [`Engine::shutdown`] waits for); false when no runtime is there to run it.
    pub(crate) fn background(&self, task: impl Future<Output = ()> + Send + 'static) -> bool {
        self.deployment.background(task)
    }

    /// Gives back every live lease, ends every waiting acquisition and withdraws its queue
    /// place, and waits for the background work (give-backs, a quorum's requests to its
    /// last nodes); the first error of a give-back that could not reach Redis.
    ///
    /// A waiting acquisition is ended before its place is withdrawn: its future is not
    /// polled again (see `Request::wait`), so no attempt of it can queue again behind the
    /// withdrawal, which goes on the same connection as its attempts; an attempt sent
    /// before runs before it. Its own give-back (its dropped future's) runs too when its
    /// task next runs, as for any dropped acquisition; the release script is idempotent.
    pub(crate) async fn shutdown(&self) -> Result<()> {
        let waiting = self.waiters.end_all();
        let leases: Vec<_> = self
            .leases
            .all()
            .into_iter()
            .filter(|holding| holding.close())
            .collect();
        let held = leases.iter().map(|holding| {
            (
                &holding.lease.keys,
                holding.lease.kind(),
                &holding.lease.token,
            )
        });
        let places = waiting.iter().map(|w| (&w.keys, w.kind, &w.token));
        let given_back = futures_util::future::join_all(
            held.chain(places)
                .map(|(keys, kind, token)| release_token(self, keys, kind, token)),
        )
        .await;
        self.deployment.settled().await;
        tracing::debug!(
            leases = leases.len(),
            waiting = waiting.len(),
            "client shut down"
        );
        given_back
            .into_iter()
            .find_map(std::result::Result::err)
            .map_or(Ok(()), Err)
    }
}

/// A lease this client holds, shared by its guard, nested (reentrant) guards of the same
/// owner, and the owner's slot; given back when the last guard lets go.
pub(crate) struct Holding {
    pub(crate) engine: Arc<Engine>,
    pub(crate) lease: Arc<Lease>,
    /// Guards alive on this lease: 1, plus one per nested acquisition.
    holds: AtomicUsize,
    /// The lease's entry in the renewal scheduler, when renewed.
    renewal: OnceLock<u64>,
    /// The holding's entry in its engine's registry.
    id: u64,
}

impl Holding {
    /// Holds `lease`, renewed (until `max_hold` after `acquired`) when `renew` says so.
    pub(crate) fn new(
        engine: &Arc<Engine>,
        lease: Lease,
        renew: Option<(Instant, Option<Duration>)>,
    ) -> Arc<Self> {
        let lease = Arc::new(lease);
        let renewal = OnceLock::new();
        if let Some((acquired, max_hold)) = renew {
            let _ = renewal.set(engine.renewer.add(&lease, acquired, max_hold));
        }
        let id = engine.leases.next_id();
        let holding = Arc::new(Self {
            engine: Arc::clone(engine),
            lease,
            holds: AtomicUsize::new(1),
            renewal,
            id,
        });
        engine.leases.add(id, &holding);
        holding
    }

    /// Whether the renewal scheduler renews this lease ([`Renewal::Auto`](crate::Renewal)).
    pub(crate) fn is_renewed(&self) -> bool {
        self.renewal.get().is_some()
    }

    pub(crate) fn stop_renewal(&self) {
        if let Some(&entry) = self.renewal.get() {
            self.engine.renewer.remove(entry);
        }
    }

    /// Tells the renewal scheduler (when it renews this lease) that the lease was just set
    /// for `ttl` by a request sent at `sent`, so that the next renewal falls due a
    /// renewal period (`renew::period`) of that `ttl` later, also when an extension
    /// shortened the lease.
    pub(crate) fn reschedule(&self, sent: Instant, ttl: Duration) {
        if let Some(&entry) = self.renewal.get() {
            self.engine
                .renewer
                .reschedule(entry, sent + crate::renew::period(ttl));
        }
    }

    /// Adds a nested hold if the lease is still held; false once it ended.
    pub(crate) fn enter(&self) -> bool {
        if !self.lease.is_held() {
            return false;
        }
        self.holds.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Whether other guards share this lease (nested acquisitions of the same owner).
    pub(crate) fn is_nested(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 1
    }

    /// Drops one hold; true when it was the last, so the lock must be given back.
    pub(crate) fn exit(&self) -> bool {
        self.holds.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Gives the lock back: stops renewal, then runs the release script.
    /// `Err(Lost)` when the token was no longer there or the lease had been declared lost.
    ///
    /// Until Redis confirmed the release, a background give-back stands armed: a caller
    /// that drops this future (a `select!`, a `timeout`) still frees the lock at once.
    pub(crate) async fn release(&self) -> Result<()> {
        let lease = &self.lease;
        let before = lease.release_begun();
        self.stop_renewal();
        if before == State::Closed {
            // `Client::shutdown` gave it back already.
            return Ok(());
        }
        if before == State::Detached {
            // Another holder has it now: never released from here.
            return Err(lost(&lease.name));
        }
        let mut give_back = GiveBack::new(&self.engine, &lease.keys, lease.kind(), &lease.token);
        give_back.keep_trying_until(Instant::now() + lease.ttl());
        let released = release_token(&self.engine, &lease.keys, lease.kind(), &lease.token).await;
        if released.is_ok() {
            give_back.disarm();
        }
        if matches!(before, State::Held(_)) {
            // Not known when Redis could not be asked: counted as released (it expires).
            lease.release_found(*released.as_ref().unwrap_or(&true));
        }
        match (before, released?) {
            (State::Held(_), true) => {
                tracing::debug!(parent: &lease.span, lock = %lease.name, "released");
                Ok(())
            }
            (State::Held(_), false) => {
                tracing::warn!(parent: &lease.span, lock = %lease.name, token = %lease.token, "lock lost before release");
                Err(lost(&lease.name))
            }
            _ => Err(lost(&lease.name)),
        }
    }

    /// Hands the lease to another holder ([`Guard::detach`](crate::Guard::detach)): stops
    /// its renewal here and marks it detached, so that neither a guard sharing it nor
    /// [`Client::shutdown`](crate::Client::shutdown) gives it back. Nothing is sent.
    pub(crate) fn detach(&self) {
        self.lease.detach();
        self.stop_renewal();
    }

    /// Ends the lease for [`Client::shutdown`](crate::Client::shutdown): true when it was
    /// held, so that the caller gives the lock back.
    fn close(&self) -> bool {
        let closed = self.lease.close();
        if closed {
            self.stop_renewal();
        }
        closed
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.engine.leases.remove(self.id);
    }
}

/// Every lease an engine has handed out and not yet dropped, so that
/// [`Engine::shutdown`] can give them back.
#[derive(Default)]
struct Registry {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Weak<Holding>>>,
}

impl Registry {
    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<Holding>>> {
        // Single inserts and removes: a panic cannot leave the map inconsistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, id: u64, holding: &Arc<Holding>) {
        self.live().insert(id, Arc::downgrade(holding));
    }

    fn remove(&self, id: u64) {
        self.live().remove(&id);
    }

    /// The leases still alive.
    fn all(&self) -> Vec<Arc<Holding>> {
        self.live().values().filter_map(Weak::upgrade).collect()
    }
}

/// Gives back, in the background, whatever an operation that may have taken something
/// leaves in Redis when it is dropped or fails before Redis confirmed the outcome: a lock
/// taken by an attempt whose reply never came, a place in the waiter queue (and a lock
/// handed to that place), or a release in flight. The release script does all of these,
/// atomically and idempotently.
///
/// Armed from the start. The give-back is a task of the engine's, which
/// [`Client::shutdown`](crate::Client::shutdown) waits for. While Redis cannot be reached
/// it keeps trying until [`GiveBack::keep_trying_until`] (a queue place can be granted as
/// long as it lingers: given up sooner, the lock would sit handed to nobody), and a grant
/// that reaches this client for the token meanwhile makes it try again at once.
pub(crate) struct GiveBack {
    engine: Arc<Engine>,
    keys: Arc<LockKeys>,
    kind: Kind,
    token: OwnerToken,
    armed: bool,
    /// Until when a give-back that cannot reach Redis tries again.
    until: Option<Instant>,
}

/// The longest pause between two tries of a give-back that cannot reach Redis.
const GIVE_BACK_RETRY: Duration = Duration::from_millis(100);

impl GiveBack {
    pub(crate) fn new(
        engine: &Arc<Engine>,
        keys: &Arc<LockKeys>,
        kind: Kind,
        token: &OwnerToken,
    ) -> Self {
        Self {
            engine: Arc::clone(engine),
            keys: Arc::clone(keys),
            kind,
            token: token.clone(),
            armed: true,
            until: None,
        }
    }

    /// Something may be left in Redis from now on.
    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    /// Redis confirmed that nothing is left (or the lease passed to a guard).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// What is left may be granted until `until` (a queue place's linger): a give-back
    /// that cannot reach Redis keeps trying until then.
    pub(crate) fn keep_trying_until(&mut self, until: Instant) {
        self.until = Some(self.until.map_or(until, |u| u.max(until)));
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let engine = Arc::clone(&self.engine);
        let keys = Arc::clone(&self.keys);
        let (kind, token, until) = (self.kind, self.token.clone(), self.until);
        let spawned = self.engine.background(async move {
            give_back(&engine, &keys, kind, &token, until).await;
        });
        if !spawned {
            tracing::debug!(key = %self.keys.key, "no runtime to give back an abandoned operation's lock; it expires by itself");
        }
    }
}

/// Runs the release script for an abandoned operation's `token`, trying again while Redis
/// cannot be reached until `until` (or the client shuts down), and at once when a grant for
/// the token reaches this client.
async fn give_back(
    engine: &Engine,
    keys: &Arc<LockKeys>,
    kind: Kind,
    token: &OwnerToken,
    until: Option<Instant>,
) {
    let orphan = engine.notifier.orphan(token);
    let mut tries = 0u32;
    loop {
        match release_token(engine, keys, kind, token).await {
            Ok(true) => {
                tracing::debug!(key = %keys.key, "gave back a lock left by an abandoned operation");
                return;
            }
            Ok(false) => return,
            Err(e)
                if e.is_worth_retrying()
                    && until.is_some_and(|u| Instant::now() < u)
                    && !engine.deployment.settling() =>
            {
                tries += 1;
                tracing::debug!(key = %keys.key, error = %e, tries, "give-back cannot reach Redis yet; trying again");
                let step = GIVE_BACK_RETRY.min(Duration::from_millis(5) * tries);
                let pause = step / 2 + jitter(step / 2);
                let _ = tokio::time::timeout(pause, orphan.granted()).await;
            }
            Err(e) => {
                tracing::warn!(key = %keys.key, error = %e, "could not give back a lock left by an abandoned operation; it expires by itself");
                return;
            }
        }
    }
}

/// Runs the release script of `token`'s lease at `keys` (also withdraws the token from the
/// waiter queue). Returns whether the lease was still held. A hand-off to a waiter of this
/// client is told to it at once, from the script's reply, instead of waiting for the
/// grant's push on the subscription (one wake-up fewer on the lock's critical path), and
/// every hand-off is followed up (see [`Followups`]).
async fn release_token(
    engine: &Engine,
    keys: &Arc<LockKeys>,
    kind: Kind,
    token: &OwnerToken,
) -> Result<bool> {
    let released = engine.release_script(keys, kind, token.secret()).await?;
    Ok(released.was_held())
}

/// Every release of a lease goes through here: the release script, told this client's
/// grant channel so that a lock handed to one of this client's waiters is granted directly
/// and told to it from the reply (no confirming attempt, no wait for the push); then the
/// follow-up of a claim window.
///
/// A hand-off to another client's waiter holds the lock for a short claim window only until
/// it confirms the grant (`scripts/lib/grants.lua`): a waiter whose link was cut silently
/// never does, and the lock is then free with waiters queued. The queue's watchers are
/// nudged to re-check when the window ends, which serves the next waiter whether or not the
/// releasing process still lives; the client that made the hand-off checks too, once the
/// window is over, with one more run of the release script for its old token (it finds
/// its token gone, and serves the queue if the lock is free), so that a live releaser
/// serves the queue even when every watcher is gone. One check per lock and client covers
/// every hand-off made meanwhile (the latest window), so a busy lock costs one script call
/// per window, not one per hand-off.
pub(crate) struct Followups {
    deployment: Arc<Deployment>,
    notifier: Arc<Notifier>,
    /// By lock key: when to check, and how (the lease's keys and kind, the token of the
    /// latest release).
    pending: Mutex<HashMap<String, Followup>>,
}

struct Followup {
    at: Instant,
    keys: Arc<LockKeys>,
    kind: Kind,
    token: String,
}

/// How much later than the claim window a follow-up runs: Redis' clock and ours may
/// disagree by the drift allowance (see `ttl::drift`).
fn followup_after(window: Duration) -> Duration {
    window + crate::ttl::drift(window)
}

impl Followups {
    /// Runs the release script of `token`'s lease at `keys` (also withdraws the token from
    /// the waiter queue), and follows up the hand-off it made, if any.
    pub(crate) async fn release(
        self: &Arc<Self>,
        keys: &Arc<LockKeys>,
        kind: Kind,
        token: &str,
    ) -> Result<Released> {
        let own = self.notifier.enabled().then(|| self.notifier.channel(keys));
        // Grants pushed for this lock while the release runs wait for its reply, which
        // tells this client's own waiters first (see `Notifier::releasing`).
        let in_flight = own.is_some().then(|| self.notifier.releasing(&keys.key));
        let sent = Instant::now();
        let released = self
            .deployment
            .release(keys, kind, token, own.as_deref())
            .await?;
        for handoff in &released.handoffs {
            self.handed_off(keys, kind, token, handoff, sent);
        }
        drop(in_flight);
        Ok(released)
    }

    /// `handoff` was made by the release of `token` at `keys`, sent at `sent`: told to the
    /// waiter if it is this client's, and, a claim window, checked once it is over.
    fn handed_off(
        self: &Arc<Self>,
        keys: &Arc<LockKeys>,
        kind: Kind,
        token: &str,
        handoff: &Handoff,
        sent: Instant,
    ) {
        self.notifier.deliver(
            handoff.fence,
            &handoff.token,
            handoff.direct.then_some(sent),
        );
        if handoff.direct {
            // This client's own waiter holds the whole ttl: nothing to follow up (a
            // waiter that gave up meanwhile gives it back, see `Notifier::deliver`).
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let at = Instant::now() + followup_after(handoff.lease);
        let first = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            let first = !pending.contains_key(&keys.key);
            pending.insert(
                keys.key.clone(),
                Followup {
                    at,
                    keys: Arc::clone(keys),
                    kind,
                    token: token.to_owned(),
                },
            );
            first
        };
        if first {
            let me = Arc::clone(self);
            let key = keys.key.clone();
            runtime.spawn(async move { me.follow(key).await });
        }
    }

    /// Waits for the latest window of the lock at `key` to close, then checks it.
    async fn follow(self: Arc<Self>, key: String) {
        loop {
            let due = {
                let pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                match pending.get(&key) {
                    Some(followup) => followup.at,
                    None => return,
                }
            };
            tokio::time::sleep_until(due).await;
            let followup = {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                match pending.get(&key) {
                    // A later hand-off moved the check.
                    Some(followup) if followup.at > Instant::now() => continue,
                    Some(_) => pending.remove(&key),
                    None => return,
                }
            };
            let Some(Followup {
                keys, kind, token, ..
            }) = followup
            else {
                return;
            };
            match self.release(&keys, kind, &token).await {
                Ok(released) if !released.held && !released.handoffs.is_empty() => {
                    tracing::debug!(key = %keys.key, "a hand-off was not confirmed in its window; the next waiter is served");
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(key = %keys.key, error = %e, "could not check a hand-off; queued waiters re-check by themselves");
                }
            }
            return;
        }
    }
}

/// `note` on one line (control characters become spaces), trimmed and cut to `max` bytes;
/// `None` when nothing is left.
pub(crate) fn one_line(note: &str, max: usize) -> Option<String> {
    let note: String = note
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut end = note.len().min(max);
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    Some(note[..end].trim().to_owned()).filter(|n| !n.is_empty())
}
