//! How a waiter stands in the queue: how an attempt joins it ([`Queue`]), and what ends a
//! queued waiter's wait between two attempts ([`News`], [`wait_for_news`]).

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::notify::{Grant, Registration, Told};

/// How an attempt joins the queue when the name is busy (see
/// [`Join`](crate::scripts::Join)): the waiter's [`Standing`](super::standing::Standing)
/// for its next attempt, as the scripts are told it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Queue {
    No,
    /// Only try, but withdraw the place an earlier attempt of this acquisition may have
    /// taken (its reply lost, or queued while the grant subscription was up): a lock taken
    /// now must leave no place behind, or a later release hands the lock to a finished
    /// acquisition and it sits with nobody for a ttl.
    Leave,
    Grants,
    Silent,
    /// No place, but a mark that a waiter listens for release notices.
    Listen,
}

impl Queue {
    /// As it is, except that an attempt that only tries withdraws a place when `again`
    /// (not the acquisition's first attempt: an earlier one may have left a place).
    pub(super) fn later(self, again: bool) -> Self {
        if self == Self::No && again {
            Self::Leave
        } else {
            self
        }
    }
}

/// Sleeps until `wake`, a hand-off to `registration` (or a nudge: it is next), a
/// `released` notice or a dropped pub/sub connection, whichever comes first.
pub(super) async fn wait_for_news(
    registration: Option<&mut Registration>,
    released: Option<&mut Pin<Box<Notified<'_>>>>,
    wake: Instant,
    epochs: &mut watch::Receiver<u64>,
) -> News {
    let granted = async {
        match registration {
            Some(r) => match r.told().await {
                Told::Granted(grant) => News::Granted(grant),
                Told::Next(ttl) => News::Next(ttl),
            },
            None => std::future::pending().await,
        }
    };
    let released = async {
        match released {
            Some(n) => n.await,
            None => std::future::pending().await,
        }
    };
    // Biased: a grant already read counts before a timer that expired meanwhile (a paused
    // process finds both ready), which saves an attempt; the grant is checked either way.
    tokio::select! {
        biased;
        news = granted => news,
        () = released => News::Check,
        () = tokio::time::sleep_until(wake) => News::Check,
        _ = epochs.changed() => News::Check,
    }
}

/// What ended a queued waiter's wait.
pub(super) enum News {
    /// The lock was handed to it.
    Granted(Grant),
    /// A hand-off told it that it is next in line, behind a holder with this lease length.
    Next(Duration),
    /// Time to attempt again: its timer ran out, a release was announced, or its grant
    /// subscription changed.
    Check,
}
