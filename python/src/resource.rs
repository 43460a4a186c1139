//! `FencedStore`: the protected resource's half of fencing, for values kept in Redis
//! (`redlease::resource::fenced_set`).

use pyo3::prelude::*;
use redlease::resource::{Fenced, fenced_set};
use redlease::{FencingToken, redis};

use crate::call::{Outcome, block_on};
use crate::errors::Failure;
use crate::life::{Here, PerProcess};

/// Values in a Redis that accept a write only with a fencing token at least as large as
/// the largest one accepted for the key before. Connected once per process (a child made
/// by `os.fork()` connects afresh on its first write).
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct FencedStore {
    client: redis::Client,
    conn: PerProcess<redis::aio::MultiplexedConnection>,
}

fn connection_error(e: &redis::RedisError) -> Failure {
    Failure::Binding(
        "ConnectionError",
        format!("could not connect the fenced store: {e}"),
    )
}

/// This process's connection of `here`, made now if it was not yet.
async fn connection(
    client: &redis::Client,
    here: &Here<redis::aio::MultiplexedConnection>,
) -> Result<redis::aio::MultiplexedConnection, Failure> {
    here.cell
        .get_or_try_init(|| async {
            client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| connection_error(&e))
        })
        .await
        .cloned()
}

#[pymethods]
impl FencedStore {
    /// Connects to the Redis at `url` (any Redis: not necessarily the locks').
    #[staticmethod]
    fn connect(py: Python<'_>, url: &str) -> PyResult<Self> {
        let made = (|| {
            let client = redis::Client::open(url).map_err(|e| connection_error(&e))?;
            let store = Self {
                client,
                conn: PerProcess::new(None)?,
            };
            let (here, _) = store.conn.here()?;
            crate::life::detach(py, || {
                here.runtime.block_on(connection(&store.client, &here))
            })?;
            Ok(store)
        })();
        made.map_err(|e: Failure| e.into_pyerr(py))
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
        let (here, _) = self.conn.here().map_err(|e| e.into_pyerr(py))?;
        let client = self.client.clone();
        let runtime = here.runtime;
        let done = block_on(py, runtime, async move {
            let mut conn = connection(&client, &here).await?;
            Ok(Outcome::MaybeNumber(
                match fenced_set(&mut conn, &key, value, FencingToken::new(token)).await? {
                    Fenced::Written => None,
                    Fenced::Refused { newer } => Some(newer.get()),
                    other => {
                        return Err(Failure::Binding(
                            "RedisError",
                            format!("unexpected outcome of a fenced write: {other:?}"),
                        ));
                    }
                },
            ))
        })?;
        done.extract(py)
    }
}
