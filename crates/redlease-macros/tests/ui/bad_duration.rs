#[redlease::locked(ttl = "ten seconds")]
async fn not_a_duration() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(ttl = "5ms")]
async fn too_short() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(wait = "5")]
async fn no_unit() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(retry = "0s")]
async fn zero_retry() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(ttl = 10)]
async fn not_a_string() -> Result<(), redlease::Error> {
    Ok(())
}

fn main() {}
