//! Making a client's [`Deployment`] from its endpoints.

#[cfg(feature = "sentinel")]
use std::sync::Arc;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::aio::ConnectionManager;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;

#[cfg(feature = "cluster")]
use super::cluster;
use super::deployment::{Deployment, Topology};
use super::node::{Conn, Node};
#[cfg(feature = "sentinel")]
use super::sentinel::Follower;
use crate::conn::{Endpoints, Settings, connecting, redact_url};
use crate::error::{Error, NodeError, Result};

/// Connects to the deployment `settings` name. Also returns the Redis that carries the
/// grant subscription where waiters queue for hand-offs (a single Redis or the Sentinel
/// primary; none for a cluster or a quorum).
pub(crate) async fn connect(settings: &Settings) -> Result<(Deployment, Option<redis::Client>)> {
    let config = settings.manager_config();
    let deployment = |topology, nodes| Deployment::new(topology, nodes, settings.response_timeout);
    Ok(match &settings.endpoints {
        Endpoints::Single(url) => {
            let redis = settings.redis_client(url)?;
            let conn = ConnectionManager::new_with_config(redis.clone(), config)
                .await
                .map_err(connecting)?;
            let node = Node::new(Conn::Single(conn), redact_url(url));
            (deployment(Topology::Single, vec![node]), Some(redis))
        }
        Endpoints::Provided(provided) => {
            let client = &provided.client;
            let conn = match &provided.manager {
                Some(manager) => manager.clone(),
                None => ConnectionManager::new_with_config(client.clone(), config)
                    .await
                    .map_err(connecting)?,
            };
            let label = settings.endpoints.labels().join(",");
            let node = Node::new(Conn::Single(conn), label);
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
            let deadline = tokio::time::Instant::now() + settings.connect_timeout;
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
        Endpoints::Quorum(urls) => (Box::pin(quorum(settings, urls)).await?, None),
    })
}

/// A quorum over `urls`, once a majority answered `PING` (the others keep connecting
/// lazily), or the error once so many failed or the connect timeout passed that no
/// majority can: a slow or silent node costs nothing here while a majority is fast.
async fn quorum(settings: &Settings, urls: &[String]) -> Result<Deployment> {
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
        let conn =
            ConnectionManager::new_lazy_with_config(redis, config.clone()).map_err(connecting)?;
        nodes.push(Node::new(Conn::Single(conn), redact_url(url)));
    }
    let deployment = Deployment::new(Topology::Quorum, nodes, settings.response_timeout);
    let needed = deployment.majority();
    let ping = redis::cmd("PING");
    let mut pings: FuturesUnordered<_> = deployment
        .nodes
        .iter()
        .map(|node| {
            let ping = &ping;
            async move {
                let result =
                    tokio::time::timeout(settings.connect_timeout, node.query::<String>(ping))
                        .await;
                (node, result)
            }
        })
        .collect();
    let mut answered = 0;
    let mut errors = Vec::new();
    while answered < needed && deployment.nodes.len() - errors.len() >= needed {
        let Some((node, result)) = pings.next().await else {
            break;
        };
        let error = match result {
            Ok(Ok(_)) => {
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
        .response_timeout(settings.response_timeout);
    #[cfg(feature = "tls")]
    let builder = match &settings.tls_root {
        Some(pem) => builder.certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        }),
        None => builder,
    };
    let client = builder.build().map_err(|e| settings.bad_url(&e))?;
    client.get_async_connection().await.map_err(connecting)
}

/// The sentinels' follower of `master`; `data` carries the primary's credentials.
#[cfg(feature = "sentinel")]
fn follower(
    settings: &Settings,
    sentinels: &[String],
    master: &str,
    data: Option<&str>,
) -> Result<Arc<Follower>> {
    let data = match data {
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
    Follower::new(
        sentinels,
        master.to_owned(),
        data,
        settings.connect_timeout,
        settings.response_timeout,
    )
    .map_err(|e| settings.bad_url(&e))
}
