//! What every primitive's builder holds (a name on a client's engine, and the options a
//! [`Lock`](crate::Lock) has), checked in one place, and the acquisition flows they share:
//! one attempt, a wait, and `run`, each through the owner's reentrancy slots.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::Request;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::{LockKeys, Primitive};
use crate::observe::{self, Acquisition, Labels, Outcome};
use crate::owner::Owner;
use crate::renew::Renewal;
use crate::scripts::Kind;
use crate::ttl::validate_ttl;
use crate::wait::{Retry, Wait};

/// Lease length when none is set.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long an acquisition waits for a busy lock when no wait is set.
pub const DEFAULT_WAIT: Wait = Wait::For(Duration::from_secs(10));
/// Key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "redlease:";
/// The longest note kept, in bytes: a client's holder note
/// ([`ClientBuilder::holder_note`](crate::ClientBuilder::holder_note)) and a leader's note
/// ([`Election::campaign`](crate::Election::campaign)) alike; a longer one is cut.
pub const MAX_NOTE: usize = 256;

/// A name on an engine, with the options of its builder.
#[derive(Clone)]
pub(crate) struct Spec {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
    pub(crate) prefix: String,
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    pub(crate) retry: Retry,
    pub(crate) renewal: Renewal,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) owner: Option<Owner>,
    pub(crate) min_replicas: Option<(usize, Duration)>,
    /// Holder details recorded instead of the client's (an election's note).
    pub(crate) holder: Option<Arc<str>>,
    /// Whether metrics carry the name as a label (`name_in_metrics`).
    pub(crate) name_in_metrics: bool,
    /// A multi-lock's, or one of its names': counted with the `multi_lock` kind label.
    pub(crate) in_multi_lock: bool,
    /// Whether an acquisition is measured on its own (not a multi-lock's name: the
    /// multi-lock measures the whole).
    pub(crate) measured: bool,
    /// The keys, derived once per name and prefix.
    keys: Arc<OnceLock<Arc<LockKeys>>>,
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spec")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("retry", &self.retry)
            .field("renewal", &self.renewal)
            .field("max_hold", &self.max_hold)
            .field("owner", &self.owner)
            .field("min_replicas", &self.min_replicas)
            .finish_non_exhaustive()
    }
}

impl Spec {
    /// The options of `name`: the client's defaults.
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        let defaults = engine.defaults.clone();
        Self {
            engine,
            name: name.into(),
            prefix: defaults.prefix,
            ttl: defaults.ttl,
            wait: defaults.wait,
            retry: Retry::default(),
            renewal: defaults.renewal,
            max_hold: None,
            owner: None,
            min_replicas: None,
            holder: None,
            name_in_metrics: false,
            in_multi_lock: false,
            measured: true,
            keys: Arc::default(),
        }
    }

    /// The metrics' labels for leases of `kind`.
    pub(crate) fn labels(&self, kind: Kind) -> Labels {
        let kind = if self.in_multi_lock {
            observe::MULTI_LOCK
        } else {
            observe::kind_label(kind)
        };
        Labels::new(kind, &self.name, self.name_in_metrics)
    }

    /// The same options for another name (the keys derived afresh).
    pub(crate) fn for_name(&self, name: Arc<str>) -> Self {
        Self {
            name,
            keys: Arc::default(),
            ..self.clone()
        }
    }

    pub(crate) fn set_prefix(&mut self, prefix: String) {
        self.prefix = prefix;
        self.keys = Arc::default();
    }

    /// Checks the options and derives (once) the keys of `primitive`.
    pub(crate) fn plan(&self, primitive: Primitive) -> Result<Arc<LockKeys>> {
        if let Some((replicas, timeout)) = self.min_replicas {
            if replicas == 0 || timeout.is_zero() {
                return Err(Error::InvalidOption {
                    option: "min_replicas",
                    reason: "needs at least one replica and a timeout above zero".into(),
                });
            }
            if let Some(reason) = self.engine.deployment().without_replicas() {
                return Err(Error::InvalidOption {
                    option: "min_replicas",
                    reason: reason.into(),
                });
            }
        }
        validate_ttl(self.ttl)?;
        self.retry.validate()?;
        self.wait.validate()?;
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(Error::InvalidOption {
                option: "max_hold",
                reason: "must be greater than zero".into(),
            });
        }
        if let Some(keys) = self.keys.get() {
            return Ok(Arc::clone(keys));
        }
        let keys = Arc::new(LockKeys::of(&self.prefix, &self.name, primitive)?);
        Ok(Arc::clone(self.keys.get_or_init(|| keys)))
    }

    /// An acquisition of a lease of `kind` at `keys`, measured by `meter`.
    fn request<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        kind: Kind,
        meter: &'a Acquisition,
    ) -> Request<'a> {
        Request {
            meter,
            labels: self.labels(kind),
            engine: &self.engine,
            name: &self.name,
            keys,
            kind,
            ttl: self.ttl,
            wait: self.wait,
            retry: self.retry,
            renewal: self.renewal,
            max_hold: self.max_hold,
            min_replicas: self.min_replicas,
            holder: self.holder.as_deref(),
        }
    }

    /// The owner acquisitions act for: the builder's own, else that of the current scope.
    pub(crate) fn effective_owner(&self) -> Option<Owner> {
        self.owner.clone().or_else(Owner::current)
    }

    /// One attempt at a lease of `kind`: `Ok(None)` when busy.
    pub(crate) async fn try_acquire(&self, kind: Kind) -> Result<Option<Guard>> {
        let keys = self.plan(kind.primitive())?;
        let meter = Acquisition::start(self.labels(kind), self.measured);
        let request = self.request(&keys, kind, &meter);
        let holding = match self.effective_owner() {
            Some(owner) => {
                // Another task of this owner acquiring the same name right now makes it
                // busy for this attempt: no waiting behind it.
                owner
                    .hold(
                        &self.engine,
                        &keys,
                        kind,
                        Some(Instant::now()),
                        request.try_once(),
                    )
                    .await
            }
            None => request.try_once().await,
        };
        meter.finish(match &holding {
            Ok(Some(_)) => Outcome::Acquired,
            Ok(None) => Outcome::Busy,
            Err(_) => Outcome::Failed,
        });
        Ok(holding?.map(Guard::new))
    }

    /// A fresh lease of `kind` in one attempt, which no owner re-enters (a latch's count:
    /// every call is one count more); `Ok(None)` when busy.
    pub(crate) async fn take_fresh(&self, kind: Kind) -> Result<Option<Guard>> {
        let keys = self.plan(kind.primitive())?;
        let meter = Acquisition::start(self.labels(kind), self.measured);
        let taken = self.request(&keys, kind, &meter).try_once().await;
        meter.finish(match &taken {
            Ok(Some(_)) => Outcome::Acquired,
            Ok(None) => Outcome::Busy,
            Err(_) => Outcome::Failed,
        });
        Ok(taken?.map(Guard::new))
    }

    /// A lease of `kind`, waiting up to the builder's `wait`.
    pub(crate) async fn acquire(&self, kind: Kind) -> Result<Guard> {
        let meter = Acquisition::start(self.labels(kind), self.measured);
        let taken = self.acquire_metered(kind, &meter).await;
        meter.finish(match &taken {
            Ok(_) => Outcome::Acquired,
            Err(Error::Timeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Failed,
        });
        taken
    }

    /// As [`Spec::acquire`], measured by `meter`: the acquisition's own, or that of a
    /// multi-lock taking its names one by one (which then counts as waiting as soon as
    /// one of them is busy).
    pub(crate) async fn acquire_metered(&self, kind: Kind, meter: &Acquisition) -> Result<Guard> {
        let keys = self.plan(kind.primitive())?;
        let request = self.request(&keys, kind, meter);
        let started = Instant::now();
        let deadline = request.deadline(started);
        let holding = match self.effective_owner() {
            // The owner's own bookkeeping (another of its tasks acquiring the same name)
            // counts against the same wait.
            Some(owner) => owner
                .hold(&self.engine, &keys, kind, deadline, async {
                    request.wait(started, deadline).await.map(Some)
                })
                .await
                .and_then(|held| held.ok_or_else(|| request.timeout(started, None))),
            None => request.wait(started, deadline).await,
        };
        Ok(Guard::new(holding?))
    }

    /// Acquires a lease of `kind`, runs `work` while it is kept renewed (cancelled when it
    /// is lost), and releases it; as [`Lock::run`](crate::Lock::run) documents.
    pub(crate) async fn run<T, E, F>(&self, kind: Kind, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        match self.run_or_busy(kind, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(busy)) => Err(E::from(busy)),
            Err(e) => Err(e),
        }
    }

    /// As [`run`](Spec::run), with `Ok(None)` where the lock stayed busy.
    pub(crate) async fn run_unless_busy<T, E, F>(
        &self,
        kind: Kind,
        work: F,
    ) -> std::result::Result<Option<T>, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        match self.run_or_busy(kind, work).await {
            Ok(Ok(value)) => Ok(Some(value)),
            Ok(Err(_busy)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs `work` under the lease (see [`run`](Spec::run)); `Ok(Err(timeout))` when the
    /// lock stayed busy and `work` never ran.
    async fn run_or_busy<T, E, F>(
        &self,
        kind: Kind,
        work: F,
    ) -> std::result::Result<std::result::Result<T, Error>, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let owner = self.effective_owner().unwrap_or_default();
        let mut spec = self.clone();
        spec.renewal = Renewal::Auto;
        spec.owner = Some(owner.clone());
        owner
            .scope(async move {
                let guard = match Box::pin(spec.acquire(kind)).await {
                    Ok(guard) => guard,
                    Err(busy) if busy.is_busy() => return Ok(Err(busy)),
                    Err(e) => return Err(E::from(e)),
                };
                // `spec` renews every lease it acquires: one that is not renewed was
                // re-entered, acquired earlier by this owner with `Renewal::Fixed`.
                if !guard.holding().is_renewed() {
                    let name = guard.name().to_owned();
                    // A nested hold: giving it back only counts down, the outer holds on.
                    let _ = guard.release().await;
                    return Err(E::from(Error::FixedLeaseReentered { name }));
                }
                let outcome = {
                    let work = work(&guard);
                    tokio::select! {
                        biased;
                        () = guard.lost() => Err(guard.holding().lease.ended_error()),
                        out = work => Ok(out),
                    }
                };
                let released = guard.release().await;
                settle(outcome, released).map(Ok)
            })
            .await
    }
}

/// What a `run` returns once its work ended (`outcome`: its result, or the lease's end
/// that cancelled it) and the lease was given back (`released`): the work's own error
/// first, then the lease's.
pub(crate) fn settle<T, E: From<Error>>(
    outcome: std::result::Result<std::result::Result<T, E>, Error>,
    released: Result<()>,
) -> std::result::Result<T, E> {
    match (outcome, released) {
        (Err(ended), _) => Err(E::from(ended)),
        (Ok(Err(e)), _) => Err(e),
        (Ok(Ok(_)), Err(e)) => Err(E::from(e)),
        (Ok(Ok(value)), Ok(())) => Ok(value),
    }
}

/// The option setters every primitive's builder has, on a type with a `spec: Spec` field.
macro_rules! option_setters {
    ($builder:ident) => {
        impl $builder {
            /// Lease length (default: the client's,
            /// [`ClientBuilder::ttl`](crate::ClientBuilder::ttl), itself by default
            /// [`DEFAULT_TTL`](crate::DEFAULT_TTL)), between [`MIN_TTL`](crate::MIN_TTL)
            /// and [`MAX_TTL`](crate::MAX_TTL).
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.spec.ttl = ttl;
                self
            }

            /// How long an acquisition waits while the name is busy (default: the
            /// client's, [`ClientBuilder::wait`](crate::ClientBuilder::wait), itself by
            /// default [`DEFAULT_WAIT`](crate::DEFAULT_WAIT); an election's campaign
            /// waits [`Wait::Forever`](crate::Wait::Forever) unless told otherwise).
            pub fn wait(mut self, wait: impl Into<crate::Wait>) -> Self {
                self.spec.wait = wait.into();
                self
            }

            /// Key prefix (default: the client's,
            /// [`ClientBuilder::prefix`](crate::ClientBuilder::prefix), itself by default
            /// [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX)). An empty prefix makes the key
            /// the bare name.
            pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
                self.spec.set_prefix(prefix.into());
                self
            }

            /// Back-off bounds for polling (default [`Retry::default`](crate::Retry)).
            pub fn retry(mut self, retry: crate::Retry) -> Self {
                self.spec.retry = retry;
                self
            }

            /// Whether the lease is renewed while held (default: the client's,
            /// [`ClientBuilder::renewal`](crate::ClientBuilder::renewal), itself by default
            /// [`Renewal::Auto`](crate::Renewal::Auto)); [`Renewal::Fixed`](crate::Renewal::Fixed)
            /// for a lease that simply expires after its TTL. `run` always renews (and
            /// refuses to re-enter a fixed lease).
            pub fn renewal(mut self, renewal: crate::Renewal) -> Self {
                self.spec.renewal = renewal;
                self
            }

            /// A budget for the whole hold: renewal stops once this much time has passed
            /// since the acquisition, and the lease then expires (default: no budget).
            /// Keeps a stuck holder from holding forever.
            pub fn max_hold(mut self, budget: std::time::Duration) -> Self {
                self.spec.max_hold = Some(budget);
                self
            }

            /// Acquire for this owner, so that a nested acquisition of the same name by
            /// the same owner re-enters (see [`Owner`](crate::Owner)). Without it, the
            /// owner is that of the task-local scope the acquisition runs in
            /// ([`Owner::scope`](crate::Owner::scope)), if any; with neither, every
            /// acquisition is a fresh one.
            pub fn owner(mut self, owner: &crate::Owner) -> Self {
                self.spec.owner = Some(owner.clone());
                self
            }

            /// Label this name's metrics with a `name` label (feature `metrics`). Off by
            /// default: every name is one more series in the metrics backend, so turn it
            /// on for a few well-known names only.
            #[cfg(feature = "metrics")]
            #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
            pub fn name_in_metrics(mut self) -> Self {
                self.spec.name_in_metrics = true;
                self
            }

            /// The owner acquisitions act for: the builder's own, else that of the
            /// current scope.
            #[allow(dead_code, reason = "used by the blocking builders that drive some")]
            pub(crate) fn effective_owner(&self) -> Option<crate::Owner> {
                self.spec.effective_owner()
            }
        }
    };
}
pub(crate) use option_setters;
