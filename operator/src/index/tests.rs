use super::*;
use k8s_openapi::api::core::v1::Pod;
use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};

/// A pod in `ns`, in `sequence` (unlabelled when `None`), at resourceVersion `rv`.
fn pod(ns: &str, name: &str, sequence: Option<&str>, rv: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.namespace = Some(ns.into());
    pod.metadata.name = Some(name.into());
    pod.metadata.resource_version = Some(rv.into());
    pod.metadata.labels = sequence.map(|s| [(SEQUENCE_LABEL.to_string(), s.to_string())].into());
    pod
}

fn names(objects: &[Arc<Pod>]) -> Vec<String> {
    objects.iter().map(|p| name_of(p.as_ref())).collect()
}

fn fed(events: Vec<watcher::Event<Pod>>) -> (Index<Pod>, IndexWriter<Pod>) {
    let (index, mut writer) = index::<Pod>();
    for event in &events {
        writer.apply_watcher_event(event);
    }
    (index, writer)
}

#[test]
fn a_sequence_reads_its_own_objects_only_by_namespace_and_label() {
    let (index, _writer) = fed(vec![
        Apply(pod("shop", "web-1", Some("orders"), "1")),
        Apply(pod("shop", "web-0", Some("orders"), "2")),
        Apply(pod("shop", "cart-0", Some("carts"), "3")),
        // Same sequence name, another namespace: another sequence.
        Apply(pod("ops", "job-0", Some("orders"), "4")),
        Apply(pod("shop", "unlabelled", None, "5")),
    ]);
    assert_eq!(names(&index.of("shop", "orders")), ["web-0", "web-1"]);
    assert_eq!(names(&index.of("shop", "carts")), ["cart-0"]);
    assert_eq!(names(&index.of("ops", "orders")), ["job-0"]);
    assert!(index.of("shop", "nothing").is_empty());
    assert!(
        index.get("shop", "unlabelled").is_some(),
        "get finds any cached object"
    );
    assert_eq!(index.sequence_count(), 3);
}

#[test]
fn an_update_replaces_the_object_and_a_changed_label_moves_it() {
    let (index, mut writer) = fed(vec![Apply(pod("shop", "web-0", Some("orders"), "1"))]);
    writer.apply_watcher_event(&Apply(pod("shop", "web-0", Some("orders"), "2")));
    let got = index.of("shop", "orders");
    assert_eq!(got[0].metadata.resource_version.as_deref(), Some("2"));
    assert_eq!(got.len(), 1);

    writer.apply_watcher_event(&Apply(pod("shop", "web-0", Some("carts"), "3")));
    assert!(index.of("shop", "orders").is_empty(), "moved out");
    assert_eq!(names(&index.of("shop", "carts")), ["web-0"]);

    writer.apply_watcher_event(&Apply(pod("shop", "web-0", None, "4")));
    assert!(index.of("shop", "carts").is_empty(), "label removed");
    assert_eq!(
        index.sequence_count(),
        0,
        "no empty sequence entries are kept"
    );
    assert!(index.get("shop", "web-0").is_some());
}

#[test]
fn a_delete_removes_the_object_from_its_sequence_and_the_cache() {
    let (index, mut writer) = fed(vec![
        Apply(pod("shop", "web-0", Some("orders"), "1")),
        Apply(pod("shop", "web-1", Some("orders"), "2")),
    ]);
    // The deleted object as the watch reports it (its last state).
    writer.apply_watcher_event(&Delete(pod("shop", "web-0", Some("orders"), "3")));
    assert_eq!(names(&index.of("shop", "orders")), ["web-1"]);
    assert!(index.get("shop", "web-0").is_none());
    // A delete whose label differs from the cached copy still removes it from where it is.
    writer.apply_watcher_event(&Delete(pod("shop", "web-1", None, "4")));
    assert!(index.of("shop", "orders").is_empty());
    assert_eq!(index.sequence_count(), 0);
}

#[test]
fn a_relist_replaces_everything_at_its_end_and_hands_back_what_vanished() {
    let (index, mut writer) = fed(vec![
        Init,
        InitApply(pod("shop", "web-0", Some("orders"), "1")),
        InitApply(pod("shop", "web-1", Some("orders"), "2")),
        InitApply(pod("shop", "cart-0", Some("carts"), "3")),
        InitDone,
    ]);
    assert_eq!(names(&index.of("shop", "orders")), ["web-0", "web-1"]);

    // The watch was lost; meanwhile web-1 and cart-0 were deleted, web-0 was relabelled
    // and web-2 created.
    assert!(writer.apply_watcher_event(&Init).is_empty());
    writer.apply_watcher_event(&InitApply(pod("shop", "web-0", Some("carts"), "7")));
    writer.apply_watcher_event(&InitApply(pod("shop", "web-2", Some("orders"), "8")));
    assert_eq!(
        names(&index.of("shop", "orders")),
        ["web-0", "web-1"],
        "until the list is complete, the old view stands"
    );
    let mut vanished = names(&writer.apply_watcher_event(&InitDone));
    vanished.sort();
    assert_eq!(vanished, ["cart-0", "web-1"]);
    assert_eq!(names(&index.of("shop", "orders")), ["web-2"]);
    assert_eq!(names(&index.of("shop", "carts")), ["web-0"]);
    assert!(index.get("shop", "web-1").is_none());
    assert!(index.get("shop", "cart-0").is_none());
}

#[tokio::test]
async fn the_store_is_ready_once_the_first_list_is_done() {
    let (index, mut writer) = index::<Pod>();
    writer.apply_watcher_event(&Init);
    writer.apply_watcher_event(&InitApply(pod("shop", "web-0", Some("orders"), "1")));
    let waited = tokio::time::timeout(
        std::time::Duration::from_millis(50),
        index.store().wait_until_ready(),
    );
    assert!(waited.await.is_err(), "not ready mid-list");
    writer.apply_watcher_event(&InitDone);
    index.store().wait_until_ready().await.expect("ready");
    assert_eq!(index.store().state().len(), 1);
}
