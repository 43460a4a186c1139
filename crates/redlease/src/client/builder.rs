//! [`ClientBuilder`]: the options a [`Client`] is built with, and the constructors of
//! [`Client`] that start one (`Client::builder`, `Client::quorum_builder`...) or connect
//! with default options (`Client::connect`, `Client::quorum`...).

mod connect;

use std::fmt;
use std::time::Duration;

use crate::builder::{DEFAULT_PREFIX, DEFAULT_TTL, DEFAULT_WAIT, MAX_NOTE};
use crate::conn::tls::{Tls, Verify};
use crate::conn::{Endpoints, Provided};
use crate::engine::{Defaults, one_line};
use crate::error::Result;
use crate::renew::Renewal;
use crate::wait::Wait;

use super::handle::Client;

/// How long connecting to Redis may take before it fails, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one command may wait for its reply before it fails, by default.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a grant keeps a name's fencing counter past the server's clock, by default
/// (see [`ClientBuilder::fence_keep`]): one hour. Clock steps seen in practice (an NTP or
/// chrony step, a leap second, a VM migrated or resumed) are milliseconds to minutes, so
/// an hour tolerates a hundredfold of them, and a name locked once leaves its counter for
/// an hour rather than the week of earlier versions. `FENCE_KEEP_MS` in
/// `scripts/lib/fence.lua` is the same value: a client with this keep sends none.
pub const DEFAULT_FENCE_KEEP: Duration = Duration::from_secs(3600);
/// The shortest [`ClientBuilder::fence_keep`]: a second, a hundred times the coarser
/// fencing clock of a quorum's nodes (10 ms steps).
const MIN_FENCE_KEEP: Duration = Duration::from_secs(1);
/// The longest [`ClientBuilder::fence_keep`]: a year.
const MAX_FENCE_KEEP: Duration = Duration::from_secs(366 * 24 * 3600);

/// Whether waiters learn of releases over pub/sub (the default) or only by polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Notifications {
    /// A single Redis, a Sentinel primary or a Cluster hands a released lock to the oldest
    /// waiter over pub/sub: one shared RESP3 connection per [`Client`] (on a Cluster, one
    /// per primary that owns a lock waited for, with sharded pub/sub that stays in the
    /// lock's shard); quorum waiters (and a Cluster's semaphore and read-write lock
    /// waiters) are woken by a release notice on the lock's channel and try again.
    /// Polling remains as a fallback (see [`crate::wait`]).
    #[default]
    PubSub,
    /// Waiters poll with jittered exponential back-off only.
    Polling,
}

/// Builds a [`Client`]; start with [`Client::builder`], [`Client::cluster_builder`],
/// [`Client::sentinel_builder`] or [`Client::quorum_builder`].
#[must_use]
#[derive(Clone)]
pub struct ClientBuilder {
    endpoints: Endpoints,
    connect_timeout: Duration,
    response_timeout: Duration,
    notifications: Notifications,
    /// How `rediss://` connections trust the server and present themselves.
    tls: Tls,
    /// Appended to the holder details (`host=... pid=...`) that locks record.
    holder_note: Option<String>,
    /// What every primitive of the client starts from.
    defaults: Defaults,
    /// How long a grant keeps a name's fencing counter past the server's clock.
    fence_keep: Duration,
    /// The application's own cluster connection, for commands.
    #[cfg(feature = "cluster")]
    cluster_connection: Option<redis::cluster_async::ClusterConnection>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("urls", &self.endpoints.labels())
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("notifications", &self.notifications)
            .field("tls", &self.tls)
            .field("holder_note", &self.holder_note)
            .field("defaults", &self.defaults)
            .field("fence_keep", &self.fence_keep)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    fn new(endpoints: Endpoints) -> Self {
        Self {
            endpoints,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            notifications: Notifications::default(),
            tls: Tls::default(),
            holder_note: None,
            defaults: Defaults {
                prefix: DEFAULT_PREFIX.to_owned(),
                ttl: DEFAULT_TTL,
                wait: DEFAULT_WAIT,
                renewal: Renewal::Auto,
            },
            fence_keep: DEFAULT_FENCE_KEEP,
            #[cfg(feature = "cluster")]
            cluster_connection: None,
        }
    }

    /// The key prefix of every primitive of this client (default [`DEFAULT_PREFIX`]),
    /// unless its builder sets its own ([`Lock::prefix`](crate::Lock::prefix) and the like). An empty prefix
    /// makes each key the bare name.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     .prefix("billing:locks:")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .connect()
    ///     .await?;
    /// // Key `billing:locks:invoice-7`, a 10 s lease, waits up to 2 s.
    /// let guard = client.lock("invoice-7").acquire().await?;
    /// # guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.defaults.prefix = prefix.into();
        self
    }

    /// The lease length of every primitive of this client (default [`DEFAULT_TTL`]),
    /// unless its builder sets its own ([`Lock::ttl`](crate::Lock::ttl) and the like); checked when the
    /// client connects.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.defaults.ttl = ttl;
        self
    }

    /// How long every acquisition of this client waits for a busy name (default
    /// [`DEFAULT_WAIT`]), unless its builder sets its own ([`Lock::wait`](crate::Lock::wait) and the like).
    /// An election's campaign waits [`Wait::Forever`] unless its own builder says
    /// otherwise.
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.defaults.wait = wait.into();
        self
    }

    /// Whether leases of this client are renewed while held (default
    /// [`Renewal::Auto`]), unless a builder sets its own ([`Lock::renewal`](crate::Lock::renewal) and the like).
    /// `run` always renews.
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.defaults.renewal = renewal;
        self
    }

    /// Connect timeout (default [`DEFAULT_CONNECT_TIMEOUT`]): the bound on
    /// [`connect`](Self::connect) altogether (every try of the first connection, the
    /// sentinels' answer, the handshake), and on each try of a later reconnection.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Per-command reply timeout (default [`DEFAULT_RESPONSE_TIMEOUT`]). Keep it well below
    /// the locks' TTL: a reply that comes later than this is treated as lost, and the
    /// attempt's outcome as unknown. A connection that left a request unanswered this
    /// long is replaced by a new one (the old one may sit behind a silent partition that
    /// dropped its packets), and the kernel closes a connection whose sent bytes stay
    /// unacknowledged for twice this long (`TCP_USER_TIMEOUT`, Linux; every connection
    /// also sends TCP keepalive probes after 5 s idle). In a quorum it also bounds each node's answer (at
    /// most a tenth of the lease). In a cluster, renewals wait at most a third of the
    /// lease for each primary (a longer response timeout is clamped there, with a
    /// warning), and each primary's leases are credited as soon as it answers.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long a grant keeps a name's fencing counter (`{prefix:name}\0fence`) past the
    /// server's clock (default [`DEFAULT_FENCE_KEEP`], one hour): **the fencing tokens of a
    /// name stay increasing as long as the server's clock never steps back by more than
    /// this** (an NTP step, a failover to a node whose clock is behind).
    ///
    /// A grant hands out `max(counter + 1, server time in µs)` and keeps the counter
    /// `keep + max(0, counter - now)`: until the clock has passed it, plus `keep`. Once it
    /// expired, the clock alone is past every token handed out before, unless it steps
    /// back by more than `keep`; then a grant may hand out a token at or below an earlier
    /// one, and a fenced resource ([`crate::resource`]) refuses its writes until the clock
    /// catches up. A longer keep tolerates larger steps and costs a key (about 72 bytes)
    /// per name locked in that time; a hold longer than the keep needs nothing (its token
    /// is recorded with its lease). The counter's loss by other means (a restart without
    /// persistence, an asynchronous failover that lost it) is tolerated as before, as long
    /// as the clock did not step back by more than the time since the last grant.
    ///
    /// Every client granting a name should use the same keep: a grant sets the counter's
    /// expiry by its own client's. Whole milliseconds, rounded up; a client with the
    /// default sends the scripts no argument for it.
    ///
    /// Checked when the client connects: less than a second or more than a year fails
    /// [`connect`](Self::connect) with [`Error::InvalidOption`](crate::Error::InvalidOption).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// use std::time::Duration;
    ///
    /// // Tolerate the server's clock stepping back by up to a day.
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     .fence_keep(Duration::from_secs(24 * 3600))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn fence_keep(mut self, keep: Duration) -> Self {
        self.fence_keep = keep;
        self
    }

    /// The fence keep as the granting scripts take it: `None` for the default (the
    /// scripts' own), else whole ms as text.
    fn fence_keep_arg(&self) -> Result<Option<String>> {
        if self.fence_keep < MIN_FENCE_KEEP || self.fence_keep > MAX_FENCE_KEEP {
            return Err(crate::Error::InvalidOption {
                option: "fence_keep",
                reason: format!(
                    "must be between {MIN_FENCE_KEEP:?} and {} days (the server's clock may step back by up to it), not {:?}",
                    MAX_FENCE_KEEP.as_secs() / 86_400,
                    self.fence_keep
                ),
            });
        }
        if self.fence_keep == DEFAULT_FENCE_KEEP {
            return Ok(None);
        }
        let ms = self.fence_keep.as_nanos().div_ceil(1_000_000);
        Ok(Some(ms.to_string()))
    }

    /// How waiters learn of releases (default [`Notifications::PubSub`]).
    pub fn notifications(mut self, notifications: Notifications) -> Self {
        self.notifications = notifications;
        self
    }

    /// Trust the CA certificate(s) in `pem` (PEM text) for `rediss://` connections, instead
    /// of the system's root store. The server's certificate is always verified, including
    /// its name or IP against the URL's host.
    ///
    /// The PEM is checked when the client connects: text without a certificate fails
    /// [`connect`](Self::connect) with [`Error::InvalidOption`](crate::Error::InvalidOption).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redlease::Client::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// Presents the client certificate (chain) in `cert_pem` with its private key in
    /// `key_pem` (both PEM text; the key unencrypted: PKCS#8, SEC1 or PKCS#1) on
    /// `rediss://` connections: mutual TLS, for a server that requires client certificates
    /// (`tls-auth-clients yes`). Combine it with
    /// [`tls_root_certificate`](Self::tls_root_certificate) when the server's own
    /// certificate is signed by a private CA.
    ///
    /// Both are checked when the client connects: a PEM without a certificate, a key that
    /// cannot be read, or a key that is not the certificate's fails
    /// [`connect`](Self::connect) with [`Error::InvalidOption`](crate::Error::InvalidOption).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redlease::Client::builder("rediss://redis.internal:6380")
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.crt")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/redis/client.crt")?,
    ///         std::fs::read("/etc/redis/client.key")?,
    ///     )
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// **Turns off the verification of the server's certificate** on `rediss://`
    /// connections: any certificate is accepted, whoever signed it and whatever name it
    /// carries. The traffic is still encrypted, but to whoever answers: anyone on the
    /// network path (a compromised router, a spoofed DNS record, a rogue host on the same
    /// network) can impersonate the server, read the password sent at connect and every
    /// lock's traffic, and grant or deny locks at will, so mutual exclusion holds only as
    /// long as nobody does. Use it for a test server with a throw-away certificate; in
    /// production give the server's CA with
    /// [`tls_root_certificate`](Self::tls_root_certificate) instead.
    ///
    /// It is the only way to turn verification off: a `rediss://...#insecure` URL (which
    /// redis-rs reads as this mode) is refused unless this option is set too, so that a
    /// URL copied into a configuration cannot turn it off unseen. A client certificate
    /// ([`tls_client_certificate`](Self::tls_client_certificate)) is still presented.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// // A disposable test server with a self-signed certificate.
    /// let client = redlease::Client::builder("rediss://127.0.0.1:6380")
    ///     .danger_accept_invalid_certificates()
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn danger_accept_invalid_certificates(mut self) -> Self {
        self.tls.verify = Verify::Nothing;
        self
    }

    /// Adds `note` to the holder details that this client's locks record beside the lock
    /// key (by default `host=<hostname> pid=<pid>`), for operators who ask who holds a lock
    /// (`redlease status`): the details become `host=<hostname> pid=<pid> <note>`. The
    /// `redlease run` command puts `cmd=<program>` here.
    ///
    /// Anyone who can read the lock's keys can read the note: never put a secret in it.
    /// Control characters are replaced by spaces and the note is cut to
    /// [`MAX_NOTE`] bytes.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     .holder_note("job=nightly-report")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn holder_note(mut self, note: impl Into<String>) -> Self {
        self.holder_note = one_line(&note.into(), MAX_NOTE);
        self
    }
}

impl Client {
    /// Connects to the Redis at `url` with default options.
    ///
    /// `url` is `redis://[user:password@]host:port[/db]`; ACL user and password come from
    /// the URL.
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Starts building a client for `url`: `redis://`, `rediss://` (TLS), or
    /// `redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]` for a
    /// primary found through Sentinel (the credentials and database are the primary's;
    /// `rediss+sentinel://` for TLS to the sentinels and to the primary, both with this
    /// builder's TLS options, as [`Client::sentinel_builder`] with `rediss://` sentinels),
    /// or `redis+cluster://[user:password@]host:port[,host:port...]` (`rediss+cluster://`
    /// for TLS) for a Redis Cluster seeded by those nodes (as `Client::cluster_builder`; the `sentinel`
    /// and `cluster` features).
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(Endpoints::parse(url))
    }

    /// Starts building a client on the application's own redis-rs `client` (one Redis),
    /// so that the connection details (address, credentials, TLS, RESP version) are set
    /// in one place. Builder options that shape connections ([`ClientBuilder::tls_root_certificate`])
    /// are then `client`'s business and ignored.
    ///
    /// What redlease opens from `client`: one reconnecting connection for commands (a
    /// [`ConnectionManager`](redis::aio::ConnectionManager) with this builder's connect
    /// and response timeouts; use [`Client::from_connection_manager`] to share the
    /// application's own), and, on first wait, one pub/sub connection that carries every
    /// waiter's hand-offs and the election observers' notices.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::redis;
    ///
    /// let app_redis = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let client = redlease::Client::from_redis(app_redis.clone()).connect().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_redis(client: redis::Client) -> ClientBuilder {
        ClientBuilder::new(Endpoints::Provided(Box::new(Provided {
            client,
            manager: None,
        })))
    }

    /// As [`Client::from_redis`], with the application's own connection `manager` (made
    /// from `client`) carrying redlease's commands too: no second data connection. Its
    /// own response timeout then bounds each reply (keep it well below the locks' TTL;
    /// see [`ClientBuilder::response_timeout`]). The pub/sub connection is still
    /// redlease's own, from `client`: a connection manager cannot carry subscriptions
    /// beside its commands.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::redis;
    ///
    /// let app_redis = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let manager = redis::aio::ConnectionManager::new(app_redis.clone()).await?;
    /// let client = redlease::Client::from_connection_manager(app_redis, manager)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn from_connection_manager(
        client: redis::Client,
        manager: redis::aio::ConnectionManager,
    ) -> ClientBuilder {
        ClientBuilder::new(Endpoints::Provided(Box::new(Provided {
            client,
            manager: Some(manager),
        })))
    }

    /// Starts building a Cluster client whose commands go over the application's own
    /// cluster `connection` (which follows MOVED and ASK itself); redlease opens only its
    /// pub/sub connections for hand-offs and release notices, through `seeds` (the
    /// cluster's nodes' URLs, with the credentials the subscriptions need: a redis-rs
    /// cluster client does not tell its nodes).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// use redlease::redis;
    ///
    /// let seeds = ["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"];
    /// let app_cluster = redis::cluster::ClusterClient::new(seeds)?;
    /// let connection = app_cluster.get_async_connection().await?;
    /// let client = redlease::Client::cluster_from(seeds, connection).connect().await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    pub fn cluster_from<S: AsRef<str>>(
        seeds: impl IntoIterator<Item = S>,
        connection: redis::cluster_async::ClusterConnection,
    ) -> ClientBuilder {
        let mut builder = Self::cluster_builder(seeds);
        builder.cluster_connection = Some(connection);
        builder
    }

    /// Starts building a client for the Redis Cluster reachable through `seeds` (any of
    /// its nodes' URLs). Each lock lives on the primary that owns its slot; MOVED and ASK
    /// redirections during resharding are followed.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<S: AsRef<str>>(seeds: impl IntoIterator<Item = S>) -> ClientBuilder {
        ClientBuilder::new(Endpoints::Cluster(
            seeds.into_iter().map(|s| s.as_ref().to_owned()).collect(),
        ))
    }

    /// Starts building a client for the primary named `master` that the sentinels at
    /// `sentinels` (`redis://host:port` each) watch; it follows failovers.
    ///
    /// Credentials in a sentinel's URL (`redis://user:password@host:port`) are the
    /// sentinel's own. `rediss://` sentinels (all of them: a mix of schemes is refused)
    /// are reached over TLS, and so are the primaries and replicas they name, with the
    /// builder's TLS options for both ([`ClientBuilder::tls_root_certificate`],
    /// [`ClientBuilder::tls_client_certificate`],
    /// [`ClientBuilder::danger_accept_invalid_certificates`]).
    ///
    /// The primary is the address a majority of the listed sentinels name
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), so list them all: with fewer than a majority
    /// up, connecting fails. The client listens to every sentinel's failover events
    /// (`+failover-state-send-slaveof-noone`, `+switch-master`): from the moment a
    /// failover starts, nothing more is sent to the old primary (which may answer as a
    /// primary for seconds more), calls then in flight report their outcome unknown, and
    /// the next ones wait (within the response timeout) for a majority naming the new
    /// primary. The grant subscription of waiters follows it too.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_builder<S: AsRef<str>>(
        sentinels: impl IntoIterator<Item = S>,
        master: &str,
    ) -> ClientBuilder {
        ClientBuilder::new(Endpoints::Sentinel {
            sentinels: sentinels
                .into_iter()
                .map(|s| s.as_ref().to_owned())
                .collect(),
            master: master.to_owned(),
            data: None,
        })
    }

    /// Starts building a quorum (Redlock) client over independent primaries: a lock is held
    /// when a majority of them grant it. See [`crate::quorum`] for the guarantees.
    pub fn quorum_builder<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> ClientBuilder {
        ClientBuilder::new(Endpoints::Quorum(
            nodes.into_iter().map(|s| s.as_ref().to_owned()).collect(),
        ))
    }

    /// Connects to a Redis Cluster with default options; see [`Client::cluster_builder`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn cluster<S: AsRef<str>>(seeds: impl IntoIterator<Item = S>) -> Result<Self> {
        Self::cluster_builder(seeds).connect().await
    }

    /// Connects to a Sentinel-managed primary with default options; see
    /// [`Client::sentinel_builder`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn sentinel<S: AsRef<str>>(
        sentinels: impl IntoIterator<Item = S>,
        master: &str,
    ) -> Result<Self> {
        Self::sentinel_builder(sentinels, master).connect().await
    }

    /// Connects to a quorum of independent primaries with default options; see
    /// [`Client::quorum_builder`].
    ///
    /// # Errors
    /// As [`ClientBuilder::connect`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// let client = redlease::Client::quorum([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn quorum<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Result<Self> {
        Self::quorum_builder(nodes).connect().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_do_not_show_passwords() {
        let b = Client::builder("redis://u:hunter2@h:1");
        assert!(!format!("{b:?}").contains("hunter2"));
    }

    #[test]
    fn holder_notes_are_single_line_and_bounded() {
        let b = Client::builder("redis://h:1").holder_note(" cmd=a\nb\t ");
        assert_eq!(b.holder_note.as_deref(), Some("cmd=a b"));
        let long = "é".repeat(MAX_NOTE);
        let b = Client::builder("redis://h:1").holder_note(long);
        let kept = b.holder_note.unwrap_or_default();
        assert!(kept.len() <= MAX_NOTE && kept.len() > MAX_NOTE - 2);
        assert_eq!(
            Client::builder("redis://h:1").holder_note("  ").holder_note,
            None
        );
    }
}
