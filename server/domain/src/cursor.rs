//! The console's page cursors: where a page continues, as the text a link carries back. The
//! server makes a cursor from a row it showed; what comes back is parsed, never trusted, and
//! anything that is not a cursor is [`NotAPageCursor`].

use chrono::{DateTime, Datelike, SecondsFormat, Utc};

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a page cursor")]
pub struct NotAPageCursor;

/// Where a page of the records browser continues: strictly after this record, in the
/// browser's order (newest first, ties broken by the scoped key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordCursor {
    pub created_at: DateTime<Utc>,
    pub tenant_id: String,
    pub operation: String,
    pub key: String,
}

impl RecordCursor {
    /// `["<created at, RFC 3339>", tenant, operation, key]`.
    pub fn parse(text: &str) -> Result<RecordCursor, NotAPageCursor> {
        let [created_at, tenant_id, operation, key]: [String; 4] =
            serde_json::from_str(text).map_err(|_| NotAPageCursor)?;
        Ok(RecordCursor {
            created_at: time(&created_at)?,
            tenant_id,
            operation,
            key,
        })
    }

    pub fn to_text(&self) -> String {
        // Microseconds: PostgreSQL keeps them, and a cursor rounded down would skip rows.
        let created_at = self.created_at.to_rfc3339_opts(SecondsFormat::Micros, true);
        serde_json::json!([created_at, self.tenant_id, self.operation, self.key]).to_string()
    }
}

/// Where a page of the audit log continues: strictly before this entry (newest first, ties
/// broken by id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCursor {
    pub at: DateTime<Utc>,
    pub id: String,
}

impl AuditCursor {
    /// `["<at, RFC 3339>", id]`.
    pub fn parse(text: &str) -> Result<AuditCursor, NotAPageCursor> {
        let [at, id]: [String; 2] = serde_json::from_str(text).map_err(|_| NotAPageCursor)?;
        Ok(AuditCursor { at: time(&at)?, id })
    }

    /// The cursor after an entry shown with its time as RFC 3339 text and its id.
    pub fn text_after(at: &str, id: &str) -> String {
        serde_json::json!([at, id]).to_string()
    }
}

/// A cursor's time is a row's, which the server wrote: a four-digit year once in UTC (an
/// offset could carry "0000-01-01T00:00:00+01:00" into year -1), so that it is written back
/// exactly as it was read.
fn time(text: &str) -> Result<DateTime<Utc>, NotAPageCursor> {
    let at = DateTime::parse_from_rfc3339(text)
        .map_err(|_| NotAPageCursor)?
        .with_timezone(&Utc);
    if !(0..=9999).contains(&at.year()) {
        return Err(NotAPageCursor);
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_record_cursor_reads_back_what_it_wrote_to_the_microsecond() {
        let cursor = RecordCursor {
            created_at: Utc
                .timestamp_opt(1_780_000_000, 123_456_000)
                .single()
                .expect("a time"),
            tenant_id: "ten_1".into(),
            operation: "create_payment".into(),
            key: "k \"quoted\" ✓".into(),
        };
        assert_eq!(RecordCursor::parse(&cursor.to_text()), Ok(cursor));
    }

    #[test]
    fn an_audit_cursor_reads_back_the_entry_it_follows() {
        let text = AuditCursor::text_after("2026-11-30T10:00:00.123Z", "aud_1");
        let cursor = AuditCursor::parse(&text).expect("a cursor");
        assert_eq!(cursor.id, "aud_1");
        assert_eq!(cursor.at.timestamp_subsec_millis(), 123);
    }

    #[test]
    fn anything_else_is_not_a_page_cursor() {
        for text in [
            "",
            "[]",
            "{}",
            "[\"x\",\"a\",\"b\",\"c\"]",
            "[1,2,3,4]",
            "[\"2026-11-30T10:00:00Z\",\"a\"]",
            "[\"0000-01-01T00:00:00+01:00\",\"a\",\"b\",\"c\"]",
        ] {
            assert_eq!(RecordCursor::parse(text), Err(NotAPageCursor), "{text}");
        }
        for text in [
            "",
            "[\"2026-11-30T10:00:00Z\"]",
            "[\"yesterday\",\"aud_1\"]",
            "null",
        ] {
            assert_eq!(AuditCursor::parse(text), Err(NotAPageCursor), "{text}");
        }
    }
}
