//! N independent primaries, as Redlock needs them.

use std::ops::{Index, IndexMut};

use crate::{Error, RedisServer, ServerOptions};

/// `N` independent `redis-server` primaries (no replication, no cluster), each on its own
/// free loopback port: the nodes of a Redlock quorum. Every process is stopped by PID when
/// this value is dropped, including when a test panics.
///
/// Index it (`nodes[2]`, `&mut nodes[2]`) to kill, restart, pause or query one node.
///
/// ```no_run
/// # fn main() -> Result<(), redlease_local::Error> {
/// let mut nodes = redlease_local::Nodes::start(5)?;
/// let urls: Vec<String> = nodes.urls(); // redis://127.0.0.1:PORT, one per node
/// nodes[0].kill(); // a minority down
/// nodes[1].pause()?; // a node that hangs
/// nodes[0].restart_empty()?; // back, having forgotten every key
/// nodes[1].resume()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Nodes {
    servers: Vec<RedisServer>,
}

impl Nodes {
    /// Starts `n` standalone servers with default options and waits until each answers
    /// `PING`.
    ///
    /// # Errors
    /// When a server cannot be started; those already started are stopped.
    pub fn start(n: usize) -> Result<Self, Error> {
        Self::start_with(n, &ServerOptions::default())
    }

    /// Starts `n` servers, each with a copy of `options` (e.g. `--appendonly yes` to test a
    /// restart that keeps its data).
    ///
    /// # Errors
    /// When a server cannot be started; those already started are stopped.
    pub fn start_with(n: usize, options: &ServerOptions) -> Result<Self, Error> {
        let servers = (0..n)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect::<Result<_, _>>()?;
        Ok(Self { servers })
    }

    /// How many nodes there are (up or down).
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no nodes at all.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every node's `redis://127.0.0.1:PORT`, in index order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The nodes, in index order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The nodes, in index order, to kill, restart or pause several of them.
    pub fn servers_mut(&mut self) -> &mut [RedisServer] {
        &mut self.servers
    }
}

impl Index<usize> for Nodes {
    type Output = RedisServer;

    fn index(&self, index: usize) -> &RedisServer {
        &self.servers[index]
    }
}

impl IndexMut<usize> for Nodes {
    fn index_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.servers[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reply;

    #[test]
    fn independent_nodes_kill_restart_empty_pause() -> Result<(), Error> {
        let mut nodes = Nodes::start(3)?;
        assert_eq!(nodes.len(), 3);
        let urls = nodes.urls();
        assert_eq!(urls.len(), 3);
        assert!(
            urls.iter()
                .all(|u| u.starts_with("redis://") && u.contains("127.0.0.1:"))
        );
        for node in nodes.servers() {
            assert_eq!(node.query(&["SET", "k", "v"])?, Reply::Status("OK".into()));
        }
        // Independent: a write to one is not seen by another.
        nodes[0].query(&["DEL", "k"])?;
        assert_eq!(nodes[1].query(&["GET", "k"])?, Reply::Bulk(b"v".to_vec()));

        nodes[1].kill();
        assert!(nodes[1].query(&["PING"]).is_err(), "killed");
        assert_eq!(nodes[2].query(&["EXISTS", "k"])?, Reply::Integer(1));
        nodes[1].restart()?;
        assert_eq!(
            nodes[1].query(&["EXISTS", "k"])?,
            Reply::Integer(0),
            "no data kept"
        );

        nodes[2].pause()?;
        nodes[2].resume()?;
        assert_eq!(nodes[2].query(&["GET", "k"])?, Reply::Bulk(b"v".to_vec()));
        Ok(())
    }

    #[test]
    fn restart_empty_drops_persisted_data() -> Result<(), Error> {
        let options = ServerOptions::default()
            .arg("--appendonly")
            .arg("yes")
            .arg("--appendfsync")
            .arg("always");
        let mut nodes = Nodes::start_with(1, &options)?;
        nodes[0].query(&["SET", "k", "v"])?;
        nodes[0].restart()?;
        assert_eq!(
            nodes[0].query(&["EXISTS", "k"])?,
            Reply::Integer(1),
            "AOF kept it"
        );
        nodes[0].restart_empty()?;
        assert_eq!(nodes[0].query(&["EXISTS", "k"])?, Reply::Integer(0));
        Ok(())
    }
}
