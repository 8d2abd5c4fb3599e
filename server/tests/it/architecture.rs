//! The layout's rules, as `docs/ARCHITECTURE.md` states them, checked against the code: the
//! domain floor depends on no web, database or UI crate; the console's browser code never on
//! sqlx; and every import between the server's top-level modules points down.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The platform this test runs on, as `rustc` names it.
fn host() -> String {
    let output = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("a host line")
        .to_owned()
}

/// `cargo metadata` of the workspace for this platform, offline (the build already fetched
/// every crate it needs).
fn metadata() -> Value {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &host()])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("metadata json")
}

/// The names of every crate `package` depends on, directly or not.
fn dependencies_of(metadata: &Value, package: &str) -> BTreeSet<String> {
    let name_of: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|package| {
            (
                package["id"].as_str().expect("id"),
                package["name"].as_str().expect("name"),
            )
        })
        .collect();
    let nodes: BTreeMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve nodes")
        .iter()
        .map(|node| {
            let dependencies = node["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|id| id.as_str().expect("id"))
                .collect();
            (node["id"].as_str().expect("id"), dependencies)
        })
        .collect();
    let root = name_of
        .iter()
        .find(|(_, name)| **name == package)
        .map(|(id, _)| *id)
        .unwrap_or_else(|| panic!("no package {package}"));
    let mut seen = BTreeSet::new();
    let mut to_visit = vec![root];
    while let Some(id) = to_visit.pop() {
        for dependency in &nodes[id] {
            if seen.insert(name_of[dependency].to_owned()) {
                to_visit.push(dependency);
            }
        }
    }
    seen
}

#[test]
fn the_domain_floor_depends_on_no_web_database_or_ui_crate() {
    let dependencies = dependencies_of(&metadata(), "idem-domain");
    let forbidden = [
        "axum",
        "hyper",
        "tower",
        "reqwest",
        "sqlx",
        "sqlx-core",
        "leptos",
        "tokio",
        "async-nats",
    ];
    let found: Vec<&str> = forbidden
        .into_iter()
        .filter(|name| dependencies.contains(*name))
        .collect();
    assert!(found.is_empty(), "the domain crate depends on {found:?}");
    assert!(dependencies.contains("sha2"), "the check reads the real graph");
}

#[test]
fn the_console_app_never_depends_on_sqlx() {
    let dependencies = dependencies_of(&metadata(), "app");
    assert!(
        !dependencies.contains("sqlx") && !dependencies.contains("sqlx-core"),
        "app depends on sqlx"
    );
    assert!(dependencies.contains("idem-domain"));
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    files
}

/// For each top-level module of the server (`store`, `engine`, `main`, …), the other
/// top-level modules its files name as `crate::module`.
fn module_imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in sources(&root) {
        let relative = file.strip_prefix(&root).expect("below src");
        let first = relative.components().next().expect("a component");
        let module = first
            .as_os_str()
            .to_str()
            .expect("utf-8")
            .trim_end_matches(".rs")
            .to_owned();
        let text = std::fs::read_to_string(&file).expect("read source");
        let named = imports.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let target = &rest[..end];
            if !target.is_empty() && target != module {
                named.insert(target.to_owned());
            }
        }
    }
    imports
}

/// The server's modules, lowest first: each may import only modules of an earlier line.
const LAYERS: &[&[&str]] = &[
    &["crash", "files", "auth", "cli", "supervisor", "bounds"],
    &["store", "provider", "telemetry"],
    &["metrics", "events", "admin"],
    &["engine"],
    &["console", "workers"],
    &["http"],
    &["application"],
    &["serve"],
    &["main", "lib"],
];

#[test]
fn every_import_between_the_servers_modules_points_down() {
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |module| (*module, layer)))
        .collect();
    let imports = module_imports();
    assert!(imports.len() >= 15, "the check reads the real tree: {imports:?}");
    let mut violations = Vec::new();
    for (module, targets) in &imports {
        let Some(&layer) = layer_of.get(module.as_str()) else {
            violations.push(format!("{module} is on no layer: add it to LAYERS"));
            continue;
        };
        for target in targets {
            match layer_of.get(target.as_str()) {
                Some(&below) if below < layer => {}
                Some(_) => violations.push(format!("{module} imports {target}, which is not below it")),
                None => violations.push(format!("{module} imports {target}, which is on no layer")),
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Where in `text` a row is read by position: `try_get(<index>)`, a tuple row
/// (`query_as::<_, (…)>`, or a binding typed as a tuple, an optional tuple or a list of tuples
/// before `query_as`), or a tuple type alias. Rows are read by name, into `FromRow` structs
/// beside their statements, so that no column order two SQL strings share can be swapped.
fn positional_rows(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let at = |what: &str| format!("line {}: {what}: {}", number + 1, code);
        if let Some(index) = code.find("try_get(")
            && code[index + "try_get(".len()..].starts_with(|c: char| c.is_ascii_digit())
        {
            found.push(at("a column read by index"));
        }
        if code.contains("query_as::<_, (") {
            found.push(at("a tuple row"));
        }
        let typed_tuple = ["<(", ": ("].iter().any(|opening| {
            code.split_once('=')
                .is_some_and(|(binding, value)| binding.contains(opening) && value.contains("query_as"))
        });
        if typed_tuple {
            found.push(at("a tuple row"));
        }
        if code.starts_with("type ") && code.contains("= (") || code.contains("type Row = (") {
            found.push(at("a tuple row alias"));
        }
    }
    found
}

#[test]
fn rows_are_read_by_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    // Files that run SQL; a tuple elsewhere (a map's key) is no row.
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).expect("read source");
        if !text.contains("sqlx::") {
            continue;
        }
        found.extend(
            positional_rows(&text)
                .into_iter()
                .map(|place| format!("{}: {place}", file.display())),
        );
    }
    assert!(found.is_empty(), "{found:#?}");
    // The check finds what it forbids.
    for positional in [
        "let status: String = row.try_get(0)?;",
        "let row: Option<(String, i64)> = sqlx::query_as(STATEMENT)",
        "let rows: Vec<(String, String)> = sqlx::query_as(D::LIVE_INSTANCES)",
        "let (a, b): (i64, i64) = sqlx::query_as(D::BACKLOG)",
        "type LookUpRow = (String, i64);",
        "let rows = sqlx::query_as::<_, (String,)>(\"select id from tenants\")",
    ] {
        assert_eq!(positional_rows(positional).len(), 1, "{positional}");
    }
    for by_name in [
        "let row: Option<LookUpRow> = sqlx::query_as(D::LOOK_UP_RECORD)",
        "let id: Option<String> = sqlx::query_scalar(\"select id from tenants\")",
        "tenant_name: row.try_get(\"tenant_name\")?,",
    ] {
        assert!(positional_rows(by_name).is_empty(), "{by_name}");
    }
}

/// The generic keyed layer knows no operation: the store's records and the engine's request
/// path name neither payments nor refunds; each operation's part sits in files of its own
/// (`store/payments/keyed.rs`, `store/refunds.rs`; `engine/payments.rs`, `engine/refunds.rs`).
#[test]
fn the_generic_keyed_layer_imports_no_operation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for generic in [
        "store/records/mod.rs",
        "store/records/claim.rs",
        "engine/keyed.rs",
        "engine/verdict.rs",
    ] {
        let text = std::fs::read_to_string(root.join(generic)).expect("read source");
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        assert!(code.len() > 100, "{generic} is read");
        for operation in [
            "payments",
            "refunds",
            "CreatePayment",
            "CreateRefund",
            "NewPayment",
            "NewRefund",
        ] {
            let naming: Vec<&&str> = code.iter().filter(|line| line.contains(operation)).collect();
            assert!(naming.is_empty(), "{generic} names {operation}: {naming:#?}");
        }
    }
}

/// The console is a feature of its own: `console::router` owns its routes, layers and
/// settings, and `http` builds the API alone; `application` puts the two on their ports.
#[test]
fn http_imports_nothing_of_the_console() {
    let imports = module_imports();
    let http = imports.get("http").expect("the http module is read");
    assert!(!http.contains("console"), "http imports {http:?}");
    assert!(
        imports["application"].contains("console") && imports["application"].contains("http"),
        "the application assembles both: {:?}",
        imports["application"]
    );
}

/// The console's app is cut by feature: every server function sits in its page's `api.rs`,
/// and every view model the server sends (a `Serialize` type) in its page's `model.rs`.
#[test]
fn the_console_app_is_organised_by_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../app/src");
    let mut server_functions = 0;
    let mut view_models = 0;
    for file in sources(&root) {
        let relative = file.strip_prefix(&root).expect("below app/src");
        let name = relative
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or_default();
        let in_a_page = relative.components().count() == 2;
        let text = std::fs::read_to_string(&file).expect("read source");
        let functions = text.matches("#[server(").count();
        let models = text.matches("Serialize, Deserialize)]").count();
        if functions > 0 {
            assert!(
                in_a_page && name == "api.rs",
                "{relative:?} declares server functions"
            );
        }
        if models > 0 {
            assert!(
                in_a_page && name == "model.rs",
                "{relative:?} declares view models"
            );
        }
        server_functions += functions;
        view_models += models;
    }
    assert!(server_functions > 20 && view_models > 40, "the app is read");
}

/// A page matches on the domain's states, never on their stored names: no console source
/// spells an operation, a record status, a progress step, a claim or an outcome as a string.
#[test]
fn the_console_app_speaks_in_domain_states_not_strings() {
    use domain::outcome::Outcome;
    use domain::record::{ClaimedAs, ProgressStep, RecordStatus};
    use domain::scope::Operation;
    use strum::VariantArray;
    let names: Vec<&'static str> = Operation::VARIANTS
        .iter()
        .map(|variant| variant.as_str())
        .chain(RecordStatus::VARIANTS.iter().map(|variant| variant.as_str()))
        .chain(ProgressStep::VARIANTS.iter().map(|variant| variant.as_str()))
        .chain(ClaimedAs::VARIANTS.iter().map(|variant| <&str>::from(*variant)))
        .chain(Outcome::VARIANTS.iter().map(|variant| variant.as_str()))
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../app/src");
    let files = sources(&root);
    assert!(files.len() > 20, "the app is read");
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        // A one-word lower-case name ("new", "replay", "takeover") is also an English word a
        // page may write; the names of more than one word are the domain's alone.
        for name in names
            .iter()
            .filter(|name| name.contains('_') || name.chars().any(char::is_uppercase))
        {
            let quoted = format!("\"{name}\"");
            assert!(!text.contains(&quoted), "{file:?} spells {quoted}");
        }
    }
}

/// A file a newcomer can read in one sitting: none in the server's or the console app's
/// sources is over 500 lines (a file that grows past it is split by what its parts do, as
/// `engine/keyed.rs` and `engine/verdict.rs` were).
#[test]
fn no_source_file_is_over_500_lines() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut read = 0;
    for dir in ["server/src", "app/src"] {
        for file in sources(&workspace.join(dir)) {
            let lines = std::fs::read_to_string(&file)
                .expect("read source")
                .lines()
                .count();
            assert!(lines <= 500, "{} has {lines} lines", file.display());
            read += 1;
        }
    }
    assert!(read > 50, "the sources are read ({read} files)");
}
