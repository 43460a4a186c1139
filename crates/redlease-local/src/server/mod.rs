//! One `redis-server` process ([`RedisServer`]) and how it is started ([`ServerOptions`]):
//! the ACL users the tests share (`acl`), the TLS certificates (`tls`), free ports and the
//! loopback listener the proxies bind (`ports`).

mod acl;
mod options;
mod ports;
mod tls;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::Error;
use crate::resp::{self, Control, Reply};

#[cfg(test)]
pub(crate) use acl::test_acl_wanted;
pub use acl::{REDLEASE_ACL_RULES, TEST_ACL_ENV, TEST_ACL_PASSWORD, TEST_ADMIN_PASSWORD};
use options::ClientCertificates;
pub use options::ServerOptions;
pub use ports::free_port;
pub(crate) use ports::{forwarded_url, listen};
pub(crate) use tls::make_certificates;

/// How long [`RedisServer::start`] waits for a new server to answer `PING`.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(10);

/// The name of the server binary looked up on `PATH`; override with `REDLEASE_REDIS_SERVER`.
pub const DEFAULT_SERVER_BINARY: &str = "redis-server";

/// A running `redis-server` that this process started; killed by PID on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    tls_port: Option<u16>,
    dir: tempfile::TempDir,
    options: ServerOptions,
    /// Started with the users of [`TEST_ACL_ENV`].
    acl: bool,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts a standalone server on a free loopback port and waits until it answers `PING`.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with `options`.
    pub fn start_with(options: ServerOptions) -> Result<Self, Error> {
        let mut dir = tempfile::Builder::new();
        dir.prefix("redlease-redis-");
        let dir = match &options.parent {
            Some(parent) => dir.tempdir_in(parent)?,
            None => dir.tempdir()?,
        };
        let mut server = Self {
            child: None,
            port: 0,
            tls_port: None,
            dir,
            acl: options.test_acl(),
            options,
        };
        if server.options.tls.is_some() && server.options.tls_only.is_none() {
            make_certificates(server.dir.path())?;
        }
        // A free port can be taken by someone else between our probe and the server's bind;
        // try a few ports before giving up.
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            if server.options.tls_only.is_some() {
                server.tls_port = Some(server.port);
            } else if server.options.tls.is_some() {
                server.tls_port = Some(free_port()?);
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) if attempt >= 5 => return Err(e),
                Err(_) => {}
            }
        }
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let binary = std::env::var("REDLEASE_REDIS_SERVER")
            .unwrap_or_else(|_| DEFAULT_SERVER_BINARY.to_owned());
        let mut cmd = Command::new(&binary);
        cmd.envs(self.options.envs.iter().map(|(k, v)| (k, v)));
        if let Some(config) = &self.options.sentinel_config {
            let path = self.dir.path().join("sentinel.conf");
            if !path.exists() {
                std::fs::write(&path, config)?;
            }
            cmd.arg(path).arg("--sentinel");
        } else {
            // A replica's full sync starts at once (the default waits 5 s for more
            // replicas) and loads from the socket, not through a file on a slow disk.
            cmd.args(["--repl-diskless-sync-delay", "0"])
                .args(["--repl-diskless-load", "on-empty-db"]);
        }
        if self.options.tls_only.is_some() {
            // No plain TCP port: the harness' own commands go through the Unix socket.
            cmd.args([
                "--port",
                "0",
                "--tls-replication",
                "yes",
                "--unixsocketperm",
                "700",
            ])
            .arg("--unixsocket")
            .arg(self.socket_path());
        } else {
            cmd.arg("--port").arg(self.port.to_string());
        }
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "yes", "--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path());
        if let Some(tls_port) = self.tls_port {
            let dir = self.certificates_dir();
            cmd.arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(dir.join("server.crt"))
                .arg("--tls-key-file")
                .arg(dir.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.crt"))
                .arg("--tls-auth-clients")
                .arg(match self.options.tls {
                    Some(ClientCertificates::Required) => "yes",
                    _ => "no",
                });
        }
        if self.options.cluster {
            cmd.args(["--cluster-enabled", "yes", "--cluster-config-file"])
                .arg(self.dir.path().join("nodes.conf"));
        }
        if self.acl {
            cmd.args(["--user", "default", "off"])
                .args(["--user", "admin", "on"])
                .arg(format!(">{TEST_ADMIN_PASSWORD}"))
                .args(["~*", "&*", "+@all"])
                .args(["--user", "redlease", "on"])
                .arg(format!(">{TEST_ACL_PASSWORD}"))
                .args(REDLEASE_ACL_RULES);
        }
        cmd.args(&self.options.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let started_before = self.starts_logged();
        let child = cmd.spawn().map_err(|source| Error::Spawn {
            binary: binary.clone(),
            source,
        })?;
        self.child = Some(child);
        if let Err(e) = self.wait_ready(DEFAULT_START_TIMEOUT, started_before) {
            self.kill();
            return Err(e);
        }
        Ok(())
    }

    /// How many times this server's log says it started listening (`Running mode=...`,
    /// logged once the port is bound).
    fn starts_logged(&self) -> usize {
        read_to_string_lossy(&self.log_path())
            .matches("Running mode=")
            .count()
    }

    /// Waits until our process answers on the port. A `PONG` alone could come from another
    /// process that bound the same free port first (our server then exits): the log must
    /// also show that ours bound it.
    fn wait_ready(&mut self, timeout: Duration, started_before: usize) -> Result<(), Error> {
        let started = Instant::now();
        let mut delay = Duration::from_millis(2);
        while started.elapsed() < timeout {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(_status)) = child.try_wait()
            {
                break; // exited: e.g. the port was taken
            }
            if self.ping().is_ok() && self.starts_logged() > started_before {
                return Ok(());
            }
            // The server gives no event we could wait on before it listens; poll with a
            // short, growing delay.
            std::thread::sleep(delay);
            delay = (delay * 2).min(Duration::from_millis(50));
        }
        Err(Error::NotReady {
            port: self.port,
            waited: started.elapsed(),
            log: self.log(),
        })
    }

    fn ping(&self) -> std::io::Result<()> {
        let reply = self.command(&["PING"])?;
        // A server that demands a password is answering too.
        if reply.starts_with("+PONG") || reply.starts_with("-NOAUTH") {
            Ok(())
        } else {
            Err(std::io::Error::other(reply))
        }
    }

    /// Sends one command over a fresh connection and returns the first line of the reply
    /// (RESP, e.g. `+OK` or `:1`). Meant for test set-up, not for speed.
    pub fn command(&self, args: &[&str]) -> std::io::Result<String> {
        Ok(self.query(args)?.first_line())
    }

    /// Sends one command over a fresh connection and returns the whole parsed reply; an
    /// error reply is `Ok(Reply::Error(..))`. Meant for test set-up, not for speed.
    ///
    /// # Errors
    /// When the server cannot be reached or sends no valid reply in time.
    pub fn query<A: AsRef<[u8]>>(&self, args: &[A]) -> std::io::Result<Reply> {
        let admin = self.acl.then_some(("admin", TEST_ADMIN_PASSWORD));
        let control = if self.options.tls_only.is_some() {
            Control::Unix(self.socket_path())
        } else {
            Control::Tcp(self.port)
        };
        resp::request(&control, admin, args)
    }

    /// The Unix socket of a server that serves TLS only.
    fn socket_path(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// Where the TLS certificates are: a deployment's shared directory, or the server's.
    fn certificates_dir(&self) -> &Path {
        self.options
            .tls_only
            .as_deref()
            .unwrap_or_else(|| self.dir.path())
    }

    /// Like [`query`](Self::query), with an error reply turned into [`Error::Reply`].
    pub(crate) fn call<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<Reply, Error> {
        match self.query(args)? {
            Reply::Error(e) => Err(self.unexpected(args, &e)),
            reply => Ok(reply),
        }
    }

    /// Runs a command that must answer `+OK`.
    pub(crate) fn call_ok<A: AsRef<[u8]>>(&self, args: &[A]) -> Result<(), Error> {
        match self.call(args)? {
            Reply::Status(s) if s == "OK" => Ok(()),
            other => Err(self.unexpected(args, &format!("{other:?}"))),
        }
    }

    /// The value of `field` in a `field:value` text reply, such as `INFO replication` or
    /// `CLUSTER INFO` give; empty when absent.
    pub(crate) fn text_field(&self, args: &[&str], field: &str) -> Result<String, Error> {
        let reply = self.call(args)?;
        let text = reply.text().unwrap_or_default();
        Ok(text
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .unwrap_or_default()
            .to_owned())
    }

    /// An [`Error::Reply`] for `args` answered with `reply`.
    pub(crate) fn unexpected<A: AsRef<[u8]>>(&self, args: &[A], reply: &str) -> Error {
        let command = args
            .iter()
            .map(|a| String::from_utf8_lossy(a.as_ref()).into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        Error::Reply {
            port: self.port,
            command,
            reply: reply.to_owned(),
        }
    }

    /// The loopback port (the TLS port of a server of a TLS deployment, such as
    /// [`Sentinel::start_tls`](crate::Sentinel::start_tls), which has no other).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`; `redis://redlease:PASSWORD@127.0.0.1:PORT` under
    /// [`TEST_ACL_ENV`]; `rediss://127.0.0.1:PORT` for a server of a TLS deployment
    /// (which serves TLS only).
    pub fn url(&self) -> String {
        if self.options.tls_only.is_some() {
            format!("rediss://127.0.0.1:{}", self.port)
        } else if self.acl {
            format!(
                "redis://redlease:{TEST_ACL_PASSWORD}@127.0.0.1:{}",
                self.port
            )
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    /// A URL with every right, for a test's own look-ups behind the library's back:
    /// [`url`](Self::url), or the `admin` user's under [`TEST_ACL_ENV`].
    pub fn admin_url(&self) -> String {
        if self.options.tls_only.is_some() {
            self.url()
        } else if self.acl {
            format!(
                "redis://admin:{TEST_ADMIN_PASSWORD}@127.0.0.1:{}",
                self.port
            )
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    /// `rediss://127.0.0.1:TLS_PORT` when started with [`ServerOptions::tls`].
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("rediss://127.0.0.1:{p}"))
    }

    /// The PEM file of the CA that signed the TLS certificate, when started with
    /// [`ServerOptions::tls`].
    pub fn ca_certificate(&self) -> Option<PathBuf> {
        self.tls_port
            .map(|_| self.certificates_dir().join("ca.crt"))
    }

    /// The PEM files of a client certificate signed by the CA of
    /// [`RedisServer::ca_certificate`] and of its key (unencrypted PKCS#8), when started
    /// with [`ServerOptions::tls`]: what a server started with
    /// [`ServerOptions::tls_client_certificates`] asks for.
    pub fn client_certificate(&self) -> Option<(PathBuf, PathBuf)> {
        self.tls_port.map(|_| {
            let dir = self.certificates_dir();
            (dir.join("client.crt"), dir.join("client.key"))
        })
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's log so far (for failing tests).
    pub fn log(&self) -> String {
        read_to_string_lossy(&self.log_path())
    }

    /// Kills the server with SIGKILL (no chance to save or reply) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port after [`kill`](Self::kill) or a crash (or
    /// kills it first), with whatever its options persist: nothing by default (`--save ""`,
    /// no AOF), so the restarted server is empty unless options turned persistence on.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }

    /// Kills the server, deletes its data files (`dump.rdb`, the AOF), and starts it again
    /// on the same port: the restarted server is empty even when options turned persistence
    /// on. A cluster node keeps its identity (`nodes.conf`), a sentinel its configuration.
    pub fn restart_empty(&mut self) -> Result<(), Error> {
        self.kill();
        let dir = self.dir.path();
        ignore_not_found(std::fs::remove_file(dir.join("dump.rdb")))?;
        ignore_not_found(std::fs::remove_file(dir.join("appendonly.aof")))?;
        ignore_not_found(std::fs::remove_dir_all(dir.join("appendonlydir")))?;
        self.spawn()
    }

    /// Suspends the process with SIGSTOP: it keeps its sockets but answers nothing.
    pub fn pause(&self) -> Result<(), Error> {
        self.signal(Signal::SIGSTOP)
    }

    /// Resumes a process suspended by [`pause`](Self::pause).
    pub fn resume(&self) -> Result<(), Error> {
        self.signal(Signal::SIGCONT)
    }

    fn signal(&self, sig: Signal) -> Result<(), Error> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        let raw = i32::try_from(pid).map_err(|_| Error::Io(std::io::Error::other("pid range")))?;
        kill(Pid::from_raw(raw), sig).map_err(|source| Error::Signal { pid, source })
    }

    /// The directory holding the server's log and files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server cannot die of SIGKILL any slower, but resume it anyway so that the
        // kernel reaps it promptly.
        let _ = self.resume();
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- redis-server :{} log ---\n{}", self.port, self.log());
        }
    }
}

/// A removal's result, with "it was not there" counted as success.
fn ignore_not_found(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn read_to_string_lossy(path: &Path) -> String {
    let mut buf = Vec::new();
    match std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut buf)) {
        Ok(_) => String::from_utf8_lossy(&buf).into_owned(),
        Err(e) => format!("(no log: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr, TcpStream};

    #[test]
    fn starts_answers_and_stops_by_pid() -> Result<(), Error> {
        let mut server = RedisServer::start()?;
        assert_eq!(server.command(&["SET", "k", "v"])?, "+OK");
        assert_eq!(server.command(&["GET", "k"])?, "$1");
        let pid = server.pid();
        assert!(pid.is_some());
        server.restart()?;
        assert_eq!(server.command(&["EXISTS", "k"])?, ":0", "restart is empty");
        let port = server.port();
        drop(server);
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
        Ok(())
    }

    #[test]
    fn dir_in_keeps_the_servers_files_there_across_a_restart() -> Result<(), Error> {
        let parent = tempfile::tempdir()?;
        let mut server = RedisServer::start_with(
            ServerOptions::default()
                .dir_in(parent.path())
                .arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg("always"),
        )?;
        assert!(
            server.dir().starts_with(parent.path()),
            "{} is not inside {}",
            server.dir().display(),
            parent.path().display()
        );
        assert_eq!(server.command(&["SET", "k", "v"])?, "+OK");
        server.restart()?;
        assert_eq!(server.command(&["EXISTS", "k"])?, ":1", "the AOF was kept");
        Ok(())
    }
}
