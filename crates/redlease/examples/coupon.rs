//! The flash-sale coupon race: 100 coupons, 400 buyers, a stock kept in Redis and updated
//! by a non-atomic read-modify-write. Without a lock the shop oversells; under a redlease
//! lock it sells exactly 100, and every sale carries a larger fencing token than the last.
//!
//! Starts a private redis-server on a free loopback port and stops it at the end:
//! `cargo run --release -p redlease --example coupon`. `make demo` runs `redlease demo`,
//! the same race across real OS processes, plus a crashed and a paused holder.
#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use redis::AsyncCommands as _;

const COUPONS: i64 = 100;
const BUYERS: usize = 400;
const STOCK: &str = "shop:coupon-stock";
const SOLD: &str = "shop:coupons-sold";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = redlease_local::RedisServer::start()?;
    println!(
        "private redis-server at {} (pid {:?})",
        server.url(),
        server.pid()
    );
    let redis = redis::Client::open(server.url())?;
    let conn = redis.get_multiplexed_async_connection().await?;
    let locks = redlease::Client::connect(&server.url()).await?;

    for locked in [false, true] {
        let mut c = conn.clone();
        let () = c.set(STOCK, COUPONS).await?;
        let _: i64 = c.del(SOLD).await?;
        let started = Instant::now();
        let mut buyers = Vec::new();
        for _ in 0..BUYERS {
            let mut c = conn.clone();
            let lock = locks.lock("coupon").wait(Duration::from_secs(30));
            buyers.push(tokio::spawn(async move {
                let guard = if locked {
                    Some(lock.acquire().await?)
                } else {
                    None
                };
                // Check, then act: the race the lock exists to prevent.
                let stock: i64 = c.get(STOCK).await?;
                if stock > 0 {
                    tokio::task::yield_now().await;
                    let () = c.set(STOCK, stock - 1).await?;
                    let fence = guard.as_ref().map_or(0, |g| g.fencing_token().get());
                    let _: i64 = c.rpush(SOLD, fence).await?;
                }
                if let Some(guard) = guard {
                    guard.release().await?;
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            }));
        }
        for b in buyers {
            b.await?.map_err(|e| e.to_string())?;
        }
        let sold: Vec<u64> = c.lrange(SOLD, 0, -1).await?;
        let stock: i64 = c.get(STOCK).await?;
        let increasing = sold.windows(2).all(|w| w[0] < w[1]);
        println!(
            "{:<16} sold {:>3} of {COUPONS} coupons, stock left {stock:>3}, {:>5.0?}{}",
            if locked {
                "with redlease:"
            } else {
                "without a lock:"
            },
            sold.len(),
            started.elapsed(),
            if locked {
                format!(", fencing tokens strictly increasing: {increasing}")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}
