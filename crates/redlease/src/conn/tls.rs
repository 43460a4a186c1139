//! How `rediss://` connections trust the server and present themselves: the CA(s) that
//! sign the server's certificate, the client's own certificate (mutual TLS), and whether
//! the server's certificate is verified at all.
//!
//! The PEM given is parsed when the client connects, before any connection, so that a
//! wrong file is named as such instead of surfacing as a handshake failure. Turning
//! verification off is a builder option only: redis-rs also reads it from a `#insecure`
//! URL fragment, but a URL travels through environment variables and configuration files
//! shared by many programs, where nobody sees that it gives up the server's identity, so
//! such a URL is refused with the option to use instead.

use redis::{ConnectionAddr, ConnectionInfo};

use crate::error::{Error, Result};

/// Whether the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Verify {
    /// Against the roots (the system's, or those given), and its name against the host.
    #[default]
    Certificate,
    /// Not at all: any certificate is accepted.
    Nothing,
}

/// The TLS options of every connection of one client.
#[derive(Clone, Default)]
pub(crate) struct Tls {
    /// PEM of the CA(s) that sign the server's certificate, instead of the system's roots.
    pub(crate) root: Option<Vec<u8>>,
    /// PEM of the client's certificate chain and of its private key (mutual TLS).
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Whether the server's certificate is checked.
    pub(crate) verify: Verify,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Certificates are not secret, but the key is: neither is printed.
        f.debug_struct("Tls")
            .field("root", &self.root.as_ref().map(|_| "<pem>"))
            .field("client", &self.client.as_ref().map(|_| "<pem>"))
            .field("verify", &self.verify)
            .finish()
    }
}

/// The option that turns verification off, as the library and the CLI call it.
const INSECURE_OPTION: &str =
    "ClientBuilder::danger_accept_invalid_certificates (the CLI's --insecure)";

impl Tls {
    /// Checks that the PEM given holds what it should: at least one certificate in the
    /// roots and in the client's chain, a private key that matches the client's
    /// certificate.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the option whose PEM is wrong;
    /// [`Error::InvalidOption`] too when TLS is not compiled in and an option is set.
    pub(crate) fn validate(&self) -> Result<()> {
        #[cfg(feature = "tls")]
        {
            if let Some(root) = &self.root {
                certificates("tls_root_certificate", "CA certificate", root)?;
            }
            if let Some((cert, key)) = &self.client {
                client_identity(cert, key)?;
            }
            Ok(())
        }
        #[cfg(not(feature = "tls"))]
        {
            if self.root.is_some() || self.client.is_some() || self.verify == Verify::Nothing {
                return Err(Error::InvalidOption {
                    option: "tls",
                    reason: "TLS support is not compiled in; enable redlease's `tls` feature"
                        .into(),
                });
            }
            Ok(())
        }
    }

    /// The certificates redis-rs takes, when a root or a client certificate is set.
    #[cfg(feature = "tls")]
    pub(crate) fn certificates(&self) -> Option<redis::TlsCertificates> {
        (self.root.is_some() || self.client.is_some()).then(|| redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root.clone(),
        })
    }

    /// A redis-rs client for `info` (as [`Tls::addressed`] left it) with these options.
    ///
    /// # Errors
    /// redis-rs' error when it refuses the certificates (a TLS option on a `redis://`
    /// URL).
    #[cfg_attr(not(feature = "tls"), allow(clippy::unused_self))]
    pub(crate) fn client(&self, info: ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if let Some(certificates) = self.certificates() {
            return redis::Client::build_with_tls(info, certificates);
        }
        redis::Client::open(info)
    }

    /// `info` with verification turned off when asked, after checking that its URL did not
    /// turn it off by itself.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a `#insecure` URL without [`Verify::Nothing`].
    pub(crate) fn addressed(&self, info: ConnectionInfo) -> Result<ConnectionInfo> {
        let addr = match info.addr().clone() {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => {
                if insecure && self.verify != Verify::Nothing {
                    return Err(insecure_fragment());
                }
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: self.verify == Verify::Nothing,
                    tls_params,
                }
            }
            other => other,
        };
        Ok(info.set_addr(addr))
    }

    /// Checks that no URL of `urls` turns verification off by itself (for the cluster
    /// builder of redis-rs, which parses the URLs itself).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a `#insecure` URL without [`Verify::Nothing`].
    #[cfg(feature = "cluster")]
    pub(crate) fn check_urls(&self, urls: &[String]) -> Result<()> {
        if self.verify == Verify::Nothing {
            return Ok(());
        }
        for url in urls {
            if let Ok(info) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
                self.addressed(info)?;
            }
        }
        Ok(())
    }
}

/// The refusal of a `#insecure` URL.
fn insecure_fragment() -> Error {
    Error::InvalidOption {
        option: "url",
        reason: format!(
            "a `#insecure` URL turns off the server's certificate verification, which redlease takes only as an explicit option: drop `#insecure` and give the server's CA with ClientBuilder::tls_root_certificate (the CLI's --cacert), or, knowing what it gives up, use {INSECURE_OPTION}"
        ),
    }
}

/// The certificates of `pem`, at least one.
#[cfg(feature = "tls")]
fn certificates(
    option: &'static str,
    what: &str,
    pem: &[u8],
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::{CertificateDer, pem::PemObject as _};
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidOption {
            option,
            reason: format!("the {what} PEM could not be read ({e}); give the PEM text (-----BEGIN CERTIFICATE-----)"),
        })?;
    if certs.is_empty() {
        return Err(Error::InvalidOption {
            option,
            reason: format!(
                "no {what} found in the PEM given; give the PEM text (-----BEGIN CERTIFICATE-----), not a file name or DER"
            ),
        });
    }
    Ok(certs)
}

/// Checks the client's certificate chain and key: both readable, and the key the
/// certificate's (rustls builds the configuration the connections will use).
#[cfg(feature = "tls")]
fn client_identity(cert: &[u8], key: &[u8]) -> Result<()> {
    use rustls::pki_types::{PrivateKeyDer, pem::PemObject as _};
    const OPTION: &str = "tls_client_certificate";
    let chain = certificates(OPTION, "client certificate", cert)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| Error::InvalidOption {
        option: OPTION,
        reason: format!(
            "no private key could be read from the key PEM ({e}); give the unencrypted PEM key (-----BEGIN PRIVATE KEY-----, EC or RSA PRIVATE KEY) that belongs to the certificate"
        ),
    })?;
    rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(chain, key)
        .map_err(|e| Error::InvalidOption {
            option: OPTION,
            reason: format!(
                "the client certificate and key cannot be used together ({e}); check that the certificate is an X.509 v3 one and the key is its own"
            ),
        })?;
    Ok(())
}
