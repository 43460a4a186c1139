//! A primary, two replicas and three sentinels watching them.

use std::path::PathBuf;
use std::time::Duration;

use crate::server::make_certificates;
use crate::{Error, RedisServer, Reply, ServerOptions, wait};

/// The name the sentinels monitor the primary under.
pub const DEFAULT_MASTER_NAME: &str = "redlease";

/// How long [`Sentinel::start`], [`Sentinel::failover`] and [`Sentinel::wait_in_sync`]
/// wait for replication and sentinel discovery: generous, for a loaded machine (discovery
/// alone takes a few seconds of sentinel hello messages).
pub const DEFAULT_SENTINEL_TIMEOUT: Duration = Duration::from_secs(60);

/// How many replicas the primary has.
const REPLICAS: usize = 2;

/// How many sentinels watch it; a majority of them (the quorum) must agree it is down.
const SENTINELS: usize = 3;

/// How many sentinels must agree that the primary is down.
const QUORUM: usize = 2;

/// No answer for this long and a sentinel deems a server down. Short so that a killed
/// primary fails over quickly, long enough that a busy 2-core machine does not fail over a
/// merely slow one.
const DOWN_AFTER: Duration = Duration::from_secs(2);

/// How long a failover may take, and twice this before the same primary is failed over
/// again.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(5);

/// A Sentinel deployment on free loopback ports: one primary, two replicas (`REPLICAOF`),
/// and three sentinels monitoring it as [`master_name`](Self::master_name) with a quorum
/// of 2. Every process is stopped by PID when this value is dropped, including when a test
/// panics. [`Sentinel::start_tls`] starts one that speaks TLS only, everywhere.
///
/// ```no_run
/// # fn main() -> Result<(), redlease_local::Error> {
/// let mut sentinel = redlease_local::Sentinel::start()?;
/// // redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/redlease
/// let url = sentinel.sentinel_url();
/// let before = sentinel.primary()?.port();
/// let after = sentinel.failover()?;
/// assert_ne!(before, after);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Sentinel {
    master_name: String,
    /// The data nodes; `servers[0]` was the first primary.
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    /// The CA and certificates every server of a TLS deployment shares (removed after the
    /// servers stopped: dropped last).
    certificates: Option<tempfile::TempDir>,
}

/// How the servers of a TLS deployment ask for client certificates:
/// [`ServerOptions::tls`] or [`ServerOptions::tls_client_certificates`].
type TlsMode = fn(ServerOptions) -> ServerOptions;

impl Sentinel {
    /// Starts the primary, its replicas and the sentinels, and waits (up to
    /// [`DEFAULT_SENTINEL_TIMEOUT`]) until [`wait_in_sync`](Self::wait_in_sync) holds.
    ///
    /// # Errors
    /// When a process cannot be started ([`Error::Spawn`], [`Error::NotReady`]) or the
    /// deployment does not settle in time ([`Error::Timeout`]); everything started so far
    /// is stopped.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(None)
    }

    /// As [`Sentinel::start`], with every server and sentinel speaking TLS only (no plain
    /// TCP port: `--port 0`, `--tls-port`) with certificates for `127.0.0.1` signed by one
    /// throw-away CA ([`ca_certificate`](Self::ca_certificate)); replicas replicate and
    /// sentinels monitor over TLS (`tls-replication yes`). [`sentinel_url`](Self::sentinel_url)
    /// is then `rediss+sentinel://...` and [`sentinel_urls`](Self::sentinel_urls) are
    /// `rediss://` URLs. This harness reaches its servers through Unix sockets in their
    /// directories.
    ///
    /// # Errors
    /// As [`Sentinel::start`]; [`Error::Spawn`] when `openssl` cannot be run.
    pub fn start_tls() -> Result<Self, Error> {
        Self::start_with(Some(ServerOptions::tls))
    }

    /// As [`Sentinel::start_tls`], and every server and sentinel requires a client
    /// certificate of the CA (`tls-auth-clients yes`; see
    /// [`client_certificate`](Self::client_certificate)).
    ///
    /// # Errors
    /// As [`Sentinel::start_tls`].
    pub fn start_tls_client_certificates() -> Result<Self, Error> {
        Self::start_with(Some(ServerOptions::tls_client_certificates))
    }

    fn start_with(tls: Option<TlsMode>) -> Result<Self, Error> {
        let certificates = match tls {
            Some(_) => {
                let dir = tempfile::Builder::new()
                    .prefix("redlease-sentinel-tls-")
                    .tempdir()?;
                make_certificates(dir.path())?;
                Some(dir)
            }
            None => None,
        };
        let options = |options: ServerOptions| match (tls, &certificates) {
            (Some(tls), Some(dir)) => tls(options).tls_only(dir.path()),
            _ => options,
        };
        let master_name = DEFAULT_MASTER_NAME.to_owned();
        let data = options(ServerOptions::default().without_test_acl());
        let primary = RedisServer::start_with(data.clone())?;
        let primary_port = primary.port().to_string();
        let mut servers = vec![primary];
        for _ in 0..REPLICAS {
            let replica = data
                .clone()
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(&primary_port);
            servers.push(RedisServer::start_with(replica)?);
        }
        let config = format!(
            "sentinel resolve-hostnames no\n\
             sentinel monitor {master_name} 127.0.0.1 {primary_port} {QUORUM}\n\
             sentinel down-after-milliseconds {master_name} {}\n\
             sentinel failover-timeout {master_name} {}\n\
             sentinel parallel-syncs {master_name} {REPLICAS}\n",
            DOWN_AFTER.as_millis(),
            FAILOVER_TIMEOUT.as_millis(),
        );
        let sentinels = (0..SENTINELS)
            .map(|_| {
                RedisServer::start_with(options(ServerOptions::default()).sentinel(config.clone()))
            })
            .collect::<Result<_, _>>()?;
        let deployment = Self {
            master_name,
            servers,
            sentinels,
            certificates,
        };
        deployment.wait_in_sync(DEFAULT_SENTINEL_TIMEOUT)?;
        Ok(deployment)
    }

    /// The name the sentinels monitor the primary under ([`DEFAULT_MASTER_NAME`]).
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// Each sentinel's `redis://127.0.0.1:PORT` (`rediss://` for a TLS deployment).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// All sentinels and the master name in one URL:
    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/<master-name>`
    /// (`rediss+sentinel://...` for a TLS deployment).
    ///
    /// redis-rs parses no such URL (it takes sentinel addresses and a service name
    /// separately); this form is a redlease convention, the one Python's
    /// `redis-sentinel-url` and several other clients use: comma-separated `host:port`
    /// sentinels, then `/` and the master name.
    pub fn sentinel_url(&self) -> String {
        let hosts = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",");
        let scheme = if self.certificates.is_some() {
            "rediss+sentinel"
        } else {
            "redis+sentinel"
        };
        format!("{scheme}://{hosts}/{}", self.master_name)
    }

    /// The PEM file of the CA that signed every server's and sentinel's certificate, for a
    /// deployment started with [`Sentinel::start_tls`] or
    /// [`Sentinel::start_tls_client_certificates`].
    pub fn ca_certificate(&self) -> Option<PathBuf> {
        self.certificates
            .as_ref()
            .map(|dir| dir.path().join("ca.crt"))
    }

    /// The PEM files of a client certificate signed by [`ca_certificate`](Self::ca_certificate)'s
    /// CA and of its key (unencrypted PKCS#8), for a TLS deployment: what
    /// [`Sentinel::start_tls_client_certificates`] asks for.
    pub fn client_certificate(&self) -> Option<(PathBuf, PathBuf)> {
        self.certificates
            .as_ref()
            .map(|dir| (dir.path().join("client.crt"), dir.path().join("client.key")))
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The sentinel processes, to kill or pause some.
    pub fn sentinels_mut(&mut self) -> &mut [RedisServer] {
        &mut self.sentinels
    }

    /// The data nodes (the primary and its replicas, whichever is which now).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The data nodes, to kill or pause some. A restarted node comes back as it was first
    /// started: the first primary as a primary, the others as replicas of it; the sentinels
    /// reconfigure it when it is not what they expect.
    pub fn servers_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }

    /// The current primary, as the first sentinel that answers names it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    ///
    /// # Errors
    /// When no sentinel answers, or one names a server that is not part of this
    /// deployment.
    pub fn primary(&self) -> Result<&RedisServer, Error> {
        let mut last = None;
        for sentinel in &self.sentinels {
            match self.primary_port_from(sentinel) {
                Ok(port) => return self.server_on(port),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Io(std::io::Error::other("no sentinel"))))
    }

    /// The data nodes other than the current [`primary`](Self::primary).
    ///
    /// # Errors
    /// As for [`primary`](Self::primary).
    pub fn replicas(&self) -> Result<Vec<&RedisServer>, Error> {
        let primary = self.primary()?.port();
        Ok(self
            .servers
            .iter()
            .filter(|s| s.port() != primary)
            .collect())
    }

    /// Runs `SENTINEL FAILOVER` (retrying while sentinels answer that no replica is fit
    /// yet) and waits until every sentinel names a new primary and that node reports
    /// `role:master`; returns the new primary's port.
    ///
    /// The old primary is turned into a replica by the sentinels a few seconds later;
    /// call [`wait_in_sync`](Self::wait_in_sync) to wait for that.
    ///
    /// # Errors
    /// [`Error::Timeout`] when that does not happen within [`DEFAULT_SENTINEL_TIMEOUT`];
    /// [`Error::Reply`] when a sentinel refuses the failover for another reason.
    pub fn failover(&mut self) -> Result<u16, Error> {
        let old = self.primary()?.port();
        let sentinel = &self.sentinels[0];
        let args = ["SENTINEL", "FAILOVER", &self.master_name];
        let mut refused = None;
        wait::until(
            "a sentinel accepting SENTINEL FAILOVER",
            DEFAULT_SENTINEL_TIMEOUT,
            || match sentinel.query(&args) {
                Ok(Reply::Status(s)) if s == "OK" => Ok(()),
                // NOGOODSLAVE: no replica fit yet (e.g. the last failover's old primary
                // is still being reconfigured); INPROG: one is running already.
                Ok(Reply::Error(e)) if e.starts_with("NOGOODSLAVE") || e.starts_with("INPROG") => {
                    Err(e)
                }
                Ok(other) => {
                    refused = Some(sentinel.unexpected(&args, &format!("{other:?}")));
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            },
        )?;
        if let Some(error) = refused {
            return Err(error);
        }
        self.wait_for_new_primary(old, DEFAULT_SENTINEL_TIMEOUT)
    }

    /// Waits until every sentinel names a primary other than the server on port `old`, and
    /// that server reports `role:master`; returns its port. Use it after killing the
    /// primary: the sentinels deem a silent primary down after 2 s
    /// (`down-after-milliseconds`), agree on it, elect a leader and promote a replica,
    /// which takes a few seconds more.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming what the sentinels said last, when that does not happen
    /// within `timeout`.
    pub fn wait_for_new_primary(&self, old: u16, timeout: Duration) -> Result<u16, Error> {
        wait::until(
            "every sentinel naming a new primary that reports role:master",
            timeout,
            || {
                let ports = self
                    .sentinels
                    .iter()
                    .map(|s| self.primary_port_from(s).map_err(|e| e.to_string()))
                    .collect::<Result<Vec<_>, _>>()?;
                let new = ports[0];
                if new == old || ports.iter().any(|&p| p != new) {
                    return Err(format!("sentinels name {ports:?}, old primary {old}"));
                }
                let server = self.server_on(new).map_err(|e| e.to_string())?;
                match server.text_field(&["INFO", "replication"], "role") {
                    Ok(role) if role == "master" => Ok(new),
                    Ok(role) => Err(format!("{new} reports role:{role}")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
    }

    /// Waits until the deployment is settled: every sentinel names the same primary, which
    /// reports `role:master` and two replicas `online`; each replica reports
    /// `master_link_status:up` to it; and every sentinel lists both replicas (flags
    /// `slave`, link `ok`) and the two other sentinels.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming what was still missing after `timeout`.
    pub fn wait_in_sync(&self, timeout: Duration) -> Result<(), Error> {
        wait::until("primary, replicas and sentinels in sync", timeout, || {
            self.in_sync().map_err(|e| e.to_string())?
        })
    }

    /// `Ok(Ok(()))` when settled, `Ok(Err(what is missing))` when not yet.
    fn in_sync(&self) -> Result<Result<(), String>, Error> {
        let name = self.master_name.as_str();
        let mut primaries = Vec::new();
        for sentinel in &self.sentinels {
            primaries.push(self.primary_port_from(sentinel)?);
            let replicas = sentinel.call(&["SENTINEL", "REPLICAS", name])?;
            let fit = replicas.array().unwrap_or_default().iter().filter(|r| {
                r.field("flags").as_deref() == Some("slave")
                    && r.field("master-link-status").as_deref() == Some("ok")
            });
            if fit.count() != REPLICAS {
                return Ok(Err(format!(
                    "sentinel {} sees replicas {replicas:?}",
                    sentinel.port()
                )));
            }
            let others = sentinel.call(&["SENTINEL", "SENTINELS", name])?;
            if others.array().map_or(0, <[Reply]>::len) != SENTINELS - 1 {
                return Ok(Err(format!(
                    "sentinel {} knows sentinels {others:?}",
                    sentinel.port()
                )));
            }
        }
        let port = primaries[0];
        if primaries.iter().any(|&p| p != port) {
            return Ok(Err(format!("sentinels name primaries {primaries:?}")));
        }
        let primary = self.server_on(port)?;
        let info = primary.call(&["INFO", "replication"])?;
        let info = info.text().unwrap_or_default();
        let online = info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count();
        if !info.contains("role:master") || online != REPLICAS {
            return Ok(Err(format!("primary {port}: {info}")));
        }
        for replica in self.servers.iter().filter(|s| s.port() != port) {
            let link = replica.text_field(&["INFO", "replication"], "master_link_status")?;
            let master = replica.text_field(&["INFO", "replication"], "master_port")?;
            if link != "up" || master != port.to_string() {
                return Ok(Err(format!(
                    "replica {}: link {link:?} to {master:?}",
                    replica.port()
                )));
            }
        }
        Ok(Ok(()))
    }

    fn primary_port_from(&self, sentinel: &RedisServer) -> Result<u16, Error> {
        let args = [
            "SENTINEL",
            "GET-MASTER-ADDR-BY-NAME",
            self.master_name.as_str(),
        ];
        let reply = sentinel.call(&args)?;
        reply
            .array()
            .and_then(|addr| addr.get(1))
            .and_then(Reply::integer)
            .and_then(|port| u16::try_from(port).ok())
            .ok_or_else(|| sentinel.unexpected(&args, &format!("{reply:?}")))
    }

    fn server_on(&self, port: u16) -> Result<&RedisServer, Error> {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .ok_or_else(|| Error::Reply {
                port,
                command: "SENTINEL GET-MASTER-ADDR-BY-NAME".to_owned(),
                reply: format!("a primary on port {port}, which is none of ours"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicates_and_fails_over() -> Result<(), Error> {
        let mut deployment = Sentinel::start()?;
        assert_eq!(deployment.master_name(), DEFAULT_MASTER_NAME);
        assert_eq!(deployment.sentinel_urls().len(), 3);
        let url = deployment.sentinel_url();
        assert!(url.starts_with("redis+sentinel://127.0.0.1:"), "{url}");
        assert!(url.ends_with("/redlease"), "{url}");
        assert_eq!(url.matches(',').count(), 2, "{url}");

        let primary = deployment.primary()?;
        let before = primary.port();
        primary.call(&["SET", "k", "v"])?;
        // Every replica has the write once the primary's WAIT says so.
        assert_eq!(primary.call(&["WAIT", "2", "10000"])?, Reply::Integer(2));
        let replicas = deployment.replicas()?;
        assert_eq!(replicas.len(), 2);
        for replica in replicas {
            assert_eq!(replica.call(&["GET", "k"])?, Reply::Bulk(b"v".to_vec()));
        }

        let after = deployment.failover()?;
        assert_ne!(before, after);
        assert_eq!(deployment.primary()?.port(), after);
        deployment.primary()?.call(&["SET", "k", "w"])?;
        // The old primary rejoins as a replica of the new one.
        deployment.wait_in_sync(DEFAULT_SENTINEL_TIMEOUT)?;
        let old = deployment.server_on(before)?;
        assert_eq!(old.text_field(&["INFO", "replication"], "role")?, "slave");
        Ok(())
    }

    #[test]
    fn a_killed_primary_is_replaced_and_rejoins_as_a_replica() -> Result<(), Error> {
        let mut deployment = Sentinel::start()?;
        let before = deployment.primary()?.port();
        let dead = deployment
            .servers()
            .iter()
            .position(|s| s.port() == before)
            .ok_or_else(|| Error::Io(std::io::Error::other("no such server")))?;
        deployment.servers_mut()[dead].kill();
        let after = deployment.wait_for_new_primary(before, DEFAULT_SENTINEL_TIMEOUT)?;
        assert_ne!(before, after);
        deployment.servers_mut()[dead].restart()?;
        deployment.wait_in_sync(DEFAULT_SENTINEL_TIMEOUT)?;
        let old = deployment.server_on(before)?;
        assert_eq!(old.text_field(&["INFO", "replication"], "role")?, "slave");
        Ok(())
    }

    #[test]
    fn a_tls_deployment_speaks_tls_only_and_fails_over() -> Result<(), Error> {
        let mut deployment = Sentinel::start_tls()?;
        let url = deployment.sentinel_url();
        assert!(url.starts_with("rediss+sentinel://127.0.0.1:"), "{url}");
        assert!(
            deployment
                .sentinel_urls()
                .iter()
                .all(|u| u.starts_with("rediss://127.0.0.1:")),
            "{:?}",
            deployment.sentinel_urls()
        );
        let ca = deployment.ca_certificate();
        assert!(ca.is_some_and(|ca| ca.exists()));
        // The ports the sentinels name and announce are TLS ports: a plain command there
        // gets no reply.
        let primary = deployment.primary()?;
        assert_eq!(primary.ca_certificate(), deployment.ca_certificate());
        assert!(
            crate::resp::request(&crate::resp::Control::Tcp(primary.port()), None, &["PING"])
                .is_err()
        );
        let before = primary.port();
        let after = deployment.failover()?;
        assert_ne!(before, after);
        deployment.wait_in_sync(DEFAULT_SENTINEL_TIMEOUT)?;
        Ok(())
    }
}
