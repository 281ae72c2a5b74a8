use super::names::dns_label_prefix;

#[test]
fn namespace_prefixes_are_dns_labels() {
    assert_eq!(
        dns_label_prefix("crd_rejects::Bad Epoch"),
        "crd-rejects--bad-epoch"
    );
    assert_eq!(dns_label_prefix("__"), "test");
    assert_eq!(dns_label_prefix(&"a".repeat(100)).len(), 40);
}
