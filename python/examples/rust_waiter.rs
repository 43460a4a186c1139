//! A Rust holder for the Python tests' shared queue: `rust_waiter URL NAME FILE` waits for
//! lock NAME (up to a minute), appends `rust TOKEN` to FILE while holding it, releases.

use std::io::Write;
use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, name, file] = args.as_slice() else {
        return Err("usage: rust_waiter URL NAME FILE".into());
    };
    let client = redlease::Client::connect(url).await?;
    let guard = client
        .lock(name.clone())
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(60))
        .acquire()
        .await?;
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(file)?;
    writeln!(out, "rust {}", guard.fencing_token())?;
    guard.release().await?;
    client.shutdown().await?;
    Ok(())
}
