//! `Client`: a connection to Redis (or a quorum, cluster, sentinels) and the
//! acquisitions of every primitive.

use pyo3::prelude::*;
use redlease::Wait;
use tokio::runtime::Runtime;

use crate::call::{Cancel, Outcome, block_on, duration, spawn_with_callback};
use crate::errors::Failure;
use crate::guard::{Guard, Held};

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

/// A client of redlease: the binding's side of `redlease.Client` and
/// `redlease.AsyncClient`.
#[pyclass(module = "redlease._native", frozen)]
pub(crate) struct Client {
    inner: redlease::Client,
    runtime: &'static Runtime,
    pid: u32,
}

impl Client {
    pub(crate) fn new(inner: redlease::Client, runtime: &'static Runtime) -> Self {
        Self {
            inner,
            runtime,
            pid: std::process::id(),
        }
    }

    /// A connected client as an operation's outcome (made a Python `Client` under the GIL).
    fn outcome(inner: redlease::Client) -> Outcome {
        Outcome::Object(Box::new(move |py, runtime| {
            pyo3::IntoPyObjectExt::into_py_any(Self::new(inner, runtime), py)
        }))
    }

    /// The client, unless it was connected in a parent of this process (before
    /// `os.fork()`): its connections and runtime are the parent's.
    fn check_process(&self) -> Result<(), Failure> {
        if self.pid == std::process::id() {
            return Ok(());
        }
        Err(Failure::Binding(
            "ForkedClient",
            format!(
                "this client was connected in process {} and this is process {} (made by os.fork()): its connections and runtime stay with the parent; connect a new client in this process",
                self.pid,
                std::process::id()
            ),
        ))
    }

    /// Connects a client of `url` whose locks' keys start with `prefix`, when given.
    async fn connecting(url: String, prefix: Option<String>) -> Result<Outcome, Failure> {
        let builder = redlease::Client::builder(&url);
        let builder = match prefix {
            Some(prefix) => builder.prefix(prefix),
            None => builder,
        };
        Ok(Client::outcome(builder.connect().await?))
    }

    fn runtime_or_err() -> Result<&'static Runtime, Failure> {
        crate::runtime::runtime().map_err(|e| {
            Failure::Binding(
                "Error",
                format!("could not start the binding's Tokio runtime: {e}"),
            )
        })
    }
}

#[pymethods]
impl Client {
    /// Connects to the Redis at `url` (`redis://host:port`, `rediss://` for TLS,
    /// `redis+sentinel://`), waiting for the connection; `prefix` (default `redlease:`)
    /// starts every key of its locks, as the library's and the CLI's `--prefix`.
    #[staticmethod]
    #[pyo3(signature = (url, prefix=None))]
    fn connect(py: Python<'_>, url: String, prefix: Option<String>) -> PyResult<Py<PyAny>> {
        let runtime = Self::runtime_or_err().map_err(|e| e.into_pyerr(py))?;
        block_on(py, runtime, Self::connecting(url, prefix))
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
        let runtime = Self::runtime_or_err().map_err(|e| e.into_pyerr(py))?;
        Ok(spawn_with_callback(
            runtime,
            callback,
            Self::connecting(url, prefix),
        ))
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
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let (request, client) = (request.clone(), self.inner.clone());
        block_on(py, self.runtime, async move {
            Ok(Guard::outcome(request.acquire(client).await?, on_lost))
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
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let (request, client) = (request.clone(), self.inner.clone());
        Ok(spawn_with_callback(self.runtime, callback, async move {
            Ok(Guard::outcome(request.acquire(client).await?, on_lost))
        }))
    }

    /// Looks at the latch `request` names (`what`: `"count"` or `"wait_open"`).
    fn latch(&self, py: Python<'_>, request: &Request, what: String) -> PyResult<Py<PyAny>> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let (request, client) = (request.clone(), self.inner.clone());
        block_on(py, self.runtime, request.look_at_latch(client, what))
    }

    /// `latch` in the background.
    fn latch_with(
        &self,
        py: Python<'_>,
        request: &Request,
        what: String,
        callback: Py<PyAny>,
    ) -> PyResult<Cancel> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let (request, client) = (request.clone(), self.inner.clone());
        Ok(spawn_with_callback(
            self.runtime,
            callback,
            request.look_at_latch(client, what),
        ))
    }

    /// The leader of election `name` as `(note, term, remaining seconds)`, or `None`.
    fn leader(&self, py: Python<'_>, name: String) -> PyResult<Py<PyAny>> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let client = self.inner.clone();
        block_on(py, self.runtime, async move {
            Ok(Outcome::Leader(client.election(name).leader().await?))
        })
    }

    /// `leader` in the background.
    fn leader_with(&self, py: Python<'_>, name: String, callback: Py<PyAny>) -> PyResult<Cancel> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let client = self.inner.clone();
        Ok(spawn_with_callback(self.runtime, callback, async move {
            Ok(Outcome::Leader(client.election(name).leader().await?))
        }))
    }

    /// A stream of election `name`'s leaders, the current one first.
    fn observe(&self, py: Python<'_>, name: String) -> PyResult<crate::observe::LeaderChanges> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let _inside = self.runtime.enter();
        Ok(crate::observe::LeaderChanges::new(
            self.runtime,
            self.inner.election(name).observe(),
        ))
    }

    /// Gives back every lease this client holds and waits for it.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        self.check_process().map_err(|e| e.into_pyerr(py))?;
        let client = self.inner.clone();
        block_on(py, self.runtime, async move {
            client.shutdown().await?;
            Ok(Outcome::Unit)
        })
        .map(drop)
    }
}
