//! Edits to a member pod, recorded as a JSON Patch against the original.
//!
//! Pods are the hot path of the webhook (every replica of every job), so
//! their mutation never clones or diffs the whole object: it records the keys
//! to set and the list items to append, reading the original for what is
//! already there, and emits the RFC 6902 operations at the end — a parent
//! map or list whole only when it is absent, otherwise one operation per key
//! or item. Pointer escaping (`~1`) is jsonptr's.
//!
//! Nor is a JSON tree built for what is only sent: the items dljob appends
//! most (env vars, the port) are typed and borrowed ([`Item`]), and each
//! operation's value is serialised once, when the patch is made
//! ([`PatchOperation::value`] is the JSON text).

use std::borrow::Cow;
use std::collections::BTreeMap;

use json_patch::jsonptr::Token;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::{to_raw_value, RawValue};
use serde_json::Value;

use crate::object;

/// A JSON Patch (RFC 6902), each operation's value already JSON text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Patch(pub Vec<PatchOperation>);

/// One RFC 6902 operation, its fields in the order json-patch writes
/// them (`op`, `from` of a move or copy, `path`, `value`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PatchOperation {
    pub op: Op,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The JSON Pointer, escaped.
    pub path: String,
    /// The value as JSON text (`null` included).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub value: Option<Box<RawValue>>,
}

/// A present `value`, `null` included (an `Option` alone reads `null` as
/// absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

impl PartialEq for PatchOperation {
    fn eq(&self, other: &Self) -> bool {
        (self.op, &self.path, &self.from) == (other.op, &other.path, &other.from)
            && self.value.as_ref().map(|v| v.get()) == other.value.as_ref().map(|v| v.get())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Add,
    Remove,
    Replace,
    Move,
    Copy,
    Test,
}

impl Patch {
    /// The same patch as json-patch's operations, to apply it.
    pub fn to_json_patch(&self) -> json_patch::Patch {
        let text = serde_json::to_vec(self).expect("a patch serialises");
        serde_json::from_slice(&text).expect("dljob's patch is RFC 6902")
    }
}

impl From<json_patch::Patch> for Patch {
    fn from(p: json_patch::Patch) -> Self {
        let text = serde_json::to_vec(&p).expect("a patch serialises");
        serde_json::from_slice(&text).expect("json-patch writes RFC 6902")
    }
}

fn operation(op: Op, path: String, value: &impl Serialize) -> PatchOperation {
    PatchOperation {
        op,
        path,
        from: None,
        value: Some(to_raw_value(value).expect("a patch value serialises")),
    }
}

/// `base` and one more pointer token.
fn pointer(base: &str, token: &str) -> String {
    let token = Token::new(token);
    let encoded = token.encoded();
    let mut p = String::with_capacity(base.len() + 1 + encoded.len());
    p.push_str(base);
    p.push('/');
    p.push_str(encoded);
    p
}

/// A list of the pod that dljob appends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum List {
    Env(usize),
    Ports(usize),
    Mounts(usize),
    Volumes,
    SchedulingGates,
    InitContainers,
}

impl List {
    fn tokens(self) -> (Option<usize>, &'static str) {
        match self {
            List::Env(i) => (Some(i), "env"),
            List::Ports(i) => (Some(i), "ports"),
            List::Mounts(i) => (Some(i), "volumeMounts"),
            List::Volumes => (None, "volumes"),
            List::SchedulingGates => (None, "schedulingGates"),
            List::InitContainers => (None, "initContainers"),
        }
    }

    fn pointer(self) -> String {
        match self.tokens() {
            (Some(i), key) => format!("/spec/containers/{i}/{key}"),
            (None, key) => format!("/spec/{key}"),
        }
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

/// An item dljob appends to a list of the pod: the frequent ones typed
/// and borrowed, the rest JSON.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Item<'a> {
    /// `{"name", "value"}` in a container's `env`.
    Env { name: &'a str, value: &'a str },
    /// `{"name", "valueFrom": {"fieldRef": {"fieldPath"}}}` in `env`.
    FieldEnv { name: &'a str, field_path: &'a str },
    /// `{"containerPort", "name", "protocol"}` in a container's `ports`.
    Port {
        name: &'static str,
        container_port: u16,
        protocol: &'static str,
    },
    /// Anything else (mounts, volumes, gates: one or two a pod).
    Json(Value),
}

/// Typed items serialise with their keys sorted, as a JSON tree does.
impl Serialize for Item<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct FieldRef<'a> {
            #[serde(rename = "fieldPath")]
            field_path: &'a str,
        }
        #[derive(Serialize)]
        struct ValueFrom<'a> {
            #[serde(rename = "fieldRef")]
            field_ref: FieldRef<'a>,
        }
        match self {
            Item::Env { name, value } => {
                let mut st = s.serialize_struct("EnvVar", 2)?;
                st.serialize_field("name", name)?;
                st.serialize_field("value", value)?;
                st.end()
            }
            Item::FieldEnv { name, field_path } => {
                let mut st = s.serialize_struct("EnvVar", 2)?;
                st.serialize_field("name", name)?;
                st.serialize_field(
                    "valueFrom",
                    &ValueFrom {
                        field_ref: FieldRef { field_path },
                    },
                )?;
                st.end()
            }
            Item::Port {
                name,
                container_port,
                protocol,
            } => {
                let mut st = s.serialize_struct("ContainerPort", 3)?;
                st.serialize_field("containerPort", container_port)?;
                st.serialize_field("name", name)?;
                st.serialize_field("protocol", protocol)?;
                st.end()
            }
            Item::Json(v) => v.serialize(s),
        }
    }
}

impl Item<'_> {
    /// The item as a JSON tree (for the rare comparisons with a user's).
    pub(crate) fn to_value(&self) -> Cow<'_, Value> {
        match self {
            Item::Json(v) => Cow::Borrowed(v),
            typed => Cow::Owned(serde_json::to_value(typed).expect("an item serialises")),
        }
    }
}

/// An item of a list as the edits see it: the original pod's, or one
/// appended so far.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Seen<'e, 'a> {
    Original(&'e Value),
    Pending(&'e Item<'a>),
}

impl<'e> Seen<'e, '_> {
    /// Its `name` (empty when it has none).
    pub(crate) fn name(self) -> &'e str {
        match self {
            Seen::Original(v) | Seen::Pending(Item::Json(v)) => object::name_of(v),
            Seen::Pending(Item::Env { name, .. } | Item::FieldEnv { name, .. }) => name,
            Seen::Pending(Item::Port { name, .. }) => name,
        }
    }

    /// An env var's literal value (`""` when it has none); `None` when it
    /// is set from a source (`valueFrom`).
    pub(crate) fn literal_value(self) -> Option<&'e str> {
        match self {
            Seen::Original(v) | Seen::Pending(Item::Json(v)) => match v.get("valueFrom") {
                Some(_) => None,
                None => Some(v.get("value").and_then(Value::as_str).unwrap_or("")),
            },
            Seen::Pending(Item::Env { value, .. }) => Some(value),
            Seen::Pending(Item::FieldEnv { .. } | Item::Port { .. }) => None,
        }
    }

    /// A port's `containerPort`.
    pub(crate) fn container_port(self) -> Option<u64> {
        match self {
            Seen::Original(v) | Seen::Pending(Item::Json(v)) => {
                v.get("containerPort").and_then(Value::as_u64)
            }
            Seen::Pending(Item::Port { container_port, .. }) => Some(u64::from(*container_port)),
            Seen::Pending(Item::Env { .. } | Item::FieldEnv { .. }) => None,
        }
    }

    /// The item as a JSON tree.
    pub(crate) fn to_value(self) -> Cow<'e, Value> {
        match self {
            Seen::Original(v) => Cow::Borrowed(v),
            Seen::Pending(item) => item.to_value(),
        }
    }
}

/// Pending edits to one pod.
pub(crate) struct PodEdits<'a> {
    pod: &'a Value,
    labels: Vec<(&'static str, String)>,
    annotations: Vec<(Cow<'static, str>, String)>,
    removed_annotations: Vec<&'static str>,
    spec: Vec<(&'static str, Value)>,
    /// Keys of a container: (container index, key, value).
    container_keys: Vec<(usize, &'static str, Value)>,
    /// Per list, the items to put before the original ones (in order) and
    /// those to put after them.
    appends: Vec<(List, Added<'a>)>,
}

/// What is added to one list: before its original items, before a given
/// original item, and after them all.
#[derive(Default)]
struct Added<'a> {
    front: Vec<Item<'a>>,
    /// (original index, item): put just before that original item, in
    /// the order of the indexes (then of their adding).
    before: Vec<(usize, Item<'a>)>,
    back: Vec<Item<'a>>,
}

impl<'a> PodEdits<'a> {
    pub(crate) fn new(pod: &'a Value) -> Self {
        Self {
            pod,
            labels: Vec::new(),
            annotations: Vec::new(),
            removed_annotations: Vec::new(),
            spec: Vec::new(),
            container_keys: Vec::new(),
            appends: Vec::with_capacity(6),
        }
    }

    /// The original pod.
    pub(crate) fn pod(&self) -> &'a Value {
        self.pod
    }

    /// Sets `metadata.labels[key]`.
    pub(crate) fn set_label(&mut self, key: &'static str, value: String) {
        self.labels.push((key, value));
    }

    /// Sets `metadata.annotations[key]`.
    pub(crate) fn set_annotation(&mut self, key: impl Into<Cow<'static, str>>, value: String) {
        self.annotations.push((key.into(), value));
    }

    /// Removes `metadata.annotations[key]` (the original pod's).
    pub(crate) fn remove_annotation(&mut self, key: &'static str) {
        self.removed_annotations.push(key);
    }

    /// Sets `spec[key]`.
    pub(crate) fn set_spec(&mut self, key: &'static str, value: Value) {
        self.spec.push((key, value));
    }

    /// Sets `spec.containers[container][key]`.
    pub(crate) fn set_container(&mut self, container: usize, key: &'static str, value: Value) {
        self.container_keys.push((container, key, value));
    }

    /// Items of `list` in the order the patch leaves them: those put in
    /// front so far, the original ones, then those appended so far.
    pub(crate) fn items(&self, list: List) -> impl Iterator<Item = Seen<'_, 'a>> {
        let original = list.original(self.pod).map(Vec::as_slice).unwrap_or(&[]);
        let (front, before, back) = self
            .appends
            .iter()
            .find(|(l, _)| *l == list)
            .map(|(_, a)| (a.front.as_slice(), a.before.as_slice(), a.back.as_slice()))
            .unwrap_or((&[], &[], &[]));
        front
            .iter()
            .map(Seen::Pending)
            .chain(original.iter().enumerate().flat_map(move |(k, item)| {
                before
                    .iter()
                    .filter(move |(at, _)| *at == k)
                    .map(|(_, added)| Seen::Pending(added))
                    .chain(std::iter::once(Seen::Original(item)))
            }))
            .chain(back.iter().map(Seen::Pending))
    }

    fn added(&mut self, list: List) -> &mut Added<'a> {
        let at = match self.appends.iter().position(|(l, _)| *l == list) {
            Some(at) => at,
            None => {
                self.appends.push((list, Added::default()));
                self.appends.len() - 1
            }
        };
        &mut self.appends[at].1
    }

    /// Appends `item` to `list`.
    pub(crate) fn append(&mut self, list: List, item: Item<'a>) {
        self.added(list).back.push(item);
    }

    /// Puts `item` before the original items of `list` (after those put
    /// there before it): an env var there can be named by the user's own
    /// vars as `$(NAME)`, which Kubernetes expands from earlier ones only.
    pub(crate) fn prepend(&mut self, list: List, item: Item<'a>) {
        self.added(list).front.push(item);
    }

    /// Puts `item` just before the original item at `index` of `list` (or
    /// after them all when there is none there).
    pub(crate) fn insert_before(&mut self, list: List, index: usize, item: Item<'a>) {
        let len = list.original(self.pod).map_or(0, Vec::len);
        let added = self.added(list);
        if index >= len {
            added.back.push(item);
        } else {
            let at = added.before.partition_point(|(k, _)| *k <= index);
            added.before.insert(at, (index, item));
        }
    }

    /// The JSON Patch of every recorded edit.
    pub(crate) fn into_patch(self) -> Patch {
        let mut ops = Vec::new();
        let meta = self.pod.get("metadata");
        let original = meta.and_then(|m| m.get("annotations"));
        for key in self.removed_annotations {
            if original.and_then(|a| a.get(key)).is_some() {
                ops.push(PatchOperation {
                    op: Op::Remove,
                    path: pointer("/metadata/annotations", key),
                    from: None,
                    value: None,
                });
            }
        }
        let labels = meta.and_then(|m| m.get("labels"));
        set_keys(&mut ops, "/metadata/labels", labels, self.labels);
        set_keys(
            &mut ops,
            "/metadata/annotations",
            original,
            self.annotations,
        );
        set_keys(&mut ops, "/spec", self.pod.get("spec"), self.spec);
        for (i, key, value) in self.container_keys {
            let container = self.pod.pointer(&format!("/spec/containers/{i}"));
            let path = format!("/spec/containers/{i}");
            set_keys(&mut ops, &path, container, vec![(key, value)]);
        }
        for (list, added) in self.appends {
            let path = list.pointer();
            match list.original(self.pod) {
                None => {
                    let mut items = added.front;
                    items.extend(added.back);
                    ops.push(operation(Op::Add, path, &items));
                }
                Some(existing) => {
                    // Each add at k inserts before what was at k, so the
                    // front items land in order before the originals, and
                    // each of the others before its original item (moved
                    // along by all that was added before it).
                    for (k, item) in added.front.iter().enumerate() {
                        ops.push(operation(Op::Add, format!("{path}/{k}"), item));
                    }
                    let front = added.front.len();
                    for (n, (k, item)) in added.before.iter().enumerate() {
                        ops.push(operation(
                            Op::Add,
                            format!("{path}/{}", front + n + k),
                            item,
                        ));
                    }
                    let end = existing.len() + front + added.before.len();
                    for (k, item) in added.back.iter().enumerate() {
                        ops.push(operation(Op::Add, format!("{path}/{}", end + k), item));
                    }
                }
            }
        }
        Patch(ops)
    }
}

/// Sets keys of the map at `path`: the whole map when it is absent (its
/// keys sorted, the last value of a key set twice, as a JSON tree has
/// them), else one add/replace per key that differs.
fn set_keys<K: AsRef<str> + Ord + Serialize, V: Serialize + PartialEq<Value>>(
    ops: &mut Vec<PatchOperation>,
    path: &str,
    existing: Option<&Value>,
    keys: Vec<(K, V)>,
) {
    if keys.is_empty() {
        return;
    }
    match existing.and_then(Value::as_object) {
        None => {
            let map: BTreeMap<K, V> = keys.into_iter().collect();
            ops.push(operation(Op::Add, path.to_owned(), &map));
        }
        Some(map) => {
            for (k, v) in keys {
                let k = k.as_ref();
                let op = match map.get(k) {
                    Some(old) if v == *old => continue,
                    Some(_) => Op::Replace,
                    None => Op::Add,
                };
                ops.push(operation(op, pointer(path, k), &v));
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
        json_patch::patch(&mut out, &patch.to_json_patch()).unwrap();
        out
    }

    #[test]
    fn absent_parents_are_added_whole_and_present_ones_per_item() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}});
        let mut e = PodEdits::new(&pod);
        e.set_annotation("dljob.dev/hostfile", "h\n".into());
        e.set_spec("hostname", json!("j-w-0"));
        e.append(
            List::Env(0),
            Item::Env {
                name: "B",
                value: "2",
            },
        );
        e.append(
            List::Env(0),
            Item::Env {
                name: "C",
                value: "3",
            },
        );
        e.append(List::Volumes, Item::Json(json!({"name": "v"})));
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
    fn items_put_in_front_come_before_the_originals_in_order() {
        let pod = json!({"spec": {"containers": [{"name": "c", "env": [{"name": "U", "value": "$(B)"}]}]}});
        let mut e = PodEdits::new(&pod);
        let env = |name| Item::Env { name, value: "v" };
        e.prepend(List::Env(0), env("A"));
        e.append(List::Env(0), env("Z"));
        e.prepend(List::Env(0), env("B"));
        let names: Vec<&str> = e.items(List::Env(0)).map(|s| s.name()).collect();
        assert_eq!(names, ["A", "B", "U", "Z"]);
        let patch = e.into_patch();
        let paths: Vec<&str> = patch.0.iter().map(|o| o.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/spec/containers/0/env/0",
                "/spec/containers/0/env/1",
                "/spec/containers/0/env/3"
            ]
        );
        let out = apply(&pod, &patch);
        let names: Vec<&str> = out["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["A", "B", "U", "Z"]);
        // Absent list: one add, front items first.
        let bare = json!({"spec": {"containers": [{"name": "c"}]}});
        let mut e = PodEdits::new(&bare);
        e.append(List::Env(0), env("Z"));
        e.prepend(List::Env(0), env("A"));
        let out = apply(&bare, &e.into_patch());
        assert_eq!(out["spec"]["containers"][0]["env"][0]["name"], "A");
        assert_eq!(out["spec"]["containers"][0]["env"][1]["name"], "Z");
    }

    #[test]
    fn items_put_before_an_original_land_there_in_order() {
        let pod = json!({"spec": {"containers": [{"name": "c"}], "initContainers": [
            {"name": "A", "restartPolicy": "Always"}, {"name": "B"}, {"name": "C"}
        ]}});
        let mut e = PodEdits::new(&pod);
        let init = |name: &str| Item::Json(json!({"name": name}));
        e.insert_before(List::InitContainers, 1, init("X"));
        e.append(List::InitContainers, init("L"));
        e.insert_before(List::InitContainers, 2, init("Z"));
        e.insert_before(List::InitContainers, 1, init("Y"));
        e.prepend(List::InitContainers, init("F"));
        // Past the last original: after them all.
        e.insert_before(List::InitContainers, 9, init("M"));
        let want = ["F", "A", "X", "Y", "B", "Z", "C", "L", "M"];
        let names: Vec<String> = e
            .items(List::InitContainers)
            .map(|s| s.name().to_owned())
            .collect();
        assert_eq!(names, want);
        let out = apply(&pod, &e.into_patch());
        let names: Vec<&str> = out["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, want);
    }

    #[test]
    fn keys_equal_to_the_original_make_no_operation() {
        let pod = json!({"metadata": {"annotations": {"a/b": "x", "c": "old"}}, "spec": {"hostname": "h"}});
        let mut e = PodEdits::new(&pod);
        e.set_annotation("a/b", "x".into());
        e.set_annotation("c", "new".into());
        e.set_annotation("d/e", "added".into());
        e.set_spec("hostname", json!("h"));
        assert_eq!(
            serde_json::to_value(e.into_patch()).unwrap(),
            json!([
                {"op": "replace", "path": "/metadata/annotations/c", "value": "new"},
                {"op": "add", "path": "/metadata/annotations/d~1e", "value": "added"}
            ])
        );
    }

    /// The bytes of a typed item are those of the JSON tree it stands
    /// for (keys sorted, numbers as numbers, strings escaped alike).
    #[test]
    fn typed_items_serialise_as_their_json_trees_do() {
        let items = [
            Item::Env {
                name: "MASTER_ADDR",
                value: "j-master-0.j",
            },
            Item::Env {
                name: "Q",
                value: "a \"quoted\"\nline\\ é",
            },
            Item::FieldEnv {
                name: "POD_IP",
                field_path: "status.podIP",
            },
            Item::Port {
                name: "dljob",
                container_port: 29500,
                protocol: "TCP",
            },
            Item::Json(json!({"name": "v", "readOnly": true})),
        ];
        // The Kubernetes shapes they stand for, spelled out.
        let trees = [
            json!({"name": "MASTER_ADDR", "value": "j-master-0.j"}),
            json!({"name": "Q", "value": "a \"quoted\"\nline\\ é"}),
            json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
            json!({"containerPort": 29500, "name": "dljob", "protocol": "TCP"}),
            json!({"name": "v", "readOnly": true}),
        ];
        for (item, expected) in items.iter().zip(&trees) {
            assert_eq!(&*item.to_value(), expected, "{item:?}");
        }
        for item in &items {
            // A tree serialises with its keys sorted: the item's own bytes
            // must be the same.
            let tree = serde_json::to_string(&*item.to_value()).unwrap();
            assert_eq!(serde_json::to_string(item).unwrap(), tree, "{item:?}");
            assert_eq!(
                Seen::Pending(item).name(),
                object::name_of(&item.to_value())
            );
        }
        let env = Seen::Pending(&items[0]);
        assert_eq!(env.literal_value(), Some("j-master-0.j"));
        assert_eq!(Seen::Pending(&items[2]).literal_value(), None);
        assert_eq!(Seen::Pending(&items[3]).container_port(), Some(29500));
        let original =
            json!({"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}});
        assert_eq!(Seen::Original(&original).literal_value(), None);
        assert_eq!(
            Seen::Original(&json!({"name": "Y"})).literal_value(),
            Some("")
        );
    }

    /// A map added whole has its keys sorted and the last value of a key
    /// set twice, as the JSON tree it replaces had.
    #[test]
    fn a_map_added_whole_is_sorted_and_keeps_the_last_value() {
        let pod = json!({"metadata": {}});
        let mut e = PodEdits::new(&pod);
        e.set_label("z", "1".into());
        e.set_label("a", "2".into());
        e.set_label("z", "3".into());
        let patch = e.into_patch();
        assert_eq!(
            serde_json::to_string(&patch).unwrap(),
            r#"[{"op":"add","path":"/metadata/labels","value":{"a":"2","z":"3"}}]"#
        );
    }

    /// json-patch's operations (the workloads' diff) convert both ways
    /// unchanged, a `null` value included (not read as absent).
    #[test]
    fn json_patch_operations_convert_both_ways() {
        let ours_text = r#"[{"op":"add","path":"/a","value":null},{"op":"remove","path":"/b"},{"op":"replace","path":"/c~1d","value":{"e":[1,2]}},{"op":"move","from":"/g","path":"/f"}]"#;
        let theirs: json_patch::Patch = serde_json::from_str(ours_text).unwrap();
        let ours = Patch::from(theirs.clone());
        assert_eq!(ours.0.len(), 4);
        assert_eq!(ours.0[0].value.as_ref().map(|v| v.get()), Some("null"));
        assert_eq!(ours.to_json_patch(), theirs);
        assert_eq!(
            serde_json::to_string(&ours).unwrap(),
            serde_json::to_string(&theirs).unwrap()
        );
    }
}
