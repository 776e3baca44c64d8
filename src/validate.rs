//! The validation of ARCHITECTURE.md §4: (object, old object, peers) → warnings or
//! violations. Pure: the peers are whatever the caller knows of the job's
//! other members (the reconciler's cache in the webhook, the other documents
//! of the file offline) — never an API call.

use serde_json::Value;

use crate::config::Config;
use crate::contract::{self as c, Topology};
use crate::member::{self, job_label, MemberSpec};
use crate::object::{self, Kind, Subject};
use crate::violation::{Rule, Violations};

/// Validates `object` (with `old` on UPDATE) against the contract and
/// against `peers`, the known members of the same job (a slice of them, or
/// the reconciler's index through [`PeerSource`]). Returns the warnings to
/// show when the object is acceptable.
///
/// An UPDATE is refused only for what it breaks: a problem the object
/// already had (a StatefulSet `kubectl scale`d past its role, which the
/// scale subresource let through) does not block an update that leaves it
/// as it was — an annotation added, the reconciler scaling it to 0 — while
/// an update that brings a problem of its own is refused for it.
pub fn validate<P: PeerSource + ?Sized>(
    subject: Subject<'_>,
    config: &Config,
    peers: &P,
) -> Result<Vec<String>, Violations> {
    let Subject {
        kind,
        object,
        old,
        namespace,
    } = subject;
    let mut v = Violations::default();
    if let Some(old) = old {
        immutable_keys(kind, object, old, namespace, config, &mut v);
    }
    let operation = match old {
        Some(_) => crate::mutate::Operation::Update,
        None => crate::mutate::Operation::Create,
    };
    let new = member::parse(kind, object, namespace, config);
    let was = old.map(|o| member::parse(kind, o, namespace, config));
    // One read of the peers for both objects: what the old object already
    // had is judged against the same members as the new one.
    let mut asked = Vec::with_capacity(2);
    for parsed in std::iter::once(&new).chain(was.as_ref()) {
        if let Ok(Some(p)) = parsed {
            asked.push(&p.member);
        }
    }
    let mut answers = peers.relevant_peers_to_each(&asked).into_iter();
    let mut peers_of = |parsed: &member::Parsing| match parsed {
        Ok(Some(_)) => answers.next().unwrap_or_default(),
        _ => Vec::new(),
    };
    let (new_peers, old_peers) = (peers_of(&new), was.as_ref().map(&mut peers_of));
    let named = peers.names_peers();
    let (found, warnings) = judge(new, object, config, (&new_peers, named), operation);
    let before = match (old, was, old_peers) {
        (Some(old), Some(was), Some(old_peers)) if !found.is_empty() => {
            judge(was, old, config, (&old_peers, named), operation).0
        }
        _ => Violations::default(),
    };
    let had: std::collections::HashSet<&str> =
        before.0.iter().map(|b| b.message.as_str()).collect();
    v.0.extend(
        found
            .0
            .into_iter()
            .filter(|f| !had.contains(f.message.as_str())),
    );
    v.into_result(warnings)
}

/// Everything [`validate`] checks of one object but what an UPDATE
/// changed: its problems, and its warnings, against `peers` ([`relevant`]
/// to it; named in messages or not, [`PeerSource::names_peers`]).
fn judge(
    parsed: member::Parsing,
    object: &Value,
    config: &Config,
    (peers, named): (&[MemberSpec], bool),
    operation: crate::mutate::Operation,
) -> (Violations, Vec<String>) {
    let parsed = match parsed {
        Ok(Some(p)) => p,
        Ok(None) => return (Violations::default(), Vec::new()),
        Err(e) => return (e, Vec::new()),
    };
    let mut v = crate::mutate::pod_violations(&parsed.member, object, config, operation);
    for problem in crate::tensorboard::check(&parsed.member, object) {
        v.push(Rule::TensorBoardVolume, problem);
    }
    agree_with_peers(&parsed.member, peers, named, &mut v);
    (v, parsed.warnings)
}

/// The identity keys of an existing member cannot change on UPDATE.
fn immutable_keys(
    kind: Kind,
    new: &Value,
    old: &Value,
    namespace: Option<&str>,
    config: &Config,
    v: &mut Violations,
) {
    if job_label(old).is_none() {
        // A workload may become a member by UPDATE (its template is
        // rewritten and its pods come again, wired); a pod cannot: what
        // dljob gives a member pod (env, hostname, hostfile) is written
        // when it is created, and its spec is immutable since.
        if kind == Kind::Pod {
            if let Some(job) = job_label(new) {
                v.push(
                    Rule::JoinByUpdate,
                    format!(
                        "an existing pod cannot join job \"{job}\": dljob wires a member pod when it is created; create the pod with {}, {} and {} instead of adding them",
                        c::JOB,
                        c::ROLE,
                        c::INDEX
                    ),
                );
            }
        }
        return;
    }
    // As the member is read: a workload's own metadata, else its pod
    // template's (a key set only in the template counts the same).
    let read = |o: &Value, which: &str, k: &str| {
        object::meta_str(o, &[], which, k)
            .or_else(|| match kind {
                Kind::Pod => None,
                _ => object::meta_str(o, Kind::StatefulSet.pod_path(), which, k),
            })
            .map(str::to_owned)
    };
    let label = |o: &Value, k: &str| read(o, "labels", k);
    let annotation = |o: &Value, k: &str| read(o, "annotations", k);
    for (key, before, after) in [
        (c::JOB, label(old, c::JOB), label(new, c::JOB)),
        (c::ROLE, label(old, c::ROLE), label(new, c::ROLE)),
        (
            c::FRAMEWORK,
            annotation(old, c::FRAMEWORK),
            annotation(new, c::FRAMEWORK),
        ),
        // A pod's index is its hostname and rank, fixed at creation; a
        // set's offset moves every index of its pods.
        (
            c::INDEX,
            annotation(old, c::INDEX).filter(|_| kind == Kind::Pod),
            annotation(new, c::INDEX).filter(|_| kind == Kind::Pod),
        ),
        (
            c::INDEX_OFFSET,
            annotation(old, c::INDEX_OFFSET),
            annotation(new, c::INDEX_OFFSET),
        ),
    ] {
        if before != after {
            v.push(
                Rule::ImmutableKey,
                changed(key, before.as_deref(), after.as_deref()),
            );
        }
    }
    // What dljob wrote on a member pod at its creation for the kubelet to
    // project into its files (/etc/dljob/hostfile, /etc/volcano/*.host)
    // stays as written: changed, the kubelet would rewrite those files in
    // the running pod.
    if kind == Kind::Pod {
        let projected = |o: &Value| -> std::collections::BTreeMap<String, String> {
            object::string_map(o, &[], "annotations")
                .into_iter()
                .flatten()
                .filter(|(k, _)| {
                    k.as_str() == c::HOSTFILE || k.starts_with(c::VOLCANO_HOSTS_PREFIX)
                })
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        };
        let (before, after) = (projected(old), projected(new));
        let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        for key in keys {
            let (b, a) = (before.get(key), after.get(key));
            if b != a {
                v.push(
                    Rule::ImmutableKey,
                    format!(
                        "{} is written by dljob when a member pod is created, and the kubelet keeps a file of the running pod equal to it: it cannot change ({}); delete the pod to have it created again",
                        c::quoted(key),
                        changed_value(b.map(String::as_str), a.map(String::as_str))
                    ),
                );
            }
        }
    }
    // The reconciler's mark of a finished run is added once and never
    // changed or removed: taken off, the leftovers would count again.
    // (On the object itself: the reconciler marks the workload, not its
    // template.)
    let mark =
        |o: &Value| object::meta_str(o, &[], "annotations", c::FINISHED_RUN).map(str::to_owned);
    if let (Some(before), after) = (mark(old), mark(new)) {
        if after.as_deref() != Some(before.as_str()) {
            v.push(
                Rule::ImmutableKey,
                format!(
                    "{} marks what a finished run left and cannot change or be removed ({}): delete this member to start the job again",
                    c::FINISHED_RUN,
                    changed_value(Some(&before), after.as_deref())
                ),
            );
        }
    }
    // The topology compares as written or inferred, so that scaling a
    // single-role workload counts as a change too.
    let parsed = |o: &Value| member::parse(kind, o, namespace, config).ok().flatten();
    let (parsed_old, parsed_new) = (parsed(old), parsed(new));
    // Whichever source gives a pod its index (dljob.dev/index, the
    // controllers' pod-index and completion-index keys, its controller
    // reference, the offset), the index itself cannot change: a worker
    // must not become the coordinator by a relabel. (A change of
    // dljob.dev/index itself is said above.)
    if kind == Kind::Pod && annotation(old, c::INDEX) == annotation(new, c::INDEX) {
        let index = |p: &Option<member::Parsed>| p.as_ref().and_then(|p| p.member.index);
        let (before, after) = (index(&parsed_old), index(&parsed_new));
        // (A new object that is no member, or no valid one, is said
        // otherwise.)
        if let (Some(before), Some(after)) = (before, after) {
            if before != after {
                let sources = [c::INDEX, c::K8S_POD_INDEX, c::K8S_JOB_COMPLETION_INDEX];
                v.push(
                    Rule::ImmutableKey,
                    format!(
                        "the pod's index cannot change on an existing member ({before} → {after}, from its {}, {}, {} or controller): delete the pod to change it",
                        sources[0], sources[1], sources[2]
                    ),
                );
            }
        }
    }
    let effective = |o: &Value, p: &Option<member::Parsed>| -> Option<Topology> {
        match p {
            Some(p) => Some(p.member.spec.replicas.clone()),
            None => annotation(o, c::REPLICAS).and_then(|t| Topology::parse(&t).ok()),
        }
    };
    let (before, after) = (effective(old, &parsed_old), effective(new, &parsed_new));
    let same = match (&before, &after) {
        (Some(a), Some(b)) => a == b,
        (None, None) => annotation(old, c::REPLICAS) == annotation(new, c::REPLICAS),
        _ => false,
    };
    if !same {
        let show = |t: &Option<Topology>, o: &Value| {
            t.as_ref()
                .map(ToString::to_string)
                .or_else(|| annotation(o, c::REPLICAS))
        };
        v.push(
            Rule::ImmutableKey,
            changed(
                c::REPLICAS,
                show(&before, old).as_deref(),
                show(&after, new).as_deref(),
            ),
        );
    }
}

fn changed(key: &str, before: Option<&str>, after: Option<&str>) -> String {
    format!(
        "{key} cannot change on an existing member ({}): delete and recreate the job's members to change it",
        changed_value(before, after)
    )
}

/// `"before" → "after"`, each quoted in at most [`c::MAX_QUOTED`] bytes.
fn changed_value(before: Option<&str>, after: Option<&str>) -> String {
    let show =
        |s: Option<&str>| s.map_or("(unset)".to_owned(), |s| format!("\"{}\"", c::quoted(s)));
    format!("{} → {}", show(before), show(after))
}

/// Every member of a job agrees on framework, topology and policies, and no
/// two pods claim the same (role, index). `peers` are those [`relevant`]
/// chose.
/// `m` against the job's other members: the same job-wide spec, no
/// replica claimed twice. `named`: the messages name the other member and
/// its values; otherwise (a client dljob did not authenticate) they say
/// only what is wrong with `m` and how to list the job's members.
fn agree_with_peers(m: &MemberSpec, peers: &[MemberSpec], named: bool, v: &mut Violations) {
    let list = format!(
        " (kubectl get pods,statefulsets,jobs -l {}={} lists them)",
        c::JOB,
        m.job
    );
    for peer in peers {
        if !is_peer(m, peer) {
            continue;
        }
        let who = if named {
            format!("{} \"{}\"", peer.kind.as_str(), peer.name)
        } else {
            format!("another {}", peer.kind.as_str())
        };
        let hint = if named { "" } else { list.as_str() };
        // Left running by a finished run: it binds a new run to nothing,
        // but still holds its replica's hostname.
        let (who, finished) = match &peer.finished_run {
            Some(_) => (
                format!("{who} (left running by a finished run of the job: delete it first)"),
                true,
            ),
            None => (who, false),
        };
        for (what, value, theirs) in m
            .spec
            .differences(&peer.spec)
            .into_iter()
            .filter(|_| !finished)
        {
            let theirs = if named {
                format!("{theirs} on")
            } else {
                "another value on".to_owned()
            };
            v.push(Rule::PeerDisagrees, format!(
                "{what} is {value} here but {theirs} {who} of job \"{}\"; every member of a job must agree{hint}",
                m.job
            ));
        }
        if m.kind == Kind::Pod
            && peer.kind == Kind::Pod
            && peer.role == m.role
            && peer.index == m.index
        {
            v.push(
                Rule::DuplicateReplica,
                format!(
                    "{who} already is {} {} of job \"{}\"; give this pod another {}{hint}",
                    m.role,
                    m.index.unwrap_or(0),
                    m.job,
                    c::INDEX
                ),
            );
        }
        if peer.role == m.role {
            if let Some(message) = overlap(m, peer, &who, named) {
                v.push(Rule::DuplicateReplica, format!("{message}{hint}"));
            }
        }
    }
}

/// The indexes of its role a member covers: a plain pod its own, a
/// workload `offset..offset + size` (a workload without
/// `dljob.dev/index-offset` is the whole role: its count, or the size it
/// has now where the role is elastic and resizes).
pub(crate) fn covers(m: &MemberSpec) -> Option<(u32, u32)> {
    match m.kind {
        Kind::Pod if m.owner == member::PodOwner::None => m.index.map(|i| (i, i + 1)),
        Kind::Pod => None, // a workload's pod: its workload covers it
        _ => {
            let offset = m.index_offset.unwrap_or(0);
            let size = m.size.unwrap_or(0);
            let resizes =
                crate::frameworks::ElasticRole::of(m.framework, &m.spec.replicas, m.spec.elastic)
                    .is_some_and(|e| e.role == m.role);
            let end = if m.index_offset.is_some() || resizes {
                offset.saturating_add(size)
            } else {
                m.spec.replicas.count_or_zero(&m.role)
            };
            Some((offset, end))
        }
    }
}

/// Two members of one role that claim the same index, named with both
/// ranges. Two plain pods claiming one index are caught by the pods' check.
fn overlap(m: &MemberSpec, peer: &MemberSpec, who: &str, named: bool) -> Option<String> {
    if m.kind == Kind::Pod && peer.kind == Kind::Pod {
        return None;
    }
    let ((a0, a1), (b0, b1)) = (covers(m)?, covers(peer)?);
    if a0 >= b1 || b0 >= a1 {
        return None;
    }
    let show = |(s, e): (u32, u32)| {
        if e == s + 1 {
            format!("{} {s}", m.role)
        } else {
            format!("{} {s} to {}", m.role, e.saturating_sub(1))
        }
    };
    let whole = |x: &MemberSpec| x.kind != Kind::Pod && x.index_offset.is_none();
    let fix = if m.kind == Kind::Pod {
        format!("give this pod another {}", c::INDEX)
    } else if peer.kind == Kind::Pod {
        format!("move this set's range ({}) past it", c::INDEX_OFFSET)
    } else if whole(m) || whole(peer) {
        format!(
            "a role split over several workloads needs {} on each (the first index it covers)",
            c::INDEX_OFFSET
        )
    } else {
        format!("give each set its own range with {}", c::INDEX_OFFSET)
    };
    let theirs = if named {
        show((b0, b1))
    } else {
        "some of them".to_owned()
    };
    Some(format!(
        "this {} covers {} but {who} of job \"{}\" already covers {theirs}: {fix}",
        m.kind.as_str(),
        show((a0, a1)),
        m.job,
    ))
}

/// Whether `peer` is another member of `m`'s job (not `m` itself).
fn is_peer(m: &MemberSpec, peer: &MemberSpec) -> bool {
    peer.job == m.job
        && peer.namespace == m.namespace
        && !(peer.kind == m.kind && !m.name.is_empty() && peer.name == m.name)
}

/// Whether `peer`, a member of `m`'s role, claims an index `m` claims:
/// the same pod index, or overlapping ranges ([`overlap`]).
pub(crate) fn same_replicas(m: &MemberSpec, peer: &MemberSpec) -> bool {
    peer.role == m.role
        && ((m.kind == Kind::Pod && peer.kind == Kind::Pod && peer.index == m.index)
            || covers_overlap(m, peer))
}

fn covers_overlap(m: &MemberSpec, peer: &MemberSpec) -> bool {
    if m.kind == Kind::Pod && peer.kind == Kind::Pod {
        return false;
    }
    match (covers(m), covers(peer)) {
        (Some((a0, a1)), Some((b0, b1))) => a0 < b1 && b0 < a1,
        _ => false,
    }
}

/// The members of a job that `m`'s checks against its peers concern, in
/// their order: for each job-wide spec other than `m`'s, the first live
/// member of a running run holding it (a disagreement is reported once per
/// spec, naming one member, not once per member: a 1 000-member job with
/// another port is one line), every pod at `m`'s index and every member of
/// its role whose range overlaps `m`'s. What is not chosen could add no
/// refusal. Linear in `peers`; the reconciler's index answers the same
/// from its per-job tallies ([`PeerSource::relevant_peers`]).
pub fn relevant<'p>(
    m: &MemberSpec,
    peers: impl IntoIterator<Item = &'p MemberSpec>,
) -> Vec<&'p MemberSpec> {
    let mut specs = Vec::new();
    let mut out = Vec::new();
    for peer in peers {
        if !is_peer(m, peer) {
            continue;
        }
        let other_spec =
            peer.finished_run.is_none() && peer.spec != m.spec && !specs.contains(&&peer.spec);
        if other_spec {
            specs.push(&peer.spec);
        }
        if other_spec || same_replicas(m, peer) {
            out.push(peer);
        }
    }
    out
}

/// A manifest's members as the peers of one another (offline: `dljob
/// validate`, the tests).
impl PeerSource for [MemberSpec] {
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec> {
        self.iter()
            .filter(|p| p.namespace == namespace && p.job == job)
            .cloned()
            .collect()
    }
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        relevant(m, self).into_iter().cloned().collect()
    }
}

impl PeerSource for Vec<MemberSpec> {
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec> {
        self.as_slice().peers(namespace, job)
    }
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        self.as_slice().relevant_peers(m)
    }
}

impl<const N: usize> PeerSource for [MemberSpec; N] {
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec> {
        self.as_slice().peers(namespace, job)
    }
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        self.as_slice().relevant_peers(m)
    }
}

/// Parses the peers among `objects` (e.g. the documents of one file),
/// ignoring what does not parse (it is reported on its own).
pub fn peers_of<'a>(
    objects: impl IntoIterator<Item = (Kind, &'a Value)>,
    namespace: Option<&str>,
    config: &Config,
) -> Vec<MemberSpec> {
    objects
        .into_iter()
        .filter_map(|(k, o)| member::parse(k, o, namespace, config).ok().flatten())
        .map(|p| p.member)
        .collect()
}

/// What the validating webhook knows of a job's other members: the
/// reconciler's in-process cache in the server, nothing offline. It must
/// answer from memory; admission never waits on the API server.
pub trait PeerSource: Send + Sync {
    /// Known members of job `job` in `namespace`.
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec>;
    /// The known members of `m`'s job that its checks concern
    /// ([`relevant`]). What the webhook asks for on every review: a source
    /// holding many members answers it without going through them all.
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        relevant(m, &self.peers(&m.namespace, &m.job))
            .into_iter()
            .cloned()
            .collect()
    }
    /// [`PeerSource::relevant_peers`] to each of `ms` (an UPDATE's new and
    /// old object), from one view of the members: a member that comes or
    /// goes between two reads cannot make the two judgements disagree.
    fn relevant_peers_to_each(&self, ms: &[&MemberSpec]) -> Vec<Vec<MemberSpec>> {
        ms.iter().map(|m| self.relevant_peers(m)).collect()
    }
    /// Whether denials may name the peers (their names, values, ranges).
    /// A server whose clients are not authenticated answers for every
    /// namespace to whoever connects, so it says only what is wrong with
    /// the object reviewed ([`Withheld`]).
    fn names_peers(&self) -> bool {
        true
    }
    /// Whether the source has seen every member once (a cache that has not
    /// listed yet would let a disagreeing member through): the server is
    /// not ready before.
    fn synced(&self) -> bool {
        true
    }
}

/// A [`PeerSource`] whose peers are not named in messages: the server's,
/// when its clients are not authenticated (no `--client-ca`).
pub struct Withheld(pub std::sync::Arc<dyn PeerSource>);

impl PeerSource for Withheld {
    fn peers(&self, namespace: &str, job: &str) -> Vec<MemberSpec> {
        self.0.peers(namespace, job)
    }
    fn relevant_peers(&self, m: &MemberSpec) -> Vec<MemberSpec> {
        self.0.relevant_peers(m)
    }
    fn relevant_peers_to_each(&self, ms: &[&MemberSpec]) -> Vec<Vec<MemberSpec>> {
        self.0.relevant_peers_to_each(ms)
    }
    fn names_peers(&self) -> bool {
        false
    }
    fn synced(&self) -> bool {
        self.0.synced()
    }
}

/// No cluster: no peers.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoPeers;

impl PeerSource for NoPeers {
    fn peers(&self, _namespace: &str, _job: &str) -> Vec<MemberSpec> {
        Vec::new()
    }
}
