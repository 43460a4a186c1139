//! `Client`: a connection to Redis (or a quorum, cluster, sentinels) and the
//! acquisitions of every primitive.

use std::future::Future;
use std::sync::Arc;

use pyo3::prelude::*;
use redlease::Wait;

use crate::call::{Cancel, Outcome, block_on, duration, spawn_with_callback};
use crate::errors::Failure;
use crate::guard::{Guard, Held};
use crate::life::{Here, PerProcess};

/// What to acquire.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lock,
    /// A semaphore of `permits`, taking `take` of them as one lease.
    Semaphore {
        permits: u32,
        take: u32,
    },
    Read,
    Write,
    Multi,
    Campaign,
    /// A latch's count (acquired: counted up), or a look at the latch.
    Count,
}

/// One acquisition, as the Python layer describes it: made (and its options checked)
/// once, when the Python acquisition is, and acquired any number of times.
#[pyclass(module = "redlease._native", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct Request {
    kind: Kind,
    names: Vec<String>,
    ttl: Option<std::time::Duration>,
    wait: Wait,
    note: String,
}

/// Sets a builder's ttl (when given) and wait.
macro_rules! options {
    ($builder:expr, $req:expr) => {{
        let builder = $builder.wait($req.wait);
        match $req.ttl {
            Some(ttl) => builder.ttl(ttl),
            None => builder,
        }
    }};
}

#[pymethods]
impl Request {
    /// An acquisition of a primitive (`kind`: lock, semaphore, read, write, multi,
    /// campaign) of `names`, waiting `wait` seconds (`None`: until acquired; 0: one
    /// attempt).
    #[new]
    #[pyo3(signature = (kind, names, ttl, wait, permits=1, note=String::new(), take=1))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the Python constructor's arguments, one per option of an acquisition"
    )]
    fn py_new(
        py: Python<'_>,
        kind: &str,
        names: Vec<String>,
        ttl: Option<f64>,
        wait: Option<f64>,
        permits: u32,
        note: String,
        take: u32,
    ) -> PyResult<Self> {
        let checked = || -> Result<Self, Failure> {
            let kind = match kind {
                "lock" => Kind::Lock,
                "semaphore" => Kind::Semaphore { permits, take },
                "read" => Kind::Read,
                "write" => Kind::Write,
                "multi" => Kind::Multi,
                "campaign" => Kind::Campaign,
                "count" => Kind::Count,
                other => {
                    return Err(Failure::Binding(
                        "InvalidOption",
                        format!("unknown primitive `{other}`"),
                    ));
                }
            };
            let ttl = ttl.map(|t| duration("ttl", t)).transpose()?;
            let wait = match wait {
                None => Wait::Forever,
                Some(0.0) => Wait::No,
                Some(w) => Wait::For(duration("wait", w)?),
            };
            Ok(Self {
                kind,
                names,
                ttl,
                wait,
                note,
            })
        };
        checked().map_err(|e| e.into_pyerr(py))
    }
}

impl Request {
    /// A look at the latch this request names: `"count"` (its live counts, as a
    /// 1-tuple) or `"wait_open"` (waits for its round to end: `(counted down, expired)`).
    async fn look_at_latch(
        self,
        client: redlease::Client,
        what: String,
    ) -> Result<Outcome, Failure> {
        let latch = options!(client.latch(self.name()), self);
        Ok(Outcome::Numbers(match what.as_str() {
            "count" => vec![latch.count().await?],
            "wait_open" => {
                let opened = latch.wait_open().await?;
                vec![opened.counted_down(), opened.expired()]
            }
            other => {
                return Err(Failure::Binding(
                    "InvalidOption",
                    format!("unknown look at a latch `{other}`"),
                ));
            }
        }))
    }

    fn name(&self) -> String {
        self.names.first().cloned().unwrap_or_default()
    }

    async fn acquire(self, client: redlease::Client) -> redlease::Result<Held> {
        Ok(match self.kind {
            Kind::Lock => Held::One(options!(client.lock(self.name()), self).acquire().await?),
            Kind::Semaphore { permits, take } => {
                let semaphore = options!(client.semaphore(self.name(), permits), self);
                Held::One(if take == 1 {
                    semaphore.acquire().await?
                } else {
                    semaphore.acquire_many(take).await?
                })
            }
            Kind::Read => Held::One(
                options!(client.rwlock(self.name()), self)
                    .read()
                    .acquire()
                    .await?,
            ),
            Kind::Write => Held::Write(
                options!(client.rwlock(self.name()), self)
                    .write()
                    .acquire()
                    .await?,
            ),
            Kind::Multi => Held::Multi(
                options!(client.multi_lock(self.names.clone()), self)
                    .acquire()
                    .await?,
            ),
            Kind::Campaign => Held::Leader(
                options!(client.election(self.name()), self)
                    .campaign(self.note.clone())
                    .await?,
            ),
            Kind::Count => Held::Count(options!(client.latch(self.name()), self).count_up().await?),
        })
    }
}

/// How a client connects: kept, so that a child process (after `os.fork()`) connects
/// afresh with the same options.
#[derive(Debug)]
pub(crate) struct Options {
    url: String,
    prefix: Option<String>,
}

impl Options {
    /// A connected library client.
    async fn connect(&self) -> Result<redlease::Client, Failure> {
        let builder = redlease::Client::builder(&self.url);
        let builder = match &self.prefix {
            Some(prefix) => builder.prefix(prefix.clone()),
            None => builder,
        };
        Ok(builder.connect().await?)
    }
}

/// This process's connection of a client, and the options to make it on first use.
#[derive(Debug, Clone)]
struct Connection {
    here: Here<redlease::Client>,
    options: Arc<Options>,
}

impl Connection {
    /// The library client of this process, connected now if it was not yet.
    async fn client(&self) -> Result<redlease::Client, Failure> {
        self.here
            .cell
            .get_or_try_init(|| self.options.connect())
            .await
            .cloned()
    }
}

/// A client of redlease: the binding's side of `redlease.Client` and
/// `redlease.AsyncClient`. It connects once per process: a child made by `os.fork()`
/// connects afresh on its first call.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct Client {
    options: Arc<Options>,
    conn: PerProcess<redlease::Client>,
}

impl Client {
    /// A client of `url` that connects on first use.
    fn lazy(url: String, prefix: Option<String>) -> Result<Self, Failure> {
        let client = Self {
            options: Arc::new(Options { url, prefix }),
            conn: PerProcess::new(None)?,
        };
        crate::life::register(&client.conn.here()?.0);
        Ok(client)
    }

    /// This process's connection (registered for the exit hook when made).
    fn connection(&self) -> Result<Connection, Failure> {
        let (here, fresh) = self.conn.here()?;
        if fresh {
            crate::life::register(&here);
        }
        Ok(Connection {
            here,
            options: Arc::clone(&self.options),
        })
    }

    /// Runs `op` with this process's library client, waiting for it.
    fn call<Op, Fut>(&self, py: Python<'_>, op: Op) -> PyResult<Py<PyAny>>
    where
        Op: FnOnce(redlease::Client, Connection) -> Fut + Send,
        Fut: Future<Output = Result<Outcome, Failure>> + Send,
    {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        let runtime = conn.here.runtime;
        block_on(
            py,
            runtime,
            async move { op(conn.client().await?, conn).await },
        )
    }

    /// `call` in the background: `callback(result, None)` or `callback(None, error)`.
    fn spawn<Op, Fut>(&self, py: Python<'_>, callback: Py<PyAny>, op: Op) -> PyResult<Cancel>
    where
        Op: FnOnce(redlease::Client, Connection) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Outcome, Failure>> + Send,
    {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        let runtime = conn.here.runtime;
        Ok(spawn_with_callback(runtime, callback, async move {
            op(conn.client().await?, conn).await
        }))
    }

    /// Connects `self` now, as an operation's outcome: the client itself.
    async fn connected(self) -> Result<Outcome, Failure> {
        self.connection()?.client().await?;
        Ok(Outcome::Object(Box::new(move |py, _| {
            pyo3::IntoPyObjectExt::into_py_any(self, py)
        })))
    }
}

/// A guard of `held` as an outcome, keeping its client's connection alive.
fn guard(held: Held, on_lost: Option<Py<PyAny>>, conn: &Connection) -> Outcome {
    Guard::outcome(held, on_lost, Arc::clone(&conn.here.cell))
}

#[pymethods]
impl Client {
    /// Connects to the Redis at `url` (`redis://host:port`, `rediss://` for TLS,
    /// `redis+sentinel://`), waiting for the connection; `prefix` (default `redlease:`)
    /// starts every key of its locks, as the library's and the CLI's `--prefix`.
    #[staticmethod]
    #[pyo3(signature = (url, prefix=None))]
    fn connect(py: Python<'_>, url: String, prefix: Option<String>) -> PyResult<Py<PyAny>> {
        let client = Self::lazy(url, prefix).map_err(|e| e.into_pyerr(py))?;
        let runtime = crate::life::runtime().map_err(|e| e.into_pyerr(py))?;
        block_on(py, runtime, client.connected())
    }

    /// `connect` in the background: `callback(client, None)` or `callback(None, error)`.
    #[staticmethod]
    #[pyo3(signature = (url, callback, prefix=None))]
    fn connect_with(
        py: Python<'_>,
        url: String,
        callback: Py<PyAny>,
        prefix: Option<String>,
    ) -> PyResult<Cancel> {
        let client = Self::lazy(url, prefix).map_err(|e| e.into_pyerr(py))?;
        let runtime = crate::life::runtime().map_err(|e| e.into_pyerr(py))?;
        Ok(spawn_with_callback(runtime, callback, client.connected()))
    }

    /// A client of `url` that connects on its first call (no I/O now).
    #[staticmethod]
    #[pyo3(signature = (url, prefix=None))]
    fn from_url(py: Python<'_>, url: String, prefix: Option<String>) -> PyResult<Self> {
        Self::lazy(url, prefix).map_err(|e| e.into_pyerr(py))
    }

    /// Acquires `request`; `on_lost()` is called once, from another thread, if the
    /// lease is lost.
    #[pyo3(signature = (request, on_lost=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        request: &Request,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let request = request.clone();
        self.call(py, move |client, conn| async move {
            Ok(guard(request.acquire(client).await?, on_lost, &conn))
        })
    }

    /// `acquire` in the background: `callback(guard, None)` or `callback(None, error)`.
    #[pyo3(signature = (request, callback, on_lost=None))]
    fn acquire_with(
        &self,
        py: Python<'_>,
        request: &Request,
        callback: Py<PyAny>,
        on_lost: Option<Py<PyAny>>,
    ) -> PyResult<Cancel> {
        let request = request.clone();
        self.spawn(py, callback, move |client, conn| async move {
            Ok(guard(request.acquire(client).await?, on_lost, &conn))
        })
    }

    /// Looks at the latch `request` names (`what`: `"count"` or `"wait_open"`).
    fn latch(&self, py: Python<'_>, request: &Request, what: String) -> PyResult<Py<PyAny>> {
        let request = request.clone();
        self.call(py, move |client, _| request.look_at_latch(client, what))
    }

    /// `latch` in the background.
    fn latch_with(
        &self,
        py: Python<'_>,
        request: &Request,
        what: String,
        callback: Py<PyAny>,
    ) -> PyResult<Cancel> {
        let request = request.clone();
        self.spawn(py, callback, move |client, _| {
            request.look_at_latch(client, what)
        })
    }

    /// The leader of election `name` as `(note, term, remaining seconds)`, or `None`.
    fn leader(&self, py: Python<'_>, name: String) -> PyResult<Py<PyAny>> {
        self.call(py, move |client, _| async move {
            Ok(Outcome::Leader(client.election(name).leader().await?))
        })
    }

    /// `leader` in the background.
    fn leader_with(&self, py: Python<'_>, name: String, callback: Py<PyAny>) -> PyResult<Cancel> {
        self.spawn(py, callback, move |client, _| async move {
            Ok(Outcome::Leader(client.election(name).leader().await?))
        })
    }

    /// A stream of election `name`'s leaders, the current one first (connecting on its
    /// first `next`).
    fn observe(&self, py: Python<'_>, name: String) -> PyResult<crate::observe::LeaderChanges> {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        let runtime = conn.here.runtime;
        Ok(crate::observe::LeaderChanges::new(runtime, move || {
            let (conn, name) = (conn.clone(), name.clone());
            async move { Ok(conn.client().await?.election(name).observe()) }
        }))
    }

    /// Gives back every lease this client holds and waits for it.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        let Some(client) = conn.here.cell.get().cloned() else {
            return Ok(()); // never connected in this process: nothing is held
        };
        block_on(py, conn.here.runtime, async move {
            client.shutdown().await?;
            Ok(Outcome::Unit)
        })
        .map(drop)
    }
}
