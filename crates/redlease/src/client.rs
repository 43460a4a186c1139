//! [`Client`]: one cheap-to-clone handle per Redis deployment.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::renew::Renewer;
use crate::wait::Notifier;

/// How long connecting to Redis may take before it fails, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest note [`ClientBuilder::holder_note`] keeps, in bytes.
pub const MAX_HOLDER_NOTE: usize = 256;
/// How long one command may wait for its reply before it fails, by default.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether waiters learn of releases over pub/sub (the default) or only by polling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Notifications {
    /// One shared RESP3 pub/sub connection per [`Client`] carries hand-offs and release
    /// notices to every waiter; polling remains as a fallback.
    #[default]
    PubSub,
    /// Waiters poll with jittered exponential back-off only.
    Polling,
}

/// Builds a [`Client`]; start with [`Client::builder`].
#[must_use]
#[derive(Clone)]
pub struct ClientBuilder {
    url: String,
    connect_timeout: Duration,
    response_timeout: Duration,
    notifications: Notifications,
    /// PEM of the CA(s) that sign the server's certificate, instead of the system's roots.
    tls_root: Option<Vec<u8>>,
    /// Appended to the holder details (`host=... pid=...`) that locks record.
    holder_note: Option<String>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("url", &redact_url(&self.url))
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("notifications", &self.notifications)
            .field("tls_root", &self.tls_root.as_ref().map(|_| "<pem>"))
            .field("holder_note", &self.holder_note)
            .finish()
    }
}

impl ClientBuilder {
    /// Connect timeout (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Per-command reply timeout (default [`DEFAULT_RESPONSE_TIMEOUT`]). Keep it well below
    /// the locks' TTL: a reply that comes later than this is treated as lost, and the
    /// attempt's outcome as unknown.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How waiters learn of releases (default [`Notifications::PubSub`]).
    pub fn notifications(mut self, notifications: Notifications) -> Self {
        self.notifications = notifications;
        self
    }

    /// Trust the CA certificate(s) in `pem` (PEM text) for `rediss://` connections, instead
    /// of the system's root store. The server's certificate is always verified, including
    /// its name or IP against the URL's host.
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// Adds `note` to the holder details that this client's locks record beside the lock
    /// key (by default `host=<hostname> pid=<pid>`), for operators who ask who holds a lock
    /// (`redlease status`): the details become `host=<hostname> pid=<pid> <note>`. The
    /// `redlease run` command puts `cmd=<program>` here.
    ///
    /// Anyone who can read the lock's keys can read the note: never put a secret in it.
    /// Control characters are replaced by spaces and the note is cut to
    /// [`MAX_HOLDER_NOTE`] bytes.
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
        let note: String = note
            .into()
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let mut end = note.len().min(MAX_HOLDER_NOTE);
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        self.holder_note = Some(note[..end].trim().to_owned()).filter(|n| !n.is_empty());
        self
    }

    /// Connects, failing fast when Redis cannot be reached.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a malformed URL or zero timeout, [`Error::Redis`] when
    /// Redis cannot be reached or refuses the credentials.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the half-made connection.
    pub async fn connect(self) -> Result<Client> {
        for (option, value) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::InvalidOption {
                    option,
                    reason: "must be greater than zero".into(),
                });
            }
        }
        let redis = self.redis_client().map_err(|e| Error::InvalidOption {
            option: "url",
            reason: format!(
                "`{}` is not a usable Redis URL ({}); expected redis://[user:password@]host:port[/db] or rediss://... for TLS",
                redact_url(&self.url),
                e.kind_description()
            ),
        })?;
        let config = manager_config(self.connect_timeout, self.response_timeout);
        let conn = ConnectionManager::new_with_config(redis.clone(), config)
            .await
            .map_err(|source| Error::Redis {
                action: "connecting",
                source,
            })?;
        let notifier = Notifier::new(
            self.notifications == Notifications::PubSub,
            redis,
            self.connect_timeout,
            self.response_timeout,
        )?;
        Ok(Client {
            inner: Arc::new(Inner {
                renewer: Renewer::new(conn.clone()),
                conn,
                notifier,
                holder: holder_details(self.holder_note.as_deref()),
            }),
        })
    }
}

impl ClientBuilder {
    fn redis_client(&self) -> redis::RedisResult<redis::Client> {
        match &self.tls_root {
            #[cfg(feature = "tls")]
            Some(pem) => redis::Client::build_with_tls(
                self.url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            #[cfg(not(feature = "tls"))]
            Some(_) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS support is not compiled in (enable the `tls` feature)",
            ))),
            None => redis::Client::open(self.url.as_str()),
        }
    }
}

pub(crate) fn manager_config(connect: Duration, response: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response))
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(Duration::from_secs(1))
        .set_number_of_retries(3)
}

trait KindDescription {
    fn kind_description(&self) -> String;
}

impl KindDescription for redis::RedisError {
    fn kind_description(&self) -> String {
        // The error's Display may echo the URL with its password; keep only the kind.
        format!("{:?}", self.kind())
    }
}

/// A handle to one Redis deployment, shared by every lock and task that uses it.
///
/// Cheap to clone (an `Arc`): clone it into tasks rather than connecting again. It
/// multiplexes all commands over one connection that reconnects by itself, and carries
/// all waiters' notifications over one more pub/sub connection.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) conn: ConnectionManager,
    pub(crate) notifier: Arc<Notifier>,
    pub(crate) renewer: Arc<Renewer>,
    pub(crate) holder: String,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
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

    /// Starts building a client for `url`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            notifications: Notifications::default(),
            tls_root: None,
            holder_note: None,
        }
    }

    /// A lock named `name` on this deployment, with default options; set others with the
    /// [`Lock`] builder methods. Nothing is sent to Redis until it is acquired.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), name.into())
    }

    /// How many tasks of this client are waiting in a lock queue right now (diagnostics).
    pub fn waiting(&self) -> usize {
        self.inner.notifier.waiting()
    }

    /// Renewal round trips this client has sent so far (diagnostics): one per sweep of the
    /// renewal scheduler, however many leases it renewed.
    pub fn renewal_round_trips(&self) -> u64 {
        self.inner.renewer.round_trips()
    }

    /// Identifies this client (and its clones) among others in one process.
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner).addr()
    }

    pub(crate) fn conn(&self) -> ConnectionManager {
        self.inner.conn.clone()
    }
}

/// `url` with its password replaced by `***` (`redis://user:secret@host` ->
/// `redis://user:***@host`), fit for logs and error messages. A string without `://`
/// becomes `***` altogether.
///
/// # Examples
/// ```
/// assert_eq!(
///     redlease::redact_url("rediss://app:s3cret@db:6380/0"),
///     "rediss://app:***@db:6380/0"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return "***".into();
    };
    let rest = &url[scheme_end + 3..];
    match rest.rfind('@') {
        Some(at) => {
            let creds = &rest[..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***@{}", &url[..scheme_end + 3], &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

/// "host=... pid=... [note]" for operators who ask who holds a lock.
fn holder_details(note: Option<&str>) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let pid = std::process::id();
    match note {
        Some(note) => format!("host={host} pid={pid} {note}"),
        None => format!("host={host} pid={pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("redis://app:s3cret@127.0.0.1:6379/0"),
            "redis://app:***@127.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        let b = Client::builder("redis://u:hunter2@h:1");
        assert!(!format!("{b:?}").contains("hunter2"));
    }

    #[test]
    fn holder_notes_are_single_line_and_bounded() {
        let b = Client::builder("redis://h:1").holder_note(" cmd=a\nb\t ");
        assert_eq!(b.holder_note.as_deref(), Some("cmd=a b"));
        let long = "é".repeat(MAX_HOLDER_NOTE);
        let b = Client::builder("redis://h:1").holder_note(long);
        let kept = b.holder_note.unwrap_or_default();
        assert!(kept.len() <= MAX_HOLDER_NOTE && kept.len() > MAX_HOLDER_NOTE - 2);
        assert_eq!(
            Client::builder("redis://h:1").holder_note("  ").holder_note,
            None
        );
        assert!(holder_details(Some("cmd=x")).ends_with(" cmd=x"));
        assert!(holder_details(None).starts_with("host="));
    }
}
