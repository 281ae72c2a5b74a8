//! Following one named object (a Lease, the webhook configuration) with a watch: the
//! stream the operator and the sidecar use for it, written once.

use std::fmt::Debug;

use futures::Stream;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::backoff::WatchBackoff;

/// Every change of the object `name` in `api`, as kube-runtime's watcher reports them:
/// `Init`, `InitApply` (the object, if it exists) and `InitDone` for each list, then
/// `Apply` and `Delete`. After an error (yielded, for the caller to log or count) it waits
/// as [`WatchBackoff`] says and goes on, resuming or listing again.
///
/// Lists are quorum reads (`ListSemantic::MostRecent`): a list never hands back a copy
/// older than what etcd holds, only the watch events after it may trail (the API server's
/// watch cache). One object makes such a list cheap.
pub fn one_object<K>(
    api: Api<K>,
    name: &str,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .list_semantic(ListSemantic::MostRecent);
    watcher::watcher(api, config).backoff(WatchBackoff::default())
}
