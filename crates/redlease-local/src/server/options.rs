//! [`ServerOptions`]: how a server is started.

use super::acl::test_acl_wanted;

/// Whether a TLS server asks its clients for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ClientCertificates {
    /// `--tls-auth-clients no`.
    Optional,
    /// `--tls-auth-clients yes`: a client must present a certificate of the CA.
    Required,
}

/// Options for a server to start; build with [`ServerOptions::default`] and the setters.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ServerOptions {
    pub(super) extra_args: Vec<String>,
    pub(super) cluster: bool,
    /// Serves TLS too, and whether clients must present a certificate.
    pub(super) tls: Option<ClientCertificates>,
    /// Serves TLS only, with the certificates in this directory (a deployment's CA).
    pub(super) tls_only: Option<std::path::PathBuf>,
    /// Runs `--sentinel` with this text as its (rewritable) configuration file.
    pub(super) sentinel_config: Option<String>,
    /// Never under [`TEST_ACL_ENV`](crate::TEST_ACL_ENV) (the data nodes of a Sentinel deployment).
    pub(super) no_test_acl: bool,
    /// Where the server's directory is made (the system's temporary directory if `None`).
    pub(super) parent: Option<std::path::PathBuf>,
    /// Environment variables the server starts with.
    pub(super) envs: Vec<(String, String)>,
}

impl ServerOptions {
    /// Starts the server with `--cluster-enabled yes` (a node with no slots; useful for
    /// `CLUSTER KEYSLOT`).
    pub fn cluster_enabled(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Also serves TLS on a second loopback port, with a certificate for `127.0.0.1` signed
    /// by a throw-away CA made with `openssl` in the server's directory (see
    /// [`RedisServer::tls_url`](crate::RedisServer::tls_url) and [`RedisServer::ca_certificate`](crate::RedisServer::ca_certificate)).
    pub fn tls(mut self) -> Self {
        self.tls = Some(ClientCertificates::Optional);
        self
    }

    /// As [`ServerOptions::tls`], and the TLS port requires a client certificate signed by
    /// the same CA (`--tls-auth-clients yes`; see [`RedisServer::client_certificate`](crate::RedisServer::client_certificate)).
    pub fn tls_client_certificates(mut self) -> Self {
        self.tls = Some(ClientCertificates::Required);
        self
    }

    /// Adds a `redis-server` argument, e.g. `"--appendonly"` then `"yes"`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Makes the server's directory (its append-only file, its RDB) inside `parent`
    /// instead of the system's temporary directory: for example a memory file system
    /// (`/dev/shm`), where `appendfsync always` costs no disk flush, so that a test of the
    /// client is not also a test of the disk's flush latency. A SIGKILL of the server still
    /// loses nothing it acknowledged there: its writes are in the kernel, not the process.
    pub fn dir_in(mut self, parent: impl Into<std::path::PathBuf>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// Starts the server with the environment variable `key` set to `value` (for example
    /// an `LD_PRELOAD` library that makes its clock run fast).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.envs.push((key.into(), value.into()));
        self
    }

    /// Leaves the server out of [`TEST_ACL_ENV`](crate::TEST_ACL_ENV).
    pub(crate) fn without_test_acl(mut self) -> Self {
        self.no_test_acl = true;
        self
    }

    /// Whether this server gets the test ACL users of [`TEST_ACL_ENV`](crate::TEST_ACL_ENV).
    pub(super) fn test_acl(&self) -> bool {
        test_acl_wanted()
            && !self.no_test_acl
            && !self.cluster
            && self.tls.is_none()
            && self.sentinel_config.is_none()
            && !self
                .extra_args
                .iter()
                .any(|a| matches!(a.as_str(), "--user" | "--aclfile" | "--requirepass"))
    }

    /// Serves TLS only (`--port 0`; [`ServerOptions::tls`] unless
    /// [`ServerOptions::tls_client_certificates`] was asked), with the certificates
    /// `make_certificates` made in `certs` (one CA for a whole deployment), and replicates
    /// or monitors over TLS (`--tls-replication yes`). The harness' own commands go
    /// through a Unix socket in the server's directory.
    pub(crate) fn tls_only(mut self, certs: impl Into<std::path::PathBuf>) -> Self {
        self.tls.get_or_insert(ClientCertificates::Optional);
        self.tls_only = Some(certs.into());
        self
    }

    /// Runs the process as a sentinel whose configuration file starts as `config` (written
    /// into the server's directory once: the sentinel rewrites it as it learns).
    pub(crate) fn sentinel(mut self, config: String) -> Self {
        self.sentinel_config = Some(config);
        self
    }
}
