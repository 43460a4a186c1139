//! `FencedStore`: the protected resource's half of fencing, for values kept in Redis
//! (`redlease::resource::fenced_set`).

use pyo3::prelude::*;
use redlease::resource::{Fenced, fenced_set};
use redlease::{FencingToken, redis};
use tokio::runtime::Runtime;

use crate::call::{Outcome, block_on};
use crate::errors::Failure;

/// Values in a Redis that accept a write only with a fencing token at least as large as
/// the largest one accepted for the key before.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct FencedStore {
    runtime: &'static Runtime,
    conn: redis::aio::MultiplexedConnection,
    pid: u32,
}

fn connection_error(e: &redis::RedisError) -> Failure {
    Failure::Binding(
        "ConnectionError",
        format!("could not connect the fenced store: {e}"),
    )
}

#[pymethods]
impl FencedStore {
    /// Connects to the Redis at `url` (any Redis: not necessarily the locks').
    #[staticmethod]
    fn connect(py: Python<'_>, url: &str) -> PyResult<Self> {
        let runtime = crate::runtime::runtime().map_err(|e| {
            Failure::Binding(
                "Error",
                format!("could not start the binding's Tokio runtime: {e}"),
            )
            .into_pyerr(py)
        })?;
        let conn = py
            .detach(|| {
                runtime.block_on(async {
                    let client = redis::Client::open(url).map_err(|e| connection_error(&e))?;
                    client
                        .get_multiplexed_async_connection()
                        .await
                        .map_err(|e| connection_error(&e))
                })
            })
            .map_err(|e| e.into_pyerr(py))?;
        Ok(Self {
            runtime,
            conn,
            pid: std::process::id(),
        })
    }

    /// Sets `key` to `value` if `token` is at least the largest token accepted for `key`
    /// before (and remembers it), atomically. `None` when written; the newer token when
    /// refused (a newer holder wrote: this one's lease must have run out).
    fn set(
        &self,
        py: Python<'_>,
        key: String,
        value: Vec<u8>,
        token: u64,
    ) -> PyResult<Option<u64>> {
        if self.pid != std::process::id() {
            return Err(Failure::Binding(
                "ForkedClient",
                "this store was connected in a parent process (before os.fork()); connect a new one in this process".to_owned(),
            )
            .into_pyerr(py));
        }
        let mut conn = self.conn.clone();
        let done = block_on(py, self.runtime, async move {
            Ok(Outcome::Fenced(
                match fenced_set(&mut conn, &key, value, FencingToken::new(token)).await? {
                    Fenced::Written => None,
                    Fenced::Refused { newer } => Some(newer.get()),
                    other => {
                        return Err(Failure::Binding(
                            "Error",
                            format!("unexpected outcome of a fenced write: {other:?}"),
                        ));
                    }
                },
            ))
        })?;
        done.extract(py)
    }
}
