//! Serves redlease's metrics in the Prometheus text format while a few tasks contend for
//! one lock.
//!
//! ```text
//! cargo run -p redlease --features metrics --example prometheus -- redis://127.0.0.1:6379
//! curl -s http://127.0.0.1:9464/metrics | grep redlease_
//! ```
//!
//! redlease records through the `metrics` facade and bundles no exporter: this example
//! installs `metrics-exporter-prometheus`'s recorder and answers every connection on
//! 127.0.0.1:9464 (or the second argument) with the rendered metrics. It runs until
//! interrupted.
#![allow(
    clippy::print_stdout,
    reason = "an example that tells where it listens"
)]

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:9464".into());

    let metrics = PrometheusBuilder::new().install_recorder()?;
    let client = redlease::Client::connect(&url).await?;

    // Four tasks take turns on one lock, so that waits, holds and the gauges move.
    for worker in 0..4 {
        let client = client.clone();
        tokio::spawn(async move {
            loop {
                let outcome = client
                    .lock("report")
                    .name_in_metrics()
                    .ttl(Duration::from_secs(5))
                    .run(async |_| {
                        tokio::time::sleep(Duration::from_millis(50 + worker * 10)).await;
                        Ok::<_, redlease::Error>(())
                    })
                    .await;
                if let Err(e) = outcome {
                    eprintln!("worker {worker}: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        });
    }

    let listener = TcpListener::bind(&listen).await?;
    println!("serving metrics on http://{listen}/metrics (Ctrl-C to stop)");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (mut socket, _) = accepted?;
                let body = metrics.render();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                // A client that hung up early is not this example's problem.
                let _ = socket.write_all(response.as_bytes()).await;
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    client.shutdown().await?;
    Ok(())
}
