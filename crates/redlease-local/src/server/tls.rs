//! The TLS certificates of a server started with [`ServerOptions::tls`](super::ServerOptions::tls),
//! made with `openssl`.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::Error;

/// A CA, a server certificate for IP 127.0.0.1 and a client certificate signed by it, made
/// with `openssl`.
pub(crate) fn make_certificates(dir: &Path) -> Result<(), Error> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n")?;
    // An extension makes an X.509 v3 certificate (rustls takes no v1 client certificate).
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")?;
    let steps: [&[&str]; 5] = [
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=redlease test CA",
            ],
        ]
        .concat(),
        &[
            &["req"],
            &ec[..],
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
        &[
            &["req"],
            &ec[..],
            &[
                "-keyout",
                "client.key",
                "-out",
                "client.csr",
                "-subj",
                "/CN=redlease test client",
            ],
        ]
        .concat(),
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.crt",
            "-days",
            "2",
            "-extfile",
            "client.ext",
        ],
    ];
    steps.into_iter().try_for_each(|args| openssl(dir, args))
}

/// Runs `openssl ARGS` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), Error> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Spawn {
            binary: "openssl".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "openssl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))));
    }
    Ok(())
}
