#[redlease::locked]
async fn nothing() {}

#[redlease::locked]
async fn not_a_result() -> u32 {
    7
}

#[derive(Debug)]
struct AppError;

#[redlease::locked]
async fn error_without_from() -> Result<u32, AppError> {
    Ok(7)
}

#[redlease::locked]
fn sync_not_a_result() -> Option<u32> {
    Some(7)
}

fn main() {}
