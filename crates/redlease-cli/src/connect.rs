//! Where Redis is (`--redis URL`, `REDIS_URL`, or the default) and connecting to it.

use std::time::Duration;

use anyhow::{Context as _, bail};
use redis::aio::MultiplexedConnection;
use redlease_local::RedisServer;

/// The Redis used when neither `--redis` nor `REDIS_URL` says otherwise.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one reply may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

const REDIS_HELP: &str = "The Redis to use: redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss://... for TLS (the server certificate is verified). Credentials in the URL are never printed. Repeatable for a quorum of independent nodes, which is not supported yet. [default: $REDIS_URL, else redis://127.0.0.1:6379]";

/// The connection options every subcommand that talks to Redis shares.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RedisArgs {
    #[arg(
        long = "redis",
        value_name = "URL",
        env = "REDIS_URL",
        hide_env_values = true,
        hide_env = true,
        help = REDIS_HELP
    )]
    pub(crate) urls: Vec<String>,

    /// Prefix of the Redis key of every lock: lock NAME lives at key PREFIX+NAME. Must match
    /// the prefix of the programs that take the lock (the library's default is redlease:)
    #[arg(long, value_name = "PREFIX", default_value = redlease::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
}

impl RedisArgs {
    /// The one URL to use.
    pub(crate) fn url(&self) -> anyhow::Result<&str> {
        match self.urls.as_slice() {
            [] => Ok(DEFAULT_URL),
            [url] => Ok(url),
            urls => bail!(
                "{} --redis URLs given, but a quorum of independent Redis nodes (Redlock) is not supported yet; give one URL",
                urls.len()
            ),
        }
    }

    /// A redlease client; `note` goes into the holder details of its locks.
    pub(crate) async fn client(&self, note: Option<String>) -> anyhow::Result<redlease::Client> {
        let url = self.url()?;
        let mut builder = redlease::Client::builder(url).connect_timeout(CONNECT_TIMEOUT);
        if let Some(note) = note {
            builder = builder.holder_note(note);
        }
        builder
            .connect()
            .await
            .with_context(|| format!("connecting to Redis at {}", redlease::redact_url(url)))
    }

    /// A plain redis-rs connection, for reading and removing keys behind the library.
    pub(crate) async fn raw(&self) -> anyhow::Result<MultiplexedConnection> {
        let url = self.url()?;
        let shown = redlease::redact_url(url);
        // redis-rs' own message may repeat the URL, password included: keep only its kind.
        let client = redis::Client::open(url).map_err(|e| {
            anyhow::anyhow!(
                "`{shown}` is not a usable Redis URL ({:?}); expected redis://[user:password@]host:port[/db] or rediss://...",
                e.kind()
            )
        })?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .with_context(|| format!("connecting to Redis at {shown}"))
    }
}

/// The Redis of `redlease demo` and `redlease bench`: `url` when given, else a private
/// redis-server on a free loopback port, stopped when the returned server is dropped
/// (drop it after every connection to it). Returns the server, the URL and a description
/// of where it is (the URL redacted, or the private server's address).
pub(crate) async fn url_or_private_server(
    url: Option<&str>,
) -> anyhow::Result<(Option<RedisServer>, String, String)> {
    if let Some(url) = url {
        return Ok((None, url.to_owned(), redlease::redact_url(url)));
    }
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await?
        .context("starting a private redis-server")?;
    let url = server.url();
    let where_ = format!("a private redis-server on 127.0.0.1:{}", server.port());
    Ok((Some(server), url, where_))
}
