//! Who is calling: tenants and their API keys (the payments API), operators (the console).

pub mod api_key;
pub mod operator;
pub mod source;
