#[redlease::locked(key = "backups", permits = 3, read)]
async fn permits_and_read() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "backups", write, permits = 3)]
async fn write_and_permits() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "config", read, write)]
async fn read_and_write() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "config", read, read)]
async fn read_twice() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "backups", permits = 0)]
async fn no_permits() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "backups", permits = "3")]
async fn permits_as_a_string() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "backups", permits = 2.5)]
fn fractional_permits() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "backups", permits = 5000000000)]
fn too_many_permits() -> Result<(), redlease::Error> {
    Ok(())
}

#[redlease::locked(key = "config", read = true)]
async fn read_with_a_value() -> Result<(), redlease::Error> {
    Ok(())
}

fn main() {}
