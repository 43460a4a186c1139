//! `LeaderChanges`: an election's leaders as they change.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::StreamExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use crate::call::{Cancel, Outcome, block_on, spawn_with_callback};
use crate::errors::Failure;

/// How the observation starts: on the first `next` (the client may connect then), and
/// again on the next one if that start failed.
type Start = Box<
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<redlease::LeaderChanges, Failure>> + Send>>
        + Send
        + Sync,
>;

/// The observation: not started yet, or its stream.
enum State {
    Start(Start),
    Observing(redlease::LeaderChanges),
}

/// An election's leaders, the current one first, then each change.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct LeaderChanges {
    runtime: &'static Runtime,
    pid: u32,
    state: Arc<Mutex<Option<State>>>,
}

impl LeaderChanges {
    pub(crate) fn new<Fut>(
        runtime: &'static Runtime,
        start: impl Fn() -> Fut + Send + Sync + 'static,
    ) -> Self
    where
        Fut: Future<Output = Result<redlease::LeaderChanges, Failure>> + Send + 'static,
    {
        let start: Start = Box::new(move || Box::pin(start()));
        Self {
            runtime,
            pid: std::process::id(),
            state: Arc::new(Mutex::new(Some(State::Start(start)))),
        }
    }

    /// The state, unless this observation was started in a parent process.
    fn state(&self, py: Python<'_>) -> PyResult<Arc<Mutex<Option<State>>>> {
        crate::life::same_process(self.pid, "election observation")
            .map_err(|e| e.into_pyerr(py))?;
        Ok(Arc::clone(&self.state))
    }
}

impl Drop for LeaderChanges {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // The parent's stream: dropping it could wait for the parent's threads.
            let orphan = std::mem::replace(&mut self.state, Arc::new(Mutex::new(None)));
            std::mem::forget(orphan);
        }
    }
}

async fn next(state: Arc<Mutex<Option<State>>>) -> Result<Outcome, Failure> {
    let mut state = state.lock().await;
    if let Some(State::Start(start)) = state.as_ref() {
        let changes = start().await?;
        *state = Some(State::Observing(changes));
    }
    let Some(State::Observing(changes)) = state.as_mut() else {
        return Err(ended());
    };
    match changes.next().await {
        Some(leader) => Ok(Outcome::Leader(leader?)),
        None => Err(ended()),
    }
}

fn ended() -> Failure {
    Failure::Binding(
        "ShutDown",
        "the observation of the election ended: its client is gone".to_owned(),
    )
}

#[pymethods]
impl LeaderChanges {
    /// The next leader as `(note, term, remaining seconds)`, or `None` while nobody
    /// leads; waits for a change.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        block_on(py, self.runtime, next(self.state(py)?))
    }

    /// `next` in the background.
    fn next_with(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Cancel> {
        Ok(spawn_with_callback(
            self.runtime,
            callback,
            next(self.state(py)?),
        ))
    }
}
