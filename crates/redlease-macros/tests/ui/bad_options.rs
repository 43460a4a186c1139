#[redlease::locked(lease = "10s")]
async fn unknown_option() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(ttl = "10s", ttl = "20s")]
async fn twice() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(on_busy = fallback)]
async fn pattern_parameter((a, b): (u8, u8)) -> Result<u8, redlease::Error> {
    Ok(a + b)
}

async fn fallback(_: (u8, u8)) -> Result<u8, redlease::Error> {
    Ok(0)
}

#[redlease::locked]
struct NotAFunction;

fn main() {}
