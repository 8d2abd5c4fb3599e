//! Files an operator downloads: a filtered set of records, streamed page by page so that the
//! server never holds the whole set, and bounded.

use super::{StoreConsole, views};
use crate::store::StoreError;
use crate::store::console::RecordQuery;
use app::records::model::RecordFilter;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::cursor::RecordCursor;
use futures_util::StreamExt;

/// Rows one records file holds at most: a larger set is narrowed by its filter first.
pub const MAX_EXPORTED_RECORDS: usize = 100_000;

/// Rows read (and written) per step of the stream.
const EXPORT_PAGE: usize = 1_000;

const HEADER: [&str; 14] = [
    "tenant_id",
    "tenant",
    "operation",
    "idempotency_key",
    "status",
    "step",
    "amount",
    "currency",
    "merchant_reference",
    "resource_id",
    "provider_reference",
    "created_at",
    "updated_at",
    "recovery_attempts",
];

/// `GET /console/records.csv?status=…&tenant=…`: the records the browser's filter selects,
/// newest first, as CSV, for any signed-in operator (the gate has checked the session).
pub async fn records_file(
    State(console): State<StoreConsole>,
    Query(filter): Query<RecordFilter>,
) -> Response {
    let query = match views::record_query(&RecordFilter {
        after: String::new(),
        ..filter
    }) {
        Ok(query) => query,
        Err(refusal) => return (StatusCode::BAD_REQUEST, format!("{refusal}\n")).into_response(),
    };
    let first = csv_lines(&[HEADER.map(str::to_owned).to_vec()]);
    let pages = futures_util::stream::unfold(Some((query, 0_usize)), move |state| {
        let console = console.clone();
        async move {
            let (query, written) = state?;
            match console.export_page(&query).await {
                Ok((lines, rows, next)) => {
                    let written = written + rows;
                    let more = next.filter(|_| written < MAX_EXPORTED_RECORDS).map(|after| {
                        (
                            RecordQuery {
                                after: Some(after),
                                ..query
                            },
                            written,
                        )
                    });
                    Some((Ok::<_, StoreError>(lines), more))
                }
                // The file is cut short: a client sees the stream fail, not a complete file.
                Err(error) => {
                    tracing::error!(%error, "records file: store failure");
                    Some((Err(error), None))
                }
            }
        }
    });
    let body = futures_util::stream::once(async move { Ok(first) }).chain(pages);
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"records.csv\"",
            ),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

impl StoreConsole {
    /// One page of a records file: its CSV lines, how many rows, and where the next starts.
    async fn export_page(
        &self,
        query: &RecordQuery,
    ) -> Result<(String, usize, Option<RecordCursor>), StoreError> {
        let rows = self.store.list_records(query, EXPORT_PAGE as i64).await?;
        let next = (rows.len() == EXPORT_PAGE)
            .then(|| rows.last())
            .flatten()
            .map(|last| RecordCursor {
                created_at: last.created_at,
                tenant_id: last.record.tenant_id.clone(),
                operation: last.record.operation.clone(),
                key: last.record.key.clone(),
            });
        let count = rows.len();
        let lines: Vec<Vec<String>> = rows
            .into_iter()
            .map(views::summary)
            .map(|row| {
                vec![
                    row.record.tenant_id,
                    row.tenant_name,
                    row.record.operation,
                    row.record.key,
                    row.status.as_str().to_owned(),
                    row.step.as_str().to_owned(),
                    row.amount.unwrap_or_default(),
                    row.currency.unwrap_or_default(),
                    row.merchant_reference.unwrap_or_default(),
                    row.resource_id.unwrap_or_default(),
                    row.provider_reference.unwrap_or_default(),
                    row.created_at,
                    row.updated_at,
                    row.recovery_attempts.to_string(),
                ]
            })
            .collect();
        Ok((csv_lines(&lines), count, next))
    }
}

/// Rows as CSV; a cell a spreadsheet would run as a formula is written with a leading
/// apostrophe (keys and references come from API clients).
pub fn csv_lines(rows: &[Vec<String>]) -> String {
    let mut csv = csv::Writer::from_writer(Vec::new());
    for row in rows {
        let safe = row.iter().map(|cell| {
            if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
                format!("'{cell}")
            } else {
                cell.clone()
            }
        });
        if let Err(error) = csv.write_record(safe) {
            tracing::error!(%error, "CSV: a row was not written");
        }
    }
    String::from_utf8_lossy(&csv.into_inner().unwrap_or_default()).into_owned()
}
