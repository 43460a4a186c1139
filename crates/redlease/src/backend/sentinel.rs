//! Following the primary that a set of sentinels elect.
//!
//! The primary is the address that a majority of the sentinels name
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`, asked of every sentinel at once), never the first
//! answer: during a failover one sentinel may still list the old primary, which keeps
//! answering as a primary (`ROLE`) until the sentinels demote it, some seconds later.
//!
//! The sentinels' own pub/sub events say when a failover starts and ends: each sentinel
//! is subscribed to (one self-healing [`Link`] each) for `+failover-state-send-slaveof-noone`
//! (the leader is about to promote a replica), `+switch-master` (a sentinel now names the
//! new primary) and `-failover-abort-slave-timeout`. From the first of them on, the old
//! primary is not used again: a call in flight when it arrived reports its outcome unknown
//! (the caller's give-back settles it), and the next call waits, within its response
//! timeout, until a majority names another primary. Writes taken by the old primary
//! after the promotion would be lost with it (two primaries granting one lock, tokens
//! falling), so none is made.
//!
//! Over TLS (`rediss://` sentinels), the primaries and replicas the sentinels name are
//! reached over TLS too, with the client's TLS options (CA, client certificate,
//! verification): as redis-rs' own Sentinel client does with its `TlsMode`, an address
//! named becomes a `ConnectionAddr::TcpTls` with the client's certificates.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::{AsyncConnectionConfig, IntoConnectionInfo as _, PushInfo, RedisResult, Value};
use tokio::time::Instant;

use crate::conn::pubsub::{Link, Mode as LinkMode, Owner as LinkOwner};
use crate::conn::tls::{Tls, Verify};

/// The sentinel events that say the primary is changing or changed.
const FAILOVER_STARTS: &str = "+failover-state-send-slaveof-noone";
const SWITCHED: &str = "+switch-master";
const ABORTED: &str = "-failover-abort-slave-timeout";

/// How long after a failover started the old primary stays out of use while a majority
/// of the sentinels still names it (a failover that ended without our hearing it).
const PATIENCE: Duration = Duration::from_secs(10);

/// How often the sentinels are asked again while they do not agree yet.
const ASK_EVERY: Duration = Duration::from_millis(25);

/// A host and port.
pub(crate) type Addr = (String, u16);

/// How the primary the sentinels name is reached.
pub(crate) struct DataNodes {
    /// Its credentials and database.
    pub(crate) redis: redis::RedisConnectionInfo,
    /// The client's TLS options when the primary speaks TLS (the sentinels do), `None`
    /// for plain TCP.
    pub(crate) tls: Option<Tls>,
}

/// Called with the new primary once connected to it, and with `None` when a failover
/// starts moving away from the primary in use.
type SwitchHook = Box<dyn Fn(Option<&redis::Client>) + Send + Sync>;

/// Hears the sentinels and finds the primary a majority of them name.
pub(crate) struct Follower {
    /// One client per sentinel.
    sentinels: Vec<redis::Client>,
    master: String,
    /// The primary's credentials, database and TLS.
    data: DataNodes,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// One event subscription per sentinel.
    links: Vec<Arc<Link>>,
    /// The primary in use now.
    current: Mutex<Option<Addr>>,
    /// Set when the primary in use may no longer be the sentinels' choice.
    adrift: AtomicBool,
    /// The primary a failover is moving away from, and since when.
    leaving: Mutex<Option<(Addr, Instant)>>,
    /// Bumped by every event about the primary in use: a call that saw it change cannot
    /// tell which primary ran it.
    events: AtomicU64,
    /// Told when a failover starts and the new primary once connected (the grant
    /// subscription follows it, and waiters re-check at once).
    on_switch: Mutex<Option<SwitchHook>>,
}

impl Follower {
    /// Subscribes to the events of `sentinels` (in the background) about `master`.
    pub(crate) fn new(
        sentinels: Vec<redis::Client>,
        master: String,
        data: DataNodes,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<Arc<Self>> {
        let mut failed = None;
        let follower = Arc::new_cyclic(|weak: &Weak<Self>| {
            let owner: Weak<dyn LinkOwner> = weak.clone();
            let links = sentinels
                .iter()
                .filter_map(|sentinel| {
                    match Link::new(
                        std::slice::from_ref(sentinel),
                        LinkMode::Classic,
                        connect_timeout,
                        response_timeout,
                        owner.clone(),
                    ) {
                        Ok(link) => {
                            for channel in [FAILOVER_STARTS, SWITCHED, ABORTED] {
                                link.keep(channel);
                            }
                            Some(link)
                        }
                        Err(e) => {
                            failed = Some(e);
                            None
                        }
                    }
                })
                .collect();
            Self {
                sentinels,
                master,
                data,
                connect_timeout,
                response_timeout,
                links,
                current: Mutex::new(None),
                adrift: AtomicBool::new(false),
                leaving: Mutex::new(None),
                events: AtomicU64::new(0),
                on_switch: Mutex::new(None),
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(follower),
        }
    }

    /// Starts (or restarts) the event subscriptions on the current runtime.
    pub(crate) fn listen(&self) {
        for link in &self.links {
            link.start();
        }
    }

    /// Calls `hook` with `None` when a failover starts moving away from the primary in
    /// use, and with the new primary whenever the primary in use changes.
    pub(crate) fn on_switch(&self, hook: impl Fn(Option<&redis::Client>) + Send + Sync + 'static) {
        *self
            .on_switch
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Whether the primary in use must be looked up again before the next call.
    pub(crate) fn adrift(&self) -> bool {
        self.adrift.load(Ordering::Acquire)
    }

    /// Marks the primary in use as possibly moved.
    pub(crate) fn set_adrift(&self) {
        self.adrift.store(true, Ordering::Release);
    }

    /// A count of failover events so far; compare before and after a call.
    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::Acquire)
    }

    /// The primary a majority of the sentinels name, kept out of a failover's way: while
    /// one is under way, waits (until `deadline`) for a majority naming another primary.
    /// Returns a client for it and its address, for [`Follower::connected`].
    pub(crate) async fn elect(&self, deadline: Instant) -> RedisResult<(redis::Client, Addr)> {
        loop {
            let outcome = match self.majority(deadline).await {
                // Certificates or credentials refused: asking again changes nothing.
                Err(NoMajority {
                    error,
                    settled: true,
                }) => return Err(error),
                Err(NoMajority { error, .. }) => Err(error),
                Ok(addr) => {
                    let leaving = self
                        .leaving
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .clone();
                    match leaving {
                        Some((from, since)) if from == addr && since.elapsed() < PATIENCE => {
                            Err(redis::RedisError::from(std::io::Error::new(
                                std::io::ErrorKind::TimedOut,
                                format!(
                                    "a failover of sentinel master `{}` is under way and a \
                                     majority of the sentinels still name the old primary; \
                                     try again in a moment",
                                    self.master
                                ),
                            )))
                        }
                        _ => Ok(addr),
                    }
                }
            };
            match outcome {
                Ok(addr) => {
                    let client = self.client_for(&addr)?;
                    return Ok((client, addr));
                }
                Err(e) if Instant::now() + ASK_EVERY >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %e, "no primary to follow yet; asking the sentinels again");
                    tokio::time::sleep(ASK_EVERY).await;
                }
            }
        }
    }

    /// The primary at `addr` is connected to and in use from now on; tells the hook if it
    /// changed.
    pub(crate) fn connected(&self, addr: &Addr, client: &redis::Client) {
        *self.leaving.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let changed = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(addr.clone())
            .is_none_or(|old| old != *addr);
        self.adrift.store(false, Ordering::Release);
        if changed {
            tracing::info!(master = %self.master, host = %addr.0, port = addr.1, "following the primary the sentinels elected");
            self.switched(client);
        }
    }

    /// Tells the hook about a new primary.
    fn switched(&self, client: &redis::Client) {
        if let Some(hook) = &*self
            .on_switch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            hook(Some(client));
        }
    }

    /// A client for the primary at `addr`, with the primary's credentials, over TLS when
    /// the sentinels are reached so, and with the socket options the sentinels' clients
    /// carry (the client's keepalive and user timeout).
    fn client_for(&self, addr: &Addr) -> RedisResult<redis::Client> {
        let tcp = self
            .sentinels
            .first()
            .map(|s| s.get_connection_info().tcp_settings().clone())
            .unwrap_or_default();
        let (host, port) = addr.clone();
        let address = match &self.data.tls {
            Some(tls) => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: tls.verify == Verify::Nothing,
                tls_params: None,
            },
            None => redis::ConnectionAddr::Tcp(host, port),
        };
        let info = address
            .into_connection_info()?
            .set_redis_settings(self.data.redis.clone())
            .set_tcp_settings(tcp);
        match &self.data.tls {
            Some(tls) => tls.client(info),
            None => redis::Client::open(info),
        }
    }

    /// The address a majority of all the sentinels name right now.
    async fn majority(&self, deadline: Instant) -> Result<Addr, NoMajority> {
        let needed = self.sentinels.len() / 2 + 1;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let mut asks: FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|sentinel| {
                let config = &config;
                async move {
                    let ask = async {
                        let mut conn = sentinel
                            .get_multiplexed_async_connection_with_config(config)
                            .await?;
                        redis::cmd("SENTINEL")
                            .arg("GET-MASTER-ADDR-BY-NAME")
                            .arg(&self.master)
                            .query_async::<Option<Addr>>(&mut conn)
                            .await
                    };
                    match tokio::time::timeout_at(deadline, ask).await {
                        Ok(answer) => answer,
                        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "the sentinel did not answer in time",
                        ))),
                    }
                }
            })
            .collect();
        let mut named: Vec<(Addr, usize)> = Vec::new();
        let mut answers = Vec::new();
        let mut errors = Vec::new();
        let mut left = self.sentinels.len();
        while let Some(answer) = asks.next().await {
            left -= 1;
            match answer {
                Ok(Some(addr)) => {
                    answers.push(format!("{}:{}", addr.0, addr.1));
                    let count = if let Some((_, count)) = named.iter_mut().find(|(a, _)| *a == addr)
                    {
                        *count += 1;
                        *count
                    } else {
                        named.push((addr.clone(), 1));
                        1
                    };
                    if count >= needed {
                        return Ok(addr);
                    }
                }
                Ok(None) => answers.push("unknown master".to_owned()),
                Err(e) => {
                    answers.push(e.to_string());
                    errors.push(e);
                }
            }
            let best = named.iter().map(|(_, count)| *count).max().unwrap_or(0);
            if best + left < needed {
                // No address can reach a majority any more.
                break;
            }
        }
        let refused = answers.len() == errors.len() && !errors.is_empty();
        if refused && errors.iter().all(crate::error::is_auth_refusal) {
            // Every sentinel refused the credentials: that refusal itself, for
            // `Error::Auth`.
            return Err(NoMajority {
                error: errors.swap_remove(0),
                settled: true,
            });
        }
        let settled = refused && errors.iter().all(is_certificate_refusal);
        let hint = if settled {
            "; the sentinels' TLS certificates are not trusted: give the CA that signed them \
             (ClientBuilder::tls_root_certificate, the CLI's --cacert)"
        } else if !errors.is_empty() && self.data.tls.is_none() {
            "; a sentinel that speaks TLS only drops or leaves unanswered a plain \
             connection: if they do, use rediss+sentinel:// (or rediss:// sentinels)"
        } else if !errors.is_empty() {
            "; over TLS, a sentinel that requires client certificates drops a client without \
             one: give ClientBuilder::tls_client_certificate (the CLI's --cert and --tls-key)"
        } else {
            ""
        };
        Err(NoMajority {
            error: redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no majority of the {} sentinels names a primary for `{}` (answers: {}); \
                     check that most sentinels are up and monitor this name{hint}",
                    self.sentinels.len(),
                    self.master,
                    answers.join("; ")
                ),
            )),
            settled,
        })
    }

    /// A failover is moving away from `from`: stop using it if it is the primary in use.
    fn leaving(&self, from: Addr) {
        let current = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if current.as_ref().is_some_and(|c| *c != from) {
            // Already following another primary (a late copy of the event).
            return;
        }
        self.events.fetch_add(1, Ordering::AcqRel);
        let mut leaving = self.leaving.lock().unwrap_or_else(PoisonError::into_inner);
        if leaving.as_ref().is_none_or(|(a, _)| *a != from) {
            *leaving = Some((from, Instant::now()));
        }
        drop(leaving);
        self.adrift.store(true, Ordering::Release);
        tracing::info!(master = %self.master, "the sentinels are failing the primary over; following them");
        if let Some(hook) = &*self
            .on_switch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            hook(None);
        }
    }
}

/// Why no primary was found: the error, and whether asking again is of no use (every
/// sentinel's certificate, or every sentinel's answer to the credentials, was a refusal).
struct NoMajority {
    error: redis::RedisError,
    settled: bool,
}

/// Whether `e` is a server's TLS certificate refused by this client (signed by a CA it
/// does not trust, or naming another host): the same on every try. rustls' error reaches
/// here as the text of an I/O error.
fn is_certificate_refusal(e: &redis::RedisError) -> bool {
    e.to_string().contains("invalid peer certificate")
}

impl LinkOwner for Follower {
    fn message(&self, push: &PushInfo) {
        let text = |v: Option<&Value>| match v {
            Some(Value::BulkString(b)) => String::from_utf8(b.clone()).ok(),
            Some(Value::SimpleString(s)) => Some(s.clone()),
            _ => None,
        };
        let (Some(channel), Some(payload)) = (text(push.data.first()), text(push.data.get(1)))
        else {
            return;
        };
        let words: Vec<&str> = payload.split(' ').collect();
        let addr = |host: Option<&&str>, port: Option<&&str>| {
            Some(((*host?).to_owned(), port?.parse::<u16>().ok()?))
        };
        match channel.as_str() {
            // <master> <old ip> <old port> <new ip> <new port>
            SWITCHED if words.first() == Some(&self.master.as_str()) => {
                if let Some(old) = addr(words.get(1), words.get(2)) {
                    self.leaving(old);
                }
            }
            // slave <ip:port> <ip> <port> @ <master> <master ip> <master port>
            FAILOVER_STARTS if words.get(5) == Some(&self.master.as_str()) => {
                if let Some(old) = addr(words.get(6), words.get(7)) {
                    self.leaving(old);
                }
            }
            // master <master> <ip> <port>
            ABORTED if words.get(1) == Some(&self.master.as_str()) => {
                *self.leaving.lock().unwrap_or_else(PoisonError::into_inner) = None;
                self.adrift.store(true, Ordering::Release);
            }
            _ => {}
        }
    }

    fn changed(&self, _up: bool) {}

    fn needed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(channel: &str, payload: &str) -> PushInfo {
        PushInfo {
            kind: redis::PushKind::Message,
            data: vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(payload.as_bytes().to_vec()),
            ],
        }
    }

    #[test]
    fn failover_events_about_the_primary_in_use_set_it_aside() -> RedisResult<()> {
        let follower = Follower::new(
            vec![redis::Client::open("redis://127.0.0.1:1")?],
            "redlease".to_owned(),
            DataNodes {
                redis: redis::RedisConnectionInfo::default(),
                tls: None,
            },
            Duration::from_secs(1),
            Duration::from_secs(1),
        )?;
        let primary = redis::Client::open("redis://127.0.0.1:1000")?;
        follower.connected(&("127.0.0.1".to_owned(), 1000), &primary);
        assert!(!follower.adrift());

        // Another master's failover, or one away from a primary not in use: ignored.
        follower.message(&push(SWITCHED, "other 127.0.0.1 1000 127.0.0.1 2000"));
        follower.message(&push(SWITCHED, "redlease 127.0.0.1 3000 127.0.0.1 2000"));
        assert!(!follower.adrift());
        assert_eq!(follower.events(), 0);

        // The leader is about to promote a replica of the primary in use.
        follower.message(&push(
            FAILOVER_STARTS,
            "slave 127.0.0.1:2000 127.0.0.1 2000 @ redlease 127.0.0.1 1000",
        ));
        assert!(follower.adrift());
        assert_eq!(follower.events(), 1);
        let leaving = follower.leaving.lock().map(|l| l.clone()).ok().flatten();
        assert_eq!(
            leaving.map(|(a, _)| a),
            Some(("127.0.0.1".to_owned(), 1000))
        );

        // Connected to the new primary: a late +switch-master changes nothing.
        let new = redis::Client::open("redis://127.0.0.1:2000")?;
        follower.connected(&("127.0.0.1".to_owned(), 2000), &new);
        follower.message(&push(SWITCHED, "redlease 127.0.0.1 1000 127.0.0.1 2000"));
        assert!(!follower.adrift());
        assert_eq!(follower.events(), 1);
        Ok(())
    }
}
