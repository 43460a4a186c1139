//! Where Redis is (`--redis URL`, `REDIS_URL`, or the default) and connecting to it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;
#[cfg(feature = "local")]
use redlease_local::RedisServer;

/// The Redis used when neither `--redis` nor `REDIS_URL` says otherwise.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// The environment variable that gives the Redis when no `--redis` does.
const URL_ENV: &str = "REDIS_URL";

const REDIS_HELP: &str = "The Redis to use: redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss://... for TLS (the server certificate is verified against the system's roots, or --cacert); a primary found through Sentinel: redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER-NAME[/DB] (the credentials are the primary's), or rediss+sentinel://... for TLS to the sentinels and to the primary they name (with the same --cacert, --cert and --tls-key); redis+cluster://HOST:PORT[,HOST:PORT...] (rediss+cluster:// for TLS) for a Redis Cluster. Credentials in the URL are never printed (give the password in REDISCLI_AUTH instead). Repeat it for a quorum (Redlock) of independent primaries: a lock is held when a majority of them grant it. [default: $REDIS_URL, else redis://127.0.0.1:6379; demo and bench: a private redis-server]";

/// The connection options every subcommand that talks to Redis shares: global, so that
/// they go before the subcommand (`redlease --redis URL status`) or after it.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RedisArgs {
    /// The `--redis` URLs given on the command line (`REDIS_URL` is read by
    /// [`RedisArgs::urls`], so that `demo` and `bench` see only these).
    #[arg(
        long = "redis",
        value_name = "URL",
        global = true,
        help_heading = CONNECTION,
        help = REDIS_HELP
    )]
    pub(crate) urls: Vec<String>,

    /// Prefix of the Redis key of every lock: lock NAME lives at key PREFIX+NAME. Must match
    /// the prefix of the programs that take the lock (the library's default is redlease:)
    #[arg(long, value_name = "PREFIX", default_value = redlease::DEFAULT_PREFIX, global = true, help_heading = CONNECTION)]
    pub(crate) prefix: String,

    /// How long connecting to Redis may take (every try, the TLS and AUTH handshake), e.g.
    /// 1500ms or 10s [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, global = true, help_heading = CONNECTION)]
    pub(crate) connect_timeout: Option<Duration>,

    /// How long one reply may take on a connection that works before it is given up as
    /// lost (a stopped server, a network that drops packets), e.g. 500ms or 3s; keep it well
    /// below --ttl [default: 2s]
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, global = true, help_heading = CONNECTION)]
    pub(crate) response_timeout: Option<Duration>,

    #[command(flatten)]
    pub(crate) tls: TlsArgs,
}

/// The help heading of the connection options.
const CONNECTION: &str = "Connection (before or after the subcommand)";

/// A `--connect-timeout` or `--response-timeout`: a humantime duration above zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    let timeout = humantime::parse_duration(text).map_err(|e| format!("{e} (e.g. 1500ms, 2s)"))?;
    if timeout.is_zero() {
        return Err("must be above zero (e.g. 1500ms, 2s)".into());
    }
    Ok(timeout)
}

/// How `rediss://` connections trust the server and present themselves (redis-cli's
/// flags, but for the key: `--key` names the lock of `run`).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct TlsArgs {
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        help_heading = "TLS",
        help = "PEM file of the CA certificate(s) that sign the server's certificate (rediss://), instead of the system's roots: a private CA needs no SSL_CERT_FILE (redis-cli's --cacert). The server's certificate must still name the URL's host or IP"
    )]
    pub(crate) cacert: Option<PathBuf>,

    #[arg(
        long,
        value_name = "FILE",
        requires = "tls_key",
        global = true,
        help_heading = "TLS",
        help = "PEM file of this client's certificate (chain), for a server that requires one (mutual TLS: tls-auth-clients yes); needs --tls-key (redis-cli's --cert)"
    )]
    pub(crate) cert: Option<PathBuf>,

    #[arg(
        long = "tls-key",
        value_name = "FILE",
        requires = "cert",
        global = true,
        help_heading = "TLS",
        help = "PEM file of the unencrypted private key of --cert (redis-cli calls it --key; here --key names the lock of `run`)"
    )]
    pub(crate) tls_key: Option<PathBuf>,

    #[arg(
        long,
        global = true,
        help_heading = "TLS",
        help = "Do not verify the server's certificate (rediss://): any certificate is accepted. The traffic is encrypted, but anyone on the network path can impersonate the server, read the password and every lock's traffic, and grant or deny locks: for test servers only; give --cacert instead (redis-cli's --insecure). The only way to turn verification off: a rediss://...#insecure URL is refused without it"
    )]
    pub(crate) insecure: bool,
}

/// The PEM of a `--cacert`, `--cert` or `--tls-key` file.
struct Pem {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsArgs {
    /// The files' contents, read now.
    fn read(&self) -> anyhow::Result<Pem> {
        let ca = self
            .cacert
            .as_deref()
            .map(|path| read_pem("--cacert", path))
            .transpose()?;
        let client = match (&self.cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                Some((read_pem("--cert", cert)?, read_pem("--tls-key", key)?))
            }
            // clap requires each with the other.
            _ => None,
        };
        Ok(Pem { ca, client })
    }

    /// `builder` with these options.
    fn apply(&self, builder: redlease::ClientBuilder) -> anyhow::Result<redlease::ClientBuilder> {
        let pem = self.read()?;
        let mut builder = builder;
        if let Some(ca) = pem.ca {
            builder = builder.tls_root_certificate(ca);
        }
        if let Some((cert, key)) = pem.client {
            builder = builder.tls_client_certificate(cert, key);
        }
        if self.insecure {
            builder = builder.danger_accept_invalid_certificates();
        }
        Ok(builder)
    }

    /// A plain redis-rs client for `url` with these options (the library's rules: a
    /// `#insecure` URL only with `--insecure`).
    fn redis_client(&self, url: &str, shown: &str) -> anyhow::Result<redis::Client> {
        use redis::{ConnectionAddr, IntoConnectionInfo as _};
        // redis-rs' own message may repeat the URL, password included: keep only its kind.
        let bad_url = |e: &redis::RedisError| {
            anyhow::anyhow!(
                "`{shown}` is not a usable Redis URL ({:?}); expected redis://[user:password@]host:port[/db] or rediss://...",
                e.kind()
            )
        };
        let info = url.into_connection_info().map_err(|e| bad_url(&e))?;
        let addr = match info.addr().clone() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => {
                if insecure && !self.insecure {
                    anyhow::bail!(
                        "`{shown}` turns off the server's certificate verification (#insecure), which redlease takes only as an explicit option: drop #insecure and give the server's CA with --cacert, or, knowing what it gives up, add --insecure"
                    );
                }
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: self.insecure,
                    tls_params,
                }
            }
            other => other,
        };
        let info = info.set_addr(addr);
        let pem = self.read()?;
        if pem.ca.is_none() && pem.client.is_none() {
            return redis::Client::open(info).map_err(|e| bad_url(&e));
        }
        let certificates = redis::TlsCertificates {
            client_tls: pem
                .client
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: pem.ca,
        };
        redis::Client::build_with_tls(info, certificates)
            .with_context(|| format!("setting up TLS for {shown} (--cacert, --cert, --tls-key)"))
    }
}

/// The contents of `path`, given with `flag`.
fn read_pem(flag: &str, path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading the {flag} file {}", path.display()))
}

/// The environment variable that gives the password (redis-cli's name), so that it need
/// not be on the command line, where `/proc/PID/cmdline` shows it to every user.
const AUTH_ENV: &str = "REDISCLI_AUTH";

/// The password of `REDISCLI_AUTH`, when set.
fn env_password() -> Option<String> {
    std::env::var(AUTH_ENV).ok().filter(|p| !p.is_empty())
}

impl RedisArgs {
    /// The URLs to use: those given, else the default; the password of `REDISCLI_AUTH`
    /// (when set) in each that has no credentials of its own.
    pub(crate) fn urls(&self) -> Vec<String> {
        let password = env_password();
        self.given()
            .into_iter()
            .map(|url| match &password {
                Some(password) => with_password(&url, password),
                None => url,
            })
            .collect()
    }

    /// The URLs as given: `--redis`, else `REDIS_URL`, else the default.
    fn given(&self) -> Vec<String> {
        if !self.urls.is_empty() {
            return self.urls.clone();
        }
        let from_env = std::env::var(URL_ENV).ok().filter(|u| !u.is_empty());
        vec![from_env.unwrap_or_else(|| DEFAULT_URL.to_owned())]
    }

    /// Whether the password of some URL comes from `REDISCLI_AUTH` (it gave none).
    fn password_from_env(&self) -> bool {
        env_password().is_some_and(|password| {
            self.given()
                .iter()
                .any(|url| with_password(url, &password) != *url)
        })
    }

    /// The connect timeout: `--connect-timeout`, else the library's default.
    fn connect_timeout(&self) -> Duration {
        self.connect_timeout
            .unwrap_or(redlease::DEFAULT_CONNECT_TIMEOUT)
    }

    /// The response timeout: `--response-timeout`, else the library's default.
    fn response_timeout(&self) -> Duration {
        self.response_timeout
            .unwrap_or(redlease::DEFAULT_RESPONSE_TIMEOUT)
    }

    /// `err`, met connecting, in the CLI's words where the library's would mislead: a
    /// password from `REDISCLI_AUTH` that was refused is to be fixed there, not put in a
    /// URL.
    fn connect_error(&self, err: redlease::Error) -> anyhow::Error {
        match err {
            redlease::Error::Auth {
                endpoints, detail, ..
            } if self.password_from_env() => anyhow::Error::new(crate::exit::Said {
                code: crate::exit::NO_PERMISSION,
                text: format!(
                    "{endpoints} refused the credentials ({detail}); check the password in {AUTH_ENV} (and the user, given in the URL as {}://USER@host:port)",
                    self.given()
                        .first()
                        .and_then(|url| url.split_once("://"))
                        .map_or("redis", |(scheme, _)| scheme)
                ),
            }),
            err => err.into(),
        }
    }

    /// Where the locks live, for messages: the URL, or `a quorum of N nodes`.
    fn shown(&self) -> String {
        match self.urls().as_slice() {
            [url] => redlease::diagnostics::redact_url(url),
            urls => format!(
                "a quorum of {} nodes ({})",
                urls.len(),
                urls.iter()
                    .map(|u| redlease::diagnostics::redact_url(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// A redlease client over one Redis, or a quorum (Redlock) over several; `note` goes
    /// into the holder details of its locks.
    pub(crate) async fn client(&self, note: Option<String>) -> anyhow::Result<redlease::Client> {
        let urls = self.urls();
        let mut builder = match urls.as_slice() {
            [url] => redlease::Client::builder(url),
            urls => redlease::Client::quorum_builder(urls),
        }
        .connect_timeout(self.connect_timeout())
        .response_timeout(self.response_timeout());
        builder = self.tls.apply(builder)?;
        if let Some(note) = note {
            builder = builder.holder_note(note);
        }
        builder
            .connect()
            .await
            .map_err(|e| self.connect_error(e))
            .with_context(|| format!("connecting to Redis at {}", self.shown()))
    }

    /// A plain redis-rs connection to every node, for reading and removing keys behind the
    /// library. With one node, failing to reach it is an error; with several, each node's
    /// connection is given as it went, so that one node down does not hide the others.
    pub(crate) async fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        let urls = self.urls();
        if let [url] = urls.as_slice() {
            return Ok(vec![Node {
                url: redlease::diagnostics::redact_url(url),
                conn: Ok(self.raw_to(url).await?),
            }]);
        }
        Ok(futures_util::future::join_all(urls.iter().map(|url| self.node(url))).await)
    }

    /// The node at `url`, with a connection or why there is none.
    pub(crate) async fn node(&self, url: &str) -> Node {
        Node {
            url: redlease::diagnostics::redact_url(url),
            conn: self
                .raw_to(url)
                .await
                .map_err(|e| crate::exit::one_line(&e)),
        }
    }

    /// A plain connection to the one node there is.
    #[cfg(feature = "local")]
    pub(crate) async fn raw(&self) -> anyhow::Result<MultiplexedConnection> {
        match self.urls().as_slice() {
            [url] => self.raw_to(url).await,
            urls => Err(one_url_wanted(urls.len())),
        }
    }
}

impl RedisArgs {
    /// A plain redis-rs connection to `url`, with these TLS options and timeouts.
    pub(crate) async fn raw_to(&self, url: &str) -> anyhow::Result<MultiplexedConnection> {
        let shown = redlease::diagnostics::redact_url(url);
        let client = self.tls.redis_client(url, &shown)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout()))
            .set_response_timeout(Some(self.response_timeout()));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("connecting to Redis at {shown}"))
    }
}

/// The error of a command that works on one Redis, given `given` URLs.
#[cfg(feature = "local")]
fn one_url_wanted(given: usize) -> anyhow::Error {
    anyhow::anyhow!("{given} --redis URLs given, but this command works on one Redis; give one URL")
}

/// One Redis node and, if it could be reached, a connection to it.
#[derive(Clone)]
pub(crate) struct Node {
    /// Its URL, password redacted.
    pub(crate) url: String,
    /// The connection, or why there is none.
    pub(crate) conn: Result<MultiplexedConnection, String>,
}

#[cfg(feature = "local")]
/// The Redis of `redlease demo` and `redlease bench`: the one `--redis` URL of `redis`
/// when given (never `REDIS_URL`), else a private
/// redis-server on a free loopback port, stopped when the returned server is dropped
/// (drop it after every connection to it). Returns the server, the URL and a description
/// of where it is (the URL redacted, or the private server's address).
pub(crate) async fn url_or_private_server(
    redis: &RedisArgs,
) -> anyhow::Result<(Option<RedisServer>, String, String)> {
    match redis.urls.as_slice() {
        [] => {}
        [url] => return Ok((None, url.clone(), redlease::diagnostics::redact_url(url))),
        urls => return Err(one_url_wanted(urls.len())),
    }
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await?
        .context("starting a private redis-server")?;
    let url = server.url();
    let where_ = format!("a private redis-server on 127.0.0.1:{}", server.port());
    Ok((Some(server), url, where_))
}

/// `url` with `password`, when it gives none: for its user (`redis://user@host`), or the
/// default user. Unchanged when it has a password (`user:password@`, `:password@`), or
/// when it is no `redis://`, `rediss://`, `redis+sentinel://`, `rediss+sentinel://`,
/// `redis+cluster://` or `rediss+cluster://` URL (the connection then says what is wrong
/// with it).
fn with_password(url: &str, password: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    if !matches!(
        scheme,
        "redis"
            | "rediss"
            | "redis+sentinel"
            | "rediss+sentinel"
            | "redis+cluster"
            | "rediss+cluster"
    ) {
        return url.to_owned();
    }
    let authority = rest.split('/').next().unwrap_or_default();
    let (user, host) = match authority.rfind('@') {
        Some(_) if authority.contains(':') && authority.find(':') < authority.rfind('@') => {
            return url.to_owned();
        }
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => ("", rest),
    };
    let encoded =
        percent_encoding::utf8_percent_encode(password, percent_encoding::NON_ALPHANUMERIC);
    format!("{scheme}://{user}:{encoded}@{host}")
}

#[cfg(test)]
mod tests {
    use super::with_password;

    #[test]
    fn a_password_goes_into_urls_without_credentials_only() {
        assert_eq!(
            with_password("redis://127.0.0.1:6379/2", "p@ss:w/rd"),
            "redis://:p%40ss%3Aw%2Frd@127.0.0.1:6379/2"
        );
        assert_eq!(
            with_password("rediss://user:own@host:6380", "other"),
            "rediss://user:own@host:6380"
        );
        assert_eq!(
            with_password("redis://:own@host:6379", "other"),
            "redis://:own@host:6379"
        );
        assert_eq!(
            with_password("redis://user@host:6379", "pw"),
            "redis://user:pw@host:6379"
        );
        assert_eq!(
            with_password("redis+sentinel://s1:26379,s2:26379/main", "pw"),
            "redis+sentinel://:pw@s1:26379,s2:26379/main"
        );
        assert_eq!(
            with_password("rediss+sentinel://s1:26380,s2:26380/main", "pw"),
            "rediss+sentinel://:pw@s1:26380,s2:26380/main"
        );
        assert_eq!(
            with_password("redis+cluster://n1:7000,n2:7001", "pw"),
            "redis+cluster://:pw@n1:7000,n2:7001"
        );
        assert_eq!(
            with_password("rediss+cluster://app@n1:7000,n2:7001", "pw"),
            "rediss+cluster://app:pw@n1:7000,n2:7001"
        );
        assert_eq!(with_password("not a url", "pw"), "not a url");
    }
}
