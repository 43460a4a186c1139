//! Hand-off grants: this client's grant channel, and the waiters it routes grants to.
//!
//! Each [`Client`](crate::Client) subscribes once, on a RESP3 connection of its own, to its
//! *grant channel* `redlease:grant:<client id>`. A waiter registers its token here, then
//! joins the lock's FIFO queue in Redis; the release script hands the lock to the oldest
//! waiter whose client still listens and publishes the grant on that client's channel,
//! which this module routes to the waiting task (see [`crate::wait`]).
//!
//! On a Redis Cluster a client has one grant channel per lock it waits for,
//! `{K}\0grant:<client id>` (the lock's hash tag: its slot), subscribed with `SSUBSCRIBE`
//! on the primary that owns the slot and followed across slot migrations and failovers
//! (see `crate::conn::shards`). The release script `SPUBLISH`es the grant there: it stays
//! in the lock's shard, and its count of receivers (the primary's subscribers) tells the
//! script whether the waiter still listens, as `PUBLISH` does on a single Redis. A lock's
//! grant channel stays subscribed for [`IN_USE_FOR`] after its last waiter left, so that a
//! client that keeps contending does not subscribe again for every wait.
//!
//! A grant pushed on the subscription is never proof that the lock is the waiter's: a
//! demoted primary relays its new primary's grants, also those counted for nobody there,
//! and whatever the link says of its server's role may be out of date by the time the
//! waiter acts (a primary demoted and promoted again: a failback). A pushed grant sets the
//! lock for a short claim window only (`scripts/lib/grants.lua`), and its waiter confirms
//! it with an attempt, on the server that decides. Only a grant told from the reply of
//! this client's own release is proof ([`Grant::direct`]): that script ran on the server
//! that answered it, and gave this client's waiter its whole ttl.
//!
//! A grant can also reach a waiter that is gone: it gave up while cut off from Redis, its
//! give-back could not withdraw its place, and other waiters' joins kept the queue alive.
//! Each acquisition that queues holds a [`Place`]; one that ends without the lock leaves
//! its token *abandoned* for [`ABANDONED_KEPT`], and a grant for an abandoned token is
//! given back at once (the release for that token, by [`Notifier::on_abandoned`]'s hook),
//! rather than left with nobody for a ttl.

use hashbrown::HashMap;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::{PushInfo, Value};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use crate::conn::pubsub::{Link, Mode as LinkMode, Owner as LinkOwner};
use crate::conn::shards::Shards;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::replies::{parse_grant, parse_nudge};
use crate::scripts::Kind;
use crate::token::OwnerToken;

/// Where a client's grants come from.
pub(crate) enum GrantSource {
    /// Nowhere: notifications are off, or waiters do not queue (a quorum).
    Off,
    /// One node (a single Redis, a Sentinel primary): one classic grant channel.
    Node { redis: Box<redis::Client> },
    /// A Redis Cluster (its seeds): one shard grant channel per lock waited for.
    #[cfg(feature = "cluster")]
    Cluster(Vec<redis::Client>),
}

/// A hand-off of a lock to one of this client's waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The fencing token it was granted with.
    pub(crate) fence: u64,
    /// A direct grant, told from the reply of this client's own release (which gave the
    /// waiter its whole ttl): the release's send time, before the grant was made. `None`
    /// for a pushed grant, which its waiter confirms with an attempt.
    pub(crate) direct: Option<Instant>,
}

/// A registered waiter's two ways to be told: its grant (once), and that it is next in
/// line (any number of times, with the new holder's lease length).
struct Waiter {
    grant: oneshot::Sender<Grant>,
    next: watch::Sender<Option<Duration>>,
}

/// Routes hand-offs from this client's grant channel to the waiting tasks.
pub(crate) struct Notifier {
    enabled: bool,
    /// This client's id in grant channel names.
    id: String,
    channel: String,
    /// The subscription of a single Redis or Sentinel client.
    link: Option<Arc<Link>>,
    /// A Cluster client's grant channels, one per lock, each on its slot's primary.
    shards: Option<Arc<Shards>>,
    /// A Cluster client's grant channels in use: waiters registered on each, and when it
    /// was last asked for.
    lock_channels: Mutex<HashMap<String, ChannelUse>>,
    waiters: Mutex<HashMap<String, Waiter>>,
    /// Lock keys with a release of this client in flight, and the grants pushed for them
    /// meanwhile, held back until the release's reply has told its waiters (see
    /// [`Notifier::releasing`]).
    releasing: Mutex<HashMap<String, Releasing>>,
    /// Tokens of abandoned operations whose give-back has not reached Redis yet: a grant
    /// for one of them wakes its give-back at once (the lock would sit with nobody).
    orphans: Mutex<HashMap<String, Arc<Notify>>>,
    /// Tokens of acquisitions that queued and ended without the lock (see [`Place`]).
    abandoned: Mutex<HashMap<String, Abandoned>>,
    /// Gives back a lock granted to an abandoned token (set by the client).
    give_back: std::sync::OnceLock<GiveBackHook>,
    /// When a waiter last asked for the subscription: the link keeps reconnecting for
    /// [`IN_USE_FOR`] after that, even with no waiter registered.
    last_used: Mutex<Option<Instant>>,
    epoch: watch::Sender<u64>,
}

/// Runs the release script of a lease on `keys` of `kind` for an abandoned token.
pub(crate) type GiveBackHook = Box<dyn Fn(Arc<LockKeys>, Kind, String) + Send + Sync>;

/// An acquisition that queued and ended without the lock: its place may still be granted.
struct Abandoned {
    keys: Arc<LockKeys>,
    kind: Kind,
    since: Instant,
}

/// How long a grant for an abandoned acquisition's token is still given back. Its place
/// lingers as long as the queue does, which other waiters' joins renew; this bounds the
/// memory kept for it (one entry per abandoned acquisition).
const ABANDONED_KEPT: Duration = Duration::from_secs(600);

/// How one Cluster grant channel is used.
struct ChannelUse {
    /// Registered waiters.
    users: usize,
    last_used: Instant,
}

/// How long after its last use the grant subscription is still restored after an outage
/// when no waiter is queued (with waiters queued, it is restored for as long as it takes);
/// on a Cluster, how long a lock's grant channel stays subscribed after its last waiter.
const IN_USE_FOR: Duration = Duration::from_secs(30);

impl Notifier {
    pub(crate) fn new(
        source: GrantSource,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Arc<Self>> {
        let id = OwnerToken::generate()?;
        let channel = format!("redlease:grant:{}", id.secret());
        let (redis, seeds): (_, Option<Vec<redis::Client>>) = match source {
            GrantSource::Off => (None, None),
            GrantSource::Node { redis } => (Some(*redis), None),
            #[cfg(feature = "cluster")]
            GrantSource::Cluster(seeds) => (None, Some(seeds)),
        };
        Ok(Arc::new_cyclic(|weak: &Weak<Self>| {
            let owner: Weak<dyn LinkOwner> = weak.clone();
            #[cfg(feature = "cluster")]
            let shards = seeds
                .map(|seeds| Shards::new(seeds, connect_timeout, response_timeout, owner.clone()));
            // No seeds without the feature: nothing to make shard channels on.
            #[cfg(not(feature = "cluster"))]
            let shards: Option<Arc<Shards>> = seeds.and(None);
            let link = redis.and_then(|redis| {
                match Link::new(&[redis], LinkMode::Grants, connect_timeout, response_timeout, owner) {
                    Ok(link) => {
                        link.keep(&channel);
                        Some(link)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "release notifications unavailable; waiters poll instead");
                        None
                    }
                }
            });
            Self {
                enabled: link.is_some() || shards.is_some(),
                id: id.secret().to_owned(),
                channel,
                link,
                shards,
                lock_channels: Mutex::new(HashMap::new()),
                waiters: Mutex::new(HashMap::new()),
                releasing: Mutex::new(HashMap::new()),
                orphans: Mutex::new(HashMap::new()),
                abandoned: Mutex::new(HashMap::new()),
                give_back: std::sync::OnceLock::new(),
                last_used: Mutex::new(None),
                epoch: watch::Sender::new(0),
            }
        }))
    }

    /// Moves the grant subscription to `primary` (a Sentinel primary the sentinels
    /// elected): the current connection is dropped and the next one goes there.
    pub(crate) fn follow(&self, primary: &redis::Client) {
        if let Some(link) = &self.link
            && let Err(e) = link.retarget(std::slice::from_ref(primary))
        {
            tracing::warn!(error = %e, "the grant subscription cannot follow the new primary; waiters poll");
        }
    }

    /// Checks the grant subscription's connection at once (the command connection went
    /// silent: the same network may have muted this one too).
    pub(crate) fn check_soon(&self) {
        if let Some(link) = &self.link {
            link.check_soon();
        }
    }

    /// Makes every waiter re-check the lock now (a failover moves the queues elsewhere).
    pub(crate) fn recheck(&self) {
        self.epoch.send_modify(|e| *e += 1);
    }

    /// The channel on which this client receives hand-offs of the lock at `keys`.
    pub(crate) fn channel(&self, keys: &LockKeys) -> Cow<'_, str> {
        if self.shards.is_some() {
            Cow::Owned(keys.grant_channel(&self.id))
        } else {
            Cow::Borrowed(&self.channel)
        }
    }

    /// Whether this client gets hand-offs at all (notifications on): while it does but its
    /// subscription is down, its waiters hear of no release.
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether hand-offs of the lock at `keys` can reach this client now, without waiting
    /// for a subscription: false while the subscription is down (being restored or, on a
    /// Cluster, moved to the slot's new primary).
    pub(crate) fn subscribed(&self, keys: &LockKeys) -> bool {
        if !self.enabled {
            return false;
        }
        match &self.shards {
            Some(shards) => shards.is_up(&self.channel(keys)),
            None => self.link.as_ref().is_some_and(|l| l.is_up()),
        }
    }

    /// Subscribes on first use; false when notifications are off or unavailable right
    /// now, in which case the caller polls. Waits for a subscription being made no later
    /// than `deadline`, and not at all for one known to be down (it is restored in the
    /// background meanwhile).
    pub(crate) async fn ready(
        self: &Arc<Self>,
        keys: &LockKeys,
        deadline: Option<Instant>,
    ) -> bool {
        if !self.enabled {
            return false;
        }
        if let Some(shards) = &self.shards {
            let channel = self.channel(keys).into_owned();
            self.touch(&channel, 0);
            if shards.is_up(&channel) {
                return true;
            }
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            shards.want(&channel, Some(tx));
            let answer = match deadline {
                Some(d) => tokio::time::timeout_at(d, rx.recv()).await.ok().flatten(),
                None => rx.recv().await,
            };
            return answer == Some(true);
        }
        let Some(link) = &self.link else {
            return false;
        };
        *self
            .last_used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
        link.up(deadline).await.is_some()
    }

    fn lock_waiters(&self) -> std::sync::MutexGuard<'_, HashMap<String, Waiter>> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable.
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a waiter for the lock at `keys` before it joins the queue, so that no
    /// hand-off can be missed.
    pub(crate) fn register(self: &Arc<Self>, token: &OwnerToken, keys: &LockKeys) -> Registration {
        let (grant, rx) = oneshot::channel();
        let (next, next_rx) = watch::channel(None);
        self.lock_waiters()
            .insert(token.secret().to_owned(), Waiter { grant, next });
        // A registered waiter needs the subscription: (re)start it if it went idle.
        if self.enabled
            && let Some(link) = &self.link
        {
            link.start();
        }
        let channel = self.shards.as_ref().map(|_| {
            let channel = self.channel(keys).into_owned();
            self.touch(&channel, 1);
            channel
        });
        Registration {
            notifier: Arc::clone(self),
            token: token.secret().to_owned(),
            channel,
            grant: rx,
            next: next_rx,
        }
    }

    fn lock_channels(&self) -> std::sync::MutexGuard<'_, HashMap<String, ChannelUse>> {
        // Single inserts, removes and counter updates: a poisoned lock is still usable.
        self.lock_channels
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A Cluster grant channel used now, by `users` more registered waiters: subscribed
    /// when it is not yet, and unsubscribed [`IN_USE_FOR`] after its last use.
    fn touch(self: &Arc<Self>, channel: &str, users: usize) {
        let Some(shards) = &self.shards else {
            return;
        };
        let mut channels = self.lock_channels();
        if let Some(used) = channels.get_mut(channel) {
            used.users += users;
            used.last_used = Instant::now();
            return;
        }
        channels.insert(
            channel.to_owned(),
            ChannelUse {
                users,
                last_used: Instant::now(),
            },
        );
        // Under the map's lock, as is the unsubscribe below.
        shards.want(channel, None);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let notifier = Arc::downgrade(self);
        let channel = channel.to_owned();
        runtime.spawn(async move {
            let mut wake = Instant::now() + IN_USE_FOR;
            loop {
                tokio::time::sleep_until(wake).await;
                let Some(notifier) = notifier.upgrade() else {
                    return;
                };
                let mut channels = notifier.lock_channels();
                let Some(used) = channels.get(&channel) else {
                    return;
                };
                if used.users > 0 || used.last_used.elapsed() < IN_USE_FOR {
                    wake = used.last_used + IN_USE_FOR;
                    if used.users > 0 {
                        wake = Instant::now() + IN_USE_FOR;
                    }
                    continue;
                }
                channels.remove(&channel);
                if let Some(shards) = &notifier.shards {
                    shards.unwant(&channel);
                }
                return;
            }
        });
    }

    /// A registered waiter of a Cluster grant channel left.
    fn left(&self, channel: &str) {
        if let Some(used) = self.lock_channels().get_mut(channel) {
            used.users = used.users.saturating_sub(1);
            used.last_used = Instant::now();
        }
    }

    /// A receiver that changes whenever the subscription drops or comes back.
    pub(crate) fn epochs(&self) -> watch::Receiver<u64> {
        self.epoch.subscribe()
    }

    /// Tells the registered waiter `token` that it was handed the lock with `fence`, by the
    /// reply of a release by this very client; `direct`: the release, sent then, gave it
    /// the whole ttl (else a claim window, which the waiter confirms). The grant's push on
    /// the subscription may come sooner or later; the second finds nobody left to tell.
    pub(crate) fn deliver(&self, fence: u64, token: &str, direct: Option<Instant>) {
        self.tell(Grant { fence, direct }, token);
    }

    /// Marks a release of this client on the lock at `key` as in flight until the returned
    /// guard is dropped. A grant pushed meanwhile for that lock is held back until then: the
    /// release's reply tells this client's own waiter of a direct grant (its whole ttl,
    /// no confirming attempt), and the push of the same grant, which can overtake the reply
    /// on the other connection, must not make the waiter confirm it first. Dropped, the
    /// guard passes the held-back grants on (a waiter the reply told is gone by then).
    pub(crate) fn releasing(self: &Arc<Self>, key: &str) -> InFlight {
        self.lock_releasing()
            .entry(key.to_owned())
            .or_default()
            .releases += 1;
        InFlight {
            notifier: Arc::clone(self),
            key: key.to_owned(),
        }
    }

    fn lock_releasing(&self) -> std::sync::MutexGuard<'_, HashMap<String, Releasing>> {
        // Single inserts, updates and removes: a poisoned lock is still usable.
        self.releasing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tells the registered waiter `token` that it watches the queue, and to re-check in
    /// `ttl`, when the lease just granted can end (a hint: from any server).
    fn nudge(&self, ttl: Duration, token: &str) {
        if let Some(waiter) = self.lock_waiters().get(token) {
            waiter.next.send_replace(Some(ttl));
        }
    }

    /// Tells the registered waiter `token` of `grant`, or gives the lock back for an
    /// abandoned one.
    fn tell(&self, grant: Grant, token: &str) {
        let fence = grant.fence;
        let sender = self.lock_waiters().remove(token);
        if let Some(waiter) = sender {
            let _ = waiter.grant.send(grant);
            return;
        }
        let orphan = self.lock_orphans().get(token).map(Arc::clone);
        if let Some(orphan) = orphan {
            // The waiter gave up and its give-back has not reached Redis yet (an outage):
            // it tries again now, and hands the lock on.
            tracing::debug!(fence, "hand-off to an abandoned waiter; giving it back");
            orphan.notify_one();
        } else if let Some(gone) = self.lock_abandoned().remove(token) {
            // The waiter ended without the lock and its give-back did not reach Redis
            // (it was cut off): nobody would hold the lock for a ttl.
            tracing::debug!(fence, "hand-off to a waiter that gave up; giving it back");
            if let Some(give_back) = self.give_back.get() {
                give_back(gone.keys, gone.kind, token.to_owned());
            }
        } else {
            // Told already, or the waiter's give-back ran (it found the lock handed to
            // it and handed it on, or withdrew the place before the hand-off).
            tracing::trace!("hand-off for no waiter registered here");
        }
    }

    fn lock_abandoned(&self) -> std::sync::MutexGuard<'_, HashMap<String, Abandoned>> {
        // Single inserts, removes and retains: a poisoned lock is still usable.
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets how a lock granted to an abandoned acquisition is given back (once).
    pub(crate) fn on_abandoned(&self, give_back: GiveBackHook) {
        let _ = self.give_back.set(give_back);
    }

    /// The place in the queue of an acquisition of `token` for the lease on `keys`: unless
    /// [settled](Place::settle) (the lock taken), a grant for it after the acquisition
    /// ended is given back.
    pub(crate) fn place(
        self: &Arc<Self>,
        token: &OwnerToken,
        keys: &Arc<LockKeys>,
        kind: Kind,
    ) -> Place {
        Place {
            notifier: Arc::clone(self),
            token: token.secret().to_owned(),
            keys: Arc::clone(keys),
            kind,
            settled: false,
        }
    }

    fn lock_orphans(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        // Single inserts and removes: a poisoned lock is still usable.
        self.orphans
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `token` as an abandoned operation's whose give-back is under way, until the
    /// returned [`Orphan`] is dropped: grants for it then wake the give-back.
    pub(crate) fn orphan(self: &Arc<Self>, token: &OwnerToken) -> Orphan {
        let wake = Arc::new(Notify::new());
        self.lock_orphans()
            .insert(token.secret().to_owned(), Arc::clone(&wake));
        Orphan {
            notifier: Arc::clone(self),
            token: token.secret().to_owned(),
            wake,
        }
    }

    /// Number of registered waiters (for tests and diagnostics).
    pub(crate) fn waiting(&self) -> usize {
        self.lock_waiters().len()
    }
}

impl LinkOwner for Notifier {
    fn message(&self, push: &PushInfo) {
        let Some(Value::BulkString(payload)) = push.data.get(1) else {
            return;
        };
        if let Some((ttl, token)) = parse_nudge(payload) {
            self.nudge(ttl, token);
            return;
        }
        let Some((fence, token)) = parse_grant(payload) else {
            return;
        };
        // Pushed: never proof by itself (see the module's docs).
        let grant = Grant {
            fence,
            direct: None,
        };
        let key = std::str::from_utf8(payload)
            .ok()
            .and_then(|text| text.splitn(3, ' ').nth(2));
        if let Some(key) = key {
            let mut releasing = self.lock_releasing();
            if let Some(in_flight) = releasing.get_mut(key) {
                in_flight.held.push((grant, token.to_owned()));
                return;
            }
        }
        self.tell(grant, token);
    }

    fn changed(&self, up: bool) {
        // Down: queued waiters re-check (a release meanwhile skips them, keeping their
        // places for a while). Up: they re-join the queue at once, at the places kept,
        // where releases can reach them again.
        tracing::debug!(up, "grant subscription changed; waiters re-check");
        self.epoch.send_modify(|e| *e += 1);
    }

    fn needed(&self) -> bool {
        // (The single-node link's; a Cluster's node links ask their `Shards`.)
        !self.lock_waiters().is_empty()
            || self
                .last_used
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_some_and(|t| t.elapsed() < IN_USE_FOR)
    }
}

/// A queued acquisition's token: abandoned when dropped unless settled.
pub(crate) struct Place {
    notifier: Arc<Notifier>,
    token: String,
    keys: Arc<LockKeys>,
    kind: Kind,
    settled: bool,
}

impl Place {
    /// The acquisition took the lock: a later grant for its token is its own.
    pub(crate) fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut abandoned = self.notifier.lock_abandoned();
        abandoned.retain(|_, gone| gone.since.elapsed() < ABANDONED_KEPT);
        abandoned.insert(
            std::mem::take(&mut self.token),
            Abandoned {
                keys: Arc::clone(&self.keys),
                kind: self.kind,
                since: Instant::now(),
            },
        );
    }
}

/// An abandoned operation's token, whose give-back a grant wakes; removed on drop.
pub(crate) struct Orphan {
    notifier: Arc<Notifier>,
    token: String,
    wake: Arc<Notify>,
}

impl Orphan {
    /// Resolves when a grant for the token reached this client (also one that came
    /// before this call).
    pub(crate) async fn granted(&self) {
        self.wake.notified().await;
    }
}

/// A lock's releases in flight by this client, and the grants pushed for it meanwhile.
#[derive(Default)]
struct Releasing {
    releases: usize,
    held: Vec<(Grant, String)>,
}

/// A release of this client in flight (see [`Notifier::releasing`]).
pub(crate) struct InFlight {
    notifier: Arc<Notifier>,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let held = {
            let mut releasing = self.notifier.lock_releasing();
            let Some(entry) = releasing.get_mut(&self.key) else {
                return;
            };
            entry.releases = entry.releases.saturating_sub(1);
            if entry.releases > 0 {
                return;
            }
            releasing
                .remove(&self.key)
                .map(|r| r.held)
                .unwrap_or_default()
        };
        for (grant, token) in held {
            self.notifier.tell(grant, &token);
        }
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        self.notifier.lock_orphans().remove(&self.token);
    }
}

/// A waiter's place in the notifier; removed on drop.
pub(crate) struct Registration {
    notifier: Arc<Notifier>,
    token: String,
    /// The Cluster grant channel it keeps in use.
    channel: Option<String>,
    grant: oneshot::Receiver<Grant>,
    next: watch::Receiver<Option<Duration>>,
}

impl Registration {
    /// Resolves when the lock is handed to this waiter (its grant), or each time a
    /// hand-off tells it that it is next in line (the new holder's lease length). Pends
    /// forever once the notifier is gone (the caller always races it with a timer).
    pub(crate) async fn told(&mut self) -> Told {
        let granted = async {
            match (&mut self.grant).await {
                Ok(grant) => grant,
                Err(_) => std::future::pending().await,
            }
        };
        let nudged = async {
            loop {
                if self.next.changed().await.is_err() {
                    return std::future::pending().await;
                }
                if let Some(ttl) = *self.next.borrow_and_update() {
                    return ttl;
                }
            }
        };
        tokio::select! {
            biased;
            grant = granted => Told::Granted(grant),
            ttl = nudged => Told::Next(ttl),
        }
    }
}

/// What a queued waiter was told on its grant channel.
pub(crate) enum Told {
    /// The lock was handed to it.
    Granted(Grant),
    /// It is next in line, behind a holder whose lease lasts this long.
    Next(Duration),
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.notifier.lock_waiters().remove(&self.token);
        if let Some(channel) = &self.channel {
            self.notifier.left(channel);
        }
    }
}
