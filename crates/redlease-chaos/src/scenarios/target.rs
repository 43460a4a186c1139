//! The deployment a row runs against, and what starts, fails over and finds its servers.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use redlease_local::{Cluster, Nodes, Proxy, RedisServer, Sentinel, ServerOptions};

use crate::scenario::Fault;

/// The Redis side of a scenario.
pub(super) enum Target {
    Single(RedisServer, Option<Proxy>),
    Quorum(Nodes),
    /// Quorum nodes behind proxies of each worker's own.
    Partitioned(crate::partition::Partitioned),
    Sentinel(Box<Sentinel>),
    Cluster(Box<Cluster>),
}

pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// `options` with the server's files on a memory file system where there is one: a
/// flush of the append-only file (`appendfsync always`) then costs no disk latency, which on
/// a loaded virtual disk reached hundreds of ms and is the server's delay, not the client's
/// (see the report's note on the *restarted with its data* rows).
pub(super) fn in_memory(options: ServerOptions) -> ServerOptions {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        options.dir_in(shm)
    } else {
        options
    }
}

/// The fast-clock shim (`crates/redlease/tests/clock/fast_clock.c`), built with `cc` into
/// the system's temporary directory (the caller removes it).
pub(super) fn fast_clock_shim() -> anyhow::Result<std::path::PathBuf> {
    let out = std::env::temp_dir().join(format!(
        "redlease-chaos-fast-clock-{}.so",
        std::process::id()
    ));
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../redlease/tests/clock/fast_clock.c"
    );
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(source)
        .arg("-ldl")
        .status()
        .context("running the C compiler `cc` (Debian: gcc) for the fast-clock shim")?;
    anyhow::ensure!(status.success(), "cc failed to build {source}");
    Ok(out)
}

/// Hands the slots of primary `shard` (an index into `Cluster::primaries`) to its replica:
/// with `CLUSTER FAILOVER` (the replica catches up and the primary steps down), or, for
/// `Fault::ClusterPrimaryCrash`, by SIGKILL of the primary and `CLUSTER FAILOVER FORCE`
/// on the replica, after which the old primary is restarted (empty) and rejoins as a
/// replica. Waits, bounded, until the cluster has settled.
pub(super) fn fail_over_cluster(
    fault: Fault,
    cluster: &mut Cluster,
    shard: usize,
) -> anyhow::Result<()> {
    // One replica per primary: replica `shard` follows primary `shard`.
    if fault == Fault::ClusterFailover {
        cluster.failover(shard)?;
        return Ok(());
    }
    let dead = server_index(cluster.nodes(), cluster.primaries()[shard].port())?;
    cluster.nodes_mut()[dead].kill();
    cluster.failover_forced(shard)?;
    cluster.nodes_mut()[dead].restart()?;
    cluster.wait_settled(Duration::from_secs(30))?;
    Ok(())
}

/// The index in `servers` of the one listening on `port`.
pub(super) fn server_index(servers: &[RedisServer], port: u16) -> anyhow::Result<usize> {
    servers
        .iter()
        .position(|s| s.port() == port)
        .with_context(|| format!("no server of ours on port {port}"))
}

/// A bare connection to a local server's port, for the busy script: it runs on its own
/// thread while the runner keeps the server to send `SCRIPT KILL`.
pub(super) struct RedisServerPort(pub(super) u16);

impl RedisServerPort {
    /// Sends `EVAL script 0 arg` and returns the first line of the reply.
    pub(super) fn eval(&self, script: &str, arg: &str) -> std::io::Result<String> {
        use std::io::{BufRead as _, Write as _};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.0))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut command = String::from("*4\r\n");
        for part in ["EVAL", script, "0", arg] {
            let _ = write!(command, "${}\r\n{part}\r\n", part.len());
        }
        stream.write_all(command.as_bytes())?;
        let mut line = String::new();
        std::io::BufReader::new(stream).read_line(&mut line)?;
        Ok(line.trim_end().to_owned())
    }
}
