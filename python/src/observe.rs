//! `LeaderChanges`: an election's leaders as they change.

use std::sync::Arc;

use futures_util::StreamExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use crate::call::{Cancel, Outcome, block_on, spawn_with_callback};

/// An election's leaders, the current one first, then each change.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct LeaderChanges {
    runtime: &'static Runtime,
    changes: Arc<Mutex<redlease::LeaderChanges>>,
}

impl LeaderChanges {
    pub(crate) fn new(runtime: &'static Runtime, changes: redlease::LeaderChanges) -> Self {
        Self {
            runtime,
            changes: Arc::new(Mutex::new(changes)),
        }
    }
}

async fn next(
    changes: Arc<Mutex<redlease::LeaderChanges>>,
) -> Result<Outcome, crate::errors::Failure> {
    match changes.lock().await.next().await {
        Some(leader) => Ok(Outcome::Leader(leader?)),
        None => Err(crate::errors::Failure::Binding(
            "Error",
            "the observation of the election ended".to_owned(),
        )),
    }
}

#[pymethods]
impl LeaderChanges {
    /// The next leader as `(note, term, remaining seconds)`, or `None` while nobody
    /// leads; waits for a change.
    fn next(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        block_on(py, self.runtime, next(Arc::clone(&self.changes)))
    }

    /// `next` in the background.
    fn next_with(&self, callback: Py<PyAny>) -> Cancel {
        spawn_with_callback(self.runtime, callback, next(Arc::clone(&self.changes)))
    }
}
