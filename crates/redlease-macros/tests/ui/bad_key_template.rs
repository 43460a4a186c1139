#[redlease::locked(key = "order:{id + 1}")]
async fn arithmetic(id: u64) -> Result<u64, redlease::Error> {
    Ok(id)
}

#[redlease::locked(key = "order:{id")]
async fn unclosed(id: u64) -> Result<u64, redlease::Error> {
    Ok(id)
}

#[redlease::locked(key = "order:{}")]
async fn empty(id: u64) -> Result<u64, redlease::Error> {
    Ok(id)
}

struct Order;

#[redlease::locked(key = "order:{order}")]
async fn not_display(order: &Order) -> Result<(), redlease::Error> {
    let _ = order;
    Ok(())
}

fn main() {}
