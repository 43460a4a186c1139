//! The signals a command of `redlease` answers (SIGINT, SIGTERM, SIGHUP), as one stream:
//! `run` forwards them to its command, `status --watch` and `leader --watch` end on them,
//! the supervisor passes them on. A leaf: it uses no other module of the binary.

use anyhow::Context as _;
use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// SIGINT, SIGTERM and SIGHUP, as one stream.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).context("handling SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("handling SIGTERM")?,
            hangup: signal(SignalKind::hangup()).context("handling SIGHUP")?,
        })
    }

    /// The next signal received. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}
