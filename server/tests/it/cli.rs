//! The administrative commands of the real binary, on the embedded database.

use crate::support::idem_command;
use sqlx::Connection;
use std::path::Path;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn idem(data_dir: &Path, args: &[&str]) -> Outcome {
    let output = idem_command(data_dir)
        .args(args)
        .output()
        .await
        .expect("run idem");
    Outcome {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn open_database(data_dir: &Path) -> sqlx::SqliteConnection {
    sqlx::SqliteConnection::connect(&format!("sqlite://{}", data_dir.join("idem.db").display()))
        .await
        .expect("open the database")
}

#[tokio::test]
async fn tenants_keys_and_accounts_are_created_from_the_command_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path();

    let tenant = idem(data, &["tenant", "create", "acme"]).await;
    assert_eq!(tenant.code, Some(0), "{}", tenant.stderr);
    let tenant_id = tenant.stdout.trim_end();
    assert!(
        tenant_id.starts_with("ten_") && !tenant_id.contains('\n'),
        "the id alone: {:?}",
        tenant.stdout
    );

    let key = idem(data, &["api-key", "create", "--tenant", "acme"]).await;
    assert_eq!(key.code, Some(0), "{}", key.stderr);
    let api_key = key.stdout.trim_end().to_owned();
    assert!(
        api_key.starts_with("idem_key_"),
        "the key alone: {:?}",
        key.stdout
    );
    assert!(!key.stderr.contains(&api_key), "the key never reaches the logs");

    let account = idem(data, &create_account("eur", "1000.00")).await;
    assert_eq!(account.code, Some(0), "{}", account.stderr);

    // What is stored: the hash, never the key; the balance in minor units.
    let mut db = open_database(data).await;
    let stored: Vec<(String, String)> = sqlx::query_as("select id, key_hash from api_keys")
        .fetch_all(&mut db)
        .await
        .expect("keys");
    assert_eq!(stored.len(), 1);
    assert!(api_key.contains(&stored[0].0), "the key names its id");
    assert!(
        !api_key.contains(&stored[0].1) && stored[0].1.len() == 64,
        "a SHA-256 hex, not the key"
    );
    let balance: (String, i64) =
        sqlx::query_as("select currency, balance_minor from accounts where id = 'acc_1'")
            .fetch_one(&mut db)
            .await
            .expect("account");
    assert_eq!(balance, ("EUR".to_owned(), 100_000));

    let revoke = idem(data, &["api-key", "revoke", &stored[0].0]).await;
    assert_eq!(revoke.code, Some(0), "{}", revoke.stderr);
    let again = idem(data, &["api-key", "revoke", &stored[0].0]).await;
    assert_eq!(again.code, Some(1));
    assert!(again.stderr.contains("no active API key"), "{}", again.stderr);

    // Listed by id, creator, creation, last use and revocation: never the key.
    let keys = idem(data, &["api-key", "list", "--tenant", "acme"]).await;
    assert_eq!(keys.code, Some(0), "{}", keys.stderr);
    let columns: Vec<&str> = keys.stdout.trim_end().split('\t').collect();
    assert_eq!(columns.len(), 5, "{:?}", keys.stdout);
    assert_eq!(columns[0], stored[0].0);
    assert!(columns[1].starts_with("cli:"), "{columns:?}");
    assert_eq!(columns[3], "-", "never used");
    assert!(columns[4].ends_with('Z'), "revoked: {columns:?}");
    assert!(!keys.stdout.contains(&api_key) && !keys.stdout.contains(&stored[0].1));

    let optional = idem(data, &["tenant", "keys", "acme", "optional"]).await;
    assert_eq!(optional.code, Some(0), "{}", optional.stderr);
    let tenants = idem(data, &["tenant", "list"]).await;
    assert_eq!(tenants.code, Some(0), "{}", tenants.stderr);
    assert!(
        tenants
            .stdout
            .starts_with(&format!("acme\t{tenant_id}\toptional\t")),
        "{}",
        tenants.stdout
    );
    let nobody = idem(data, &["tenant", "keys", "nobody", "required"]).await;
    assert_eq!(nobody.code, Some(1));
    assert!(nobody.stderr.contains("no tenant is named"), "{}", nobody.stderr);

    // Every change audited in the command line's name; the refused ones not at all.
    let audited: Vec<(String,)> = sqlx::query_as(
        "select action from audit_log where actor like 'cli:%' and action not like 'operator.%' \
         order by at, action",
    )
    .fetch_all(&mut db)
    .await
    .expect("audit");
    let mut actions: Vec<String> = audited.into_iter().map(|(action,)| action).collect();
    actions.sort();
    assert_eq!(
        actions,
        [
            "api_key.create",
            "api_key.revoke",
            "tenant.create",
            "tenant.set_keys"
        ]
    );
}

/// `idem account create` for acme's `acc_1`.
fn create_account<'a>(currency: &'a str, balance: &'a str) -> [&'a str; 10] {
    [
        "account",
        "create",
        "--tenant",
        "acme",
        "--id",
        "acc_1",
        "--currency",
        currency,
        "--balance",
        balance,
    ]
}

#[tokio::test]
async fn bad_arguments_get_a_clear_error_and_change_nothing() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path();
    assert_eq!(idem(data, &["tenant", "create", "acme"]).await.code, Some(0));

    let cases: [(&[&str], &str); 6] = [
        (&["tenant", "create", "acme"], "already exists"),
        (&["tenant", "create", "Not A Slug"], "a tenant name is"),
        (&["api-key", "create", "--tenant", "nobody"], "no tenant is named"),
        (
            &create_account("EUR", "10.001"),
            "--balance: EUR allows at most 2 decimal places",
        ),
        (&create_account("XYZ", "1"), "--currency: must be one of"),
        (
            &[
                "account",
                "create",
                "--tenant",
                "acme",
                "--id",
                "acc 1",
                "--currency",
                "EUR",
                "--balance",
                "1",
            ],
            "--id: must be",
        ),
    ];
    for (args, message) in cases {
        let outcome = idem(data, args).await;
        assert_eq!(outcome.code, Some(1), "{args:?}: {}", outcome.stderr);
        assert!(outcome.stderr.contains(message), "{args:?}: {}", outcome.stderr);
        assert!(outcome.stdout.is_empty(), "{args:?} printed {:?}", outcome.stdout);
    }

    let mut db = open_database(data).await;
    let accounts: i64 = sqlx::query_scalar("select count(*) from accounts")
        .fetch_one(&mut db)
        .await
        .expect("count");
    assert_eq!(accounts, 0);
}

#[tokio::test]
async fn operators_are_managed_from_the_command_line_and_every_change_is_audited() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let data = dir.path();
    let created = idem(
        data,
        &["operator", "create", "--username", "olga", "--role", "admin"],
    )
    .await;
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let password = created.stdout.trim_end().to_owned();
    assert!(
        password.len() >= 20 && !password.contains('\n'),
        "the password alone"
    );

    // A second admin first: no change may leave the console without an enabled admin.
    let ada = idem(
        data,
        &["operator", "create", "--username", "ada", "--role", "admin"],
    )
    .await;
    assert_eq!(ada.code, Some(0), "{}", ada.stderr);
    let steps: [(&[&str], &str); 2] = [
        (
            &["operator", "set-role", "olga", "--role", "viewer"],
            "operator olga is now viewer",
        ),
        (&["operator", "disable", "olga"], "operator olga is disabled"),
    ];
    for (args, printed) in steps {
        let outcome = idem(data, args).await;
        assert_eq!(outcome.code, Some(0), "{args:?}: {}", outcome.stderr);
        assert_eq!(outcome.stdout.trim_end(), printed);
    }
    let enabled = idem(data, &["operator", "enable", "olga"]).await;
    assert_eq!(enabled.code, Some(0), "{}", enabled.stderr);
    let new_password = enabled.stdout.trim_end().to_owned();
    assert!(
        new_password.len() >= 20 && new_password != password,
        "a new password, alone"
    );
    let disabled = idem(data, &["operator", "disable", "olga"]).await;
    assert_eq!(disabled.stdout.trim_end(), "operator olga is disabled");
    let reset = idem(data, &["operator", "reset-password", "olga"]).await;
    assert_eq!(reset.code, Some(0), "{}", reset.stderr);
    assert!(
        ![password.as_str(), new_password.as_str()].contains(&reset.stdout.trim_end()),
        "a new password"
    );
    assert!(
        !reset.stderr.contains(reset.stdout.trim_end()),
        "the password never reaches the logs"
    );

    let refused: [(&[&str], &str); 5] = [
        (
            &["operator", "disable", "ada"],
            "ada is the last enabled admin: make another admin first",
        ),
        (
            &["operator", "set-role", "ada", "--role", "operator"],
            "ada is the last enabled admin",
        ),
        (
            &["operator", "disable", "nobody"],
            "no operator is named \"nobody\"",
        ),
        (
            &["operator", "set-role", "nobody", "--role", "admin"],
            "no operator is named",
        ),
        (
            &["operator", "set-role", "olga", "--role", "root"],
            "invalid value 'root'",
        ),
    ];
    for (args, message) in refused {
        let outcome = idem(data, args).await;
        assert_ne!(outcome.code, Some(0), "{args:?}");
        assert!(outcome.stderr.contains(message), "{args:?}: {}", outcome.stderr);
        assert!(outcome.stdout.is_empty(), "{args:?} printed {:?}", outcome.stdout);
    }

    let listed = idem(data, &["operator", "list"]).await;
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let rows: Vec<Vec<&str>> = listed
        .stdout
        .lines()
        .map(|line| line.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{}", listed.stdout);
    assert_eq!(rows[0][..3], ["ada", "admin", "enabled"]);
    assert_eq!(rows[1][..3], ["olga", "viewer", "disabled"]);
    assert!(
        rows.iter().all(|row| row[3].ends_with('Z')),
        "created, in UTC: {rows:?}"
    );
    assert!(!listed.stdout.contains("argon2"), "never a password hash");

    let mut db = open_database(data).await;
    let operator: (String, bool) =
        sqlx::query_as("select role, disabled_at is not null from operators where username = 'olga'")
            .fetch_one(&mut db)
            .await
            .expect("operator");
    assert_eq!(operator, ("viewer".to_owned(), true));
    let audit: Vec<(String, Option<String>)> = sqlx::query_as(
        "select action, details from audit_log where actor like 'cli:%' \
         and target = 'operator olga' order by at, rowid",
    )
    .fetch_all(&mut db)
    .await
    .expect("audit");
    let actions: Vec<&str> = audit.iter().map(|(action, _)| action.as_str()).collect();
    assert_eq!(
        actions,
        [
            "operator.create",
            "operator.set_role",
            "operator.disable",
            "operator.enable",
            "operator.disable",
            "operator.reset_password"
        ],
        "one entry per change made, none for refusals"
    );
    assert_eq!(audit[1].1.as_deref(), Some("role viewer"));
}
