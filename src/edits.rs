//! Edits to a member pod, recorded as a JSON Patch against the original.
//!
//! Pods are the hot path of the webhook (every replica of every job), so
//! their mutation never clones or diffs the whole object: it records the keys
//! to set and the list items to append, reading the original for what is
//! already there, and emits the RFC 6902 operations at the end — a parent
//! map or list whole only when it is absent, otherwise one operation per key
//! or item. Pointer escaping (`~1`) is jsonptr's.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::{Map, Value};

/// A list of the pod that dljob appends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum List {
    Env(usize),
    Ports(usize),
    Mounts(usize),
    Volumes,
    SchedulingGates,
}

impl List {
    fn tokens(self) -> (Option<usize>, &'static str) {
        match self {
            List::Env(i) => (Some(i), "env"),
            List::Ports(i) => (Some(i), "ports"),
            List::Mounts(i) => (Some(i), "volumeMounts"),
            List::Volumes => (None, "volumes"),
            List::SchedulingGates => (None, "schedulingGates"),
        }
    }

    fn pointer(self) -> PointerBuf {
        let mut p = PointerBuf::from_tokens(["spec"]);
        let (container, key) = self.tokens();
        if let Some(i) = container {
            p.push_back("containers");
            p.push_back(i);
        }
        p.push_back(key);
        p
    }

    fn original(self, pod: &Value) -> Option<&Vec<Value>> {
        let spec = pod.get("spec")?;
        let (container, key) = self.tokens();
        let parent = match container {
            Some(i) => spec.get("containers")?.get(i)?,
            None => spec,
        };
        parent.get(key)?.as_array()
    }
}

/// Pending edits to one pod.
pub(crate) struct PodEdits<'o> {
    pod: &'o Value,
    labels: Vec<(&'static str, Value)>,
    annotations: Vec<(&'static str, Value)>,
    removed_annotations: Vec<&'static str>,
    spec: Vec<(&'static str, Value)>,
    appends: Vec<(List, Vec<Value>)>,
}

impl<'o> PodEdits<'o> {
    pub(crate) fn new(pod: &'o Value) -> Self {
        Self {
            pod,
            labels: Vec::new(),
            annotations: Vec::new(),
            removed_annotations: Vec::new(),
            spec: Vec::new(),
            appends: Vec::with_capacity(6),
        }
    }

    /// The original pod.
    pub(crate) fn pod(&self) -> &'o Value {
        self.pod
    }

    /// Sets `metadata.labels[key]`.
    pub(crate) fn set_label(&mut self, key: &'static str, value: Value) {
        self.labels.push((key, value));
    }

    /// Sets `metadata.annotations[key]`.
    pub(crate) fn set_annotation(&mut self, key: &'static str, value: Value) {
        self.annotations.push((key, value));
    }

    /// Removes `metadata.annotations[key]` (the original pod's).
    pub(crate) fn remove_annotation(&mut self, key: &'static str) {
        self.removed_annotations.push(key);
    }

    /// Sets `spec[key]`.
    pub(crate) fn set_spec(&mut self, key: &'static str, value: Value) {
        self.spec.push((key, value));
    }

    /// Items of `list`: the original ones, then those appended so far.
    pub(crate) fn items(&self, list: List) -> impl Iterator<Item = &Value> {
        let original = list.original(self.pod).map(Vec::as_slice).unwrap_or(&[]);
        let pending = self
            .appends
            .iter()
            .find(|(l, _)| *l == list)
            .map(|(_, v)| v.as_slice())
            .unwrap_or(&[]);
        original.iter().chain(pending)
    }

    /// Appends `item` to `list`.
    pub(crate) fn append(&mut self, list: List, item: Value) {
        match self.appends.iter_mut().find(|(l, _)| *l == list) {
            Some((_, items)) => items.push(item),
            None => self.appends.push((list, vec![item])),
        }
    }

    /// The JSON Patch of every recorded edit.
    pub(crate) fn into_patch(self) -> Patch {
        let mut ops = Vec::new();
        let meta = self.pod.get("metadata");
        let original = meta.and_then(|m| m.get("annotations"));
        for key in self.removed_annotations {
            if original.and_then(|a| a.get(key)).is_some() {
                let path = PointerBuf::from_tokens(["metadata", "annotations", key]);
                ops.push(PatchOperation::Remove(RemoveOperation { path }));
            }
        }
        set_keys(
            &mut ops,
            &["metadata", "labels"],
            meta.and_then(|m| m.get("labels")),
            self.labels,
        );
        set_keys(
            &mut ops,
            &["metadata", "annotations"],
            meta.and_then(|m| m.get("annotations")),
            self.annotations,
        );
        set_keys(&mut ops, &["spec"], self.pod.get("spec"), self.spec);
        for (list, items) in self.appends {
            let path = list.pointer();
            match list.original(self.pod) {
                None => ops.push(add(path, Value::Array(items))),
                Some(existing) => {
                    for (k, item) in items.into_iter().enumerate() {
                        let mut p = path.clone();
                        p.push_back(existing.len() + k);
                        ops.push(add(p, item));
                    }
                }
            }
        }
        Patch(ops)
    }
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Sets keys of the map at `path`: the whole map when it is absent, else
/// one add/replace per key that differs.
fn set_keys(
    ops: &mut Vec<PatchOperation>,
    path: &[&str],
    existing: Option<&Value>,
    keys: Vec<(&'static str, Value)>,
) {
    if keys.is_empty() {
        return;
    }
    let base = PointerBuf::from_tokens(path.iter().copied());
    match existing.and_then(Value::as_object) {
        None => {
            let map: Map<String, Value> =
                keys.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            ops.push(add(base, Value::Object(map)));
        }
        Some(map) => {
            for (k, v) in keys {
                let mut p = base.clone();
                p.push_back(k);
                match map.get(k) {
                    Some(old) if *old == v => {}
                    Some(_) => ops.push(PatchOperation::Replace(ReplaceOperation {
                        path: p,
                        value: v,
                    })),
                    None => ops.push(add(p, v)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(pod: &Value, patch: &Patch) -> Value {
        let mut out = pod.clone();
        json_patch::patch(&mut out, patch).unwrap();
        out
    }

    #[test]
    fn absent_parents_are_added_whole_and_present_ones_per_item() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}});
        let mut e = PodEdits::new(&pod);
        e.set_annotation("dljob.dev/hostfile", json!("h\n"));
        e.set_spec("hostname", json!("j-w-0"));
        e.append(List::Env(0), json!({"name": "B", "value": "2"}));
        e.append(List::Env(0), json!({"name": "C", "value": "3"}));
        e.append(List::Volumes, json!({"name": "v"}));
        assert_eq!(e.items(List::Env(0)).count(), 3);
        let patch = e.into_patch();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "add", "path": "/metadata/annotations", "value": {"dljob.dev/hostfile": "h\n"}},
                {"op": "add", "path": "/spec/hostname", "value": "j-w-0"},
                {"op": "add", "path": "/spec/containers/0/env/1", "value": {"name": "B", "value": "2"}},
                {"op": "add", "path": "/spec/containers/0/env/2", "value": {"name": "C", "value": "3"}},
                {"op": "add", "path": "/spec/volumes", "value": [{"name": "v"}]}
            ])
        );
        let out = apply(&pod, &patch);
        assert_eq!(out["spec"]["containers"][0]["env"][2]["name"], "C");
    }

    #[test]
    fn keys_equal_to_the_original_make_no_operation() {
        let pod = json!({"metadata": {"annotations": {"a/b": "x", "c": "old"}}, "spec": {"hostname": "h"}});
        let mut e = PodEdits::new(&pod);
        e.set_annotation("a/b", json!("x"));
        e.set_annotation("c", json!("new"));
        e.set_spec("hostname", json!("h"));
        assert_eq!(
            serde_json::to_value(e.into_patch()).unwrap(),
            json!([{"op": "replace", "path": "/metadata/annotations/c", "value": "new"}])
        );
    }
}
