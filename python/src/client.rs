//! `Client`: a connection to Redis (or a quorum, cluster, sentinels) and the
//! acquisitions of every primitive.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use pyo3::prelude::*;
use redlease::Wait;

use crate::call::{Cancel, Outcome, block_on, duration, spawn_with_callback};
use crate::errors::Failure;
use crate::guard::{Guard, Held};
use crate::life::{Here, PerProcess};
use crate::observe::Changes;

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
    ttl: Option<Duration>,
    wait: Wait,
    note: String,
    max_hold: Option<Duration>,
    /// `Renewal::Fixed` for a lease nobody renews (`renew=False`).
    renewal: redlease::Renewal,
    /// A lock's replicas to wait for, and how long.
    min_replicas: Option<(usize, Duration)>,
}

/// Sets a builder's ttl, hold budget (when given) and wait, and the owner that re-enters
/// (when given).
macro_rules! options {
    ($builder:expr, $req:expr) => {
        options!($builder, $req, None::<&redlease::Owner>)
    };
    ($builder:expr, $req:expr, $owner:expr) => {{
        let mut builder = $builder.wait($req.wait);
        if let Some(ttl) = $req.ttl {
            builder = builder.ttl(ttl);
        }
        if let Some(budget) = $req.max_hold {
            builder = builder.max_hold(budget);
        }
        builder = builder.renewal($req.renewal);
        if let Some(owner) = $owner {
            builder = builder.owner(owner);
        }
        builder
    }};
}

/// A native owner: the acquisitions made for it re-enter the locks it holds (one per
/// thread, or per asyncio task, in the Python layer).
#[pyclass(module = "redlease._native", frozen)]
#[derive(Debug, Default)]
pub(crate) struct Owner(redlease::Owner);

#[pymethods]
impl Owner {
    #[new]
    fn py_new() -> Self {
        Self::default()
    }
}

#[pymethods]
impl Request {
    /// An acquisition of a primitive (`kind`: `lock`, `semaphore`, `read`, `write`, `multi_lock`,
    /// `election`, `latch`) of `names`, waiting `wait` seconds (`None`: until acquired; 0: one
    /// attempt).
    #[new]
    #[pyo3(signature = (kind, names, ttl, wait, permits=1, note=String::new(), take=1, max_hold=None, min_replicas=None, renew=true))]
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
        max_hold: Option<f64>,
        min_replicas: Option<(usize, f64)>,
        renew: bool,
    ) -> PyResult<Self> {
        let checked = || -> Result<Self, Failure> {
            // The library's words for lease kinds (metrics, handles), and `multi_lock`.
            let kind = match kind {
                "lock" => Kind::Lock,
                "semaphore" => Kind::Semaphore { permits, take },
                "read" => Kind::Read,
                "write" => Kind::Write,
                "multi_lock" => Kind::Multi,
                "election" => Kind::Campaign,
                "latch" => Kind::Count,
                other => {
                    return Err(Failure::Binding(
                        "InvalidOption",
                        format!("unknown primitive `{other}`"),
                    ));
                }
            };
            if names.is_empty() {
                return Err(Failure::Binding(
                    "InvalidName",
                    "no names: give at least one".to_owned(),
                ));
            }
            for name in &names {
                redlease::LockKeys::new("", name)?;
            }
            let ttl = ttl.map(|t| duration("ttl", t)).transpose()?;
            if let Some(ttl) = ttl {
                redlease::validate_ttl(ttl)?;
            }
            let max_hold = max_hold.map(|t| duration("max_hold", t)).transpose()?;
            let min_replicas = match (min_replicas, kind) {
                (None, _) => None,
                (Some((replicas, timeout)), Kind::Lock) => {
                    Some((replicas, duration("min_replicas", timeout)?))
                }
                (Some(_), _) => {
                    return Err(Failure::Binding(
                        "InvalidOption",
                        "invalid option `min_replicas`: only a lock waits for replicas".to_owned(),
                    ));
                }
            };
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
                max_hold,
                renewal: if renew {
                    redlease::Renewal::Auto
                } else {
                    redlease::Renewal::Fixed
                },
                min_replicas,
            })
        };
        checked().map_err(|e| e.into_pyerr(py))
    }
}

impl Request {
    /// A look at (or a step of) the latch this request names, as a tuple of numbers or a
    /// bool: `"count"` (its live counts), `"wait_open"` (waits for its round to end:
    /// `(counted down, expired)`), `"expect"` (presets `n` arrivals: the arrivals now
    /// expected), `"try_expect"` (presets `n` arrivals when no round is open: whether it
    /// did), `"barrier"` (a barrier of `n` parties: `(counted down, expired)`).
    async fn at_latch(
        self,
        client: redlease::Client,
        what: String,
        n: u32,
    ) -> Result<Outcome, Failure> {
        let latch = options!(client.latch(self.name()), self);
        let opened = |opened: redlease::Opened| {
            Outcome::Numbers(vec![opened.counted_down(), opened.expired()])
        };
        Ok(match what.as_str() {
            "count" => Outcome::Numbers(vec![latch.count().await?]),
            "wait_open" => opened(latch.wait_open().await?),
            "expect" => Outcome::Numbers(vec![latch.expect(n).await?]),
            "try_expect" => Outcome::Bool(latch.try_expect(n).await?),
            "barrier" => opened(latch.barrier(n).await?),
            other => {
                return Err(Failure::Binding(
                    "InvalidOption",
                    format!("unknown look at a latch `{other}`"),
                ));
            }
        })
    }

    fn name(&self) -> String {
        self.names.first().cloned().unwrap_or_default()
    }

    async fn acquire(
        self,
        client: redlease::Client,
        owner: Option<redlease::Owner>,
    ) -> redlease::Result<Held> {
        let owner = owner.as_ref();
        Ok(match self.kind {
            Kind::Lock => {
                let mut lock = options!(client.lock(self.name()), self, owner);
                if let Some((replicas, timeout)) = self.min_replicas {
                    lock = lock.min_replicas(replicas, timeout);
                }
                Held::One(lock.acquire().await?)
            }
            Kind::Semaphore { permits, take } => {
                let semaphore = options!(client.semaphore(self.name(), permits), self, owner);
                Held::One(if take == 1 {
                    semaphore.acquire().await?
                } else {
                    semaphore.acquire_many(take).await?
                })
            }
            Kind::Read => Held::One(
                options!(client.rwlock(self.name()), self, owner)
                    .read()
                    .acquire()
                    .await?,
            ),
            Kind::Write => Held::Write(
                options!(client.rwlock(self.name()), self, owner)
                    .write()
                    .acquire()
                    .await?,
            ),
            Kind::Multi => Held::Multi(
                options!(client.multi_lock(self.names.clone()), self, owner)
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

/// How a client connects (`Client.connect`'s options), made once in Python.
#[pyclass(module = "redlease._native", frozen)]
#[derive(Debug)]
pub(crate) struct Options(Arc<Settings>);

/// How a client connects: kept, so that a child process (after `os.fork()`) connects
/// afresh with the same options.
#[derive(Debug)]
pub(crate) struct Settings {
    /// One URL (a Redis, `redis+sentinel://`, `redis+cluster://`), or a quorum's nodes.
    urls: Vec<String>,
    prefix: Option<String>,
    connect_timeout: Option<Duration>,
    response_timeout: Option<Duration>,
    tls_ca: Option<Vec<u8>>,
    tls_cert: Option<(Vec<u8>, Vec<u8>)>,
    holder_note: Option<String>,
    fence_keep: Option<Duration>,
}

#[pymethods]
impl Options {
    /// The options of `Client.connect` (the files already read: PEM bytes).
    #[new]
    #[pyo3(signature = (urls, prefix=None, connect_timeout=None, response_timeout=None, tls_ca=None, tls_cert=None, tls_key=None, holder_note=None, fence_keep=None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the Python constructor's arguments, one per connection option"
    )]
    fn py_new(
        py: Python<'_>,
        urls: Vec<String>,
        prefix: Option<String>,
        connect_timeout: Option<f64>,
        response_timeout: Option<f64>,
        tls_ca: Option<Vec<u8>>,
        tls_cert: Option<Vec<u8>>,
        tls_key: Option<Vec<u8>>,
        holder_note: Option<String>,
        fence_keep: Option<f64>,
    ) -> PyResult<Self> {
        let checked = || -> Result<Self, Failure> {
            let invalid = |reason: &str| Failure::Binding("InvalidOption", reason.to_owned());
            if urls.is_empty() {
                return Err(invalid("no Redis URL: give one, or a quorum's URLs"));
            }
            let tls_cert = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => Some((cert, key)),
                (None, None) => None,
                _ => {
                    return Err(invalid(
                        "invalid option `tls_cert`: a client certificate needs its key (`tls_key`), and a key its certificate",
                    ));
                }
            };
            Ok(Self(Arc::new(Settings {
                urls,
                prefix,
                connect_timeout: connect_timeout
                    .map(|t| duration("connect_timeout", t))
                    .transpose()?,
                response_timeout: response_timeout
                    .map(|t| duration("response_timeout", t))
                    .transpose()?,
                tls_ca,
                tls_cert,
                holder_note,
                fence_keep: fence_keep.map(|t| duration("fence_keep", t)).transpose()?,
            })))
        };
        checked().map_err(|e| e.into_pyerr(py))
    }
}

impl Settings {
    /// A connected library client.
    async fn connect(&self) -> Result<redlease::Client, Failure> {
        let mut builder = match self.urls.as_slice() {
            [url] => redlease::Client::builder(url),
            nodes => redlease::Client::quorum_builder(nodes),
        };
        if let Some(prefix) = &self.prefix {
            builder = builder.prefix(prefix.clone());
        }
        if let Some(timeout) = self.connect_timeout {
            builder = builder.connect_timeout(timeout);
        }
        if let Some(timeout) = self.response_timeout {
            builder = builder.response_timeout(timeout);
        }
        if let Some(pem) = &self.tls_ca {
            builder = builder.tls_root_certificate(pem.clone());
        }
        if let Some((cert, key)) = &self.tls_cert {
            builder = builder.tls_client_certificate(cert.clone(), key.clone());
        }
        if let Some(note) = &self.holder_note {
            builder = builder.holder_note(note.clone());
        }
        if let Some(keep) = self.fence_keep {
            builder = builder.fence_keep(keep);
        }
        Ok(builder.connect().await?)
    }
}

/// This process's connection of a client, and the options to make it on first use.
#[derive(Debug, Clone)]
struct Connection {
    here: Here<redlease::Client>,
    options: Arc<Settings>,
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
    options: Arc<Settings>,
    conn: PerProcess<redlease::Client>,
}

impl Client {
    /// A client that connects on first use.
    fn lazy(options: &Options) -> Result<Self, Failure> {
        let client = Self {
            options: Arc::clone(&options.0),
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

    /// A stream `follow` makes of this process's library client, started on the first
    /// `next` (connecting then); `what` names it in errors.
    fn changes<S>(
        &self,
        py: Python<'_>,
        what: &'static str,
        follow: impl Fn(redlease::Client) -> S + Send + Sync + 'static,
    ) -> PyResult<Changes>
    where
        S: Stream<Item = Result<Outcome, Failure>> + Send + 'static,
    {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        let runtime = conn.here.runtime;
        let follow = Arc::new(follow);
        Ok(Changes::new(runtime, what, move || {
            let (conn, follow) = (conn.clone(), Arc::clone(&follow));
            async move { Ok(follow(conn.client().await?)) }
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

/// Adopts the lease of `handle` on `client`.
async fn adopting(
    client: redlease::Client,
    conn: Connection,
    handle: String,
) -> Result<Outcome, Failure> {
    let handle: redlease::LeaseHandle = handle.parse()?;
    let lock = client.lock(handle.name());
    Ok(guard(Held::One(lock.adopt(handle).await?), None, &conn))
}

/// Resizes semaphore `name` to `permits`: the count in force before, or `None`.
async fn resizing(
    client: redlease::Client,
    name: String,
    permits: u32,
) -> Result<Outcome, Failure> {
    let before = client.semaphore(name, permits).resize().await?;
    Ok(Outcome::MaybeNumber(before.map(u64::from)))
}

/// The connection state of `client`.
#[allow(
    clippy::unused_async,
    reason = "an operation of `Client::call`, which awaits the connection first"
)]
async fn connected_state(client: redlease::Client, _: Connection) -> Result<Outcome, Failure> {
    Ok(Outcome::Connection(client.connection_state()))
}

/// Inspects (or force-releases) `name`.
async fn inspecting(
    client: redlease::Client,
    name: String,
    force: bool,
) -> Result<Outcome, Failure> {
    let seen = if force {
        client.force_release(&name).await?
    } else {
        client.inspect(&name).await?
    };
    Ok(Outcome::Inspection(Box::new(seen)))
}

/// A guard of `held` as an outcome, keeping its client's connection alive.
fn guard(held: Held, on_lost: Option<Py<PyAny>>, conn: &Connection) -> Outcome {
    Guard::outcome(held, on_lost, Arc::clone(&conn.here.cell))
}

#[pymethods]
impl Client {
    /// Connects as `options` say, waiting for the connection.
    #[staticmethod]
    fn connect(py: Python<'_>, options: &Options) -> PyResult<Py<PyAny>> {
        let client = Self::lazy(options).map_err(|e| e.into_pyerr(py))?;
        let runtime = crate::life::runtime().map_err(|e| e.into_pyerr(py))?;
        block_on(py, runtime, client.connected())
    }

    /// `connect` in the background: `callback(client, None)` or `callback(None, error)`.
    #[staticmethod]
    fn connect_with(py: Python<'_>, options: &Options, callback: Py<PyAny>) -> PyResult<Cancel> {
        let client = Self::lazy(options).map_err(|e| e.into_pyerr(py))?;
        let runtime = crate::life::runtime().map_err(|e| e.into_pyerr(py))?;
        Ok(spawn_with_callback(runtime, callback, client.connected()))
    }

    /// A client that connects on its first call (no I/O now).
    #[staticmethod]
    fn from_url(py: Python<'_>, options: &Options) -> PyResult<Self> {
        Self::lazy(options).map_err(|e| e.into_pyerr(py))
    }

    /// Acquires `request`; `on_lost()` is called once, from another thread, if the
    /// lease is lost.
    #[pyo3(signature = (request, on_lost=None, owner=None))]
    fn acquire(
        &self,
        py: Python<'_>,
        request: &Request,
        on_lost: Option<Py<PyAny>>,
        owner: Option<&Owner>,
    ) -> PyResult<Py<PyAny>> {
        let (request, owner) = (request.clone(), owner.map(|o| o.0.clone()));
        self.call(py, move |client, conn| async move {
            Ok(guard(request.acquire(client, owner).await?, on_lost, &conn))
        })
    }

    /// `acquire` in the background: `callback(guard, None)` or `callback(None, error)`.
    #[pyo3(signature = (request, callback, on_lost=None, owner=None))]
    fn acquire_with(
        &self,
        py: Python<'_>,
        request: &Request,
        callback: Py<PyAny>,
        on_lost: Option<Py<PyAny>>,
        owner: Option<&Owner>,
    ) -> PyResult<Cancel> {
        let (request, owner) = (request.clone(), owner.map(|o| o.0.clone()));
        self.spawn(py, callback, move |client, conn| async move {
            Ok(guard(request.acquire(client, owner).await?, on_lost, &conn))
        })
    }

    /// Looks at the latch `request` names, or takes a step of it (`what`: `"count"`,
    /// `"wait_open"`, `"expect"`, `"try_expect"`, `"barrier"`; `n` arrivals or parties).
    #[pyo3(signature = (request, what, n=0))]
    fn latch(
        &self,
        py: Python<'_>,
        request: &Request,
        what: String,
        n: u32,
    ) -> PyResult<Py<PyAny>> {
        let request = request.clone();
        self.call(py, move |client, _| request.at_latch(client, what, n))
    }

    /// `latch` in the background.
    #[pyo3(signature = (request, what, callback, n=0))]
    fn latch_with(
        &self,
        py: Python<'_>,
        request: &Request,
        what: String,
        callback: Py<PyAny>,
        n: u32,
    ) -> PyResult<Cancel> {
        let request = request.clone();
        self.spawn(py, callback, move |client, _| {
            request.at_latch(client, what, n)
        })
    }

    /// Sets semaphore `name`'s permit count to `permits` (held or not) and returns the
    /// count in force before, or `None` when none was stored.
    fn resize_semaphore(&self, py: Python<'_>, name: String, permits: u32) -> PyResult<Py<PyAny>> {
        self.call(py, move |client, _| resizing(client, name, permits))
    }

    /// `resize_semaphore` in the background.
    fn resize_semaphore_with(
        &self,
        py: Python<'_>,
        name: String,
        permits: u32,
        callback: Py<PyAny>,
    ) -> PyResult<Cancel> {
        self.spawn(py, callback, move |client, _| {
            resizing(client, name, permits)
        })
    }

    /// The client's connection state as `(state, down, nodes)` (`"connected"`,
    /// `"degraded"` with the nodes down and the quorum's nodes, or `"suspended"`); no Redis
    /// call, but a client that did not connect in this process yet connects first.
    fn connection_state(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.call(py, connected_state)
    }

    /// `connection_state` in the background.
    fn connection_state_with(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<Cancel> {
        self.spawn(py, callback, connected_state)
    }

    /// A stream of the client's connection states, the current one first (connecting on
    /// its first `next`); while it is waited on, every node is sent a `PING` each second
    /// without a change.
    fn connection_states(&self, py: Python<'_>) -> PyResult<Changes> {
        self.changes(py, "connection state stream", |client| {
            client
                .connection_states()
                .map(|state| Ok(Outcome::Connection(state)))
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
    fn observe(&self, py: Python<'_>, name: String) -> PyResult<Changes> {
        self.changes(py, "election observation", move |client| {
            client
                .election(name.clone())
                .observe()
                .map(|leader| leader.map(Outcome::Leader).map_err(Failure::from))
        })
    }

    /// Takes over the lock lease `handle` (a guard's `detach()`) and renews it.
    fn adopt(&self, py: Python<'_>, handle: String) -> PyResult<Py<PyAny>> {
        self.call(py, move |client, conn| adopting(client, conn, handle))
    }

    /// `adopt` in the background.
    fn adopt_with(&self, py: Python<'_>, handle: String, callback: Py<PyAny>) -> PyResult<Cancel> {
        self.spawn(py, callback, move |client, conn| {
            adopting(client, conn, handle)
        })
    }

    /// What Redis holds for `name` (any primitive), as a dict; `force` deletes a lock's
    /// or semaphore's holds first and reports what was there.
    #[pyo3(signature = (name, force=false))]
    fn inspect(&self, py: Python<'_>, name: String, force: bool) -> PyResult<Py<PyAny>> {
        self.call(py, move |client, _| inspecting(client, name, force))
    }

    /// `inspect` in the background.
    #[pyo3(signature = (name, callback, force=false))]
    fn inspect_with(
        &self,
        py: Python<'_>,
        name: String,
        callback: Py<PyAny>,
        force: bool,
    ) -> PyResult<Cancel> {
        self.spawn(py, callback, move |client, _| {
            inspecting(client, name, force)
        })
    }

    /// The client's counters as `(waiting, renewal round trips, renewal tasks started)`
    /// (zeros before it connected in this process).
    fn stats(&self, py: Python<'_>) -> PyResult<(usize, u64, u64)> {
        let conn = self.connection().map_err(|e| e.into_pyerr(py))?;
        Ok(conn.here.cell.get().map_or((0, 0, 0), |client| {
            let stats = client.stats();
            (
                stats.waiting,
                stats.renewal_round_trips,
                stats.renewal_tasks_started,
            )
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
