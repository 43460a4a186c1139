// A URL is not a client.
#[redlease::locked(client = url)]
async fn from_url(url: &str) -> Result<(), redlease::Error> {
    let _ = url;
    Ok(())
}

// A synchronous function locks through the blocking API, so it needs a blocking client.
#[redlease::locked(client = client)]
fn sync_with_async_client(client: &redlease::Client) -> Result<(), redlease::Error> {
    let _ = client;
    Ok(())
}

fn main() {}
