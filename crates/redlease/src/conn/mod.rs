//! How a client reaches Redis: its endpoints, the settings every connection it opens
//! shares (data connections, one per node; pub/sub connections for grants, release
//! notices and sentinel events), and the pub/sub [`pubsub::Link`] that comes back after
//! an outage.

pub(crate) mod pubsub;
#[cfg(feature = "cluster")]
pub(crate) mod shards;
pub(crate) mod tls;

/// Without the `cluster` feature there are no shard channels: no value of this type
/// exists, so the notifiers' `Option<Arc<Shards>>` is always `None`.
#[cfg(not(feature = "cluster"))]
pub(crate) mod shards {
    /// A Cluster's shard channels (none without the `cluster` feature).
    pub(crate) enum Shards {}

    impl Shards {
        pub(crate) fn is_up(&self, _channel: &str) -> bool {
            match *self {}
        }

        pub(crate) fn want(
            &self,
            _channel: &str,
            _confirmed: Option<tokio::sync::mpsc::UnboundedSender<bool>>,
        ) {
            match *self {}
        }

        pub(crate) fn unwant(&self, _channel: &str) {
            match *self {}
        }
    }
}

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::error::{Error, Result};

/// The delay between a data connection's reconnection tries (before jitter).
const RECONNECT_STEP: Duration = Duration::from_millis(10);
/// Reconnection tries after the first, before commands waiting on it fail.
const RECONNECT_TRIES: usize = 5;

/// How long a connection may sit idle before the kernel probes whether its peer is
/// still there (TCP keepalive), and then how far apart the probes go and how many may
/// go unanswered before the kernel closes it: an idle connection cut by a silent
/// partition (packets dropped, no reset) is closed within 8 s instead of the system's
/// default two hours, so that the next command reconnects instead of waiting on it.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
/// See [`KEEPALIVE_IDLE`].
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "freebsd"
))]
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
/// See [`KEEPALIVE_IDLE`].
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "macos",
    target_os = "freebsd"
))]
const KEEPALIVE_PROBES: u32 = 3;
/// The shortest `TCP_USER_TIMEOUT` (see [`Settings::tcp`]): a few of the kernel's
/// retransmissions (200 ms apart at the least, doubling) fit in it.
#[cfg(any(target_os = "linux", target_os = "android"))]
const USER_TIMEOUT_MIN: Duration = Duration::from_secs(1);

/// Which Redis deployment a client connects to.
#[derive(Clone)]
pub(crate) enum Endpoints {
    /// One Redis: `redis://` or `rediss://`.
    Single(String),
    /// One Redis, through the application's own redis-rs client (which opens the
    /// subscriptions), and its connection manager for commands when it gave one.
    Provided(Box<Provided>),
    /// Sentinels (`redis://host:port` each, or `rediss://` for TLS to them and to the
    /// primary) and the name of the primary they watch; the credentials of `data` (a URL
    /// without host meaning) are the primary's.
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinels: Vec<String>,
        master: String,
        data: Option<String>,
    },
    /// Seed nodes of a Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// Independent primaries of a quorum.
    Quorum(Vec<String>),
}

impl Endpoints {
    /// `url` as endpoints: a `redis+sentinel://` or `redis+cluster://` URL (or their
    /// `rediss+` forms), or else one Redis.
    pub(crate) fn parse(url: &str) -> Self {
        #[cfg(feature = "sentinel")]
        if let Some(sentinel) = parse_sentinel_url(url) {
            return sentinel;
        }
        #[cfg(feature = "cluster")]
        if let Some(seeds) = parse_cluster_url(url) {
            return Self::Cluster(seeds);
        }
        Self::Single(url.to_owned())
    }

    /// The endpoints' addresses, passwords redacted, for messages.
    pub(crate) fn labels(&self) -> Vec<String> {
        match self {
            Self::Single(url) => vec![redact_url(url)],
            // The address alone: a connection's Display never shows its credentials.
            Self::Provided(provided) => {
                vec![provided.client.get_connection_info().addr().to_string()]
            }
            #[cfg(feature = "sentinel")]
            Self::Sentinel {
                sentinels, master, ..
            } => sentinels
                .iter()
                .map(|s| format!("{}/{master}", redact_url(s)))
                .collect(),
            #[cfg(feature = "cluster")]
            Self::Cluster(urls) => urls.iter().map(|u| redact_url(u)).collect(),
            Self::Quorum(urls) => urls.iter().map(|u| redact_url(u)).collect(),
        }
    }

    /// Where the user and password go for these endpoints, in the scheme they were given
    /// with (`rediss://USER:PASSWORD@host:port`...), for [`Error::Auth`]'s advice.
    pub(crate) fn credentials_form(&self) -> String {
        let scheme_of = |url: &str| {
            url.split_once("://")
                .map_or("redis", |(scheme, _)| scheme)
                .to_owned()
        };
        match self {
            Self::Single(url) => {
                let scheme = scheme_of(url);
                format!(
                    "{scheme}://USER:PASSWORD@host:port, or {scheme}://:PASSWORD@host:port for the default user"
                )
            }
            Self::Provided(_) => "the redis-rs client's connection info".to_owned(),
            #[cfg(feature = "sentinel")]
            Self::Sentinel { .. } => {
                "redis+sentinel://USER:PASSWORD@host:port[,host:port...]/master-name".to_owned()
            }
            #[cfg(feature = "cluster")]
            Self::Cluster(seeds) => {
                let scheme = seeds
                    .first()
                    .map_or_else(|| "redis".to_owned(), |s| scheme_of(s));
                format!("{scheme}+cluster://USER:PASSWORD@host:port[,host:port...]")
            }
            Self::Quorum(urls) => {
                let scheme = urls
                    .first()
                    .map_or_else(|| "redis".to_owned(), |u| scheme_of(u));
                format!("{scheme}://USER:PASSWORD@host:port in each node's URL")
            }
        }
    }
}

/// The application's own redis-rs client, and its connection manager when it gave one.
#[derive(Clone)]
pub(crate) struct Provided {
    pub(crate) client: redis::Client,
    pub(crate) manager: Option<ConnectionManager>,
}

/// What every connection of one client shares.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) endpoints: Endpoints,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How `rediss://` connections trust the server and present themselves.
    pub(crate) tls: tls::Tls,
    /// The application's own cluster connection, for commands (a Cluster only).
    #[cfg(feature = "cluster")]
    pub(crate) cluster_connection: Option<redis::cluster_async::ClusterConnection>,
}

impl Settings {
    /// The reconnecting data connections' configuration.
    ///
    /// A reconnection tries once, then [`RECONNECT_TRIES`] more times, [`RECONNECT_STEP`]
    /// to twice that apart (jittered), without growing the delay. Every command sent meanwhile waits for
    /// it, so a server that comes back is used within one step: with the redis-rs default
    /// (doubling from the first delay) a command waited up to 80 ms past the restart in
    /// the delay before the last try. The tries span 50-100 ms, longer than a waiter's
    /// poll during an outage (`acquire::OUTAGE_POLL`, 50 ms), so its next attempt finds
    /// the reconnection still trying rather than failed, and never waits a poll more.
    ///
    /// It has no response timeout of its own: every request on a data connection goes
    /// through the node's watch (`backend::node::conn::Watched`), which bounds it by the
    /// response timeout and replaces the connection when it goes silent; a second timer
    /// per request cost about 700 client instructions per acquire + release.
    pub(crate) fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None)
            .set_min_delay(RECONNECT_STEP)
            .set_exponent_base(1.0)
            .set_number_of_retries(RECONNECT_TRIES)
    }

    /// The socket options of every connection: TCP keepalive ([`KEEPALIVE_IDLE`]), and on
    /// Linux a `TCP_USER_TIMEOUT` of twice the response timeout (at least
    /// [`USER_TIMEOUT_MIN`]): the kernel closes a connection whose sent bytes stay
    /// unacknowledged that long. Without it a connection cut by a silent partition
    /// stays open through the kernel's retransmission back-off, up to about two
    /// minutes, and once the partition heals it carries nothing until the next
    /// retransmission, seconds later. A slow server does not trip it: its kernel
    /// acknowledges the bytes whatever the server does with them.
    pub(crate) fn tcp(&self) -> redis::io::tcp::TcpSettings {
        use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
        let keepalive = TcpKeepalive::new().with_time(KEEPALIVE_IDLE);
        #[cfg(any(
            target_os = "linux",
            target_os = "android",
            target_os = "macos",
            target_os = "freebsd"
        ))]
        let keepalive = keepalive
            .with_interval(KEEPALIVE_INTERVAL)
            .with_retries(KEEPALIVE_PROBES);
        let settings = TcpSettings::default().set_keepalive(keepalive);
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let settings = settings.set_user_timeout((self.response_timeout * 2).max(USER_TIMEOUT_MIN));
        settings
    }

    /// A redis-rs client for `url`, with the TLS options when set and the socket options of
    /// [`Settings::tcp`].
    pub(crate) fn redis_client(&self, url: &str) -> Result<redis::Client> {
        let info = redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| self.bad_url(&e))?
            .set_tcp_settings(self.tcp());
        let info = self.tls.addressed(info)?;
        #[cfg(feature = "tls")]
        if self.tls.certificates().is_some()
            && !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
        {
            return Err(Error::InvalidOption {
                option: "url",
                reason: format!(
                    "a CA or client certificate is given for TLS, but `{}` is a plain-text URL: use rediss:// (rediss+sentinel://, rediss+cluster://) where the server speaks TLS, or drop the TLS options",
                    redact_url(url)
                ),
            });
        }
        self.tls.client(info).map_err(|e| self.bad_url(&e))
    }

    /// The error for endpoints redis-rs refused (`e`), without echoing a password.
    pub(crate) fn bad_url(&self, e: &redis::RedisError) -> Error {
        Error::InvalidOption {
            option: "url",
            reason: format!(
                "`{}` is not a usable Redis URL ({}); expected redis://[user:password@]host:port[/db], rediss://... for TLS, or redis+sentinel://host:port[,host:port...]/master-name (rediss+sentinel://... for TLS)",
                self.endpoints.labels().join(","),
                // The error's Display may echo the URL with its password; keep the kind.
                format_args!("{:?}", e.kind())
            ),
        }
    }
}

/// The error for a connection that could not be made.
pub(crate) fn connecting(source: redis::RedisError) -> Error {
    if crate::error::is_auth_refusal(&source) {
        // The endpoints and the form are filled in by `backend::connect`, which knows them.
        return Error::Auth {
            endpoints: String::new(),
            detail: auth_detail(&source),
            form: String::new(),
        };
    }
    Error::Redis {
        action: crate::error::CONNECTING,
        source,
    }
}

/// The server's words in an authentication refusal (`NOAUTH Authentication required.`),
/// or the error's kind where the handshake failed without them.
pub(crate) fn auth_detail(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => format!("{:?}", e.kind()),
    }
}

/// `redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]` ->
/// the sentinels' URLs, the master name, and a URL carrying the primary's credentials and
/// database. `rediss+sentinel://` is the same over TLS, to the sentinels and to the
/// primary: every URL made is a `rediss://` one.
#[cfg(feature = "sentinel")]
fn parse_sentinel_url(url: &str) -> Option<Endpoints> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
        ("redis", rest)
    } else {
        ("rediss", url.strip_prefix("rediss+sentinel://")?)
    };
    let (creds, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (hosts, path) = rest.split_once('/')?;
    let mut path = path.split('/');
    let master = path.next().filter(|m| !m.is_empty())?.to_owned();
    let db = path.next().filter(|d| !d.is_empty());
    let sentinels: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{h}"))
        .collect();
    if sentinels.is_empty() {
        return None;
    }
    let data = (creds.is_some() || db.is_some()).then(|| {
        let creds = creds.map(|c| format!("{c}@")).unwrap_or_default();
        let db = db.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{scheme}://{creds}localhost{db}")
    });
    Some(Endpoints::Sentinel {
        sentinels,
        master,
        data,
    })
}

/// `redis+cluster://[user:password@]host:port[,host:port...]` (or `rediss+cluster://`
/// for TLS) -> one seed URL per node, each with the credentials.
#[cfg(feature = "cluster")]
fn parse_cluster_url(url: &str) -> Option<Vec<String>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else {
        ("rediss", url.strip_prefix("rediss+cluster://")?)
    };
    let rest = rest.trim_end_matches('/');
    let (creds, hosts) = match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    };
    let seeds: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{creds}{h}"))
        .collect();
    (!seeds.is_empty()).then_some(seeds)
}

/// `url` with its password replaced by `***` (`redis://user:secret@host` ->
/// `redis://user:***@host`), fit for logs and error messages. A string without `://`
/// becomes `***` altogether.
///
/// # Examples
/// ```
/// assert_eq!(
///     redlease::diagnostics::redact_url("rediss://app:s3cret@db:6380/0"),
///     "rediss://app:***@db:6380/0"
/// );
/// ```
pub fn redact_url(url: &str) -> String {
    // A password lives only before an `@` (`user:password@`, `:password@`); a text with
    // none (a typo, a bare host) is shown as it is, so that the typo can be seen.
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    match rest.rfind('@') {
        Some(at) => {
            let creds = &rest[..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{user}:***@{}", &url[..start], &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "cluster")]
    #[test]
    fn cluster_urls_name_every_seed_with_its_credentials() {
        assert_eq!(
            parse_cluster_url("redis+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001/"),
            Some(vec![
                "redis://app:pw@10.0.0.1:7000".to_owned(),
                "redis://app:pw@10.0.0.2:7001".to_owned(),
            ])
        );
        assert_eq!(
            parse_cluster_url("rediss+cluster://h:7000"),
            Some(vec!["rediss://h:7000".to_owned()])
        );
        assert_eq!(parse_cluster_url("redis+cluster://"), None);
        assert_eq!(parse_cluster_url("redis://h:7000"), None);
    }

    #[cfg(feature = "sentinel")]
    #[test]
    fn sentinel_urls_name_every_sentinel_in_the_scheme_given() {
        let parsed = |url: &str| match parse_sentinel_url(url) {
            Some(Endpoints::Sentinel {
                sentinels,
                master,
                data,
            }) => Some((sentinels, master, data)),
            _ => None,
        };
        assert_eq!(
            parsed("redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/main"),
            Some((
                vec![
                    "redis://10.0.0.1:26379".to_owned(),
                    "redis://10.0.0.2:26379".to_owned()
                ],
                "main".to_owned(),
                None
            ))
        );
        assert_eq!(
            parsed("rediss+sentinel://app:pw@10.0.0.1:26380,10.0.0.2:26380/main/2"),
            Some((
                vec![
                    "rediss://10.0.0.1:26380".to_owned(),
                    "rediss://10.0.0.2:26380".to_owned()
                ],
                "main".to_owned(),
                Some("rediss://app:pw@localhost/2".to_owned())
            ))
        );
        assert_eq!(parsed("rediss+sentinel://10.0.0.1:26380"), None);
        assert_eq!(parsed("rediss+sentinel:///main"), None);
        assert_eq!(parsed("rediss://10.0.0.1:6380"), None);
    }

    #[test]
    fn credentials_are_advised_in_the_scheme_given() {
        let form = |url: &str| Endpoints::parse(url).credentials_form();
        assert!(form("rediss://db:6380").starts_with("rediss://USER:PASSWORD@host:port"));
        assert!(form("redis://db:6379").starts_with("redis://USER:PASSWORD@host:port"));
        #[cfg(feature = "cluster")]
        assert!(form("rediss+cluster://a:1,b:2").starts_with("rediss+cluster://USER:PASSWORD@"));
        #[cfg(feature = "sentinel")]
        assert!(
            form("redis+sentinel://s:26379/main").starts_with("redis+sentinel://USER:PASSWORD@")
        );
        assert!(
            Endpoints::Quorum(vec!["rediss://a:1".into()])
                .credentials_form()
                .starts_with("rediss://USER:PASSWORD@")
        );
    }

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
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(redact_url("app:s3cret@db:6379"), "app:***@db:6379");
        assert_eq!(redact_url("redis://:p@ss@db"), "redis://:***@db");
    }
}
