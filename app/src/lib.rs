//! Idem's operator console.
//!
//! Compiled twice: with `ssr` into the server (rendering, server functions) and with `hydrate`
//! into the browser's wasm. Nothing here may depend on sqlx or on the `server` crate: the
//! server reaches the console through the [`backend::ConsoleBackend`] port it implements.
//!
//! Each page is a folder: its view (`mod.rs`, and panels beside it), its view models
//! (`model.rs`: what the server sends it) and its server functions (`api.rs`).

pub mod admin;
pub mod audit;
#[cfg(feature = "ssr")]
pub mod auth;
#[cfg(feature = "ssr")]
pub mod backend;
pub mod dashboard;
pub mod events;
pub mod overrides;
mod prefs;
pub mod reconcile;
pub mod records;
pub mod recovery;
mod shell;
pub mod sign_in;
mod widgets;

pub use shell::{App, shell};

/// The browser's entry point: attaches the wasm app to the server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
