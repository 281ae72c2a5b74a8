//! The operator's caches of labelled pods and slot Leases, indexed by sequence: a pass
//! reads the objects of its own sequence (`namespace`, `kubeflake.io/sequence` label) in
//! time proportional to what that sequence has, not to what the cluster has
//! (docs/scale.md). Before, every pass filtered the whole cache: O(N) per pass, with N
//! every labelled pod and Lease of the cluster.
//!
//! An [`IndexWriter`] is fed the watcher's events (as a reflector's `Writer` is): it keeps
//! the objects in a kube-rs [`Store`] (one copy of each object, shared with the readiness
//! wait and the sidecar RBAC keeper) and, beside it, the names of each sequence's objects.
//! The two change together under one lock, so an [`Index`] never shows an object in one
//! and not the other. A relist (`Init`, `InitApply`..., `InitDone`) replaces both at
//! `InitDone`, as the store does; the objects it dropped are handed back, so their
//! sequences can be woken (a pod deleted while the watch was down).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{Lookup, ObjectRef, Store};
use kube::runtime::watcher;
use kubeflake_crds::slot_lease::SEQUENCE_LABEL;

/// (namespace, sequence) -> names of its objects.
type Names = HashMap<(String, String), BTreeSet<String>>;

/// The sequence an object is in (its namespace and `kubeflake.io/sequence` label), if any.
fn sequence_of<K: Resource>(obj: &K) -> Option<(String, String)> {
    let meta = obj.meta();
    let sequence = meta.labels.as_ref()?.get(SEQUENCE_LABEL)?;
    Some((meta.namespace.clone().unwrap_or_default(), sequence.clone()))
}

fn name_of<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn insert(names: &mut Names, key: (String, String), name: String) {
    names.entry(key).or_default().insert(name);
}

fn remove(names: &mut Names, key: &(String, String), name: &str) {
    if let Some(set) = names.get_mut(key) {
        set.remove(name);
        if set.is_empty() {
            names.remove(key);
        }
    }
}

/// Reads the cache: by sequence or by name. Cheap to clone (shared).
pub struct Index<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    names: Arc<RwLock<Names>>,
}

impl<K: Lookup + Clone + 'static> Clone for Index<K>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn clone(&self) -> Self {
        Index {
            store: self.store.clone(),
            names: self.names.clone(),
        }
    }
}

impl<K> Index<K>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// The objects of sequence `sequence` in namespace `ns`, ordered by name. Costs what
    /// that sequence has.
    pub fn of(&self, ns: &str, sequence: &str) -> Vec<Arc<K>> {
        let names = self.names.read().unwrap_or_else(|p| p.into_inner());
        let Some(set) = names.get(&(ns.to_string(), sequence.to_string())) else {
            return Vec::new();
        };
        set.iter()
            .filter_map(|name| self.store.get(&ObjectRef::new(name).within(ns)))
            .collect()
    }

    /// Object `name` in namespace `ns`, labelled or not.
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(ns))
    }

    /// How many sequences have objects in the cache.
    #[cfg(test)]
    fn sequence_count(&self) -> usize {
        self.names.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The whole cache, for readers that need every object (readiness, the sidecar RBAC
    /// keeper).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }
}

/// Applies watch events to the cache behind an [`Index`].
pub struct IndexWriter<K: Lookup + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: Writer<K>,
    index: Index<K>,
    /// The names of a relist in progress (`Init` .. `InitDone`).
    relist: Names,
}

/// An empty cache: its writer and a reader.
pub fn index<K>() -> (Index<K>, IndexWriter<K>)
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    let writer = Writer::default();
    let index = Index {
        store: writer.as_reader(),
        names: Arc::default(),
    };
    let writer = IndexWriter {
        writer,
        index: index.clone(),
        relist: Names::new(),
    };
    (index, writer)
}

impl<K> IndexWriter<K>
where
    K: Resource<DynamicType = ()> + Lookup<DynamicType = ()> + Clone + 'static,
{
    /// A reader of this cache.
    pub fn as_reader(&self) -> Index<K> {
        self.index.clone()
    }

    /// Applies one watch event. Returns the objects a completed relist dropped (gone while
    /// the watch was down); empty for every other event.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<K>) -> Vec<Arc<K>> {
        // Held while the store changes too: readers see names and objects agree.
        let mut names = self.index.names.write().unwrap_or_else(|p| p.into_inner());
        match event {
            watcher::Event::Apply(obj) | watcher::Event::Delete(obj) => {
                let ns = obj.meta().namespace.as_deref().unwrap_or_default();
                let name = name_of(obj);
                // The sequence it was in (its label may have changed or gone), and is in now.
                let was = self
                    .index
                    .get(ns, &name)
                    .and_then(|old| sequence_of(old.as_ref()));
                let is = match event {
                    watcher::Event::Apply(_) => sequence_of(obj),
                    _ => None,
                };
                // Most updates (renewals, status) leave the sequence as it was.
                if was != is {
                    if let Some(key) = was {
                        remove(&mut names, &key, &name);
                    }
                    if let Some(key) = is {
                        insert(&mut names, key, name);
                    }
                }
            }
            watcher::Event::Init => self.relist = Names::new(),
            watcher::Event::InitApply(obj) => {
                if let Some(key) = sequence_of(obj) {
                    insert(&mut self.relist, key, name_of(obj));
                }
            }
            watcher::Event::InitDone => {
                *names = std::mem::take(&mut self.relist);
                let before = self.index.store.state();
                self.writer.apply_watcher_event(event);
                // What the old cache held and the new list does not.
                let now = &self.index.store;
                return before
                    .into_iter()
                    .filter(|obj| now.get(&ObjectRef::from_obj(obj.as_ref())).is_none())
                    .collect();
            }
        }
        self.writer.apply_watcher_event(event);
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
