#[redlease::locked(key = "from:{a}", keys = ["from:{a}", "to:{b}"])]
async fn key_and_keys(a: u32, b: u32) -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = ["from:{a}", "to:{b}"], key = "from:{a}")]
async fn keys_and_key(a: u32, b: u32) -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = ["a", "b"], permits = 3)]
async fn keys_and_permits() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(read, keys = ["a", "b"])]
async fn read_and_keys() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = ["a", "b"], write)]
fn keys_and_write() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = [])]
async fn no_keys() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = ["from:{a}", 7])]
async fn not_a_string(a: u32) -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = "from:{a}")]
async fn not_a_list(a: u32) -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(keys = ["from:{a}", "to:{c}"])]
async fn not_a_parameter(a: u32, b: u32) -> Result<(), redlease::Error> {
    Ok(())
}

fn main() {}
