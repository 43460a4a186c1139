//! A loopback TCP delay line: a link's latency between a client and a server, without root
//! or `tc netem`.
//!
//! [`Proxy::delay_replies`](crate::Proxy::delay_replies) holds each chunk back in turn, so
//! a burst of N chunks takes N delays: a slow or overloaded node. A [`DelayLine`] is a wire
//! instead: every chunk read from one side is stamped with its arrival time and written to
//! the other side at arrival + delay, in order, whatever else is in flight. Pipelined
//! requests and their replies thus cost one delay each way, however many there are, and
//! the delay applies in both directions (a round trip costs twice the delay).
//!
//! Each connection has four threads: per direction, a reader that stamps the chunks and a
//! writer that sleeps until each is due (with a timer slack of 1 µs, so that a sleep ends
//! within a few microseconds of its deadline on an idle machine). The writer coalesces the
//! chunks that are already due into one write.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

/// How long one write to either side may block before the delay line gives up on the
/// connection (and closes both of its ends).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest chunk read at once.
const CHUNK: usize = 64 * 1024;

/// A chunk on its way: when it is due on the other side, and its bytes.
type Chunk = (Instant, Vec<u8>);

/// Forwards connections from its own loopback port to a server, delaying every chunk in
/// both directions by the same fixed delay without serialising them, until dropped.
///
/// ```no_run
/// # fn main() -> Result<(), redlease_local::Error> {
/// use std::time::Duration;
///
/// let server = redlease_local::RedisServer::start()?;
/// // 100 µs each way: every round trip through it costs at least 200 µs more.
/// let line = redlease_local::DelayLine::start(server.port(), Duration::from_micros(100))?;
/// println!("connect through {}", line.url());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct DelayLine {
    port: u16,
    delay: Duration,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    stopped: AtomicBool,
    /// The open connections' sockets, to close them when the delay line is dropped.
    connections: Mutex<Vec<Weak<Connection>>>,
}

/// Both sockets of one forwarded connection; closing them ends its four threads.
#[derive(Debug)]
struct Connection {
    client: TcpStream,
    server: TcpStream,
}

impl Connection {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

impl DelayLine {
    /// Listens on a free loopback port and forwards every connection to
    /// `127.0.0.1:target_port`, each chunk `delay` after it arrived, in both directions
    /// (zero: as soon as possible, which measures the delay line's own cost).
    ///
    /// # Errors
    /// When no loopback port can be bound or no thread started.
    pub fn start(target_port: u16, delay: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let accept_shared = Arc::clone(&shared);
        let port = crate::server::listen("delay-line", target_port, move |listener, target| {
            accept_loop(listener, target, delay, &accept_shared);
        })?;
        Ok(Self {
            port,
            delay,
            shared,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The delay of each direction.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// `redis://127.0.0.1:<port>`, with the `redlease` user's credentials under
    /// [`TEST_ACL_ENV`](crate::TEST_ACL_ENV) (as [`RedisServer::url`](crate::RedisServer::url)).
    pub fn url(&self) -> String {
        crate::server::forwarded_url(self.port)
    }
}

impl Drop for DelayLine {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        let connections = std::mem::take(
            &mut *self
                .shared
                .connections
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for connection in connections.iter().filter_map(Weak::upgrade) {
            connection.close();
        }
        // Wake the accept loop so that it sees the flag and exits.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, delay: Duration, shared: &Shared) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        // A connection that could not be set up is closed; the others go on.
        let _ = connect(client, target, delay, shared);
    }
}

/// Connects `client` to `target` and starts the four threads that carry its traffic.
fn connect(
    client: TcpStream,
    target: SocketAddr,
    delay: Duration,
    shared: &Shared,
) -> std::io::Result<()> {
    let server = TcpStream::connect(target).inspect_err(|_| {
        let _ = client.shutdown(Shutdown::Both);
    })?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    }
    let connection = Arc::new(Connection {
        client: client.try_clone()?,
        server: server.try_clone()?,
    });
    {
        let mut connections = shared
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        connections.retain(|c| c.strong_count() > 0);
        connections.push(Arc::downgrade(&connection));
    }
    // A connection accepted while the delay line was being dropped is closed here, as the
    // drop may have missed it.
    if shared.stopped.load(Ordering::SeqCst) {
        connection.close();
        return Ok(());
    }
    direction(
        "up",
        client.try_clone()?,
        server.try_clone()?,
        delay,
        &connection,
    )?;
    direction("down", server, client, delay, &connection)
}

/// Starts the reader and the writer that carry `from` to `to`.
fn direction(
    name: &str,
    from: TcpStream,
    to: TcpStream,
    delay: Duration,
    connection: &Arc<Connection>,
) -> std::io::Result<()> {
    let (chunks, due) = channel();
    let reader_connection = Arc::clone(connection);
    let writer_connection = Arc::clone(connection);
    thread::Builder::new()
        .name(format!("delay-line-{name}-read"))
        .spawn(move || read(from, delay, &chunks, &reader_connection))?;
    thread::Builder::new()
        .name(format!("delay-line-{name}-write"))
        .spawn(move || write(to, &due, &writer_connection))?;
    Ok(())
}

/// Reads chunks from `from`, each stamped with arrival + `delay`, until it closes.
fn read(mut from: TcpStream, delay: Duration, chunks: &Sender<Chunk>, connection: &Connection) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if chunks
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            // The writer gave up (and closed the connection).
            break;
        }
    }
    // The writer delivers what is on its way, then closes the connection; when the writer
    // already ended, close it here.
    if chunks.send((Instant::now(), Vec::new())).is_err() {
        connection.close();
    }
}

/// Writes each chunk to `to` when it is due, in order, until the reader ends; then closes
/// the connection (both directions).
fn write(mut to: TcpStream, due: &Receiver<Chunk>, connection: &Connection) {
    // Sleeps end within microseconds of their deadline, not the default 50 µs later.
    let _ = nix::sys::prctl::set_timerslack(1);
    let mut next: Option<Chunk> = None;
    while let Some((at, mut bytes)) = next.take().or_else(|| due.recv().ok()) {
        if bytes.is_empty() {
            // The reader's end of stream.
            break;
        }
        let wait = at.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        // Everything else that is due by now goes in the same write.
        while let Ok(chunk) = due.try_recv() {
            if chunk.0 <= Instant::now() && !chunk.1.is_empty() {
                bytes.extend_from_slice(&chunk.1);
            } else {
                next = Some(chunk);
                break;
            }
        }
        if to.write_all(&bytes).is_err() {
            break;
        }
    }
    connection.close();
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, ErrorKind};

    use super::*;
    use crate::resp::{encode, read_reply};
    use crate::{Error, RedisServer, Reply};

    const DELAY: Duration = Duration::from_millis(20);
    /// Between pipelined requests.
    const GAP: Duration = Duration::from_millis(1);

    /// A connection through `line`, logged in as the admin under `TEST_ACL_ENV`, that has
    /// answered a PING (so it is open end to end).
    fn connect(line: &DelayLine) -> Result<BufReader<TcpStream>, Error> {
        let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, line.port()))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut conn = BufReader::new(stream);
        if crate::server::test_acl_wanted() {
            send(&mut conn, &[&["AUTH", "admin", crate::TEST_ADMIN_PASSWORD]])?;
            assert_eq!(read_reply(&mut conn)?, Reply::Status("OK".into()));
        }
        send(&mut conn, &[&["PING"]])?;
        assert_eq!(read_reply(&mut conn)?, Reply::Status("PONG".into()));
        Ok(conn)
    }

    /// Sends `commands` in one write (a pipeline).
    fn send(conn: &mut BufReader<TcpStream>, commands: &[&[&str]]) -> std::io::Result<()> {
        let mut req = Vec::new();
        for args in commands {
            encode(&mut req, args);
        }
        conn.get_mut().write_all(&req)
    }

    #[test]
    fn a_round_trip_takes_at_least_the_delay_each_way() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let line = DelayLine::start(server.port(), DELAY)?;
        assert_eq!(line.delay(), DELAY);
        let mut conn = connect(&line)?;
        let sent = Instant::now();
        send(&mut conn, &[&["PING"]])?;
        assert_eq!(read_reply(&mut conn)?, Reply::Status("PONG".into()));
        let took = sent.elapsed();
        assert!(took >= 2 * DELAY, "a round trip took {took:?}");
        Ok(())
    }

    #[test]
    fn pipelined_chunks_take_one_delay_not_one_each() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let line = DelayLine::start(server.port(), DELAY)?;
        let mut conn = connect(&line)?;
        let key = "redlease:delay-line";
        let sent = Instant::now();
        // Ten requests, a millisecond apart (far less than the delay) so that each is a
        // chunk of its own on the way out, and its reply one on the way back.
        for _ in 0..10 {
            send(&mut conn, &[&["INCR", key]])?;
            thread::sleep(GAP);
        }
        for n in 1..=10 {
            assert_eq!(read_reply(&mut conn)?, Reply::Integer(n));
        }
        let took = sent.elapsed();
        // One delay each way at least, plus the gaps; a proxy that held each chunk back in
        // turn would take ten delays each way.
        assert!(
            took >= 2 * DELAY + 9 * GAP,
            "10 pipelined INCRs took {took:?}"
        );
        assert!(took < 5 * DELAY, "10 pipelined INCRs took {took:?}");
        Ok(())
    }

    #[test]
    fn dropping_the_line_closes_its_connections() -> Result<(), Error> {
        let server = RedisServer::start()?;
        let line = DelayLine::start(server.port(), Duration::ZERO)?;
        let mut conn = connect(&line)?;
        drop(line);
        let mut byte = [0u8; 1];
        // End of stream (or a reset), never a reply nor the 10 s read timeout.
        match conn.get_mut().read(&mut byte) {
            Ok(n) => assert_eq!(n, 0, "a byte arrived after the drop"),
            Err(e) => assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "the connection stayed open: {e}"
            ),
        }
        Ok(())
    }
}
