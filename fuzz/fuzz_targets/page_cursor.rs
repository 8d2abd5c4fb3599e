//! The console's page cursors (the records browser's `after`, the audit log's `before`): any
//! text is a cursor or `NotAPageCursor`, never a panic; a record cursor the server writes reads
//! back to itself.
#![no_main]

use domain::cursor::{AuditCursor, RecordCursor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(cursor) = RecordCursor::parse(text) {
        let written = cursor.to_text();
        let again = RecordCursor::parse(&written).expect("a written cursor parses");
        assert_eq!(again.tenant_id, cursor.tenant_id);
        assert_eq!(again.operation, cursor.operation);
        assert_eq!(again.key, cursor.key);
        // Written to the microsecond: what it kept of the time is exact.
        assert_eq!(again.created_at.timestamp(), cursor.created_at.timestamp());
        assert_eq!(
            again.created_at.timestamp_subsec_micros(),
            cursor.created_at.timestamp_subsec_micros()
        );
        assert_eq!(RecordCursor::parse(&again.to_text()), Ok(again));
    }
    let _ = AuditCursor::parse(text);
});
