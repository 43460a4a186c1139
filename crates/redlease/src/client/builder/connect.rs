//! [`ClientBuilder::connect`]: a built client wired to its deployment (the command
//! connections, the grant and release-notice subscriptions, the lease engine).

use std::sync::Arc;

use crate::backend;
use crate::conn::{Endpoints, Settings};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::notify::{GrantSource, Notifier, Reach, Wakeups};
use crate::ttl::validate_ttl;

use super::{ClientBuilder, Notifications};
use crate::client::handle::{Client, holder_details};

impl ClientBuilder {
    /// Connects, failing fast when Redis cannot be reached.
    ///
    /// A quorum client connects to every node and returns once a majority answered `PING`;
    /// the others keep connecting in the background as they are used.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a malformed URL or zero timeout, a
    /// [`fence_keep`](Self::fence_keep) out of its bounds, for TLS PEM that holds
    /// no certificate or key (or a key that is not the certificate's), or for a
    /// `rediss://...#insecure` URL without
    /// [`danger_accept_invalid_certificates`](Self::danger_accept_invalid_certificates); [`Error::Redis`] when
    /// Redis cannot be reached or refuses the credentials, [`Error::ConnectTimeout`] when
    /// no connection was made within the [connect timeout](Self::connect_timeout),
    /// [`Error::NoQuorum`] when fewer than a majority of quorum nodes answer.
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
        validate_ttl(self.defaults.ttl)?;
        self.defaults.wait.validate()?;
        self.tls.validate()?;
        let fence_keep = self.fence_keep_arg()?;
        let settings = Settings {
            endpoints: self.endpoints.clone(),
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            tls: self.tls.clone(),
            #[cfg(feature = "cluster")]
            cluster_connection: self.cluster_connection.clone(),
        };
        let (mut deployment, pubsub) = Box::pin(backend::connect(&settings)).await?;
        deployment.fence_keep = fence_keep;
        let notifications = self.notifications == Notifications::PubSub;
        let wakeups = match &self.endpoints {
            // On the slot's primary over sharded pub/sub; on any node over classic pub/sub
            // where the cluster has no sharded pub/sub (the bus carries it to every node).
            #[cfg(feature = "cluster")]
            Endpoints::Cluster(urls) if notifications => {
                let reach = if deployment.shard_channels() {
                    Reach::SlotOwner
                } else {
                    Reach::AnyNode
                };
                Some(wakeups(&settings, reach, urls)?)
            }
            Endpoints::Quorum(urls) if notifications => {
                Some(wakeups(&settings, Reach::EveryNode, urls)?)
            }
            _ => None,
        };
        // Release notices where waiters are handed locks instead (a single Redis,
        // Sentinel): only observers of an election listen there; the link connects on
        // first use.
        let observers = match &pubsub {
            Some(primary) if notifications && wakeups.is_none() => Some(
                Wakeups::new(
                    Reach::AnyNode,
                    std::slice::from_ref(primary),
                    self.connect_timeout,
                    self.response_timeout,
                )
                .map_err(|e| settings.bad_url(&e))?,
            ),
            _ => None,
        };
        let grants = match (&self.endpoints, pubsub) {
            _ if !notifications => GrantSource::Off,
            #[cfg(feature = "cluster")]
            (Endpoints::Cluster(_), _) if !deployment.shard_channels() => GrantSource::Off,
            #[cfg(feature = "cluster")]
            (Endpoints::Cluster(urls), _) => GrantSource::Cluster(
                urls.iter()
                    .map(|url| settings.redis_client(url))
                    .collect::<Result<Vec<_>>>()?,
            ),
            (_, Some(primary)) => GrantSource::Node {
                redis: Box::new(primary),
            },
            (_, None) => GrantSource::Off,
        };
        let notifier = Notifier::new(grants, self.connect_timeout, self.response_timeout)?;
        if let Some(follower) = deployment.follower() {
            // The grant subscription (and the observers' one) follows the primary the
            // sentinels elect, and queued waiters try again as soon as a failover starts
            // (their attempt finds the new primary and queues there).
            let notifier = Arc::downgrade(&notifier);
            let observers = observers.as_ref().map(Arc::downgrade);
            follower.on_switch(move |primary| {
                if let Some(notifier) = notifier.upgrade() {
                    match primary {
                        Some(primary) => notifier.follow(primary),
                        None => notifier.recheck(),
                    }
                }
                if let (Some(primary), Some(observers)) = (
                    primary,
                    observers.as_ref().and_then(std::sync::Weak::upgrade),
                ) {
                    observers.follow(primary);
                }
            });
        }
        let engine = Arc::new(Engine::new(
            Arc::new(deployment),
            notifier,
            wakeups,
            observers,
            holder_details(self.holder_note.as_deref()),
            self.defaults,
        ));
        engine.notifier.on_abandoned(give_back_abandoned(&engine));
        check_links_on_silence(&engine);
        Ok(Client { engine })
    }
}

/// When a command connection of `engine` goes silent (a request unanswered for the
/// response timeout) or meets `READONLY`, every subscription of the client (grants, release
/// notices, observers) checks its own at once instead of at its next health check (up to
/// 5 s later): the network that muted one may have muted both, and the primary demoted
/// under one may hold the others (each then moves to the new primary).
fn check_links_on_silence(engine: &Arc<Engine>) {
    let notifier = Arc::downgrade(&engine.notifier);
    let notices = engine.notices().map(Arc::downgrade);
    let hook: crate::backend::StaleHook = Arc::new(move || {
        if let Some(notifier) = notifier.upgrade() {
            notifier.check_soon();
        }
        if let Some(notices) = notices.as_ref().and_then(std::sync::Weak::upgrade) {
            notices.check_soon();
        }
    });
    for node in &engine.deployment().nodes {
        node.on_stale(Arc::clone(&hook));
    }
}

/// Gives back a lock handed to an acquisition of `engine`'s client that ended without it:
/// the release for its token, in the background; a hand-off on to a waiter of this client
/// is told to it at once.
fn give_back_abandoned(engine: &Arc<Engine>) -> crate::notify::grants::GiveBackHook {
    let engine = Arc::downgrade(engine);
    Box::new(move |keys, kind, token| {
        let Some(engine) = engine.upgrade() else {
            return;
        };
        let task = {
            let engine = Arc::clone(&engine);
            async move {
                match engine.release_script(&keys, kind, &token).await {
                    Ok(released) => {
                        tracing::debug!(key = %keys.key, held = released.was_held(), "gave back a lock handed to a waiter that gave up");
                    }
                    Err(e) => {
                        tracing::warn!(key = %keys.key, error = %e, "could not give back a lock handed to a waiter that gave up; it expires by itself");
                    }
                }
            }
        };
        engine.background(task);
    })
}

/// Release notifications over `urls` (cluster seeds or quorum nodes).
fn wakeups(settings: &Settings, reach: Reach, urls: &[String]) -> Result<Arc<Wakeups>> {
    let nodes = urls
        .iter()
        .map(|url| settings.redis_client(url))
        .collect::<Result<Vec<_>>>()?;
    Wakeups::new(
        reach,
        &nodes,
        settings.connect_timeout,
        settings.response_timeout,
    )
    .map_err(|e| settings.bad_url(&e))
}
