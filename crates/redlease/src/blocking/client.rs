//! The blocking [`Client`], and the default one of synchronous `#[locked]` functions.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::error::{Error, Result};

use super::builders::{Driven, Election, Latch, Lock, MultiLock, RwLock, Semaphore};
use super::runtime::{Runtime, block_on, in_async_task, inside_runtime};

/// A blocking handle to one Redis deployment; see [`crate::Client`].
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Client").finish_non_exhaustive()
    }
}

/// Builds a blocking [`Client`]: the options of [`crate::ClientBuilder`], and a
/// [`connect`](ClientBuilder::connect) that blocks. Start with [`Client::builder`],
/// [`Client::cluster_builder`], [`Client::sentinel_builder`], [`Client::quorum_builder`],
/// [`Client::from_redis`] or [`Client::from_connection_manager`].
#[must_use]
#[derive(Debug, Clone)]
pub struct ClientBuilder(crate::ClientBuilder);

/// Setters of the blocking builder, each its async twin's.
macro_rules! forward {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            #[doc = concat!("See [`crate::ClientBuilder::", stringify!($name), "`].")]
            pub fn $name(self, $($arg: $ty),*) -> Self {
                Self(self.0.$name($($arg),*))
            }
        )*
    };
}

impl ClientBuilder {
    forward! {
        connect_timeout(timeout: std::time::Duration);
        response_timeout(timeout: std::time::Duration);
        notifications(notifications: crate::Notifications);
        tls_root_certificate(pem: impl Into<Vec<u8>>);
        tls_client_certificate(cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>);
        danger_accept_invalid_certificates();
        holder_note(note: impl Into<String>);
        prefix(prefix: impl Into<String>);
        ttl(ttl: std::time::Duration);
        wait(wait: impl Into<crate::Wait>);
        renewal(renewal: crate::Renewal);
    }

    /// Connects, blocking until connected or failed; see
    /// [`crate::ClientBuilder::connect`].
    ///
    /// # Errors
    /// As [`crate::ClientBuilder::connect`], and [`Error::Runtime`] when the runtime
    /// cannot start or this is called from inside an async task.
    pub fn connect(self) -> Result<Client> {
        Client::from_builder(self.0)
    }
}

impl From<crate::ClientBuilder> for ClientBuilder {
    fn from(builder: crate::ClientBuilder) -> Self {
        Self(builder)
    }
}

impl Client {
    /// Connects with default options; see [`crate::Client::connect`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    pub fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect()
    }

    /// Starts building a client for `url`; see [`crate::Client::builder`].
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder(crate::Client::builder(url))
    }

    /// Starts building a Redis Cluster client; see [`crate::Client::cluster_builder`].
    #[cfg(feature = "cluster")]
    pub fn cluster_builder<S: AsRef<str>>(seeds: impl IntoIterator<Item = S>) -> ClientBuilder {
        ClientBuilder(crate::Client::cluster_builder(seeds))
    }

    /// Connects to a Redis Cluster with default options; see [`crate::Client::cluster`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    #[cfg(feature = "cluster")]
    pub fn cluster<S: AsRef<str>>(seeds: impl IntoIterator<Item = S>) -> Result<Self> {
        Self::cluster_builder(seeds).connect()
    }

    /// Starts building a client for a Sentinel-managed primary; see
    /// [`crate::Client::sentinel_builder`].
    #[cfg(feature = "sentinel")]
    pub fn sentinel_builder<S: AsRef<str>>(
        sentinels: impl IntoIterator<Item = S>,
        master: &str,
    ) -> ClientBuilder {
        ClientBuilder(crate::Client::sentinel_builder(sentinels, master))
    }

    /// Connects to a Sentinel-managed primary with default options; see
    /// [`crate::Client::sentinel`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    #[cfg(feature = "sentinel")]
    pub fn sentinel<S: AsRef<str>>(
        sentinels: impl IntoIterator<Item = S>,
        master: &str,
    ) -> Result<Self> {
        Self::sentinel_builder(sentinels, master).connect()
    }

    /// Starts building a quorum (Redlock) client; see [`crate::Client::quorum_builder`].
    pub fn quorum_builder<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> ClientBuilder {
        ClientBuilder(crate::Client::quorum_builder(nodes))
    }

    /// Connects to a quorum of independent primaries with default options; see
    /// [`crate::Client::quorum`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    pub fn quorum<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Result<Self> {
        Self::quorum_builder(nodes).connect()
    }

    /// Starts building a client on the application's own redis-rs client; see
    /// [`crate::Client::from_redis`].
    pub fn from_redis(client: redis::Client) -> ClientBuilder {
        ClientBuilder(crate::Client::from_redis(client))
    }

    /// Starts building a client on the application's own redis-rs client and connection
    /// manager; see [`crate::Client::from_connection_manager`]. The manager must have
    /// been made on a runtime that keeps running (its connection's task lives there).
    pub fn from_connection_manager(
        client: redis::Client,
        manager: redis::aio::ConnectionManager,
    ) -> ClientBuilder {
        ClientBuilder(crate::Client::from_connection_manager(client, manager))
    }

    /// A blocking client over `client`, an async client of the application, driven on
    /// the application's runtime (`handle`): the same connections, subscriptions and
    /// renewal, no second runtime. See [`crate::Client::blocking`].
    pub(crate) fn on_app_runtime(client: crate::Client, handle: tokio::runtime::Handle) -> Self {
        Self {
            inner: client,
            runtime: Arc::new(Runtime::of_app(handle)),
        }
    }

    /// Connects with the options of `builder`.
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    pub fn from_builder(builder: crate::ClientBuilder) -> Result<Self> {
        // Before the runtime exists: tokio refuses to drop one inside an async task.
        if in_async_task() {
            return Err(inside_runtime());
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redlease")
            .enable_all()
            .build()
            .map_err(|e| Error::Runtime {
                reason: format!("could not start the runtime that drives blocking locks: {e}"),
            })?;
        let runtime = Runtime::new(runtime);
        let inner = block_on(&runtime, builder.connect())??;
        Ok(Self {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// Gives back every lease this client still holds and waits for background
    /// releases; see [`crate::Client::shutdown`].
    ///
    /// # Errors
    /// As [`crate::Client::shutdown`], and [`Error::Runtime`] inside an async task.
    pub fn shutdown(&self) -> Result<()> {
        block_on(&self.runtime, self.inner.shutdown())?
    }

    /// A lock named `name`; see [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock(self.drive(self.inner.lock(name)))
    }

    /// A semaphore named `name` admitting `permits` holders at once; see
    /// [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore(self.drive(self.inner.semaphore(name, permits)))
    }

    /// A count-down latch named `name`; see [`crate::Client::latch`].
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch(self.drive(self.inner.latch(name)))
    }

    /// A read-write lock named `name`; see [`crate::Client::rwlock`].
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock(self.drive(self.inner.rwlock(name)))
    }

    /// Several locks held together, all or nothing; see [`crate::Client::multi_lock`].
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock(self.drive(self.inner.multi_lock(names)))
    }

    /// A blocking leader election; see [`crate::Client::election`].
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election(self.drive(self.inner.election(name)))
    }

    /// Who holds the name `name`, who waits for it and its fencing counter; see
    /// [`crate::Client::inspect`].
    ///
    /// # Errors
    /// As [`crate::Client::inspect`], and [`Error::Runtime`] inside an async task.
    pub fn inspect(&self, name: impl AsRef<str>) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.inspect(name))?
    }

    /// As [`Client::inspect`], for the name whose keys are `keys`; see
    /// [`crate::Client::inspect_keys`].
    ///
    /// # Errors
    /// As [`Client::inspect`].
    pub fn inspect_keys(&self, keys: &crate::LockKeys) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.inspect_keys(keys))?
    }

    /// Removes every hold on the name `name`, whoever holds it; see
    /// [`crate::Client::force_release`].
    ///
    /// # Errors
    /// As [`crate::Client::force_release`], and [`Error::Runtime`] inside an async task.
    pub fn force_release(&self, name: impl AsRef<str>) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.force_release(name))?
    }

    /// Removes every hold on the name of `keys`, whoever holds it; see
    /// [`crate::Client::force_release_keys`].
    ///
    /// # Errors
    /// As [`Client::force_release`].
    pub fn force_release_keys(&self, keys: &crate::LockKeys) -> Result<crate::Inspection> {
        block_on(&self.runtime, self.inner.force_release_keys(keys))?
    }

    /// The async client this one drives.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    fn drive<L>(&self, inner: L) -> Driven<L> {
        Driven {
            inner,
            runtime: Arc::clone(&self.runtime),
        }
    }
}

// Here rather than beside the async client's other methods: the async client knows
// nothing of the blocking API built over it (no import cycle between the two).
impl crate::Client {
    /// A [`blocking::Client`](crate::blocking::Client) over this client, for the
    /// synchronous parts of an async application (`tokio::task::spawn_blocking`, threads
    /// of its own): it shares this client's connections, subscriptions and renewal, and
    /// is driven on the application's runtime (the one this is called in), instead of a
    /// second runtime and second connections. A multi-thread runtime suits it best: on a
    /// current-thread runtime its calls progress only while that runtime is driven.
    ///
    /// # Errors
    /// [`Error::Runtime`] when called outside a Tokio runtime.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// let blocking = client.blocking()?;
    /// tokio::task::spawn_blocking(move || {
    ///     let guard = blocking.lock("report").acquire()?;
    ///     // ... synchronous work under the lock ...
    ///     guard.release()
    /// })
    /// .await
    /// .expect("the blocking task panicked")?;
    /// # Ok(()) }
    /// ```
    pub fn blocking(&self) -> Result<Client> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| Error::Runtime {
            reason: "Client::blocking needs the Tokio runtime the application runs on; call it from inside that runtime".into(),
        })?;
        Ok(Client::on_app_runtime(self.clone(), handle))
    }
}

static DEFAULT: OnceLock<Client> = OnceLock::new();

/// Makes `client` the default of synchronous `#[locked]` functions without
/// `client = ...` (else they use the async default, [`crate::set_default_client`], on the
/// runtime it was set in).
///
/// # Errors
/// [`Error::DefaultClientSet`] when a default blocking client was already set (the
/// first one stays).
pub fn set_default_client(client: Client) -> Result<()> {
    DEFAULT.set(client).map_err(|_| Error::DefaultClientSet {
        setter: "redlease::blocking::set_default_client",
    })
}

/// The client set by [`set_default_client`]; else, once the async default client is set
/// (inside a runtime), a blocking client over it, driven on that runtime (and then kept:
/// [`set_default_client`] is refused after it).
///
/// # Errors
/// [`Error::NoDefaultClient`] when neither was set.
pub fn default_client() -> Result<&'static Client> {
    if let Some(client) = DEFAULT.get() {
        return Ok(client);
    }
    let (client, runtime) =
        crate::default_client::default_on_its_runtime().ok_or(Error::NoDefaultClient {
            setter: "redlease::blocking::set_default_client",
        })?;
    Ok(DEFAULT.get_or_init(|| Client::on_app_runtime(client.clone(), runtime)))
}
