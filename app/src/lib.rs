//! Idem's operator console.
//!
//! Compiled twice: with `ssr` into the server (rendering, server functions) and with `hydrate`
//! into the browser's wasm. Nothing here may depend on sqlx or on the `server` crate: the
//! server reaches the console through the [`backend::ConsoleBackend`] port it implements.

pub mod api;
#[cfg(feature = "ssr")]
pub mod auth;
#[cfg(feature = "ssr")]
pub mod backend;
pub mod dto;
pub mod pages;

pub use pages::{App, shell};

/// The browser's entry point: attaches the wasm app to the server-rendered HTML.
#[cfg(feature = "hydrate")]
#[wasm_bindgen::prelude::wasm_bindgen]
pub fn hydrate() {
    console_error_panic_hook::set_once();
    leptos::mount::hydrate_body(App);
}
