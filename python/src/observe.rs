//! `Changes`: a stream of the library's for Python, one item per `next`: an election's
//! leaders as they change, a client's connection states.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use crate::call::{Cancel, Outcome, block_on, spawn_with_callback};
use crate::errors::Failure;

/// The items of a stream, as outcomes.
type Items = Pin<Box<dyn Stream<Item = Result<Outcome, Failure>> + Send>>;

/// How the stream starts: on the first `next` (the client may connect then), and again on
/// the next one if that start failed.
type Start =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<Items, Failure>> + Send>> + Send + Sync>;

/// The stream: not started yet, or started.
enum State {
    Start(Start),
    Following(Items),
}

/// A stream of changes (an election's leaders, the current one first; a client's
/// connection states, the current one first).
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct Changes {
    runtime: &'static Runtime,
    pid: u32,
    /// What is followed, for errors: `election observation`, `connection state stream`.
    what: &'static str,
    state: Arc<Mutex<Option<State>>>,
}

impl Changes {
    /// The stream `start` makes (on the first `next`); `what` names it in errors.
    pub(crate) fn new<Fut, S>(
        runtime: &'static Runtime,
        what: &'static str,
        start: impl Fn() -> Fut + Send + Sync + 'static,
    ) -> Self
    where
        Fut: Future<Output = Result<S, Failure>> + Send + 'static,
        S: Stream<Item = Result<Outcome, Failure>> + Send + 'static,
    {
        let start: Start = Box::new(move || {
            let started = start();
            Box::pin(async move { Ok(Box::pin(started.await?) as Items) })
        });
        Self {
            runtime,
            pid: std::process::id(),
            what,
            state: Arc::new(Mutex::new(Some(State::Start(start)))),
        }
    }

    /// The state, unless this stream was started in a parent process.
    fn state(&self, py: Python<'_>) -> PyResult<Arc<Mutex<Option<State>>>> {
        crate::life::same_process(self.pid, self.what).map_err(|e| e.into_pyerr(py))?;
        Ok(Arc::clone(&self.state))
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // The parent's stream: dropping it could wait for the parent's threads.
            let orphan = std::mem::replace(&mut self.state, Arc::new(Mutex::new(None)));
            std::mem::forget(orphan);
        }
    }
}

async fn next(state: Arc<Mutex<Option<State>>>, what: &'static str) -> Result<Outcome, Failure> {
    let mut state = state.lock().await;
    if let Some(State::Start(start)) = state.as_ref() {
        let items = start().await?;
        *state = Some(State::Following(items));
    }
    let Some(State::Following(items)) = state.as_mut() else {
        return Err(ended(what));
    };
    match items.next().await {
        Some(item) => item,
        None => Err(ended(what)),
    }
}

fn ended(what: &str) -> Failure {
    Failure::Binding("ShutDown", format!("the {what} ended: its client is gone"))
}

#[pymethods]
impl Changes {
    /// The next item (an election's leader as `(note, term, remaining seconds)` or
    /// `None` while nobody leads; a connection state as `(state, down, nodes)`); waits
    /// for a change.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        block_on(py, self.runtime, next(self.state(py)?, self.what))
    }

    /// `next` in the background.
    fn next_with(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Cancel> {
        Ok(spawn_with_callback(
            self.runtime,
            callback,
            next(self.state(py)?, self.what),
        ))
    }
}
