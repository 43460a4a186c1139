//! A loopback TCP proxy in front of a server, to lose or delay replies, or partition the
//! link, on purpose.
//!
//! Tests use it to make the network misbehave without root or `tc netem`: the proxy can
//! swallow the next reply from the server and cut the client's connection, which is exactly
//! "the command ran, but the client never heard back"; hold every reply back for a
//! while, like a slower network or an overloaded node; or [cut](Proxy::cut) the link in
//! both directions until it is [healed](Proxy::heal), like a network partition; or
//! [silence](Proxy::silence) it, dropping every byte without closing anything, like a
//! partition that outlasts the kernel's patience with the connections it cut. It can
//! also [move](Proxy::retarget) new connections to another server while the open ones
//! stay where they are, as a failover endpoint (a managed primary endpoint, a Kubernetes
//! Service, `HAProxy`) does after a failover.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How long one write to either side may block before the proxy gives up on the
/// connection (and closes both of its ends). Bounds how long [`Proxy::cut`] can wait for
/// a chunk already on its way.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Forwards connections from its own loopback port to `target`, until dropped.
///
/// ```no_run
/// # fn main() -> Result<(), redlease_local::Error> {
/// let server = redlease_local::RedisServer::start()?;
/// let proxy = redlease_local::Proxy::start(server.port())?;
/// proxy.lose_next_reply(); // the next reply is dropped and its connection cut
/// println!("connect through {}", proxy.url());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    lose_next: AtomicBool,
    lost: AtomicU64,
    /// Microseconds each chunk from the server is held back.
    delay_us: AtomicU64,
    /// Silenced: every byte read is dropped, and the connection it came on stays mute.
    silent: AtomicBool,
    stopped: AtomicBool,
    /// The port new connections go to, once [`Proxy::retarget`] moved them (0: the port
    /// the proxy started with).
    target_port: AtomicU16,
    /// The partition: whether chunks may pass, and who is passing or waiting.
    gate: Mutex<Gate>,
    /// Signalled whenever `gate` changes.
    gate_changed: Condvar,
}

/// The state of the partition, shared by every connection of a proxy.
#[derive(Debug, Default)]
struct Gate {
    /// Cut: no chunk passes in either direction.
    cut: bool,
    /// Chunks being written past the gate right now.
    passing: usize,
    /// Chunks read from one side and held at the gate until the cut heals.
    held: usize,
}

impl Shared {
    fn gate(&self) -> MutexGuard<'_, Gate> {
        // Every critical section leaves the gate consistent, so a poisoned lock is usable.
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, gate: MutexGuard<'a, Gate>) -> MutexGuard<'a, Gate> {
        self.gate_changed
            .wait(gate)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits while the link is cut, then counts the caller as passing; `false` when the
    /// proxy stopped meanwhile. Pair with [`Shared::leave`].
    fn enter(&self) -> bool {
        let mut gate = self.gate();
        if gate.cut {
            gate.held += 1;
            self.gate_changed.notify_all();
            while gate.cut && !self.stopped.load(Ordering::SeqCst) {
                gate = self.wait(gate);
            }
            gate.held -= 1;
        }
        if self.stopped.load(Ordering::SeqCst) {
            return false;
        }
        gate.passing += 1;
        true
    }

    /// The chunk counted by [`Shared::enter`] has been written (or failed to).
    fn leave(&self) {
        let mut gate = self.gate();
        gate.passing -= 1;
        self.gate_changed.notify_all();
    }
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:target_port`.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub fn start(target_port: u16) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let port = crate::server::listen("proxy", target_port, move |listener, target| {
            accept_loop(listener, target, &accept_shared);
        })?;
        Ok(Self { port, shared })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, with the `redlease` user's credentials under
    /// [`TEST_ACL_ENV`](crate::TEST_ACL_ENV).
    pub fn url(&self) -> String {
        crate::server::forwarded_url(self.port)
    }

    /// The next chunk the server sends (on any connection) is dropped, and that client's
    /// connection is closed: the command ran, its reply never arrives.
    pub fn lose_next_reply(&self) {
        self.shared.lose_next.store(true, Ordering::SeqCst);
    }

    /// Holds every chunk the server sends back for `delay` before passing it on (zero:
    /// no delay), on every connection, from now on. Chunks of one connection stay in
    /// order, so a burst of replies takes `delay` per chunk: this models a slow link or an
    /// overloaded node, not a bandwidth limit.
    pub fn delay_replies(&self, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::SeqCst);
    }

    /// Sends every connection opened from now on to `127.0.0.1:target_port`; connections
    /// already open stay with the server they were made to. This is what a failover
    /// endpoint does when the primary moves.
    pub fn retarget(&self, target_port: u16) {
        self.shared.target_port.store(target_port, Ordering::SeqCst);
    }

    /// How many replies were lost on purpose so far.
    pub fn lost_replies(&self) -> u64 {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Partitions the link: from the moment this returns until [`heal`](Self::heal), no
    /// byte passes in either direction, on the connections already open and on those
    /// opened meanwhile. Requests the client sends do not reach the server; replies the
    /// server sends (to requests that reached it before the cut) do not reach the client.
    ///
    /// Nothing is dropped: what each side sends meanwhile is held (one chunk per
    /// connection and direction at the proxy, the rest in the kernel's socket buffers) and
    /// delivered, in order, when the link heals, as TCP retransmits after a partition
    /// heals. A RESP stream is therefore never cut mid-reply: a client that gave up
    /// waiting and closed its connection may still see its requests run late on the server.
    /// New connections are accepted during the cut (the kernel completes the handshake on
    /// the proxy's port either way) and connected to the server, but carry nothing until
    /// the link heals.
    ///
    /// Waits for chunks already being written past the proxy (each write is bounded by
    /// 10 s, after which that connection is closed); cutting a cut link does nothing.
    pub fn cut(&self) {
        let mut gate = self.shared.gate();
        gate.cut = true;
        while gate.passing > 0 {
            gate = self.shared.wait(gate);
        }
    }

    /// A silent partition: from the moment this returns until [`heal`](Self::heal), every
    /// byte either side sends, on every connection, is read and dropped, and nothing is
    /// closed (no FIN, no reset). The client's kernel sees its bytes acknowledged (by the
    /// proxy's), so TCP keepalive and `TCP_USER_TIMEOUT` see nothing wrong: only a client
    /// that gives up on a silent connection by itself gets out.
    ///
    /// Connections open during the silence (those open before it and those accepted
    /// meanwhile) stay mute after the heal: their streams lost bytes, so they carry
    /// nothing ever again, and stay open until the client closes them. This models a
    /// kernel partition after which a connection that lived through it recovers only
    /// at its next retransmission, which TCP's back-off puts up to two minutes away:
    /// a client is usable again soon after the heal only if it opens a new connection.
    /// Connections accepted after the heal forward as usual.
    pub fn silence(&self) {
        self.shared.silent.store(true, Ordering::SeqCst);
    }

    /// Ends a partition begun by [`cut`](Self::cut) or [`silence`](Self::silence): the
    /// bytes held at a cut are delivered in order and forwarding goes on (on the
    /// connections a silence muted, nothing passes ever again). Healing a link that is
    /// not partitioned does nothing.
    pub fn heal(&self) {
        self.shared.silent.store(false, Ordering::SeqCst);
        self.shared.gate().cut = false;
        self.shared.gate_changed.notify_all();
    }

    /// Whether the link is silenced (between [`silence`](Self::silence) and
    /// [`heal`](Self::heal)).
    pub fn is_silent(&self) -> bool {
        self.shared.silent.load(Ordering::SeqCst)
    }

    /// Whether the link is cut (between [`cut`](Self::cut) and [`heal`](Self::heal)).
    pub fn is_cut(&self) -> bool {
        self.shared.gate().cut
    }

    /// How many chunks are held at the cut right now: at most one per connection and
    /// direction (requests on their way to the server, replies on their way back).
    pub fn held_chunks(&self) -> usize {
        self.shared.gate().held
    }

    /// Waits until at least `chunks` chunks are held at the cut (see
    /// [`held_chunks`](Self::held_chunks)), at most `timeout`; says whether they are. Tests
    /// use it to know that a request or a reply has reached the partition.
    pub fn wait_held(&self, chunks: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut gate = self.shared.gate();
        while gate.held < chunks {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            gate = self
                .shared
                .gate_changed
                .wait_timeout(gate, left)
                .map_or_else(|e| e.into_inner().0, |(g, _)| g);
        }
        true
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Release the chunks held at a cut (their pumps see the flag and close).
        drop(self.shared.gate());
        self.shared.gate_changed.notify_all();
        // Wake the accept loop so that it sees the flag and exits.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let target = match shared.target_port.load(Ordering::SeqCst) {
            0 => target,
            port => SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        };
        let Ok(server) = TcpStream::connect(target) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let _ = client.set_write_timeout(Some(WRITE_TIMEOUT));
        let _ = server.set_write_timeout(Some(WRITE_TIMEOUT));
        let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        let up_shared = Arc::clone(shared);
        let down_shared = Arc::clone(shared);
        let muted = Arc::new(AtomicBool::new(shared.silent.load(Ordering::SeqCst)));
        let up_muted = Arc::clone(&muted);
        let _ = thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || pump(client_read, server, &up_shared, &up_muted, false));
        let _ = thread::Builder::new()
            .name("proxy-down".into())
            .spawn(move || pump(server_read, client, &down_shared, &muted, true));
    }
}

/// Copies `from` to `to` until either side closes. On the server-to-client direction
/// (`replies`), honours a pending "lose the next reply" and the reply delay. Each chunk
/// waits at the gate while the link is cut, whole: it is never split or dropped there.
/// While the link is silenced, every chunk is dropped and the connection is `muted` (in
/// both directions) for good.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    shared: &Shared,
    muted: &AtomicBool,
    replies: bool,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        if shared.silent.load(Ordering::SeqCst) {
            muted.store(true, Ordering::SeqCst);
        }
        if muted.load(Ordering::SeqCst) {
            continue;
        }
        if replies && shared.lose_next.swap(false, Ordering::SeqCst) {
            shared.lost.fetch_add(1, Ordering::SeqCst);
            break;
        }
        let delay_us = shared.delay_us.load(Ordering::SeqCst);
        if replies && delay_us > 0 {
            thread::sleep(Duration::from_micros(delay_us));
        }
        if !shared.enter() {
            break;
        }
        let written = to.write_all(&buf[..n]);
        shared.leave();
        if written.is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, ErrorKind};

    use super::*;
    use crate::resp::{encode, read_reply};
    use crate::{Error, RedisServer, Reply};

    /// A connection through `proxy`, logged in as the admin under `TEST_ACL_ENV`, that has
    /// answered a PING (so it is open end to end).
    fn connect(proxy: &Proxy) -> Result<BufReader<TcpStream>, Error> {
        let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut conn = BufReader::new(stream);
        if crate::server::test_acl_wanted() {
            send(&mut conn, &["AUTH", "admin", crate::TEST_ADMIN_PASSWORD])?;
            assert_eq!(read_reply(&mut conn)?, Reply::Status("OK".into()));
        }
        send(&mut conn, &["PING"])?;
        assert_eq!(read_reply(&mut conn)?, Reply::Status("PONG".into()));
        Ok(conn)
    }

    fn send(conn: &mut BufReader<TcpStream>, args: &[&str]) -> std::io::Result<()> {
        let mut req = Vec::new();
        encode(&mut req, args);
        conn.get_mut().write_all(&req)
    }

    /// Nothing arrives on `conn` within a short while (it would within a millisecond if
    /// the proxy forwarded it).
    fn silent(conn: &mut BufReader<TcpStream>) -> std::io::Result<bool> {
        conn.get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))?;
        let mut byte = [0u8; 1];
        let silent = match conn.get_mut().peek(&mut byte) {
            Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            Ok(_) => false,
        };
        conn.get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(silent)
    }

    #[test]
    fn a_cut_holds_requests_on_old_and_new_connections_until_heal() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let proxy = Proxy::start(server.port())?;
        let mut old = connect(&proxy)?;
        proxy.cut();
        assert!(proxy.is_cut());
        send(&mut old, &["SET", "redlease:old", "1"])?;
        let mut new = BufReader::new(TcpStream::connect((Ipv4Addr::LOCALHOST, proxy.port()))?);
        new.get_ref()
            .set_read_timeout(Some(Duration::from_secs(10)))?;
        if crate::server::test_acl_wanted() {
            send(&mut new, &["AUTH", "admin", crate::TEST_ADMIN_PASSWORD])?;
        }
        send(&mut new, &["SET", "redlease:new", "1"])?;
        // Both requests reached the partition; neither reached the server.
        assert!(proxy.wait_held(2, Duration::from_secs(10)));
        assert_eq!(
            server.query(&["EXISTS", "redlease:old", "redlease:new"])?,
            Reply::Integer(0)
        );
        assert!(silent(&mut old)? && silent(&mut new)?);

        proxy.heal();
        assert!(!proxy.is_cut());
        assert_eq!(read_reply(&mut old)?, Reply::Status("OK".into()));
        if crate::server::test_acl_wanted() {
            assert_eq!(read_reply(&mut new)?, Reply::Status("OK".into()));
        }
        assert_eq!(read_reply(&mut new)?, Reply::Status("OK".into()));
        assert_eq!(
            server.query(&["EXISTS", "redlease:old", "redlease:new"])?,
            Reply::Integer(2)
        );
        assert_eq!(proxy.held_chunks(), 0);
        Ok(())
    }

    #[test]
    fn a_silence_drops_bytes_and_mutes_its_connections_for_good() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let proxy = Proxy::start(server.port())?;
        let mut old = connect(&proxy)?;
        proxy.silence();
        assert!(proxy.is_silent());
        send(&mut old, &["SET", "redlease:silenced", "1"])?;
        assert!(silent(&mut old)?);
        proxy.heal();
        assert!(!proxy.is_silent());
        // The request was dropped, not held: it never runs, and the old connection stays
        // mute while a new one works.
        send(&mut old, &["PING"])?;
        assert!(silent(&mut old)?);
        let mut new = connect(&proxy)?;
        send(&mut new, &["EXISTS", "redlease:silenced"])?;
        assert_eq!(read_reply(&mut new)?, Reply::Integer(0));
        Ok(())
    }

    #[test]
    fn a_cut_holds_replies_until_heal_and_keeps_the_stream_whole() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let proxy = Proxy::start(server.port())?;
        let mut conn = connect(&proxy)?;
        send(&mut conn, &["BLPOP", "redlease:q", "30"])?;
        crate::wait::until(
            "the BLPOP to block",
            Duration::from_secs(10),
            || match server.text_field(&["INFO", "clients"], "blocked_clients") {
                Ok(n) if n == "1" => Ok(()),
                other => Err(format!("{other:?}")),
            },
        )?;
        proxy.cut();
        // The server serves the BLPOP and sends its reply, which stops at the cut.
        assert_eq!(
            server.query(&["RPUSH", "redlease:q", "x"])?,
            Reply::Integer(1)
        );
        assert!(proxy.wait_held(1, Duration::from_secs(10)));
        assert!(silent(&mut conn)?);
        // A request sent meanwhile waits too, behind the reply.
        send(&mut conn, &["PING"])?;

        proxy.heal();
        assert_eq!(
            read_reply(&mut conn)?,
            Reply::Array(vec![
                Reply::Bulk(b"redlease:q".to_vec()),
                Reply::Bulk(b"x".to_vec())
            ])
        );
        assert_eq!(read_reply(&mut conn)?, Reply::Status("PONG".into()));
        Ok(())
    }

    #[test]
    fn a_retarget_moves_new_connections_and_leaves_open_ones() -> Result<(), Error> {
        let first = RedisServer::start()?;
        let second = RedisServer::start()?;
        first.query(&["SET", "redlease:who", "first"])?;
        second.query(&["SET", "redlease:who", "second"])?;
        let proxy = Proxy::start(first.port())?;
        let mut old = connect(&proxy)?;
        proxy.retarget(second.port());
        let mut new = connect(&proxy)?;
        for (conn, want) in [(&mut old, "first"), (&mut new, "second")] {
            send(conn, &["GET", "redlease:who"])?;
            assert_eq!(read_reply(conn)?, Reply::Bulk(want.as_bytes().to_vec()));
        }
        Ok(())
    }
}
