struct User {
    id: u64,
}

#[redlease::locked(key = "coupon:{usr.id}")]
async fn grab_coupon(user: &User) -> Result<(), redlease::Error> {
    let _ = user.id;
    Ok(())
}

fn main() {}
