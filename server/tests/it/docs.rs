//! The documents that cite tests as proof cite tests that exist: a renamed or deleted test
//! would otherwise leave a claim that nothing checks any more.

use std::collections::BTreeMap;
use std::path::Path;

/// This suite's modules and their source.
fn test_modules() -> BTreeMap<String, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    std::fs::read_dir(&dir)
        .expect("tests/it")
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let module = path.file_stem()?.to_str()?.to_owned();
            (path.extension()? == "rs").then(|| (module, std::fs::read_to_string(&path).expect("source")))
        })
        .collect()
}

/// Every `module::name` (or `module::prefix*`, `module::*`) written in backticks in `text`.
fn cited(text: &str) -> Vec<(String, String)> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| code.split(|c: char| c.is_whitespace() || c == ','))
        .filter_map(|word| {
            let (module, name) = word.split_once("::")?;
            let name = name.trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '*'));
            let is_path = |part: &str| {
                part.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            };
            (is_path(module) && !module.is_empty()).then(|| (module.to_owned(), name.to_owned()))
        })
        .collect()
}

/// Whether `source` defines a test function `name`, or one starting with `prefix` for
/// `prefix*` (any test for `*` or a bare module filter).
fn defines(source: &str, name: &str) -> bool {
    let functions = source
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next());
    match name.strip_suffix('*') {
        Some(prefix) => functions.into_iter().any(|function| function.starts_with(prefix)),
        None if name.is_empty() => true,
        None => functions.into_iter().any(|function| function.starts_with(name)),
    }
}

#[test]
fn the_reliability_document_cites_only_tests_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let document = std::fs::read_to_string(root.join("docs/reliability.md")).expect("reliability.md");
    let modules = test_modules();
    // Paths that are not this suite's tests: the domain crate's unit tests, an attribute, the
    // suite's helpers.
    let elsewhere = ["domain", "utoipa", "support"];
    let mut missing = Vec::new();
    let citations = cited(&document);
    assert!(
        citations.len() >= 30,
        "the check reads the document: {citations:?}"
    );
    for (module, name) in citations {
        match modules.get(&module) {
            Some(source) if defines(source, &name) => {}
            Some(_) => missing.push(format!("{module}::{name}: no such test")),
            None if elsewhere.contains(&module.as_str()) => {}
            None => missing.push(format!("{module}::{name}: no such test module")),
        }
    }
    assert!(missing.is_empty(), "docs/reliability.md cites {missing:#?}");

    // Its counts of what the matrix walks are today's.
    let server_functions = crate::support::server_function_sources()
        .matches("#[server(endpoint = ")
        .count();
    let sentence = format!("each of the console's {server_functions} server functions");
    assert!(
        document.contains(&sentence),
        "docs/reliability.md should say {sentence:?}"
    );
}

#[test]
fn a_citation_of_a_test_that_does_not_exist_is_caught() {
    let modules = test_modules();
    let source = &modules["process"];
    assert!(defines(source, "sigterm_lets_an_in_flight_request_finish"));
    assert!(defines(source, "sigterm_*"));
    assert!(!defines(source, "sigterm_drops_every_request"));
    assert_eq!(
        cited("see `process::sigterm_x`, `faults::*` and `cargo test -- model::`"),
        [
            ("process".to_owned(), "sigterm_x".to_owned()),
            ("faults".to_owned(), "*".to_owned()),
            ("model".to_owned(), String::new()),
        ]
    );
}
