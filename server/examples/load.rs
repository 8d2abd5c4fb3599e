//! An open-loop load client for scripts/bench: requests are sent on a fixed schedule (`--rate`
//! per second) whatever the server does, and each latency is measured from the moment its
//! request was *due*, not from when it was sent. A server that stalls therefore shows the
//! stall in every request queued behind it (no coordinated omission, as with wrk2), which a
//! closed-loop client such as wrk hides by sending less while the server is slow.
//!
//!   cargo run --release -p idem --example load -- --url http://127.0.0.1:8080 \
//!     --api-key KEY --workload replay --rate 3000 --seconds 10
//!
//! Prints one JSON object: requests sent and completed, statuses, transport errors, and the
//! latency percentiles in milliseconds (from an HDR histogram, 3 significant digits).
//! `--workload client-create` sends each through `idem-client`, as a caller that retries
//! correctly would.

use clap::{Parser, ValueEnum};
use domain::key::IdempotencyKey;
use hdrhistogram::Histogram;
use idem_client::{Client, Error, NewPayment, RetryPolicy};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Workload {
    /// `GET /payments/{--payment}`.
    GetPayment,
    /// A completed key's retry: keys `r-0` … `r-<replay keys - 1>`, uniform.
    Replay,
    /// A new key per request.
    FreshCreate,
    /// A new payment per request without a key (the tenant's keys are optional): the same
    /// payment work without the idempotency layer.
    Baseline,
    /// 80% fresh creates, 15% replays, 4% conflicts (a completed key with another amount),
    /// 1% malformed bodies.
    Mix,
    /// A new logical operation per request through `idem-client` (a new key, `Prefer: wait=10`,
    /// its retries inside the measured latency): fresh creates as a caller that retries
    /// correctly sees them. A status is the client's final answer's; a transport error, a call
    /// the client gave up on.
    ClientCreate,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    url: String,
    #[arg(long)]
    api_key: String,
    #[arg(long, value_enum)]
    workload: Workload,
    /// Requests per second, on a fixed schedule.
    #[arg(long)]
    rate: u64,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The payment `get-payment` reads.
    #[arg(long, default_value = "")]
    payment: String,
    /// Makes this run's new keys and merchant references unique.
    #[arg(long, default_value = "open")]
    prefix: String,
    #[arg(long, default_value_t = 1000)]
    replay_keys: u64,
    /// Payments are spread over accounts `acc_0` … `acc_<accounts - 1>`.
    #[arg(long, default_value_t = 64)]
    accounts: u64,
}

/// One request of the workload: method, path, key and body.
struct Planned {
    get: bool,
    path: String,
    key: Option<String>,
    body: String,
}

fn payment_body(account: u64, reference: &str, amount: &str) -> String {
    format!(
        r#"{{"accountId":"acc_{account}","amount":"{amount}","currency":"EUR","merchantReference":"{reference}"}}"#
    )
}

/// A cheap, well-spread hash of the request number (SplitMix64), so that the mix and the
/// replay keys are the same in every run.
fn spread(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn plan(args: &Args, n: u64) -> Planned {
    // The replay keys were made with the account their number picks.
    let replayed = |amount: &str| {
        let number = spread(n) % args.replay_keys;
        let key = format!("r-{number}");
        Planned {
            get: false,
            path: "/payments".into(),
            body: payment_body(number % args.accounts, &key, amount),
            key: Some(key),
        }
    };
    let fresh = || {
        let key = format!("{}-{n}", args.prefix);
        Planned {
            get: false,
            path: "/payments".into(),
            body: payment_body(n % args.accounts, &key, "1.00"),
            key: Some(key),
        }
    };
    match args.workload {
        Workload::GetPayment => Planned {
            get: true,
            path: format!("/payments/{}", args.payment),
            key: None,
            body: String::new(),
        },
        Workload::Replay => replayed("1.00"),
        Workload::FreshCreate => fresh(),
        Workload::Baseline => Planned { key: None, ..fresh() },
        // Sent by the client: the plan names its key and reference.
        Workload::ClientCreate => fresh(),
        Workload::Mix => match spread(n ^ 0xA5A5) % 100 {
            0..80 => fresh(),
            80..95 => replayed("1.00"),
            95..99 => replayed("2.00"),
            _ => Planned {
                body: r#"{"accountId":"acc_1","amount":1.00}"#.into(),
                ..fresh()
            },
        },
    }
}

#[derive(Default)]
struct Tally {
    statuses: BTreeMap<u16, u64>,
    errors: u64,
}

/// One logical operation through the client: the status of its final answer, or `None` when the
/// client gave up.
async fn through_the_client(idem: &Client, args: &Args, n: u64, planned: &Planned) -> Option<u16> {
    let key = IdempotencyKey::parse(planned.key.as_deref().unwrap_or_default().as_bytes()).ok()?;
    let payment = NewPayment::new(&format!("acc_{}", n % args.accounts), "1.00", "EUR", key.as_str());
    match idem.create_payment(&key, &payment).await {
        Ok(_) => Some(201),
        Err(Error::Refused(error)) => Some(error.status),
        Err(Error::GaveUp { .. }) => None,
    }
}

/// A request's answer (`None`: a transport error) and how late after it was due it came.
fn record(histogram: &Mutex<Histogram<u64>>, tally: &Mutex<Tally>, status: Option<u16>, late: Duration) {
    match status {
        Some(status) => {
            *tally
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .statuses
                .entry(status)
                .or_default() += 1;
            let micros = u64::try_from(late.as_micros()).unwrap_or(u64::MAX).max(1);
            histogram
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .saturating_record(micros);
        }
        None => tally.lock().unwrap_or_else(PoisonError::into_inner).errors += 1,
    }
}

#[tokio::main]
async fn main() {
    let args = Arc::new(Args::parse());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client");
    let histogram = Arc::new(Mutex::new(
        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds"),
    ));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let idem = Client::new(&args.url, &args.api_key, RetryPolicy::default().waiting(10));
    let interval = Duration::from_secs_f64(1.0 / args.rate.max(1) as f64);
    let total = args.rate * args.seconds;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(total as usize);
    for n in 0..total {
        let due = start + interval.mul_f64(n as f64);
        tokio::time::sleep_until(due.into()).await;
        let (client, idem, args, histogram, tally) = (
            client.clone(),
            idem.clone(),
            args.clone(),
            histogram.clone(),
            tally.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let planned = plan(&args, n);
            if let Workload::ClientCreate = args.workload {
                let status = through_the_client(&idem, &args, n, &planned).await;
                record(&histogram, &tally, status, due.elapsed());
                return;
            }
            let url = format!("{}{}", args.url, planned.path);
            let mut request = if planned.get {
                client.get(url)
            } else {
                client.post(url)
            }
            .bearer_auth(&args.api_key);
            if let Some(key) = planned.key {
                request = request.header("Idempotency-Key", key);
            }
            if !planned.get {
                request = request
                    .header("Content-Type", "application/json")
                    .body(planned.body);
            }
            let status = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    response.bytes().await.ok().map(|_| status)
                }
                Err(_) => None,
            };
            record(&histogram, &tally, status, due.elapsed());
        }));
    }
    let sent_for = start.elapsed();
    for task in tasks {
        task.await.expect("a request task");
    }
    let histogram = histogram.lock().unwrap_or_else(PoisonError::into_inner);
    let tally = tally.lock().unwrap_or_else(PoisonError::into_inner);
    let millis = |quantile: f64| histogram.value_at_quantile(quantile) as f64 / 1000.0;
    let report = serde_json::json!({
        "workload": format!("{:?}", args.workload),
        "rate": args.rate,
        "sent": total,
        "sentForSeconds": sent_for.as_secs_f64(),
        "completed": histogram.len(),
        "errors": tally.errors,
        "statuses": tally.statuses.iter().map(|(status, count)| (status.to_string(), *count)).collect::<BTreeMap<_, _>>(),
        "p50": millis(0.5),
        "p90": millis(0.9),
        "p99": millis(0.99),
        "p999": millis(0.999),
        "max": histogram.max() as f64 / 1000.0,
    });
    println!("{report}");
}
