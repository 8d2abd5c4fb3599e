//! One payment through `idem-client`, against a running Idem (`scripts/run`):
//!
//! ```sh
//! cargo run -p idem-client --example pay -- http://127.0.0.1:3000 "$(cat data/demo-api-key)" 10.00
//! ```
//!
//! The key is made once for the logical operation and every retry reuses it; the client waits on
//! an in-flight retry (`Prefer: wait=10`) and backs off on everything else worth retrying.

use idem_client::{Client, NewPayment, RetryPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(base), Some(api_key)) = (args.next(), args.next()) else {
        return Err("usage: pay BASE_URL API_KEY [AMOUNT]".into());
    };
    let amount = args.next().unwrap_or_else(|| "10.00".to_owned());
    let client = Client::new(&base, &api_key, RetryPolicy::default().waiting(10));
    let key = Client::new_key();
    let reference = format!("example-{}", key.as_str());
    let payment = NewPayment::new("acc_1", &amount, "EUR", &reference);
    let made = client.create_payment(&key, &payment).await?;
    println!(
        "{} {} {} (key {}, {} attempt(s))",
        made.resource.payment_id,
        made.resource.status,
        made.resource.amount,
        key.as_str(),
        made.attempts
    );
    // The same logical operation again (a crash and a restart would do this): the same payment.
    let again = client.create_payment(&key, &payment).await?;
    println!("again: {} replayed={}", again.resource.payment_id, again.replayed);
    Ok(())
}
