//! Driving the async engine from synchronous code: block on its runtime, never inside an
//! async task.

use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};

/// The runtime a blocking client drives its engine on (shared by its builders and
/// guards). Dropped last on a plain thread, it shuts down as tokio's runtimes do, waiting
/// for its threads. Dropped last inside any runtime's context, it is handed to a thread of
/// its own to shut down there, since tokio panics on a runtime dropped where blocking is
/// not allowed, and no question tokio answers tells every such place (an async task, one
/// polled without a budget, the shutdown of the runtime whose task held the client) from a
/// `spawn_blocking` thread, where blocking is allowed. Background releases still pending
/// then are dropped with it, and those leases expire after their TTL.
///
/// Or the application's own runtime, by its handle ([`crate::Client::blocking`]): the
/// blocking client then shares the async client's connections and renewal, and dropping
/// it shuts nothing down.
pub(super) struct Runtime(
    Option<tokio::runtime::Runtime>,
    Option<tokio::runtime::Handle>,
);

impl Runtime {
    pub(super) fn new(runtime: tokio::runtime::Runtime) -> Self {
        Self(Some(runtime), None)
    }

    /// The application's runtime, which it keeps running.
    pub(super) fn of_app(handle: tokio::runtime::Handle) -> Self {
        Self(None, Some(handle))
    }

    /// Runs `future` to completion on this thread, which the caller checked may block.
    pub(super) fn block_on_here<F: Future>(&self, future: F) -> Result<F::Output> {
        match (&self.0, &self.1) {
            (Some(runtime), _) => Ok(runtime.block_on(future)),
            (None, Some(handle)) => Ok(handle.block_on(future)),
            (None, None) => Err(Error::Runtime {
                reason: "the blocking client's runtime has shut down".into(),
            }),
        }
    }

    /// Enters the runtime's context, so that what is dropped meanwhile spawns there.
    pub(super) fn enter(&self) -> Option<tokio::runtime::EnterGuard<'_>> {
        match (&self.0, &self.1) {
            (Some(runtime), _) => Some(runtime.enter()),
            (None, Some(handle)) => Some(handle.enter()),
            (None, None) => None,
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(runtime) = self.0.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            // A plain thread, where blocking is allowed.
            drop(runtime);
            return;
        }
        // Handed over a channel: were the thread not to start, a runtime moved into its
        // closure would be dropped here, which is what must not happen.
        let (hand, over) = std::sync::mpsc::channel::<tokio::runtime::Runtime>();
        let started = std::thread::Builder::new()
            .name("redlease-blocking-shutdown".into())
            .spawn(move || drop(over.recv()));
        let runtime = match started {
            Ok(_) => match hand.send(runtime) {
                Ok(()) => return,
                Err(std::sync::mpsc::SendError(runtime)) => runtime,
            },
            Err(e) => {
                tracing::debug!(error = %e, "no thread to shut the blocking client's runtime down on");
                runtime
            }
        };
        // Without waiting for its threads, which never blocks.
        runtime.shutdown_background();
    }
}

/// Runs `future` to completion on `runtime`, refusing to block a thread that is polling
/// an async task (see [`in_async_task`]).
pub(super) fn block_on<F: Future>(runtime: &Runtime, future: F) -> Result<F::Output> {
    if in_async_task() {
        return Err(inside_runtime());
    }
    runtime.block_on_here(future)
}

pub(super) fn inside_runtime() -> Error {
    Error::Runtime {
        reason: "the blocking API was called from inside an async task, whose thread it would block; use the async API there, or call it through tokio::task::spawn_blocking"
            .into(),
    }
}

/// Whether this thread is polling an async task right now (a task on a runtime's worker,
/// the future of a `block_on`), where blocking the thread is wrong and tokio refuses to
/// start another runtime. A thread of `tokio::task::spawn_blocking`, which runs inside a
/// runtime's context but polls no task, is not: the blocking API works there.
///
/// Tokio offers no direct question for this, but it gives every task it polls a
/// cooperative budget (at most 255 units) and runs `spawn_blocking` closures and plain
/// threads unconstrained: so this takes budget units until tokio says the budget is spent
/// (a task) or more units than any budget holds were granted (no task), then gives every
/// unit back, leaving the budget as it was. (A task polled under
/// `tokio::task::coop::unconstrained` has no budget either, and is taken for a thread that
/// may block.)
pub(super) fn in_async_task() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let mut cx = Context::from_waker(Waker::noop());
    let mut taken = Vec::new();
    let constrained = loop {
        match tokio::task::coop::poll_proceed(&mut cx) {
            Poll::Pending => break true,
            Poll::Ready(unit) => {
                taken.push(unit);
                if taken.len() > usize::from(u8::MAX) {
                    break false;
                }
            }
        }
    };
    // Each unit restores the budget it found, so the first one taken is given back last.
    while let Some(unit) = taken.pop() {
        drop(unit);
    }
    constrained
}

#[cfg(test)]
mod tests {
    use super::in_async_task;

    #[test]
    fn tasks_are_told_apart_from_blocking_threads() -> std::io::Result<()> {
        assert!(!in_async_task());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()?;
        assert!(runtime.block_on(async { in_async_task() }));
        let in_task = runtime.block_on(runtime.spawn(async { in_async_task() }));
        assert!(matches!(in_task, Ok(true)));
        let in_blocking = runtime.block_on(runtime.spawn_blocking(in_async_task));
        assert!(matches!(in_blocking, Ok(false)));
        // The probe gives back what it takes: a task keeps its whole budget.
        let kept = runtime.block_on(async {
            let before = tokio::task::coop::has_budget_remaining();
            for _ in 0..1000 {
                in_async_task();
            }
            before && tokio::task::coop::has_budget_remaining()
        });
        assert!(kept);
        Ok(())
    }
}
