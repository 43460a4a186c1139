//! A loopback TCP proxy in front of a server, to lose or delay replies on purpose.
//!
//! Tests use it to make the network misbehave without root or `tc netem`: the proxy can
//! swallow the next reply from the server and cut the client's connection, which is exactly
//! "the command ran, but the client never heard back"; or hold every reply back for a
//! while, like a slower network or an overloaded node.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

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
    stopped: AtomicBool,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:target_port`.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub fn start(target_port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let target = SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
        let accept_shared = Arc::clone(&shared);
        thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(&listener, target, &accept_shared))?;
        Ok(Self { port, shared })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, with the `redlease` user's credentials under
    /// [`TEST_ACL_ENV`](crate::TEST_ACL_ENV).
    pub fn url(&self) -> String {
        if crate::test_acl_wanted() {
            format!(
                "redis://redlease:{}@127.0.0.1:{}",
                crate::TEST_ACL_PASSWORD,
                self.port
            )
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
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

    /// How many replies were lost on purpose so far.
    pub fn lost_replies(&self) -> u64 {
        self.shared.lost.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
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
        let Ok(server) = TcpStream::connect(target) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client_read), Ok(server_read)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        let up_shared = Arc::clone(shared);
        let down_shared = Arc::clone(shared);
        let _ = thread::Builder::new()
            .name("proxy-up".into())
            .spawn(move || pump(client_read, server, &up_shared, false));
        let _ = thread::Builder::new()
            .name("proxy-down".into())
            .spawn(move || pump(server_read, client, &down_shared, true));
    }
}

/// Copies `from` to `to` until either side closes. On the server-to-client direction
/// (`replies`), honours a pending "lose the next reply".
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, replies: bool) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        if replies && shared.lose_next.swap(false, Ordering::SeqCst) {
            shared.lost.fetch_add(1, Ordering::SeqCst);
            break;
        }
        let delay_us = shared.delay_us.load(Ordering::SeqCst);
        if replies && delay_us > 0 {
            thread::sleep(Duration::from_micros(delay_us));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
