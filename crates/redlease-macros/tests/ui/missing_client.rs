struct Service {
    name: String,
}

impl Service {
    // `Service` has no field `locks`.
    #[redlease::locked(client = self.locks)]
    async fn refresh(&self) -> Result<(), redlease::Error> {
        let _ = &self.name;
        Ok(())
    }
}

// No value named `locks` here.
#[redlease::locked(client = locks)]
async fn rebuild() -> Result<(), redlease::Error> {
    Ok(())
}

fn main() {}
