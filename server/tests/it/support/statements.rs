//! The statements sqlx sends, as its `sqlx::query` events report them, for tests that count
//! what a request costs a database without a statistics view of its own (SQLite).

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Every statement sqlx logs from now on, in this process: a global subscriber, because
/// SQLite's statements are logged on sqlx's worker threads. A test that installs it needs a
/// process of its own (nextest runs each test in one).
#[derive(Clone, Default)]
pub struct StatementLog {
    sent: Arc<Mutex<Vec<String>>>,
}

impl StatementLog {
    pub fn install() -> StatementLog {
        let log = StatementLog::default();
        let subscriber = tracing_subscriber::registry().with(log.clone());
        tracing::subscriber::set_global_default(subscriber)
            .expect("the statement log is this process's only subscriber");
        log
    }

    /// The statements logged since the last call, in the order they finished.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.sent.lock().expect("statement log"))
    }
}

impl<S: tracing::Subscriber> Layer<S> for StatementLog {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() == "sqlx::query"
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut statement = Statement::default();
        event.record(&mut statement);
        // sqlx gives the whole statement only when it is longer than its summary.
        let text = if statement.whole.trim().is_empty() {
            statement.summary
        } else {
            statement.whole
        };
        self.sent
            .lock()
            .expect("statement log")
            .push(text.split_whitespace().collect::<Vec<_>>().join(" "));
    }
}

#[derive(Default)]
struct Statement {
    summary: String,
    whole: String,
}

impl Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_owned(),
            "db.statement" => self.whole = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        if field.name() == "summary" {
            self.summary = format!("{value:?}").trim_matches('"').to_owned();
        }
    }
}
