//! Records: the browser (look-up and filtered list) and one record's page.

pub mod api;
mod late_charge;
mod list;
pub mod model;
mod panels;
mod record;

pub use list::{RecordTable, RecordsPage};
pub use record::RecordPage;
