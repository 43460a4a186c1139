//! `redlease proclaim NOTE`: the command of a `redlease run --elect` changes its leader's
//! note. The `run` that leads holds the leadership (and its secret owner token) and
//! proclaims with it; its command only asks it to, over a Unix socket in the run's private
//! directory (mode 0700, see [`crate::heartbeat`]), whose path it finds in
//! `REDLEASE_PROCLAIM`. So no secret leaves `run`, the command needs no connection
//! options, and the note changes only while that `run` still leads.
//!
//! The exchange: the command writes the note and closes its side; `run` answers with one
//! line, `CODE TEXT`, the exit code of `redlease proclaim` and what it says.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use redlease::Leadership;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{UnixListener, UnixStream};

use crate::exit;

/// The environment variable that gives the command the socket's path.
pub(crate) const ENV: &str = "REDLEASE_PROCLAIM";
/// The socket's name in the run's directory.
const SOCKET: &str = "proclaim.sock";
/// The longest note read; the library keeps at most its `MAX_NOTE` bytes of it.
const LIMIT: u64 = 64 * 1024;
/// How long `run` waits for a note once the command connected.
const READ: Duration = Duration::from_secs(5);
/// How long `redlease proclaim` waits for the answer.
const ANSWER: Duration = Duration::from_secs(60);

/// `--help` of `redlease proclaim`.
pub(crate) const LONG_ABOUT: &str = "\
Change the note of the leader that runs this command: for a command started by
redlease run --elect NAME (it finds its run in REDLEASE_PROCLAIM). The run that leads
replaces its note, keeping its term and its lease, and announces it: redlease leader
--elect NAME and every watcher then show the new note in the same term (etcd's proclaim).
The note is one line (control characters become spaces), cut to 256 bytes.

Exit codes: 0 proclaimed; 79 leadership was lost (nothing written); 69 Redis could not
be reached (the note may or may not have changed); 2 not run under redlease run --elect
(no REDLEASE_PROCLAIM), an empty note, or the run could not be asked.

Examples:
  redlease run --elect scheduler -- sh -c './warm-up && redlease proclaim \"$(hostname): serving on :8080\" && exec ./scheduler'";

/// Arguments of `redlease proclaim`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProclaimArgs {
    /// The leader's new note
    #[arg(value_name = "NOTE")]
    note: String,
}

/// `run`'s side: the socket its command's `redlease proclaim` connects to.
#[derive(Debug)]
pub(crate) struct Listener {
    listener: UnixListener,
}

impl Listener {
    /// Listens in `dir` (the run's private directory).
    pub(crate) fn bind(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            listener: UnixListener::bind(path(dir))?,
        })
    }

    /// The next connection. Cancel safe.
    pub(crate) async fn accept(&self) -> std::io::Result<UnixStream> {
        self.listener.accept().await.map(|(stream, _)| stream)
    }
}

/// The socket's path in `dir`: what `REDLEASE_PROCLAIM` says.
pub(crate) fn path(dir: &Path) -> PathBuf {
    dir.join(SOCKET)
}

/// Reads a note from `stream`, proclaims it with `leadership` and answers.
pub(crate) async fn serve(mut stream: UnixStream, leadership: &Leadership) {
    let mut note = Vec::new();
    let read = tokio::time::timeout(READ, (&mut stream).take(LIMIT).read_to_end(&mut note)).await;
    let (code, text) = match read.map(|r| r.map(|_| String::from_utf8(note))) {
        Ok(Ok(Ok(note))) => match leadership.proclaim(note).await {
            Ok(()) => (0, format!("proclaimed in term {}", leadership.term())),
            Err(e @ redlease::Error::Lost { .. }) => {
                (exit::LOST, format!("{e}; nothing proclaimed"))
            }
            Err(e) => {
                let e = anyhow::Error::new(e).context("proclaiming");
                (exit::code_of(&e), exit::one_line(&e))
            }
        },
        Ok(Ok(Err(_))) => (exit::ERROR, "the note is not UTF-8".to_owned()),
        _ => (exit::ERROR, "could not read the note".to_owned()),
    };
    tracing::debug!(code, %text, "proclaim asked by the command");
    let _ = stream
        .write_all(format!("{code} {text}\n").as_bytes())
        .await;
}

/// `redlease proclaim`.
pub(crate) async fn proclaim(args: ProclaimArgs) -> anyhow::Result<ExitCode> {
    let Some(socket) = std::env::var_os(ENV).filter(|s| !s.is_empty()) else {
        anyhow::bail!(
            "{ENV} is not set: redlease proclaim changes the note of the leader whose command runs it; run it from the command of redlease run --elect NAME"
        );
    };
    let answer = async {
        let mut stream = UnixStream::connect(&socket).await?;
        stream.write_all(args.note.as_bytes()).await?;
        stream.shutdown().await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(ANSWER, answer)
        .await
        .context("no answer from the redlease run that leads")?
        .with_context(|| {
            format!(
                "asking the redlease run that leads ({ENV}={}); it may have ended",
                Path::new(&socket).display()
            )
        })?;
    let (code, text) = answer
        .trim_end()
        .split_once(' ')
        .and_then(|(code, text)| Some((code.parse::<u8>().ok()?, text)))
        .context("the redlease run that leads gave no answer")?;
    if code == 0 {
        tracing::debug!(%text, "proclaimed");
    } else {
        eprintln!("redlease: {text}");
    }
    Ok(exit::code(code))
}
