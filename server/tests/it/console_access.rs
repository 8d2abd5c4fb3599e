//! Console access: deny by default, sessions in the database, roles checked on the server,
//! same-origin mutations, rate-limited and audited sign-in.

use crate::support::{
    Console, OPERATOR_PASSWORD, Serve, TestApp, TestDatabase, conformance, metric, secs, session_cookie,
};
use domain::operator::AuditEntry;
use domain::operator::OperatorRole;
use idem::auth::operator::Password;
use idem::store::operators::OperatorChange;
use std::time::Duration;

/// An audit entry as the command line writes one for `action` on an operator.
fn command_line_audit(action: &str, username: &str) -> AuditEntry {
    AuditEntry::new("cli:test", format!("operator.{action}")).on(format!("operator {username}"))
}

async fn without_a_session_nothing_but_the_sign_in_page_is_served(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.browser();
    let page = console.get("/").await;
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/sign-in?next=/");
    let deep = console.get("/records/abc").await;
    assert_eq!(deep.headers()["location"], "/sign-in?next=/records/abc");
    assert_eq!(console.call("whoami", &[]).await.status(), 401);
    assert_eq!(console.call("whoami", &[]).await.status(), 401);
    assert_eq!(console.get("/sign-in").await.status(), 200);
    assert_eq!(console.get("/pkg/idem.css").await.status(), 200);
    assert_eq!(
        console.get("/healthz").await.status(),
        200,
        "the API is not behind the console's gate"
    );
}

async fn signing_in_starts_a_strict_http_only_session_and_is_audited(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let mut console = app.console("vera", OperatorRole::Viewer).await;
    let wrong = console.post_sign_in("vera", "not the password at all").await;
    assert_eq!(wrong.headers()["location"], "/sign-in?error=invalid");
    assert!(session_cookie(&wrong).is_none());
    let unknown = console.post_sign_in("nobody", OPERATOR_PASSWORD).await;
    assert_eq!(unknown.headers()["location"], "/sign-in?error=invalid");

    let fresh = console.post_sign_in("vera", OPERATOR_PASSWORD).await;
    let set_cookie = fresh.headers()["set-cookie"].to_str().expect("ascii").to_owned();
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    console.cookie = session_cookie(&fresh);

    let page = console.get("/").await;
    assert_eq!(page.status(), 200);
    assert!(
        page.text()
            .await
            .expect("html")
            .contains(r#"data-operator="vera""#)
    );
    let whoami: serde_json::Value = console.call("whoami", &[]).await.json().await.expect("json");
    assert_eq!(whoami["username"], "vera");
    assert_eq!(whoami["role"], "viewer");

    let audit = |result: &str| {
        format!("select count(*) from audit_log where action = 'sign_in' and result = '{result}'")
    };
    assert_eq!(app.db.query_i64(&audit("ok")).await, 2);
    // Refusals are counted, and summed up once a minute per source (see
    // `refused_sign_ins_are_summed_up_once_per_source`), never written one row each.
    assert_eq!(
        app.db
            .query_i64("select count(*) from audit_log where result <> 'ok'")
            .await,
        0
    );
    let stored = app
        .db
        .query_i64("select count(*) from operator_sessions where length(id_hash) = 64")
        .await;
    assert!(stored >= 1, "sessions are kept in the database, by hash");
}

async fn state_changing_requests_must_come_from_the_console_itself(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("vera", OperatorRole::Viewer).await;
    let cookie = console.cookie.clone().expect("signed in");
    for origin in [None, Some("http://evil.example"), Some("null")] {
        let mut request = app
            .http
            .post(app.url("/api/console/whoami"))
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        assert_eq!(request.send().await.expect("POST").status(), 403, "{origin:?}");
    }
    let forged_sign_out = app
        .http
        .post(app.url("/sign-out"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("POST");
    assert_eq!(forged_sign_out.status(), 403);
    assert_eq!(console.call("whoami", &[]).await.status(), 200, "still signed in");
}

async fn signing_out_or_a_new_password_ends_the_session(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("opal", OperatorRole::Operator).await;
    let first = console.cookie.clone();
    let sign_out = app
        .http
        .post(app.url("/sign-out"))
        .header("cookie", first.clone().expect("cookie"))
        .header("origin", console.origin())
        .send()
        .await
        .expect("POST");
    assert_eq!(sign_out.headers()["location"], "/sign-in");
    assert_eq!(
        console.call("whoami", &[]).await.status(),
        401,
        "the old cookie is dead"
    );

    let console = app.console("opal", OperatorRole::Operator).await;
    assert_eq!(console.call("whoami", &[]).await.status(), 200);
    let store = app.db.store().await;
    let new_hash = Password::parse("another long password").expect("password").hash();
    let reset = OperatorChange::Password(new_hash);
    let audit = command_line_audit("reset_password", "opal");
    assert!(
        store
            .change_operator("opal", &reset, &audit)
            .await
            .expect("reset")
    );
    assert_eq!(
        console.call("whoami", &[]).await.status(),
        401,
        "a new password ends sessions"
    );
}

async fn a_new_role_or_a_disabled_account_applies_from_the_next_request(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("olga", OperatorRole::Operator).await;
    let store = app.db.store().await;
    let change = |change: OperatorChange, action: &'static str| {
        let store = store.clone();
        async move {
            store
                .change_operator("olga", &change, &command_line_audit(action, "olga"))
                .await
        }
    };
    // A preview of a record that does not exist: refused by role first, by lookup after.
    let preview = [
        ("record[tenant_id]", "ten_0"),
        ("record[operation]", "create_payment"),
        ("record[key]", "k-none"),
    ];
    assert_ne!(console.call("reconcile/preview", &preview).await.status(), 403);

    assert!(
        change(OperatorChange::Role(OperatorRole::Viewer), "set_role")
            .await
            .expect("set role")
    );
    let whoami = console.call("whoami", &[]).await;
    assert_eq!(
        whoami.json::<serde_json::Value>().await.expect("json")["role"],
        "viewer"
    );
    assert_eq!(console.call("reconcile/preview", &preview).await.status(), 403);

    assert!(change(OperatorChange::Disable, "disable").await.expect("disable"));
    assert_eq!(
        console.call("whoami", &[]).await.status(),
        401,
        "the session stops at once"
    );
    assert_eq!(console.get("/").await.status(), 303);
    let refused = console.post_sign_in("olga", OPERATOR_PASSWORD).await;
    assert_eq!(
        refused.headers()["location"],
        "/sign-in?error=invalid",
        "no new session either"
    );
    assert!(
        change(OperatorChange::Disable, "disable")
            .await
            .expect("disable twice"),
        "idempotent"
    );
    let listed = store.list_operators().await.expect("list");
    assert_eq!(
        listed
            .iter()
            .map(|operator| (operator.username.as_str(), operator.role, operator.disabled))
            .collect::<Vec<_>>(),
        [("olga", OperatorRole::Viewer, true)]
    );

    let same_words_new_hash = Password::parse(OPERATOR_PASSWORD).expect("password").hash();
    assert!(
        change(OperatorChange::Enable(same_words_new_hash), "enable")
            .await
            .expect("enable")
    );
    assert_eq!(
        console.call("whoami", &[]).await.status(),
        401,
        "a session from before the disabling stays ended"
    );
    let console = app.console("olga", OperatorRole::Viewer).await;
    assert_eq!(console.call("whoami", &[]).await.status(), 200);

    let nobody = store
        .change_operator(
            "nobody",
            &OperatorChange::Disable,
            &command_line_audit("disable", "nobody"),
        )
        .await;
    assert!(!nobody.expect("no such operator"), "nothing to change");
    assert_eq!(
        app.db
            .query_i64("select count(*) from audit_log where actor = 'cli:test'")
            .await,
        4,
        "one entry per change made, none for the operator that does not exist"
    );
}

async fn sign_in_is_rate_limited_per_source_and_username(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("rita", OperatorRole::Viewer).await;
    let refused = async || {
        let text = app.metrics().await;
        metric(
            &text,
            "console_sign_in_refusals_total",
            &[r#"reason="rate_limited""#],
        )
    };
    let refused_before = refused().await;
    let mut limited = false;
    for _ in 0..6 {
        let attempt = console.post_sign_in("rita", "wrong password, again").await;
        limited |= attempt.headers()["location"] == "/sign-in?error=limited";
    }
    assert!(limited, "six attempts in a minute are too many");
    let right = console.post_sign_in("rita", OPERATOR_PASSWORD).await;
    assert_eq!(
        right.headers()["location"],
        "/sign-in?error=limited",
        "even the right password waits"
    );
    // Counted (other tests in this process may count too: at least these two).
    assert!(refused().await - refused_before >= 2.0);
}

async fn a_session_ends_at_its_absolute_lifetime_however_much_it_is_used(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .with(Serve::SessionLifetime(secs(3)))
        .in_process()
        .await;
    let started = std::time::Instant::now();
    let console = app.console("lena", OperatorRole::Viewer).await;
    // Used again and again until it is refused: never before its lifetime has run, and the
    // refusal comes however much it was used.
    let mut uses = 0;
    let deadline = started + Duration::from_secs(30);
    while console.call("whoami", &[]).await.status() == 200 {
        uses += 1;
        assert!(std::time::Instant::now() < deadline, "the session ends");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The sign-in time is kept in whole seconds: a 3 s lifetime ends 2 to 3 s after it.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "ended after {:?}, before its lifetime",
        started.elapsed()
    );
    assert!(uses >= 2, "it was in use: {uses} calls");
    assert_eq!(
        console.call("whoami", &[]).await.status(),
        401,
        "past its lifetime"
    );
    let page = console.get("/").await;
    assert_eq!(page.status(), 303, "pages send it to sign in again");
    assert_eq!(
        app.db
            .query_i64("select count(*) from audit_log where actor = 'lena' and action = 'session_expired'")
            .await,
        1
    );
    let again = Console::signed_in(app.address, "lena", OPERATOR_PASSWORD).await;
    assert_eq!(
        again.call("whoami", &[]).await.status(),
        200,
        "a new sign-in, a new lifetime"
    );
}

async fn a_session_holds_no_password_hash(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("hugo", OperatorRole::Viewer).await;
    assert_eq!(console.call("whoami", &[]).await.status(), 200);
    let sessions = "select count(*) from operator_sessions";
    assert_eq!(app.db.query_i64(sessions).await, 1);
    let hash = app
        .db
        .query_one::<String>("select password_hash from operators where username = 'hugo'")
        .await;
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    let holding = format!(
        "select count(*) from operator_sessions where data like '%argon2%' or data like '%{}%'",
        &hash[hash.len() - 20..]
    );
    assert_eq!(
        app.db.query_i64(&holding).await,
        0,
        "not the hash, nor a part of it"
    );
}

async fn signing_in_again_as_someone_else_gets_a_new_session_id(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    app.console("bob", OperatorRole::Operator).await;
    let mut browser = app.console("ada", OperatorRole::Viewer).await;
    let before = browser.cookie.clone().expect("ada's session");
    let again = browser.post_sign_in("bob", OPERATOR_PASSWORD).await;
    assert_eq!(again.headers()["location"], "/");
    let after = session_cookie(&again).expect("a new session cookie");
    assert_ne!(after, before, "a new session id");

    browser.cookie = Some(after);
    let whoami = browser.json("whoami", &[]).await;
    assert_eq!(whoami["username"], "bob");
    browser.cookie = Some(before);
    assert_eq!(
        browser.call("whoami", &[]).await.status(),
        401,
        "the id from before the sign-in is worth nothing"
    );
}

async fn console_answers_forbid_foreign_scripts_framing_and_sniffing(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let console = app.console("cleo", OperatorRole::Viewer).await;
    for path in ["/sign-in", "/"] {
        let page = console.get(path).await;
        assert_eq!(page.status(), 200, "{path}");
        let header = |name: &str| {
            page.headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(header("x-content-type-options"), "nosniff");
        let policy = header("content-security-policy");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        let nonce = policy
            .split_once("'nonce-")
            .and_then(|(_, rest)| rest.split_once('\''))
            .expect("a script nonce")
            .0
            .to_owned();
        assert!(nonce.len() >= 16, "{nonce}");
        let html = page.text().await.expect("html");
        let scripts = html.matches("<script").count();
        let with_the_nonce = html.matches(&format!("nonce=\"{nonce}\"")).count();
        assert!(scripts >= 1, "{html}");
        assert!(
            with_the_nonce >= scripts,
            "every inline script carries the nonce: {html}"
        );
        let next = console.get(path).await;
        let next_policy = next.headers()["content-security-policy"].to_str().expect("ascii");
        assert!(!next_policy.contains(&nonce), "a new nonce per response");
    }
    let function = console.call("whoami", &[]).await;
    assert_eq!(function.headers()["x-content-type-options"], "nosniff");
    assert_eq!(
        function.headers()["content-security-policy"],
        "default-src 'none'; frame-ancestors 'none'"
    );
}

/// Whether a sign-in attempt was refused by the limits.
fn limited(attempt: &reqwest::Response) -> bool {
    attempt.headers()["location"] == "/sign-in?error=limited"
}

async fn one_source_cannot_lock_others_out_of_sign_in(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    app.console("rita", OperatorRole::Viewer).await;
    app.console("sam", OperatorRole::Viewer).await;
    let attacker = Console::from_host(app.address, [127, 0, 0, 2].into());
    let mut refused = std::collections::BTreeMap::<&str, usize>::new();
    let started = std::time::Instant::now();
    for attempt in 0..80 {
        let (kind, typed) = match attempt % 4 {
            0 => ("rita", "rita".to_owned()),
            1 => ("sam", "sam".to_owned()),
            2 => ("other names", format!("name{attempt}")),
            _ => ("not a username", "x".repeat(4_000)),
        };
        let attempt = attacker.post_sign_in(&typed, "guess").await;
        *refused.entry(kind).or_default() += usize::from(limited(&attempt));
    }
    // Of the source's first 60 tries (its budget for a minute), five of each operator's pass
    // and every other name's; the last 20 are refused whatever they name. Budgets refill as
    // time passes (the source's by one a second, an operator's by one in 12 s), so a slow
    // machine may let a few more through.
    let seconds = started.elapsed().as_secs();
    let operator_passes = 5 + (seconds / 12 + 1) as usize;
    let source_passes = 60 + (seconds + 1) as usize;
    assert!(
        refused["rita"] >= 20 - operator_passes,
        "{refused:?} in {seconds} s"
    );
    assert!(
        refused["sam"] >= 20 - operator_passes,
        "{refused:?} in {seconds} s"
    );
    assert!(
        refused.values().sum::<usize>() >= 80 - source_passes.min(80),
        "{refused:?} in {seconds} s"
    );
    assert!(refused["rita"] >= 10, "most guesses at rita refused: {refused:?}");
    // Refills only let more through, so these hold on any machine: the first five guesses at
    // rita pass, and of the source's first 60 tries only the 20 over rita's and sam's budgets
    // are refused.
    assert!(refused["rita"] <= 15, "{refused:?} in {seconds} s");
    assert!(refused["sam"] <= 15, "{refused:?} in {seconds} s");
    assert!(
        refused.values().sum::<usize>() <= 40,
        "{refused:?} in {seconds} s"
    );

    // rita and sam, from their own hosts, sign in at once.
    for (username, host) in [("rita", 1), ("sam", 3)] {
        let browser = Console::from_host(app.address, [127, 0, 0, host].into());
        let attempt = browser.post_sign_in(username, OPERATOR_PASSWORD).await;
        assert_eq!(attempt.headers()["location"], "/", "{username} signs in");
    }
    // A spoofed X-Forwarded-For buys nothing when no proxy is trusted.
    let spoofed = attacker
        .sign_in_via_proxy("rita", "guess", Some("198.51.100.77"))
        .await;
    assert!(limited(&spoofed));
}

async fn behind_a_trusted_proxy_sources_are_told_apart_by_x_forwarded_for(db: TestDatabase) {
    let app = TestApp::on_database(db)
        .with(Serve::TrustForwardedFor)
        .in_process()
        .await;
    app.console("rita", OperatorRole::Viewer).await;
    let proxy = app.browser();
    let mut refused = 0;
    for _ in 0..30 {
        let attempt = proxy
            .sign_in_via_proxy("rita", "guess", Some("203.0.113.9"))
            .await;
        refused += usize::from(limited(&attempt));
    }
    assert!(refused >= 10, "the attacking client is limited ({refused} of 30)");
    let rita = proxy
        .sign_in_via_proxy("rita", OPERATOR_PASSWORD, Some("198.51.100.1"))
        .await;
    assert_eq!(rita.headers()["location"], "/", "rita, behind the same proxy");
}

async fn a_session_started_on_one_instance_is_honoured_by_another(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let first = app.console("ada", OperatorRole::Admin).await;
    let mut on_second = Console::at(app.another_instance().await);
    on_second.cookie = first.cookie.clone();
    assert_eq!(on_second.call("whoami", &[]).await.status(), 200);
}

async fn a_crafted_page_cursor_is_a_clear_bad_request(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let viewer = app.console("vera", OperatorRole::Viewer).await;
    let filter = |after: &'static str| {
        [
            "status",
            "step",
            "tenant",
            "operation",
            "key_prefix",
            "from",
            "to",
        ]
        .map(|field| (field, ""))
        .into_iter()
        .chain([("after", after)])
        .map(|(field, value)| (format!("filter[{field}]"), value))
        .collect::<Vec<_>>()
    };
    let call = async |after| {
        let form = filter(after);
        let form: Vec<(&str, &str)> = form
            .iter()
            .map(|(field, value)| (field.as_str(), *value))
            .collect();
        viewer.call("records", &form).await
    };
    assert_eq!(call("").await.status(), 200, "the first page");
    for crafted in [
        r#"["not a time", "ten_1", "create_payment", "k"]"#,
        r#"["2026-11-30T00:00:00Z'; drop table payments; --", "t", "o", "k"]"#,
        "[1]",
        "not json",
    ] {
        let refused = call(crafted).await;
        assert_eq!(refused.status(), 400, "{crafted}");
        let text = refused.text().await.expect("text");
        assert!(text.contains("not a page cursor"), "{crafted}: {text}");
    }
}

async fn refused_sign_ins_write_no_row_each(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    app.console("rita", OperatorRole::Viewer).await;
    let rows = "select count(*) from audit_log";
    let before = app.db.query_i64(rows).await;
    let flood = Console::from_host(app.address, [127, 0, 0, 9].into());
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    for attempt in 0..200 {
        let typed = if attempt % 2 == 0 {
            "rita"
        } else {
            "hunter2 hunter2"
        };
        let answer = flood.post_sign_in(typed, "guess").await;
        let location = answer.headers()["location"].to_str().expect("ascii").to_owned();
        *answers.entry(location).or_default() += 1;
    }
    assert_eq!(answers.values().sum::<usize>(), 200);
    assert!(
        answers.keys().all(|to| to.starts_with("/sign-in?error=")),
        "{answers:?}"
    );
    assert_eq!(
        app.db.query_i64(rows).await,
        before,
        "nothing written: {answers:?}"
    );
}

/// `admin` disables `username` from the console/// `admin` disables `username` from the console: what it says, or why it was refused.
async fn disable(admin: &Console, username: &str) -> Result<serde_json::Value, String> {
    let change = serde_json::json!({ "change": { "DisableOperator": { "username": username } } });
    admin.post_json("admin/change", &change).await
}

async fn two_admins_who_disable_each_other_at_once_leave_one(db: TestDatabase) {
    let app = TestApp::on_database(db).in_process().await;
    let enabled_admins = "select count(*) from operators where role = 'admin' and disabled_at is null";
    // In the store, one after the other: the second change would leave nobody.
    let store = app.db.store().await;
    for (username, role) in [("ann", OperatorRole::Admin), ("ben", OperatorRole::Admin)] {
        crate::support::create_operator(store.as_ref(), username, role)
            .await
            .expect("created");
    }
    let audit = |username: &str| command_line_audit("disable", username);
    assert!(
        store
            .change_operator("ben", &OperatorChange::Disable, &audit("ben"))
            .await
            .expect("ben")
    );
    let last = store
        .change_operator("ann", &OperatorChange::Disable, &audit("ann"))
        .await;
    assert!(
        matches!(last, Err(idem::store::StoreError::LastAdmin)),
        "{last:?}"
    );
    let demoted = store
        .change_operator(
            "ann",
            &OperatorChange::Role(OperatorRole::Operator),
            &audit("ann"),
        )
        .await;
    assert!(
        matches!(demoted, Err(idem::store::StoreError::LastAdmin)),
        "{demoted:?}"
    );
    assert_eq!(app.db.query_i64(enabled_admins).await, 1);
    store.close().await;

    // From the console, at the same moment, round after round: one change wins, the other is
    // refused (or finds its admin already signed out), and an admin always remains.
    let mut survivor = app.console("ann", OperatorRole::Admin).await;
    for round in 0..6 {
        let (left, right) = (format!("left{round}"), format!("right{round}"));
        let left_admin = app.console(&left, OperatorRole::Admin).await;
        let right_admin = app.console(&right, OperatorRole::Admin).await;
        disable(&left_admin, "ann").await.ok();
        if round > 0 {
            disable(&left_admin, &format!("left{}", round - 1)).await.ok();
            disable(&left_admin, &format!("right{}", round - 1)).await.ok();
        }
        assert_eq!(
            app.db.query_i64(enabled_admins).await,
            2,
            "round {round} starts with two"
        );
        let (first, second) = tokio::join!(disable(&left_admin, &right), disable(&right_admin, &left));
        assert_eq!(
            app.db.query_i64(enabled_admins).await,
            1,
            "round {round}: {first:?} / {second:?}"
        );
        let refused = [&first, &second]
            .into_iter()
            .filter_map(|outcome| outcome.as_ref().err());
        for refusal in refused {
            assert!(
                refusal.contains("last enabled admin")
                    || refusal.contains("401")
                    || refusal.contains("sign in"),
                "round {round}: {refusal}"
            );
        }
        survivor = if first.is_ok() { left_admin } else { right_admin };
    }
    assert_eq!(survivor.call("whoami", &[]).await.status(), 200);
}

conformance!(
    without_a_session_nothing_but_the_sign_in_page_is_served,
    signing_in_starts_a_strict_http_only_session_and_is_audited,
    state_changing_requests_must_come_from_the_console_itself,
    signing_out_or_a_new_password_ends_the_session,
    a_new_role_or_a_disabled_account_applies_from_the_next_request,
    sign_in_is_rate_limited_per_source_and_username,
    a_session_ends_at_its_absolute_lifetime_however_much_it_is_used,
    a_session_holds_no_password_hash,
    signing_in_again_as_someone_else_gets_a_new_session_id,
    console_answers_forbid_foreign_scripts_framing_and_sniffing,
    one_source_cannot_lock_others_out_of_sign_in,
    behind_a_trusted_proxy_sources_are_told_apart_by_x_forwarded_for,
    a_session_started_on_one_instance_is_honoured_by_another,
    a_crafted_page_cursor_is_a_clear_bad_request,
    two_admins_who_disable_each_other_at_once_leave_one,
    refused_sign_ins_write_no_row_each
);

async fn expired_sessions_are_refused_and_then_deleted(db: TestDatabase) {
    let store = db.migrated_store().await;
    let hour = chrono::Duration::hours(1);
    store
        .save_session("stale", "{}", chrono::Utc::now() - hour)
        .await
        .expect("save");
    store
        .save_session("live", "{}", chrono::Utc::now() + hour)
        .await
        .expect("save");
    assert!(
        store.load_session("stale").await.expect("load").is_none(),
        "an expired session is refused"
    );
    assert_eq!(store.delete_expired_sessions(10).await.expect("delete"), 1);
    assert!(store.load_session("live").await.expect("load").is_some());
    assert_eq!(db.query_i64("select count(*) from operator_sessions").await, 1);
}

conformance!(expired_sessions_are_refused_and_then_deleted);

/// The audit log's summary of refused sign-ins, written when the instance stops (and once a
/// minute while it runs): one entry per source, whatever the flood.
async fn refused_sign_ins_are_summed_up_once_per_source(db: TestDatabase) {
    let mut app = TestApp::on_database(db).process().await;
    app.console("rita", OperatorRole::Viewer).await;
    let per_source = 100;
    for host in 2..5 {
        let source = Console::from_host(app.address, [127, 0, 0, host].into());
        for attempt in 0..per_source {
            let typed = if attempt % 2 == 0 {
                "rita"
            } else {
                "hunter2 hunter2"
            };
            source.post_sign_in(typed, "guess").await;
        }
    }
    let text = app.metrics().await;
    let counted: f64 = ["rate_limited", "busy", "wrong_password"]
        .iter()
        .map(|reason| {
            metric(
                &text,
                "console_sign_in_refusals_total",
                &[&format!("reason=\"{reason}\"")],
            )
        })
        .sum();
    assert_eq!(counted, f64::from(3 * per_source), "every refusal counted");
    let refused_rows = "select count(*) from audit_log where result <> 'ok'";
    assert_eq!(
        app.db.query_i64(refused_rows).await,
        0,
        "nothing written per refusal"
    );

    app.server().signal("TERM");
    assert!(app.server().ended().await.success());
    assert_eq!(app.db.query_i64(refused_rows).await, 3, "one summary per source");
    for host in 2..5 {
        let details = app
            .db
            .query_one::<String>(&format!(
                "select details from audit_log where action = 'sign_in.refused' \
                 and actor = 'anonymous' and target = 'source 127.0.0.{host}'"
            ))
            .await;
        let counts: u32 = details
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|number| number.parse::<u32>().ok())
            .take(3)
            .sum();
        assert_eq!(counts, per_source, "{details}");
        assert!(
            details.ends_with("names tried: rita"),
            "typed passwords never kept: {details}"
        );
    }
}

conformance!(refused_sign_ins_are_summed_up_once_per_source);
