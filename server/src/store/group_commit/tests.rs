//! The group commit's own tests: what a group keeps and undoes, caller by caller.

use super::GroupCommit;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Pool, Sqlite};

async fn waiting(group: &GroupCommit<Sqlite>, callers: usize) {
    while group.writer.lock().await.waiting.len() < callers {
        tokio::task::yield_now().await;
    }
}

async fn group_over_a_table() -> (tempfile::TempDir, Pool<Sqlite>, GroupCommit<Sqlite>) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("group.db"))
        .create_if_missing(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .expect("open");
    sqlx::query("create table t (n integer)")
        .execute(&pool)
        .await
        .expect("table");
    let group = GroupCommit::over(pool.clone(), pool.clone(), i64::MAX);
    // The group's commit is the test's to make, and no checkpoint takes the one connection.
    group.committer.abort();
    group.checkpointer.abort();
    (dir, pool, group)
}

/// Callers of one group: the first commits, the second rolls back, the third goes away
/// inside its savepoint, and the fourth, whose `begin` rolls the third back, commits. The
/// group's commit keeps the first and the fourth callers' work, and only that.
#[tokio::test]
async fn callers_rolled_back_in_a_group_undo_only_their_own_work() {
    let (_dir, pool, group) = group_over_a_table().await;
    let insert = |n: i64| sqlx::query("insert into t (n) values ($1)").bind(n);

    let mut first = group.begin().await.expect("begin");
    insert(1).execute(&mut *first).await.expect("insert");
    let first = tokio::spawn(first.commit());
    waiting(&group, 1).await;

    let mut second = group.begin().await.expect("begin");
    insert(2).execute(&mut *second).await.expect("insert");
    let second = tokio::spawn(second.rollback());
    waiting(&group, 2).await;

    let mut third = group.begin().await.expect("begin");
    insert(3).execute(&mut *third).await.expect("insert");
    drop(third);

    let mut fourth = group.begin().await.expect("begin");
    insert(4).execute(&mut *fourth).await.expect("insert");
    let fourth = tokio::spawn(fourth.commit());
    waiting(&group, 3).await;

    let mut writer = group.writer.lock().await;
    assert!(writer.open.is_some(), "all four in one open transaction");
    writer.commit_group().await;
    drop(writer);
    first.await.expect("first").expect("first committed");
    fourth.await.expect("fourth").expect("fourth committed");
    second
        .await
        .expect("second")
        .expect("second rolled back and told of the commit");
    // The writer keeps its connection between transactions; closing gives it back.
    group.close().await;
    let kept: Vec<i64> = sqlx::query_scalar("select n from t")
        .fetch_all(&pool)
        .await
        .expect("read");
    assert_eq!(kept, vec![1, 4]);
}

/// However many callers a group holds, one savepoint is open: each caller's opening
/// statement releases the one before (nested hundreds deep under overload, they slowed
/// every page write). After five commits (savepoints a, b, a, b, a), the fourth's `b` is
/// gone, and once the fifth's `a` is released no `a` is left either.
#[tokio::test]
async fn a_group_holds_one_savepoint_however_many_callers_it_has() {
    let (_dir, _pool, group) = group_over_a_table().await;
    let mut committed = Vec::new();
    for n in 1..=5_i64 {
        let mut member = group.begin().await.expect("begin");
        sqlx::query("insert into t (n) values ($1)")
            .bind(n)
            .execute(&mut *member)
            .await
            .expect("insert");
        committed.push(tokio::spawn(member.commit()));
        waiting(&group, committed.len()).await;
    }
    let mut writer = group.writer.lock().await;
    let connection = writer.connection().expect("the group's connection");
    let mut sent = Vec::new();
    for statement in ["rollback to idem_b", "release idem_a", "rollback to idem_a"] {
        sent.push(sqlx::query(statement).execute(&mut *connection).await.is_ok());
    }
    assert_eq!(
        sent,
        [false, true, false],
        "only the last caller's savepoint was open"
    );
    writer.commit_group().await;
    drop(writer);
    for member in committed {
        member.await.expect("member").expect("committed");
    }
    group.close().await;
}

/// A caller whose transaction opens with its first statement, and goes away before
/// sending it, has no savepoint: its rollback must not find the caller's before it (whose
/// work that caller was promised) under the same name. The group is undone, and its
/// callers told, before anything else runs; the next caller starts a fresh group.
#[tokio::test]
async fn a_caller_gone_before_its_first_statement_never_rolls_back_the_one_before() {
    let (_dir, pool, group) = group_over_a_table().await;
    let insert = |n: i64| sqlx::query("insert into t (n) values ($1)").bind(n);

    let (mut first, statement) = group
        .begin_with("insert into t (n) values ($1)")
        .await
        .expect("begin");
    assert_eq!(
        statement,
        "begin immediate; savepoint idem_a; insert into t (n) values ($1)"
    );
    sqlx::query(statement)
        .bind(1_i64)
        .execute(&mut *first)
        .await
        .expect("insert");
    let first = tokio::spawn(first.commit());
    waiting(&group, 1).await;

    let (second, statement) = group
        .begin_with("insert into t (n) values ($1)")
        .await
        .expect("begin");
    assert_eq!(
        statement,
        "release idem_a; savepoint idem_b; insert into t (n) values ($1)"
    );
    drop(second);

    let mut third = group.begin().await.expect("begin");
    insert(3).execute(&mut *third).await.expect("insert");
    let third = tokio::spawn(third.commit());
    let told = first.await.expect("first");
    assert!(
        matches!(told, Err(crate::store::error::StoreError::NotCommitted(_))),
        "the first caller is told its work was undone: {told:?}"
    );
    waiting(&group, 1).await;
    group.writer.lock().await.commit_group().await;
    third.await.expect("third").expect("third committed");
    group.close().await;
    let kept: Vec<i64> = sqlx::query_scalar("select n from t")
        .fetch_all(&pool)
        .await
        .expect("read");
    assert_eq!(kept, vec![3]);
}
