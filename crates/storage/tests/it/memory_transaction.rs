//! Staged transactions over the memory store (deletion commits).

use std::sync::Arc;

use tether_core::{
    BindingStore, FakeClock, Intent, Namespace, NamespaceConfig, RowTransaction, admit_all,
};
use tether_storage::MemoryStore;

use crate::support::{START, key, text, value};

async fn store() -> (MemoryStore, Namespace) {
    let store = MemoryStore::new(Arc::new(FakeClock::new(START)));
    let ns = Namespace::new("tx").unwrap();
    store
        .register_namespace(NamespaceConfig::new(ns.clone()).with_max_entries(3))
        .await
        .unwrap();
    (store, ns)
}

#[tokio::test]
async fn staged_writes_are_invisible_until_commit() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    let tx = store.begin();
    let removed = tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    assert_eq!(text(&removed.unwrap()), r#"{"value":"a"}"#);
    assert!(
        tx.lookup(&ns, &key("a")).await.unwrap().is_none(),
        "the transaction sees its delete"
    );
    assert!(
        tx.register_if_absent(&ns, &key("b"), value("b"), None)
            .await
            .unwrap()
    );
    assert!(
        !tx.register_if_absent(&ns, &key("b"), value("b2"), None)
            .await
            .unwrap()
    );
    assert_eq!(tx.staged_writes(), 2);
    assert!(
        store.lookup(&ns, &key("a")).await.unwrap().is_some(),
        "others still see the row"
    );
    assert!(store.lookup(&ns, &key("b")).await.unwrap().is_none());
    tx.commit().unwrap();
    assert!(store.lookup(&ns, &key("a")).await.unwrap().is_none());
    assert_eq!(
        text(&store.lookup(&ns, &key("b")).await.unwrap().unwrap()),
        r#"{"value":"b"}"#
    );
}

#[tokio::test]
async fn rollback_discards_everything() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    let tx = store.begin();
    tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    tx.rollback();
    assert!(store.lookup(&ns, &key("a")).await.unwrap().is_some());
}

#[tokio::test]
async fn a_row_changed_after_the_transaction_read_it_aborts_the_commit() {
    let (store, ns) = store().await;
    store
        .register_if_absent(&ns, &key("a"), value("a"), None)
        .await
        .unwrap();
    store
        .register_if_absent(&ns, &key("c"), value("c"), None)
        .await
        .unwrap();
    let tx = store.begin();
    tx.delete_if(&ns, &key("c"), &|_| true).await.unwrap();
    tx.delete_if(&ns, &key("a"), &|_| true).await.unwrap();
    let seen = store.observe(&ns, &key("a")).await.unwrap();
    store
        .compare_and_apply(
            &ns,
            &key("a"),
            &seen.comparison,
            Intent::Set {
                row: value("successor"),
                ttl: None,
            },
            &admit_all,
        )
        .await
        .unwrap();
    let err = tx.commit().unwrap_err();
    assert!(err.to_string().contains("nothing was committed"), "{err}");
    assert_eq!(
        text(&store.lookup(&ns, &key("a")).await.unwrap().unwrap()),
        r#"{"value":"successor"}"#
    );
    assert!(
        store.lookup(&ns, &key("c")).await.unwrap().is_some(),
        "no partial commit"
    );
}
