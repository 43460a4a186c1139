//! Making a client's [`Deployment`] from its endpoints.

use std::collections::HashMap;
#[cfg(feature = "sentinel")]
use std::sync::Arc;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::Value;
use redis::aio::ConnectionManager;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;

#[cfg(feature = "cluster")]
use super::cluster;
use super::deployment::{Deployment, Topology};
use super::node::{Conn, Node};
#[cfg(feature = "sentinel")]
use super::sentinel::{DataNodes, Follower};
use crate::conn::{Endpoints, Settings, connecting, redact_url};
use crate::error::{Error, NodeError, Result};
use crate::server::Server;

/// Connects to the deployment `settings` name, within its connect timeout altogether
/// (every reconnection try of the first connection, the sentinels' answer, the
/// handshake). Also returns the Redis that carries the grant subscription where waiters
/// queue for hand-offs (a single Redis or the Sentinel primary; none for a cluster or a
/// quorum).
pub(crate) async fn connect(settings: &Settings) -> Result<(Deployment, Option<redis::Client>)> {
    connect_to(settings).await.map_err(|e| match e {
        Error::Auth { detail, .. } => Error::Auth {
            endpoints: settings.endpoints.labels().join(","),
            detail,
            form: settings.endpoints.credentials_form(),
        },
        e => e,
    })
}

async fn connect_to(settings: &Settings) -> Result<(Deployment, Option<redis::Client>)> {
    let deadline = tokio::time::Instant::now() + settings.connect_timeout;
    // A quorum bounds its own pings by the same deadline and says which nodes failed;
    // its timer fires in the same tick as this one and is polled first.
    let (mut deployment, grants) =
        match tokio::time::timeout_at(deadline, Box::pin(nodes(settings, deadline))).await {
            Ok(connected) => connected?,
            Err(_) => {
                return Err(Error::ConnectTimeout {
                    endpoints: settings.endpoints.labels().join(","),
                    after: settings.connect_timeout,
                });
            }
        };
    if deployment.server.is_none() {
        deployment.server = Box::pin(server_of(deployment.primary(), deadline)).await?;
    }
    #[cfg(feature = "cluster")]
    if deployment.topology == Topology::Cluster && !deployment.shard_channels() {
        tracing::info!(
            server = %deployment.server.as_ref().map(ToString::to_string).unwrap_or_default(),
            "no sharded pub/sub on this cluster: waiters listen for release notices over classic pub/sub"
        );
    }
    Ok((deployment, grants))
}

/// The server behind `node`, read once at connect: `HELLO` (with no protocol version: it
/// changes nothing on the connection; every ACL user may run it, so the least-privilege
/// user leaves no NOPERM in the `ACL LOG`), or `INFO server` where `HELLO` takes no bare
/// call (before Redis 6.2). `None` when neither answered in time (the connection's own
/// errors come with the first command that needs it, or the deadline passed).
///
/// # Errors
/// [`Error::Auth`] when the server wants credentials that were not given, or refuses
/// them: no command would run.
async fn server_of(node: &Node, deadline: tokio::time::Instant) -> Result<Option<Server>> {
    let read = async {
        match node
            .query::<HashMap<String, Value>>(&redis::cmd("HELLO"))
            .await
        {
            Err(e) if crate::error::is_auth_refusal(&e) => Err(connecting(e)),
            Ok(hello) => {
                let text = |name: &str| match hello.get(name) {
                    Some(Value::BulkString(b)) => std::str::from_utf8(b).ok(),
                    Some(Value::SimpleString(s)) => Some(s.as_str()),
                    _ => None,
                };
                Ok(text("version").and_then(|v| Server::from_hello(text("server"), v)))
            }
            Err(e) => {
                tracing::debug!(node = %node.label, error = %e, "HELLO refused; asking INFO server");
                let info = node.query::<String>(redis::cmd("INFO").arg("server")).await;
                Ok(info.ok().and_then(|info| Server::from_info(&info)))
            }
        }
    };
    let server = match tokio::time::timeout_at(deadline, read).await {
        Ok(read) => read?,
        Err(_) => None,
    };
    if let Some(server) = &server {
        tracing::debug!(node = %node.label, %server, "connected");
    } else {
        tracing::debug!(node = %node.label, "the server did not say its version");
    }
    Ok(server)
}

/// The deployment's nodes, connected (a quorum's oldest server read from its nodes'
/// answers at start).
async fn nodes(
    settings: &Settings,
    deadline: tokio::time::Instant,
) -> Result<(Deployment, Option<redis::Client>)> {
    let config = settings.manager_config();
    let deployment = |topology, nodes| Deployment::new(topology, nodes, settings.response_timeout);
    Ok(match &settings.endpoints {
        Endpoints::Single(url) => {
            let redis = settings.redis_client(url)?;
            let conn = ConnectionManager::new_with_config(redis.clone(), config.clone())
                .await
                .map_err(connecting)?;
            let node = Node::redialing(
                conn,
                redis.clone(),
                config,
                settings.response_timeout,
                redact_url(url),
            );
            (deployment(Topology::Single, vec![node]), Some(redis))
        }
        Endpoints::Provided(provided) => {
            let client = &provided.client;
            let label = settings.endpoints.labels().join(",");
            // The application's own connection manager is used as it is; one made here
            // is replaced when it goes silent, as for a URL.
            let node = match &provided.manager {
                Some(manager) => Node::new(
                    Conn::watched(manager.clone(), settings.response_timeout),
                    label,
                ),
                None => Node::redialing(
                    ConnectionManager::new_with_config(client.clone(), config.clone())
                        .await
                        .map_err(connecting)?,
                    client.clone(),
                    config,
                    settings.response_timeout,
                    label,
                ),
            };
            (
                deployment(Topology::Single, vec![node]),
                Some(client.clone()),
            )
        }
        #[cfg(feature = "sentinel")]
        Endpoints::Sentinel {
            sentinels,
            master,
            data,
        } => {
            let follower = follower(settings, sentinels, master, data.as_deref())?;
            follower.listen();
            let (redis, addr) = Box::pin(follower.elect(deadline))
                .await
                .map_err(connecting)?;
            let conn = ConnectionManager::new_with_config(redis.clone(), config.clone())
                .await
                .map_err(connecting)?;
            follower.connected(&addr, &redis);
            let label = format!("sentinel master `{master}`");
            let node =
                Node::with_sentinel(conn, follower, config, settings.response_timeout, label);
            (deployment(Topology::Sentinel, vec![node]), Some(redis))
        }
        #[cfg(feature = "cluster")]
        Endpoints::Cluster(urls) => {
            let conn = match &settings.cluster_connection {
                Some(conn) => conn.clone(),
                None => Box::pin(cluster_connection(settings, urls)).await?,
            };
            let node = Node::new(
                cluster::connection(conn),
                settings.endpoints.labels().join(","),
            );
            (deployment(Topology::Cluster, vec![node]), None)
        }
        Endpoints::Quorum(urls) => (Box::pin(quorum(settings, urls, deadline)).await?, None),
    })
}

/// A quorum over `urls`, once a majority answered `HELLO` (the others keep connecting
/// lazily), or the error once so many failed or the connect timeout passed that no
/// majority can: a slow or silent node costs nothing here while a majority is fast.
async fn quorum(
    settings: &Settings,
    urls: &[String],
    deadline: tokio::time::Instant,
) -> Result<Deployment> {
    if urls.is_empty() {
        return Err(Error::InvalidOption {
            option: "urls",
            reason: "a quorum needs at least one node (three or five in practice)".into(),
        });
    }
    let config = settings.manager_config();
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        let redis = settings.redis_client(url)?;
        let conn = ConnectionManager::new_lazy_with_config(redis.clone(), config.clone())
            .map_err(connecting)?;
        nodes.push(Node::redialing(
            conn,
            redis,
            config.clone(),
            settings.response_timeout,
            redact_url(url),
        ));
    }
    let mut deployment = Deployment::new(Topology::Quorum, nodes, settings.response_timeout);
    let needed = deployment.majority();
    // The first answer is also the node's server (see `server_of`): a node that answers
    // is up.
    let mut pings: FuturesUnordered<_> = deployment
        .nodes
        .iter()
        .map(|node| async move {
            let result = tokio::time::timeout_at(deadline, async {
                let server = match Box::pin(server_of(node, deadline)).await {
                    Ok(server) => server,
                    Err(e) => {
                        let detail = match e {
                            Error::Auth { detail, .. } => detail,
                            e => e.to_string(),
                        };
                        return Err(redis::RedisError::from((
                            redis::ErrorKind::AuthenticationFailed,
                            "the node refused the credentials",
                            detail,
                        )));
                    }
                };
                match server {
                    Some(server) => Ok(Some(server)),
                    None => node
                        .query::<String>(&redis::cmd("PING"))
                        .await
                        .map(|_| None),
                }
            })
            .await;
            (node, result)
        })
        .collect();
    let mut servers = Vec::new();
    let mut answered = 0;
    let mut errors = Vec::new();
    while answered < needed && deployment.nodes.len() - errors.len() >= needed {
        let Some((node, result)) = pings.next().await else {
            break;
        };
        let error = match result {
            Ok(Ok(server)) => {
                servers.extend(server);
                answered += 1;
                continue;
            }
            Ok(Err(e)) => {
                tracing::warn!(node = %node.label, error = %e, "quorum node unreachable at start");
                e
            }
            Err(_) => {
                tracing::warn!(node = %node.label, "quorum node did not answer PING at start");
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "node did not answer PING within the connect timeout",
                ))
            }
        };
        errors.push(NodeError {
            node: node.label.clone(),
            error,
        });
    }
    drop(pings);
    deployment.server = Server::oldest(servers);
    if answered < needed {
        return Err(Error::NoQuorum {
            what: "answered",
            acquired: answered,
            needed,
            errors,
        });
    }
    Ok(deployment)
}

#[cfg(feature = "cluster")]
async fn cluster_connection(settings: &Settings, urls: &[String]) -> Result<ClusterConnection> {
    let builder = redis::cluster::ClusterClientBuilder::new(urls.iter().map(String::as_str))
        .connection_timeout(settings.connect_timeout)
        .response_timeout(settings.response_timeout)
        .tcp_settings(settings.tcp());
    settings.tls.check_urls(urls)?;
    #[cfg(feature = "tls")]
    let builder = match settings.tls.certificates() {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    };
    // Insecure only where the URLs ask for TLS: the mode alone would make a `redis://`
    // cluster's connections TLS ones.
    #[cfg(feature = "tls")]
    let builder = if settings.tls.verify == crate::conn::tls::Verify::Nothing
        && urls.iter().any(|u| u.starts_with("rediss://"))
    {
        builder.tls(redis::TlsMode::Insecure)
    } else {
        builder
    };
    let client = builder.build().map_err(|e| settings.bad_url(&e))?;
    client.get_async_connection().await.map_err(connecting)
}

/// The sentinels' follower of `master`; `data` carries the primary's credentials. The
/// primary is reached over TLS when the sentinels are (`rediss://` URLs, all of them).
#[cfg(feature = "sentinel")]
fn follower(
    settings: &Settings,
    sentinels: &[String],
    master: &str,
    data: Option<&str>,
) -> Result<Arc<Follower>> {
    let redis = match data {
        Some(url) => redis::IntoConnectionInfo::into_connection_info(url)
            .map_err(|e| settings.bad_url(&e))?
            .redis_settings()
            .clone(),
        None => redis::RedisConnectionInfo::default(),
    };
    let sentinels = sentinels
        .iter()
        .map(|url| settings.redis_client(url))
        .collect::<Result<Vec<_>>>()?;
    let over_tls = |s: &redis::Client| {
        matches!(
            s.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        )
    };
    let tls = match sentinels.iter().filter(|s| over_tls(s)).count() {
        0 => None,
        n if n == sentinels.len() => Some(settings.tls.clone()),
        _ => {
            return Err(Error::InvalidOption {
                option: "url",
                reason: format!(
                    "the sentinels of `{master}` mix rediss:// and redis:// URLs; give all of them in one scheme (rediss:// when the sentinels and the data nodes speak TLS)"
                ),
            });
        }
    };
    Follower::new(
        sentinels,
        master.to_owned(),
        DataNodes { redis, tls },
        settings.connect_timeout,
        settings.response_timeout,
    )
    .map_err(|e| settings.bad_url(&e))
}
