//! [`ConnectionState`]: whether a client's Redis answers, for the whole client, and the
//! stream of its changes ([`Client::connection_states`](crate::Client::connection_states)).
//!
//! Made of what every node recorded of its latest request (`backend::node::Health`):
//! the client's own requests (acquisitions, renewals, releases) and, while a stream is
//! polled, a `PING` per node every [`PROBE`] so that an idle client notices too.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::watch;

use crate::engine::Engine;

/// How often a polled [`ConnectionStates`] stream asks every node (`PING`) when nothing
/// else has.
pub const PROBE: Duration = Duration::from_secs(1);

/// Whether a client's Redis deployment answers, judged by the latest request to each node.
///
/// A connection state says nothing about a lease: a lease is lost only when its own
/// renewal finds it gone or it runs out unrenewed, and each guard says so itself
/// ([`Guard::lost`](crate::Guard::lost), [`Guard::health`](crate::Guard::health)). While
/// the client is [`Suspended`](ConnectionState::Suspended), held leases stay valid until
/// their [`valid_until`](crate::Guard::valid_until) and their renewals keep trying;
/// acquisitions that wait keep waiting. There is no "lost connection" state that would
/// also mean "lost locks" (the ambiguity of Curator's `LOST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionState {
    /// Every node answered its latest request (or has had none since the client
    /// connected).
    Connected,
    /// Over a quorum: `down` of the `nodes` nodes did not answer their latest request,
    /// but a majority did, so leases can still be taken and renewed.
    Degraded {
        /// Nodes whose latest request failed for want of an answer.
        down: usize,
        /// Nodes of the quorum.
        nodes: usize,
    },
    /// Redis does not answer (over a quorum: a majority of the nodes do not): requests
    /// fail with connection errors or time out. Renewals and waiting acquisitions keep
    /// retrying.
    Suspended,
}

impl ConnectionState {
    /// The state of a deployment whose nodes' latest requests were answered as `answered`
    /// (`None`: no request yet).
    fn of(answered: impl IntoIterator<Item = Option<bool>>) -> Self {
        let (mut down, mut nodes) = (0, 0);
        for answered in answered {
            nodes += 1;
            if answered == Some(false) {
                down += 1;
            }
        }
        if down == 0 {
            Self::Connected
        } else if nodes - down > nodes / 2 {
            Self::Degraded { down, nodes }
        } else {
            Self::Suspended
        }
    }

    /// Whether requests can succeed now (connected, or degraded with a majority up).
    pub fn is_usable(&self) -> bool {
        !matches!(self, Self::Suspended)
    }
}

/// Every node's record, followed.
pub(crate) fn watches(engine: &Engine) -> Vec<watch::Receiver<Option<bool>>> {
    engine
        .deployment()
        .nodes
        .iter()
        .map(|node| node.health.answering())
        .collect()
}

/// The client's connection state now.
pub(crate) fn now(engine: &Engine) -> ConnectionState {
    ConnectionState::of(watches(engine).iter().map(|w| *w.borrow()))
}

/// The changes of a client's [`ConnectionState`], from
/// [`Client::connection_states`](crate::Client::connection_states): a [`Stream`] that
/// is `Unpin` and ends only when dropped.
#[must_use = "a stream does nothing unless polled"]
pub struct ConnectionStates(Pin<Box<dyn Stream<Item = ConnectionState> + Send>>);

impl fmt::Debug for ConnectionStates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionStates").finish_non_exhaustive()
    }
}

impl Stream for ConnectionStates {
    type Item = ConnectionState;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }
}

/// Follows `engine`'s nodes: the current state first, then each change.
pub(crate) fn follow(engine: Arc<Engine>) -> ConnectionStates {
    let watches = watches(&engine);
    let state = (engine, watches, None::<ConnectionState>);
    ConnectionStates(Box::pin(futures_util::stream::unfold(
        state,
        |(engine, mut watches, told)| async move {
            loop {
                let now = ConnectionState::of(watches.iter_mut().map(|w| *w.borrow_and_update()));
                if told != Some(now) {
                    return Some((now, (engine, watches, Some(now))));
                }
                let changed = futures_util::future::select_all(
                    watches.iter_mut().map(|w| Box::pin(w.changed())),
                );
                tokio::select! {
                    _ = changed => {}
                    () = tokio::time::sleep(PROBE) => probe(&engine).await,
                }
            }
        },
    )))
}

/// Asks every node for a `PING`, each bounded by the response timeout; each answer (or
/// its failure, a late one included) is recorded by the node.
async fn probe(engine: &Engine) {
    let ping = redis::cmd("PING");
    let deployment = engine.deployment();
    let asked = deployment.nodes.iter().map(|node| async {
        let answered = tokio::time::timeout(
            deployment.response_timeout,
            node.query::<redis::Value>(&ping),
        )
        .await;
        if answered.is_err() {
            node.health
                .record::<()>(&Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to a PING within the response timeout",
                ))));
        }
    });
    futures_util::future::join_all(asked).await;
}

#[cfg(test)]
mod tests {
    use super::ConnectionState;

    #[test]
    fn a_state_follows_the_majority() {
        assert_eq!(ConnectionState::of([None]), ConnectionState::Connected);
        assert_eq!(
            ConnectionState::of([Some(true)]),
            ConnectionState::Connected
        );
        assert_eq!(
            ConnectionState::of([Some(false)]),
            ConnectionState::Suspended
        );
        assert_eq!(
            ConnectionState::of([Some(true), Some(false), None]),
            ConnectionState::Degraded { down: 1, nodes: 3 }
        );
        assert_eq!(
            ConnectionState::of([Some(false), Some(false), Some(true)]),
            ConnectionState::Suspended
        );
        assert_eq!(
            ConnectionState::of([Some(true), Some(false), Some(true), Some(false), None]),
            ConnectionState::Degraded { down: 2, nodes: 5 }
        );
        assert_eq!(
            ConnectionState::of([Some(false), Some(false), Some(false), None, None]),
            ConnectionState::Suspended
        );
    }
}
