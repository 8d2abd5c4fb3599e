//! The incident day against a real `idem serve` and `idem provider-sim`: the provider's faults
//! leave unknown outcomes, which the recovery queue filters, orders, pages and counts on the
//! server, and which a named bulk job clears by filter against the provider's evidence,
//! group by group, with every item applied and audited or untouched and reported.

use crate::support::{
    Console, Serve, TestApp, TestDatabase, audited_for, conformance, eventually, keys_of, ms,
};
use domain::operator::OperatorRole;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// A real `idem serve` whose recovery worker leaves unknown outcomes to operators, with a short
/// provider timeout, its simulator and a tenant holding 10,000.00 on acc_1.
async fn outage(db: TestDatabase) -> TestApp {
    TestApp::on_database(db)
        .tenant("acme", "10000.00")
        .recovering()
        .with(Serve::RecoveryMaxAttempts(0))
        .with(Serve::ProviderTimeout(ms(500)))
        .process()
        .await
}

fn body(key: &str, amount: &str) -> String {
    format!(r#"{{"accountId":"acc_1","amount":"{amount}","currency":"EUR","merchantReference":"inv-{key}"}}"#)
}

/// Pays under each key with the simulator's fault `mode` on each charge; every answer is 202
/// (outcome unknown). The payments' ids.
async fn unknown_payments(app: &TestApp, mode: &str, keys: &[&str], amount: &str) -> Vec<String> {
    app.sim.fault(&json!({ "mode": mode, "count": keys.len() })).await;
    let mut ids = Vec::new();
    for key in keys {
        let answer = app.pay(key, body(key, amount)).await;
        assert_eq!(answer.status(), 202, "{key}");
        let answer: Value = answer.json().await.expect("json");
        ids.push(answer["paymentId"].as_str().expect("payment id").to_owned());
    }
    ids
}

async fn queue(console: &Console, query: Value) -> Result<Value, String> {
    console
        .post_json("recovery-queue", &json!({ "query": query }))
        .await
}

async fn the_recovery_queue_filters_orders_pages_and_counts_on_the_server(db: TestDatabase) {
    let app = outage(db).await;
    let paged: Vec<String> = (0..52).map(|n| format!("k-p{n:02}")).collect();
    let paged: Vec<&str> = paged.iter().map(String::as_str).collect();
    unknown_payments(&app, "error_after_accept", &paged, "10.00").await;
    unknown_payments(&app, "error_after_accept", &["k-big"], "30.00").await;
    unknown_payments(&app, "drop_response_after_accept", &["k-slow"], "20.00").await;
    assert_eq!(app.pay("k-ok", body("k-ok", "10.00")).await.status(), 201);
    let viewer = app.console("vera", OperatorRole::Viewer).await;
    let operator = app.console("otto", OperatorRole::Operator).await;

    // Fifty a page, the total beside it, and every record once over the pages.
    let first = queue(&viewer, json!({})).await.expect("first page");
    assert_eq!(first["total"], 54, "{first}");
    assert_eq!(keys_of(&first).len(), 50);
    let next = first["next"].as_str().expect("a next page").to_owned();
    let second = queue(&viewer, json!({ "after": next }))
        .await
        .expect("second page");
    assert_eq!(second["total"], 54);
    assert!(second["next"].is_null(), "{second}");
    let mut all: Vec<String> = keys_of(&first);
    all.extend(keys_of(&second));
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(
        (all.len(), distinct.len()),
        (54, 54),
        "no row twice, none skipped"
    );
    assert_eq!(all[0], "k-p00", "oldest first");
    assert!(
        !all.contains(&"k-ok".to_owned()),
        "a completed payment needs nobody"
    );

    // What an operator decides by, on each row.
    let row = &first["rows"][0];
    assert_eq!(row["tenant_name"], "acme", "{row}");
    assert_eq!(
        (row["amount"].as_str(), row["currency"].as_str()),
        (Some("10.00"), Some("EUR"))
    );
    assert_eq!(row["merchant_reference"], "inv-k-p00");
    assert_eq!(row["unknown_cause"], "ErrorAnswer");
    assert!(
        row["last_error"]
            .as_str()
            .is_some_and(|error| error.starts_with("charge request, after ") && error.contains("500")),
        "{row}"
    );
    assert!(row["last_error_at"].is_string());
    assert!(
        row["next_look"]["GaveUp"].is_string(),
        "the worker is told to leave it: {row}"
    );
    assert!(row["evidence"].is_null(), "nobody asked the provider yet");

    // Filters, each done by the server.
    let only = |page: &Value| (page["total"].as_u64(), keys_of(page));
    let slow = queue(&viewer, json!({ "cause": "timed_out" }))
        .await
        .expect("cause");
    assert_eq!(only(&slow), (Some(1), vec!["k-slow".to_owned()]));
    let range = json!({ "currency": "EUR", "min_amount": "15", "max_amount": "35.00", "order": "largest" });
    let range = queue(&viewer, range).await.expect("amounts");
    assert_eq!(
        only(&range),
        (Some(2), vec!["k-big".to_owned(), "k-slow".to_owned()])
    );
    let found = queue(&viewer, json!({ "search": "inv-k-p07" }))
        .await
        .expect("reference");
    assert_eq!(only(&found), (Some(1), vec!["k-p07".to_owned()]));
    let tenant = queue(
        &viewer,
        json!({ "tenant": "acme", "attention": "needs_operator" }),
    )
    .await;
    assert_eq!(tenant.expect("tenant")["total"], 54);
    for nobody in [
        json!({ "tenant": "nobody" }),
        json!({ "attention": "worker_retrying" }),
        json!({ "operation": "create_refund" }),
        json!({ "min_age_minutes": "60" }),
    ] {
        assert_eq!(
            queue(&viewer, nobody.clone()).await.expect("filter")["total"],
            0,
            "{nobody}"
        );
    }
    // Records by what operators know: a merchant reference finds its record, and the records
    // browser filters by the tenant's name and shows amounts and references.
    let found = viewer.json("find", &[("needle", "inv-k-p07")]).await;
    assert_eq!(found[0]["record"]["key"], "k-p07", "{found}");
    assert_eq!(
        (
            found[0]["tenant_name"].as_str(),
            found[0]["amount"].as_str(),
            found[0]["merchant_reference"].as_str()
        ),
        (Some("acme"), Some("10.00"), Some("inv-k-p07"))
    );
    let filter = |tenant: &'static str| {
        [
            ("filter[status]", ""),
            ("filter[step]", ""),
            ("filter[tenant]", tenant),
            ("filter[operation]", ""),
            ("filter[key_prefix]", "k-big"),
            ("filter[from]", ""),
            ("filter[to]", ""),
            ("filter[after]", ""),
        ]
    };
    let records = viewer.json("records", &filter("acme")).await;
    assert_eq!(records["rows"][0]["record"]["key"], "k-big", "{records}");
    assert_eq!(records["rows"][0]["amount"], "30.00");
    let records = viewer.json("records", &filter("nobody")).await;
    assert_eq!(records["rows"].as_array().map(Vec::len), Some(0), "{records}");
    // The same filter as a file, for every matching record.
    let file = viewer
        .get("/console/records.csv?tenant=acme&key_prefix=k-p")
        .await;
    assert_eq!(file.status(), 200);
    let csv = file.text().await.expect("csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 53, "a header and the 52 paged records: {csv}");
    assert!(lines[0].starts_with("tenant_id,tenant,operation,idempotency_key,status"));
    assert!(
        lines.iter().any(
            |line| line.contains(",acme,create_payment,k-p07,UNKNOWN_REQUIRES_RECOVERY,")
                && line.contains(",10.00,EUR,inv-k-p07,")
        ),
        "{csv}"
    );
    let refused = viewer.get("/console/records.csv?status=DONE").await;
    assert_eq!(refused.status(), 400, "a malformed filter is refused");
    let nobody = app.browser().get("/console/records.csv").await;
    assert_eq!(nobody.status(), 303, "the records file needs a session");
    let newest = queue(&viewer, json!({ "order": "newest" }))
        .await
        .expect("newest");
    assert_eq!(keys_of(&newest)[0], "k-slow");

    // A malformed filter is refused, naming its field, and reads nothing.
    for (query, field) in [
        (json!({ "min_amount": "10" }), "currency"),
        (json!({ "cause": "gremlins" }), "cause"),
        (json!({ "after": "not a cursor" }), "after"),
        (json!({ "order": "random" }), "order"),
    ] {
        let refused = queue(&viewer, query).await.expect_err(field);
        assert!(refused.contains(&format!("`{field}`")), "{refused}");
    }

    // The provider's evidence, once an operator asked, is on the row and filters it.
    let tenant_id = viewer.tenant_of("k-big").await;
    let preview = operator
        .json(
            "reconcile/preview",
            &[
                ("record[tenant_id]", tenant_id.as_str()),
                ("record[operation]", "create_payment"),
                ("record[key]", "k-big"),
            ],
        )
        .await;
    assert!(preview["evidence"]["Charged"].is_object(), "{preview}");
    let said = queue(&viewer, json!({ "evidence": "succeeded" }))
        .await
        .expect("evidence");
    assert_eq!(only(&said), (Some(1), vec!["k-big".to_owned()]));
    assert!(said["rows"][0]["evidence"][0]["Charged"].is_object(), "{said}");
    let unasked = queue(&viewer, json!({ "evidence": "not_asked" }))
        .await
        .expect("not asked");
    assert_eq!(unasked["total"], 53);

    // The record page says why, and that the worker gave up, instead of a past next look.
    let detail = viewer
        .json(
            "record",
            &[
                ("record[tenant_id]", tenant_id.as_str()),
                ("record[operation]", "create_payment"),
                ("record[key]", "k-slow"),
            ],
        )
        .await;
    assert_eq!(detail["unknown_cause"], "TimedOut", "{detail}");
    assert!(
        detail["last_error"]
            .as_str()
            .is_some_and(|error| error.contains("timed out"))
    );
    assert!(detail["next_look"]["GaveUp"].is_string(), "{detail}");
    // Its timeline: claimed, then the charge request that timed out, with how long it took.
    let timeline = detail["timeline"].as_array().expect("timeline");
    // (The journal's entries are written in batches, at times that may tie with a step's.)
    let record_kinds: Vec<&Value> = timeline
        .iter()
        .filter(|entry| entry["kind"] != "Request")
        .collect();
    let kinds: Vec<&str> = record_kinds
        .iter()
        .filter_map(|entry| entry["kind"].as_str())
        .collect();
    assert_eq!(kinds[..2], ["Step", "ProviderFailure"], "{detail}");
    let failure = record_kinds[1]["text"].as_str().expect("text");
    assert!(
        failure.starts_with("UNKNOWN_REQUIRES_RECOVERY")
            && failure.contains("charge request, after 0.5")
            && failure.contains("timed out"),
        "{failure}"
    );
    // A previewed record's timeline has what the provider said.
    let previewed = viewer
        .json(
            "record",
            &[
                ("record[tenant_id]", tenant_id.as_str()),
                ("record[operation]", "create_payment"),
                ("record[key]", "k-big"),
            ],
        )
        .await;
    let said = previewed["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .find(|entry| entry["kind"] == "Evidence")
        .unwrap_or_else(|| panic!("no evidence in {previewed}"));
    assert!(
        said["text"]
            .as_str()
            .is_some_and(|text| text.contains("succeeded")),
        "{said}"
    );
}

/// Waits until at least `wanted` of a running bulk job's items are done; how many are.
async fn items_done_at_least(console: &Console, id: &str, wanted: u64) -> u64 {
    eventually(
        &format!("{wanted} items of bulk job {id} done"),
        || async { console.json("bulk/job", &[("id", id)]).await["done"].as_u64() },
        |done| done.is_some_and(|done| done >= wanted),
    )
    .await
    .unwrap_or_default()
}

/// Waits until a bulk job is in `state`; the job.
async fn job_in_state(console: &Console, id: &str, state: &str) -> Value {
    eventually(
        &format!("bulk job {id} {state}"),
        || async { console.json("bulk/job", &[("id", id)]).await },
        |job| job["state"] == state,
    )
    .await
}

/// `count` payments keyed `{prefix}00`, `{prefix}01`, … left unknown, selected and
/// previewed, and a resend of them all applied (`ticket` in its reason) while every charge
/// takes the provider `delay_ms`: the console that applied it, and the job's id.
async fn resend_under_way(
    app: &TestApp,
    prefix: &str,
    count: usize,
    delay_ms: u64,
    ticket: &str,
) -> (Console, String) {
    let keys: Vec<String> = (0..count).map(|n| format!("{prefix}{n:02}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    unknown_payments(app, "fail_before_accept", &keys, "10.00").await;
    let operator = app.console("otto", OperatorRole::Operator).await;
    let id = select(&operator, json!({})).await;
    job_in_state(&operator, &id, "Previewed").await;
    app.sim
        .fault(&json!({ "mode": "latency", "rate": 1.0, "delayMs": delay_ms }))
        .await;
    let resend = json!({
        "id": id,
        "name": format!("resend ({ticket})"),
        "reason": format!("the provider has no charge for them ({ticket})"),
        "choices": [{ "operation": "create_payment", "evidence": "NoCharge", "action": "RetryCharge" }],
    });
    operator.post_json("bulk/apply", &resend).await.expect("applied");
    (operator, id)
}

/// How many times a retried charge of `key` was applied and audited.
async fn charges_retried(app: &TestApp, tenant_id: &str, key: &str) -> i64 {
    app.db
        .query_i64(&format!(
            "select count(*) from audit_log where action = 'reconcile.retry_charge' and result = 'ok' \
             and target = '{tenant_id}/create_payment/{key}'"
        ))
        .await
}

/// A job's group by operation and evidence.
fn group<'a>(job: &'a Value, evidence: &str) -> &'a Value {
    job["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|group| group["operation"] == "create_payment" && group["evidence"] == evidence)
        .unwrap_or_else(|| panic!("no {evidence} group in {job}"))
}

async fn select(console: &Console, query: Value) -> String {
    let job = console
        .post_json("bulk/select", &json!({ "selection": { "Matching": query } }))
        .await
        .expect("selected");
    assert_eq!(job["state"], "Previewing", "{job}");
    job["id"].as_str().expect("id").to_owned()
}

async fn status_count(app: &TestApp, status: &str, keys: &str) -> i64 {
    app.db
        .query_i64(&format!(
            "select count(*) from idempotency_records where status = '{status}' and idempotency_key like '{keys}'"
        ))
        .await
}

async fn an_outage_is_cleared_by_filter_as_a_named_job_group_by_group(db: TestDatabase) {
    let app = outage(db).await;
    // The provider took four charges and lost their answers, refused three before taking
    // them, and took one whose look-ups now fail.
    unknown_payments(
        &app,
        "error_after_accept",
        &["k-c1", "k-c2", "k-c3", "k-c4"],
        "10.00",
    )
    .await;
    unknown_payments(&app, "fail_before_accept", &["k-n1", "k-n2", "k-n3"], "10.00").await;
    let unreachable = unknown_payments(&app, "error_after_accept", &["k-u1"], "10.00").await;
    app.sim
        .fault(&json!({ "mode": "lookups_unavailable", "reference": unreachable[0], "rate": 1.0 }))
        .await;
    let operator = app.console("otto", OperatorRole::Operator).await;
    let viewer = app.console("vera", OperatorRole::Viewer).await;

    // Every record matching, frozen on the server and previewed in groups.
    let id = select(&operator, json!({})).await;
    let job = job_in_state(&viewer, &id, "Previewed").await;
    assert_eq!(
        (job["items"].as_u64(), job["previewed"].as_u64()),
        (Some(8), Some(8)),
        "{job}"
    );
    let succeeded = group(&job, "Succeeded");
    assert_eq!(
        (succeeded["items"].as_u64(), &succeeded["action"]),
        (Some(4), &json!("ApplyProviderResult"))
    );
    let no_charge = group(&job, "NoCharge");
    assert_eq!(no_charge["items"], 3);
    assert_eq!(
        no_charge["offered"],
        json!(["RetryCharge", "MarkFailedAndReleaseKey"])
    );
    let skipped = group(&job, "Unreachable");
    assert_eq!(
        (skipped["items"].as_u64(), skipped["action"].is_null()),
        (Some(1), true)
    );
    let queue_said = queue(&viewer, json!({ "evidence": "no_charge" }))
        .await
        .expect("queue");
    assert_eq!(queue_said["total"], 3, "the preview's evidence is the queue's");

    // An action the evidence does not allow is refused; nothing starts.
    let mut apply = json!({
        "id": id,
        "name": "provider outage 3 Dec",
        "reason": "provider statement for the outage (OPS-77)",
        "choices": [
            { "operation": "create_payment", "evidence": "Succeeded", "action": "MarkFailedAndReleaseKey" },
        ],
    });
    let refused = operator
        .post_json("bulk/apply", &apply)
        .await
        .expect_err("not offered");
    assert!(refused.contains("is not offered"), "{refused}");
    // The charged ones applied; the ones without a charge left out for now.
    apply["choices"] = json!([
        { "operation": "create_payment", "evidence": "Succeeded", "action": "ApplyProviderResult" },
        { "operation": "create_payment", "evidence": "NoCharge", "action": null },
    ]);
    operator.post_json("bulk/apply", &apply).await.expect("applied");
    let job = job_in_state(&viewer, &id, "Finished").await;
    assert_eq!(
        (job["included"].as_u64(), job["done"].as_u64(), job["ok"].as_u64()),
        (Some(4), Some(4), Some(4)),
        "{job}"
    );
    assert_eq!(job["name"], "provider outage 3 Dec");
    assert_eq!(job["applied_by"], "otto");
    assert_eq!(status_count(&app, "COMPLETED", "k-c%").await, 4);
    // A settled record's timeline: the request sent, the failure, the operator's preview and
    // apply, the provider's answer that settled it.
    let tenant_id = viewer.tenant_of("k-c1").await;
    let detail = viewer
        .json(
            "record",
            &[
                ("record[tenant_id]", tenant_id.as_str()),
                ("record[operation]", "create_payment"),
                ("record[key]", "k-c1"),
            ],
        )
        .await;
    let timeline = detail["timeline"].as_array().expect("timeline");
    let of_kind = |kind: &str| {
        timeline
            .iter()
            .filter(|entry| entry["kind"] == kind)
            .filter_map(|entry| entry["text"].as_str())
            .collect::<Vec<_>>()
    };
    assert!(of_kind("Step")[0].contains("PROVIDER_REQUEST_SENT"), "{detail}");
    assert_eq!(of_kind("ProviderFailure").len(), 1, "{detail}");
    let answered = of_kind("ProviderAnswer");
    assert!(
        answered.len() == 1
            && answered[0].starts_with("COMPLETED")
            && answered[0].contains("answered with ch_"),
        "{detail}"
    );
    assert!(of_kind("Evidence")[0].contains("succeeded"), "{detail}");
    assert!(
        of_kind("Operator")
            .iter()
            .any(|text| text.contains("reconcile.apply_provider_result, ok") && text.contains("OPS-77")),
        "{detail}"
    );
    assert_eq!(
        status_count(&app, "UNKNOWN_REQUIRES_RECOVERY", "k-n%").await,
        3,
        "left out"
    );
    assert_eq!(
        status_count(&app, "UNKNOWN_REQUIRES_RECOVERY", "k-u%").await,
        1,
        "skipped"
    );
    app.db
        .expect_i64(
            &audited_for("reconcile.apply_provider_result", "otto", "ok", "OPS-77"),
            4,
            "one audit entry per item applied",
        )
        .await;

    // The results, every item, as a file.
    let file = operator
        .get(&format!("/console/bulk-jobs/{id}/results.csv"))
        .await;
    assert_eq!(file.status(), 200);
    assert!(
        file.headers()["content-type"]
            .to_str()
            .is_ok_and(|kind| kind.starts_with("text/csv"))
    );
    let csv = file.text().await.expect("csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 9, "a header and eight items: {csv}");
    let line = |key: &str| {
        lines
            .iter()
            .find(|line| line.contains(&format!(",{key},")))
            .map(|line| (*line).to_owned())
            .unwrap_or_default()
    };
    assert!(
        line("k-c1").contains(",apply_provider_result,applied,COMPLETED,"),
        "{csv}"
    );
    assert!(line("k-n1").contains(",left out,"), "{csv}");
    assert!(line("k-u1").contains(",nothing to apply,"), "{csv}");
    let nobody = app
        .browser()
        .get(&format!("/console/bulk-jobs/{id}/results.csv"))
        .await;
    assert_eq!(nobody.status(), 303, "the results need a session");
    assert!(
        nobody.headers()["location"]
            .to_str()
            .is_ok_and(|to| to.starts_with("/sign-in"))
    );

    // A second job for the records without a charge, aborted before it is applied: nothing
    // is touched and every item is reported.
    let second = select(&operator, json!({ "evidence": "no_charge" })).await;
    let previewed = job_in_state(&viewer, &second, "Previewed").await;
    assert_eq!(previewed["items"], 3);
    let aborted = operator
        .post_json("bulk/control", &json!({ "id": second, "control": "Abort" }))
        .await
        .expect("aborted");
    assert_eq!(aborted["state"], "Aborted");
    assert_eq!(aborted["done"], 3, "{aborted}");
    assert!(
        aborted["first_items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|item| item["result"]["message"] == "not applied: the job was aborted"),
        "{aborted}"
    );
    let refused = operator
        .post_json("bulk/control", &json!({ "id": second, "control": "Resume" }))
        .await
        .expect_err("an aborted job stays aborted");
    assert!(refused.contains("cannot be resumed"), "{refused}");
    assert_eq!(
        status_count(&app, "UNKNOWN_REQUIRES_RECOVERY", "k-n%").await,
        3,
        "untouched"
    );

    // A third sends them again with their own provider keys.
    let third = select(&operator, json!({ "evidence": "no_charge" })).await;
    job_in_state(&viewer, &third, "Previewed").await;
    let resend = json!({
        "id": third,
        "name": "resend the refused charges",
        "reason": "the provider has no charge for them (OPS-78)",
        "choices": [{ "operation": "create_payment", "evidence": "NoCharge", "action": "RetryCharge" }],
    });
    operator.post_json("bulk/apply", &resend).await.expect("applied");
    let job = job_in_state(&viewer, &third, "Finished").await;
    assert_eq!(job["ok"], 3, "{job}");
    assert_eq!(status_count(&app, "COMPLETED", "k-n%").await, 3);

    // The provider charged each payment once, whatever was sent again.
    let charges = app.sim.charges().await;
    assert_eq!(charges.len(), 8, "{charges:?}");
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );

    // The jobs list keeps each job's history.
    let jobs = viewer.json("bulk/jobs", &[]).await;
    let states: Vec<&str> = jobs
        .as_array()
        .expect("jobs")
        .iter()
        .map(|job| job["state"].as_str().expect("state"))
        .collect();
    assert_eq!(
        states,
        ["Finished", "Aborted", "Finished"],
        "newest first: {jobs}"
    );
    for action in ["bulk.select", "bulk.apply", "bulk.abort"] {
        assert!(
            app.db
                .query_i64(&format!(
                    "select count(*) from audit_log where action = '{action}' and actor = 'otto'"
                ))
                .await
                >= 1,
            "{action} is audited"
        );
    }
}

async fn a_bulk_job_whose_instance_is_killed_leaves_every_item_applied_and_audited_or_reported(
    db: TestDatabase,
) {
    let mut app = TestApp::on_database(db)
        .tenant("acme", "10000.00")
        .recovering()
        .with(Serve::RecoveryMaxAttempts(0))
        .with(Serve::BulkLease(ms(1500)))
        .with(Serve::BulkResumeEvery(ms(200)))
        .process()
        .await;
    // Every charge sent again takes the provider 300 ms: the job is killed mid-way.
    let (operator, id) = resend_under_way(&app, "k-k", 12, 300, "OPS-79").await;
    let done = items_done_at_least(&operator, &id, 3).await;
    assert!((3..12).contains(&done), "killed mid-job, after {done} items");
    app.stop();
    app.restart(&[]).await;
    let operator = app.console("olga", OperatorRole::Operator).await;
    let job = job_in_state(&operator, &id, "Finished").await;
    assert!(
        job["done"].as_u64() == Some(12) && job["ok"].as_u64() >= Some(3),
        "every item has a result: {job}"
    );
    let tenant_id = operator.tenant_of("k-k00").await;
    for item in job["first_items"].as_array().expect("items") {
        let key = item["record"]["key"].as_str().expect("key");
        let result = &item["result"];
        let audited = charges_retried(&app, &tenant_id, key).await;
        if result["ok"] == true {
            assert_eq!(result["status"], "COMPLETED", "{item}");
            assert_eq!(audited, 1, "applied and audited once: {item}");
        } else {
            assert!(
                result["message"]
                    .as_str()
                    .is_some_and(|message| !message.is_empty()),
                "{item}"
            );
            assert_eq!(audited, 0, "reported, not applied: {item}");
        }
    }
    // Whatever the kill cut, the provider charged each payment once.
    let charges = app.sim.charges().await;
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );
}

async fn a_provider_that_goes_down_mid_job_leaves_the_rest_untouched_and_reported(db: TestDatabase) {
    let app = outage(db).await;
    let (operator, id) = resend_under_way(&app, "k-d", 10, 200, "OPS-80").await;
    let done = items_done_at_least(&operator, &id, 2).await;
    assert!(
        (2..10).contains(&done),
        "the provider goes down mid-job, after {done} items"
    );
    // From here on the provider answers nothing: not a look-up, not a charge.
    app.sim
        .fault(&json!({ "mode": "lookups_unavailable", "rate": 1.0 }))
        .await;
    app.sim
        .fault(&json!({ "mode": "fail_before_accept", "rate": 1.0 }))
        .await;
    let job = job_in_state(&operator, &id, "Finished").await;
    assert_eq!(job["done"], 10, "every item has a result: {job}");
    let tenant_id = operator.tenant_of("k-d00").await;
    let mut untouched = 0;
    for item in job["first_items"].as_array().expect("items") {
        let key = item["record"]["key"].as_str().expect("key");
        let result = &item["result"];
        let applied = charges_retried(&app, &tenant_id, key).await;
        let status: String = app
            .db
            .query_one(&format!(
                "select status from idempotency_records where idempotency_key = '{key}'"
            ))
            .await;
        if result["ok"] == true {
            assert_eq!(
                (status.as_str(), applied),
                ("COMPLETED", 1),
                "applied and audited: {item}"
            );
        } else {
            untouched += 1;
            assert_eq!(applied, 0, "{item}");
            assert_ne!(status, "COMPLETED", "{item}");
            assert!(
                result["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("cannot be reached")
                        || message.contains("not settled")
                        || message.contains("changed since the preview")),
                "reported with why: {item}"
            );
        }
    }
    assert!(
        untouched >= 1,
        "the items after the outage were not applied: {job}"
    );
    let charges = app.sim.charges().await;
    assert!(
        charges.iter().all(|charge| charge.create_calls == 1),
        "{charges:?}"
    );
}

conformance!(
    the_recovery_queue_filters_orders_pages_and_counts_on_the_server,
    a_provider_that_goes_down_mid_job_leaves_the_rest_untouched_and_reported,
    an_outage_is_cleared_by_filter_as_a_named_job_group_by_group,
    a_bulk_job_whose_instance_is_killed_leaves_every_item_applied_and_audited_or_reported,
);
