//! `dljob label`: the dljob labels and annotations a set of manifests needs
//! to become one job, added to the documents as written.
//!
//! Pure: (documents, options) → (documents, warnings) or problems. The
//! members are the documents of the kinds dljob handles (Pod, apps/v1
//! StatefulSet, batch/v1 Job); every other document passes through as
//! written. What is added is decided on the parsed values; the text of a
//! changed document is then edited in place with `yaml-edit` (comments,
//! key order and formatting kept), and the edit is read back and compared
//! with the intended value. Should the two differ, the document is
//! re-serialised with serde-saphyr instead (its comments and formatting are
//! lost) and a warning says so. Existing dljob keys are kept when they
//! agree and never overwritten: a disagreeing one is a problem naming it.

use std::collections::BTreeMap;
use std::str::FromStr;

use serde_json::Value;

use crate::config::Config;
use crate::contract::{self as c, Topology};
use crate::frameworks::{self, Framework, Roles};
use crate::manifest::{self, describe, Document};
use crate::object::{self, Kind};

/// What `dljob label` was asked to do.
#[derive(Clone, Debug)]
pub(crate) struct Options<'a> {
    /// `--job`.
    pub job: &'a str,
    /// `--framework`.
    pub framework: &'a str,
    /// `--role KIND/NAME=ROLE`, as given.
    pub roles: &'a [String],
    /// `--set KEY=VALUE`, as given.
    pub set: &'a [String],
    /// `-n`: the namespace of objects that name none (for validation).
    pub namespace: &'a str,
}

/// The labelled documents.
#[derive(Debug)]
pub(crate) struct Labelled {
    /// Every document, in input order: changed ones with their new text
    /// and value, the others as they were.
    pub documents: Vec<Document>,
    /// Which documents changed.
    pub changed: Vec<bool>,
    /// Validation warnings and notes on documents re-serialised.
    pub warnings: Vec<String>,
}

/// The annotations `--set` takes: the job-wide ones dljob label does not
/// compute itself.
pub(crate) fn settable() -> impl Iterator<Item = &'static str> {
    c::JOB_WIDE_ANNOTATIONS
        .iter()
        .copied()
        .filter(|k| *k != c::FRAMEWORK && *k != c::REPLICAS)
}

/// "port, slots, …" for messages.
fn settable_list() -> String {
    settable().map(short).collect::<Vec<_>>().join(", ")
}

fn short(key: &str) -> &str {
    key.strip_prefix("dljob.dev/").unwrap_or(key)
}

/// One key to add to a document.
#[derive(Clone, Debug)]
struct Edit {
    /// In the pod template's metadata (else the object's own).
    template: bool,
    /// `labels` or `annotations`.
    which: &'static str,
    key: &'static str,
    value: String,
}

/// A member document.
struct Member<'a> {
    doc: usize,
    kind: Kind,
    value: &'a Value,
    /// `Kind/name`.
    display: String,
    /// `metadata.name` (or `generateName`).
    name: String,
    role: Option<String>,
    edits: Vec<Edit>,
}

impl Member<'_> {
    fn own(&self, which: &str, key: &str) -> Option<&str> {
        object::meta_str(self.value, &[], which, key)
    }
    fn template(&self, which: &str, key: &str) -> Option<&str> {
        object::meta_str(self.value, Kind::StatefulSet.pod_path(), which, key)
    }
}

/// Labels the documents; `Err` lists every problem (nothing should be
/// written then). In phases, each stopping at its problems: the inputs
/// checked and the members found, their roles, the topology they add up
/// to, what is job-wide (replicas, `--set`, the sets' ranges and slots),
/// each pod's index, the keys each member needs, the edits applied to
/// the text, and the output validated as `dljob validate` would.
pub(crate) fn label(
    docs: &[Document],
    opts: &Options<'_>,
    config: &Config,
) -> Result<Labelled, Vec<String>> {
    let Inputs {
        framework,
        set,
        mut members,
    } = inputs(docs, opts)?;
    let mut problems = Vec::new();
    assign_roles(&mut members, framework, opts, &mut problems);
    stop_at(problems)?;
    let computed = topology(&members, framework)?;

    let mut problems = Vec::new();
    let replicas = replicas_annotation(&members, &computed, &mut problems);
    let mut policies = job_wide(&members, &set, &mut problems);
    let ranges = set_ranges(&members, &computed, &mut problems);
    let claims = ClaimTemplates::of(docs);
    if let Some(slots) = worker_slots(
        &members,
        framework,
        &ranges,
        &policies,
        &claims,
        &mut problems,
    ) {
        policies.push((c::SLOTS, slots));
    }
    let job_wide = JobWide {
        replicas,
        policies,
        indexes: pod_indexes(&members, &computed, &ranges),
        offsets: ranges.offsets,
    };
    for (i, m) in members.iter_mut().enumerate() {
        plan_edits(m, i, framework, opts.job, &job_wide, &mut problems);
    }
    stop_at(problems)?;

    let mut labelled = apply(docs, &members)?;
    // The output must pass `dljob validate`.
    let (invalid, warnings) = manifest::validate(&labelled.documents, Some(opts.namespace), config);
    if !invalid.is_empty() {
        return Err(invalid
            .into_iter()
            .map(|(name, p)| format!("{name}: {p}"))
            .collect());
    }
    labelled.warnings.extend(warnings);
    Ok(labelled)
}

/// `Err(problems)` unless there are none.
fn stop_at(problems: Vec<String>) -> Result<(), Vec<String>> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// What `dljob label` starts from, once the options check out.
struct Inputs<'d> {
    framework: &'static dyn Framework,
    /// `--set`, parsed.
    set: Vec<(&'static str, String)>,
    members: Vec<Member<'d>>,
}

/// The framework, the `--set` pairs and the member documents, once the
/// options check out.
fn inputs<'d>(docs: &'d [Document], opts: &Options<'_>) -> Result<Inputs<'d>, Vec<String>> {
    let mut problems = Vec::new();
    let framework = frameworks::by_name(opts.framework);
    if framework.is_none() {
        problems.push(format!(
            "--framework \"{}\" is not a framework dljob knows; frameworks are {}",
            opts.framework,
            frameworks::names()
        ));
    }
    if !c::is_dns1035_label(opts.job) || opts.job.len() > c::MAX_JOB_NAME {
        problems.push(format!(
            "--job \"{}\" is not a valid job name: use at most {} lowercase letters, digits and '-', starting with a letter (it names the Service and every pod's hostname)",
            opts.job,
            c::MAX_JOB_NAME
        ));
    }
    let set = parse_set(opts.set, &mut problems);
    problems.extend(
        manifest::operator_jobs(docs)
            .into_iter()
            .map(|(name, advice)| format!("{name}: {advice}")),
    );
    let members = find_members(docs, &mut problems);
    if members.is_empty() && problems.is_empty() {
        problems.push(
            "no Pod, apps/v1 StatefulSet or batch/v1 Job in the input: nothing to label".to_owned(),
        );
    }
    match framework {
        Some(framework) if problems.is_empty() => Ok(Inputs {
            framework,
            set,
            members,
        }),
        _ => Err(problems),
    }
}

/// The documents of the kinds dljob handles; a `kind: List` holding some
/// is a problem (its items are not edited).
fn find_members<'d>(docs: &'d [Document], problems: &mut Vec<String>) -> Vec<Member<'d>> {
    let mut members = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let Some(value) = &doc.value else { continue };
        if value.get("kind").and_then(Value::as_str) == Some("List") {
            let items = value.get("items").and_then(Value::as_array);
            if items.is_some_and(|items| items.iter().any(|v| Kind::of(v).is_some())) {
                problems.push(format!(
                    "document {}: dljob label does not edit the items of a kind: List; split it into one document per object",
                    i + 1
                ));
            }
            continue;
        }
        let Some(kind) = Kind::of(value) else {
            continue;
        };
        let display = describe(value);
        let name = display
            .split_once('/')
            .map(|(_, n)| n.to_owned())
            .unwrap_or_default();
        members.push(Member {
            doc: i,
            kind,
            value,
            display,
            name,
            role: None,
            edits: Vec::new(),
        });
    }
    members
}

/// The topology, from each member's own size, in the framework's order.
fn topology(members: &[Member<'_>], framework: &dyn Framework) -> Result<Topology, Vec<String>> {
    let mut problems = Vec::new();
    let mut counts: Vec<(String, u32)> = Vec::new();
    for m in members {
        let Some(size) = size_of(m, &mut problems) else {
            continue;
        };
        let role = m.role.clone().expect("every member has a role by now");
        match counts.iter_mut().find(|(r, _)| *r == role) {
            Some((_, n)) => *n += size,
            None => counts.push((role, size)),
        }
    }
    if let Roles::Fixed(rules) = framework.roles() {
        counts.sort_by_key(|(r, _)| rules.iter().position(|rule| rule.name == r));
    }
    let text = counts
        .iter()
        .map(|(r, n)| format!("{r}={n}"))
        .collect::<Vec<_>>()
        .join(",");
    let computed = Topology::parse(&text)
        .map_err(|e| format!("the members add up to \"{text}\": {e}"))
        .map_err(|e| problems.push(e));
    stop_at(problems)?;
    Ok(computed.expect("no problem means a topology"))
}

/// `dljob.dev/replicas` to write: what a member already says where it
/// agrees (else a problem); none for a job that is one StatefulSet or Job
/// (the webhook infers it from the workload's size).
fn replicas_annotation(
    members: &[Member<'_>],
    computed: &Topology,
    problems: &mut Vec<String>,
) -> Option<String> {
    let mut replicas: Option<String> = None;
    let mut any_written = false;
    for m in members {
        for (text, place) in [
            (m.own("annotations", c::REPLICAS), ""),
            (
                m.template("annotations", c::REPLICAS),
                " in its pod template",
            ),
        ] {
            let Some(text) = text else { continue };
            if m.kind == Kind::Pod && !place.is_empty() {
                continue;
            }
            any_written = true;
            match Topology::parse(text) {
                Ok(t) if t.same_as(computed) => {
                    replicas.get_or_insert_with(|| text.to_owned());
                }
                _ => problems.push(format!(
                    "{}: annotation {}{place} is \"{text}\", but the members add up to \"{computed}\"; dljob label does not overwrite it: correct or remove it",
                    m.display,
                    c::REPLICAS
                )),
            }
        }
    }
    let single_workload = members.len() == 1 && members[0].kind != Kind::Pod;
    match replicas {
        Some(t) => Some(t),
        None if single_workload && !any_written => None,
        None => Some(computed.to_string()),
    }
}

/// Job-wide annotations: `--set`, else what some member already says (all
/// that say it must agree).
fn job_wide(
    members: &[Member<'_>],
    set: &[(&'static str, String)],
    problems: &mut Vec<String>,
) -> Vec<(&'static str, String)> {
    let mut policies: Vec<(&'static str, String)> = Vec::new();
    for key in settable() {
        let wanted = set.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone());
        let existing: Vec<(&str, &str)> = members
            .iter()
            .filter_map(|m| m.own("annotations", key).map(|v| (m.display.as_str(), v)))
            .collect();
        match wanted {
            Some(w) => {
                for (who, v) in &existing {
                    if *v != w {
                        problems.push(format!(
                            "{who}: annotation {key} is \"{v}\", but --set {}={w}; dljob label does not overwrite it: remove it, or leave out --set",
                            short(key)
                        ));
                    }
                }
                policies.push((key, w));
            }
            None => {
                if let Some((_, first)) = existing.first() {
                    if let Some((other, v)) = existing.iter().find(|(_, v)| v != first) {
                        problems.push(format!(
                            "annotation {key} is \"{first}\" on {} but \"{v}\" on {other}; every member of a job must agree: correct one, or pass --set {}=VALUE",
                            existing[0].0,
                            short(key)
                        ));
                    } else {
                        policies.push((key, (*first).to_owned()));
                    }
                }
            }
        }
    }
    policies
}

/// The index ranges of roles split over several workloads (sets).
struct Ranges {
    /// Per member: the `dljob.dev/index-offset` to write.
    offsets: Vec<Option<String>>,
    /// Every set's range: (role, first, end).
    covered: Vec<(String, u32, u32)>,
}

/// A role split over several workloads (sets): each covers the next range
/// of the role's indexes, in document order (`dljob.dev/index-offset`);
/// offsets already written are kept.
fn set_ranges(members: &[Member<'_>], computed: &Topology, problems: &mut Vec<String>) -> Ranges {
    let mut offsets: Vec<Option<String>> = vec![None; members.len()];
    let mut covered: Vec<(String, u32, u32)> = Vec::new();
    for (role, _) in computed.roles() {
        let of_role: Vec<usize> = (0..members.len())
            .filter(|&i| members[i].role.as_deref() == Some(role))
            .collect();
        let sets: Vec<usize> = of_role
            .iter()
            .copied()
            .filter(|&i| members[i].kind != Kind::Pod)
            .collect();
        if of_role.len() < 2 || sets.is_empty() {
            continue;
        }
        let mut cursor = 0u32;
        for i in sets {
            let size = size_of(&members[i], problems).unwrap_or(0);
            let written = members[i]
                .own("annotations", c::INDEX_OFFSET)
                .and_then(|s| s.trim().parse::<u32>().ok());
            let first = written.unwrap_or(cursor);
            if written.is_none() {
                offsets[i] = Some(first.to_string());
            }
            cursor = cursor.max(first.saturating_add(size));
            covered.push((role.to_owned(), first, first.saturating_add(size)));
        }
    }
    Ranges { offsets, covered }
}

/// mpi/chainer with worker sets and no slots given: each set's range gets
/// the devices its framework container asks for (a device limit such as
/// `nvidia.com/gpu`, or the DRA claims it uses, counted from the
/// ResourceClaimTemplates among the manifests), every other host the
/// launcher's (or 1). One set whose hosts have one slot each says nothing.
fn worker_slots(
    members: &[Member<'_>],
    framework: &dyn Framework,
    ranges: &Ranges,
    policies: &[(&'static str, String)],
    claims: &ClaimTemplates<'_>,
    problems: &mut Vec<String>,
) -> Option<String> {
    if !framework.uses_slots() || policies.iter().any(|(k, _)| *k == c::SLOTS) {
        return None;
    }
    let mut unknown = Vec::new();
    let mut devices = |m: &Member<'_>| {
        devices_of(m, framework, claims)
            .map_err(|why| unknown.push(format!("{}: {why}", m.display)))
            .unwrap_or(0)
            .max(1)
    };
    let mut worker_sets: Vec<(u32, u32, u32)> = ranges
        .covered
        .iter()
        .filter(|(r, _, _)| r == "worker")
        .zip(
            members
                .iter()
                .filter(|m| m.kind != Kind::Pod && m.role.as_deref() == Some("worker")),
        )
        .filter(|((_, first, end), _)| end > first)
        .map(|((_, first, end), m)| (*first, *end, devices(m)))
        .collect();
    // A role that is one workload has no ranges: it covers every index.
    let workers: Vec<&Member<'_>> = members
        .iter()
        .filter(|m| m.role.as_deref() == Some("worker"))
        .collect();
    if let ([m], true) = (workers.as_slice(), worker_sets.is_empty()) {
        if m.kind != Kind::Pod {
            // Its size's problems are reported where the topology is made.
            let size = size_of(m, &mut Vec::new()).unwrap_or(0);
            if size > 0 {
                worker_sets.push((0, size, devices(m)));
            }
        }
    }
    let others = framework
        .gated_role()
        .and_then(|r| members.iter().find(|m| m.role.as_deref() == Some(r)))
        .map_or(1, &mut devices);
    if !unknown.is_empty() {
        for why in unknown {
            problems.push(format!(
                "{why}; give every host's slots with --set {}=N (or per worker range, e.g. \"0-3=4\")",
                short(c::SLOTS)
            ));
        }
        return None;
    }
    let one_each = worker_sets.len() == 1 && worker_sets[0].2 == 1 && others == 1;
    if worker_sets.is_empty() || one_each {
        return None;
    }
    let mut text = others.to_string();
    for (first, end, n) in &worker_sets {
        text.push_str(&format!(",{first}-{}={n}", end.saturating_sub(1)));
    }
    c::Slots::parse(&text)
        .map(|slots| slots.to_string())
        .map_err(|e| problems.push(e))
        .ok()
}

/// The input's `ResourceClaimTemplate`s (resource.k8s.io), by name (two of
/// one name, in two namespaces, cannot be told apart here).
struct ClaimTemplates<'d>(BTreeMap<&'d str, Vec<&'d Value>>);

impl<'d> ClaimTemplates<'d> {
    fn of(docs: &'d [Document]) -> Self {
        let mut by_name: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
        let templates = docs.iter().filter_map(|d| d.value.as_ref()).filter(|v| {
            v.get("kind").and_then(Value::as_str) == Some("ResourceClaimTemplate")
                && v.get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|a| a.starts_with("resource.k8s.io/"))
        });
        for v in templates {
            if let Some(name) = v.pointer("/metadata/name").and_then(Value::as_str) {
                by_name.entry(name).or_default().push(v);
            }
        }
        Self(by_name)
    }
}

/// Devices the DRA claim template `name` asks for: the count of its one
/// device request (`request`: that one), `ExactCount` (1 when unset). Err
/// when it cannot be counted here: absent, ambiguous, several requests,
/// `allocationMode: All`, `firstAvailable`.
fn template_devices(
    claims: &ClaimTemplates<'_>,
    name: &str,
    request: Option<&str>,
) -> Result<u32, String> {
    let template = match claims.0.get(name).map(Vec::as_slice) {
        Some([one]) => *one,
        Some(_) => {
            return Err(format!(
                "several ResourceClaimTemplates are named \"{name}\" (in different namespaces), so which one the pods use cannot be told here"
            ))
        }
        None => {
            return Err(format!(
                "ResourceClaimTemplate \"{name}\" is not among the manifests, so its devices cannot be counted"
            ))
        }
    };
    let requests = template
        .pointer("/spec/spec/devices/requests")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let wanted: Vec<&Value> = requests
        .iter()
        .filter(|r| request.is_none_or(|want| r.get("name").and_then(Value::as_str) == Some(want)))
        .collect();
    // GPUs and NICs in one claim are not all slots: which are is not said.
    if wanted.len() > 1 {
        let names: Vec<&str> = wanted
            .iter()
            .filter_map(|r| r.get("name").and_then(Value::as_str))
            .collect();
        return Err(format!(
            "ResourceClaimTemplate \"{name}\" makes {} device requests ({}), and which of them are a host's slots is not said",
            wanted.len(),
            names.join(", ")
        ));
    }
    let mut total: u32 = 0;
    for r in wanted {
        let rname = r.get("name").and_then(Value::as_str).unwrap_or("");
        if r.get("firstAvailable").is_some() {
            return Err(format!("request \"{rname}\" of ResourceClaimTemplate \"{name}\" lists alternatives (firstAvailable), whose count depends on which one is allocated"));
        }
        // resource.k8s.io/v1 nests the count under `exactly`; v1beta1 did not.
        let exact = r.get("exactly").unwrap_or(r);
        match exact.get("allocationMode").and_then(Value::as_str) {
            None | Some("ExactCount") => {}
            Some(mode) => {
                return Err(format!("request \"{rname}\" of ResourceClaimTemplate \"{name}\" has allocationMode: {mode} (every matching device of the node), a count only the node knows"));
            }
        }
        let count = exact.get("count").and_then(Value::as_u64).unwrap_or(1);
        total = total.saturating_add(u32::try_from(count).unwrap_or(u32::MAX));
    }
    Ok(total)
}

/// Indexes of plain Pods, in document order per role, where the role has
/// more than one replica; indexes already written, and the sets' ranges,
/// are kept.
fn pod_indexes(
    members: &[Member<'_>],
    computed: &Topology,
    ranges: &Ranges,
) -> Vec<Option<String>> {
    let mut indexes: Vec<Option<String>> = vec![None; members.len()];
    for (role, count) in computed.roles() {
        if count < 2 {
            continue;
        }
        let pods: Vec<usize> = (0..members.len())
            .filter(|&i| members[i].kind == Kind::Pod && members[i].role.as_deref() == Some(role))
            .collect();
        let mut used: Vec<u32> = pods
            .iter()
            .filter_map(|&i| members[i].own("annotations", c::INDEX))
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        for (_, first, end) in ranges.covered.iter().filter(|(r, _, _)| r == role) {
            used.extend(*first..*end);
        }
        for &i in &pods {
            if members[i].own("annotations", c::INDEX).is_some() {
                continue;
            }
            let next = (0..).find(|n| !used.contains(n)).expect("an unused index");
            used.push(next);
            indexes[i] = Some(next.to_string());
        }
    }
    indexes
}

/// What the job's members are to agree on, decided from all of them.
struct JobWide {
    replicas: Option<String>,
    policies: Vec<(&'static str, String)>,
    /// Per member.
    indexes: Vec<Option<String>>,
    /// Per member.
    offsets: Vec<Option<String>>,
}

/// The keys member `i` needs, as edits; a key it has with another value
/// is a problem (never overwritten), and so is a pod template or selector
/// that disagrees with the job and role.
fn plan_edits(
    m: &mut Member<'_>,
    i: usize,
    framework: &dyn Framework,
    job: &str,
    job_wide: &JobWide,
    problems: &mut Vec<String>,
) {
    let role = m.role.clone().expect("every member has a role by now");
    let mut wants: Vec<(bool, &'static str, &'static str, String)> = vec![
        (false, "labels", c::JOB, job.to_owned()),
        (false, "labels", c::ROLE, role.clone()),
    ];
    if m.kind != Kind::Pod {
        wants.extend(template_labels(m, job, &role, problems));
    }
    wants.push((
        false,
        "annotations",
        c::FRAMEWORK,
        framework.name().to_owned(),
    ));
    if let Some(r) = &job_wide.replicas {
        // Already checked where it is written.
        if m.own("annotations", c::REPLICAS).is_none() {
            wants.push((false, "annotations", c::REPLICAS, r.clone()));
        }
    }
    if let Some(index) = &job_wide.indexes[i] {
        wants.push((false, "annotations", c::INDEX, index.clone()));
    }
    if let Some(offset) = &job_wide.offsets[i] {
        wants.push((false, "annotations", c::INDEX_OFFSET, offset.clone()));
    }
    for (key, v) in &job_wide.policies {
        wants.push((false, "annotations", key, v.clone()));
    }
    for (template, which, key, value) in wants {
        let existing = if template {
            m.template(which, key)
        } else {
            m.own(which, key)
        };
        match existing {
            None => m.edits.push(Edit {
                template,
                which,
                key,
                value,
            }),
            Some(e) if e == value => {}
            Some(e) => {
                // Policies and replicas were reported where decided.
                if key == c::REPLICAS || settable().any(|k| k == key) {
                    continue;
                }
                let what = &which[..which.len() - 1];
                let hint = match key {
                    c::JOB => format!("remove it, or pass --job {e}"),
                    c::ROLE => format!("remove it, or pass --role {}={e}", m.display),
                    c::FRAMEWORK => format!("remove it, or pass --framework {e}"),
                    _ => "correct or remove it".to_owned(),
                };
                problems.push(format!(
                    "{}: {what} {key} is \"{e}\", not \"{value}\"; dljob label does not overwrite it: {hint}",
                    m.display
                ));
            }
        }
    }
}

/// A workload's pod template labels: a StatefulSet's pods carry the labels
/// its selector and the job's Service select on (a Job's template is left
/// to the webhook, which copies them at creation); a template label or a
/// StatefulSet selector that disagrees is a problem.
fn template_labels(
    m: &Member<'_>,
    job: &str,
    role: &str,
    problems: &mut Vec<String>,
) -> Vec<(bool, &'static str, &'static str, String)> {
    let mut wants = Vec::new();
    let add = m.kind == Kind::StatefulSet;
    for (key, v) in [(c::JOB, job), (c::ROLE, role)] {
        match m.template("labels", key) {
            Some(t) if t != v => problems.push(format!(
                "{}: label {key} in its pod template is \"{t}\", not \"{v}\"; dljob label does not overwrite it: correct or remove it",
                m.display
            )),
            Some(_) => {}
            None if add => wants.push((true, "labels", key, v.to_owned())),
            None => {}
        }
    }
    if m.kind == Kind::StatefulSet {
        for (key, v) in [(c::JOB, job), (c::ROLE, role)] {
            let selected = object::at(m.value, &["spec", "selector", "matchLabels", key])
                .and_then(Value::as_str);
            if let Some(s) = selected.filter(|s| *s != v) {
                problems.push(format!(
                    "{}: spec.selector.matchLabels {key} is \"{s}\", but its pods are labelled \"{v}\": the selector would not select them; correct the selector (or the --job/--role)",
                    m.display
                ));
            }
        }
    }
    wants
}

/// The members' edits applied: the value, and the text edited in place
/// (else re-serialised, with a warning).
fn apply(docs: &[Document], members: &[Member<'_>]) -> Result<Labelled, Vec<String>> {
    let mut out: Vec<Document> = docs
        .iter()
        .map(|d| Document {
            text: d.text.clone(),
            value: d.value.clone(),
        })
        .collect();
    let mut changed = vec![false; docs.len()];
    let mut warnings = Vec::new();
    let mut problems = Vec::new();
    for m in members {
        if m.edits.is_empty() {
            continue;
        }
        let mut value = m.value.clone();
        for e in &m.edits {
            let mut path: Vec<&str> = if e.template {
                vec!["spec", "template"]
            } else {
                vec![]
            };
            path.extend(["metadata", e.which]);
            match object::object_at_mut(&mut value, &path) {
                Some(map) => {
                    map.insert(e.key.to_owned(), Value::String(e.value.clone()));
                }
                None => problems.push(format!(
                    "{}: {} is not a mapping, so {} cannot be added to it",
                    m.display,
                    path.join("."),
                    e.key
                )),
            }
        }
        let text = match edit_text(&docs[m.doc].text, &m.edits, &value) {
            Some(text) => text,
            None => {
                warnings.push(format!(
                    "{}: re-serialised with serde-saphyr, so its comments and formatting are lost (yaml-edit could not edit it in place)",
                    m.display
                ));
                serde_saphyr::to_string(&value).expect("a JSON value serialises to YAML")
            }
        };
        out[m.doc] = Document {
            text,
            value: Some(value),
        };
        changed[m.doc] = true;
    }
    stop_at(problems)?;
    Ok(Labelled {
        documents: out,
        changed,
        warnings,
    })
}

/// `--set KEY=VALUE` pairs, keys with or without the `dljob.dev/` prefix.
fn parse_set(raw: &[String], problems: &mut Vec<String>) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    for item in raw {
        let Some((key, value)) = item.split_once('=') else {
            problems.push(format!(
                "--set {item}: write KEY=VALUE, e.g. --set backoff-limit=5"
            ));
            continue;
        };
        let key = key.trim();
        let full = if key.starts_with("dljob.dev/") {
            key.to_owned()
        } else {
            format!("dljob.dev/{key}")
        };
        let Some(known) = settable().find(|k| *k == full) else {
            problems.push(format!(
                "--set {key}: not a key dljob label sets; known keys are {} (with or without the dljob.dev/ prefix)",
                settable_list()
            ));
            continue;
        };
        match out.iter().find(|(k, _)| *k == known) {
            Some((_, v)) if v != value => problems.push(format!(
                "--set {}: given twice, as \"{v}\" and \"{value}\"",
                short(known)
            )),
            Some(_) => {}
            None => out.push((known, value.to_owned())),
        }
    }
    out
}

/// Gives every member its role: `--role`, else its own role label, else
/// the framework's only role, else its name's last word, else (a job of
/// one member) the first role that can make the whole job alone; the rest
/// are problems that ask for `--role`.
fn assign_roles(
    members: &mut [Member<'_>],
    framework: &dyn Framework,
    opts: &Options<'_>,
    problems: &mut Vec<String>,
) {
    let mut explicit: Vec<Option<String>> = vec![None; members.len()];
    for item in opts.roles {
        let Some((target, role)) = item.split_once('=') else {
            problems.push(format!(
                "--role {item}: write KIND/NAME=ROLE, e.g. --role StatefulSet/train-worker=worker"
            ));
            continue;
        };
        let found = members.iter().position(|m| {
            target
                .split_once('/')
                .is_some_and(|(k, n)| k.eq_ignore_ascii_case(m.kind.as_str()) && n == m.name)
        });
        let Some(i) = found else {
            problems.push(format!(
                "--role {target}: no such member; members are {}",
                members
                    .iter()
                    .map(|m| m.display.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        if let Err(e) = frameworks::check_role(framework, role) {
            problems.push(format!("--role {item}: {e}"));
            continue;
        }
        explicit[i] = Some(role.to_owned());
    }
    let single = members.len() == 1;
    for (i, m) in members.iter_mut().enumerate() {
        let existing = m.own("labels", c::ROLE).map(str::to_owned);
        let role = explicit[i]
            .clone()
            .or(existing)
            .or_else(|| infer_role(m, framework, opts.job, single));
        match role {
            Some(r) => m.role = Some(r),
            None => problems.push(format!(
                "{}: cannot tell its role; pass --role {}=ROLE ({} roles: {})",
                m.display,
                m.display,
                framework.name(),
                match framework.roles() {
                    Roles::Fixed(rules) => frameworks::role_list(rules),
                    Roles::Any => "any DNS label, e.g. worker".to_owned(),
                }
            )),
        }
    }
}

fn infer_role(
    m: &Member<'_>,
    framework: &dyn Framework,
    job: &str,
    single: bool,
) -> Option<String> {
    if let Roles::Fixed([only]) = framework.roles() {
        return Some(only.name.to_owned());
    }
    // The name's last word, past a numeric suffix (`train-worker-0`) and
    // never the job's own name (`tf-ps` is not role `ps`).
    let rest = m
        .name
        .strip_prefix(job)
        .and_then(|r| r.strip_prefix('-'))
        .unwrap_or(if m.name == job { "" } else { &m.name });
    let word = rest
        .split('-')
        .rev()
        .find(|w| !w.is_empty() && !w.bytes().all(|b| b.is_ascii_digit()));
    if let Some(word) = word {
        match framework.roles() {
            // `train-worker` or `train-workers`.
            Roles::Fixed(rules) => {
                let singular = word.strip_suffix('s').unwrap_or(word);
                if let Some(r) = rules.iter().find(|r| r.name == word || r.name == singular) {
                    return Some(r.name.to_owned());
                }
            }
            Roles::Any if c::is_dns1035_label(word) => return Some(word.to_owned()),
            Roles::Any => {}
        }
    }
    if single {
        if let Roles::Fixed(rules) = framework.roles() {
            let size = size_of(m, &mut Vec::new())?;
            return rules
                .iter()
                .find(|r| {
                    frameworks::check_topology(framework, &Topology::single(r.name, size))
                        .is_empty()
                })
                .map(|r| r.name.to_owned());
        }
    }
    None
}

/// Devices its framework container (the webhook's container rule) asks
/// for: its GPU limit, else the devices of the DRA claims it uses (0 when
/// neither). Err when a claim's devices cannot be counted from the input.
fn devices_of(
    m: &Member<'_>,
    framework: &dyn Framework,
    claims: &ClaimTemplates<'_>,
) -> Result<u32, String> {
    let Some(pod) = object::at(m.value, m.kind.pod_path()) else {
        return Ok(0);
    };
    let Some(spec) = pod.get("spec") else {
        return Ok(0);
    };
    let containers = object::containers(spec);
    let facts = crate::member::container_facts(spec);
    let Some((i, _)) = crate::member::pick_container(
        object::meta_str(pod, &[], "annotations", c::CONTAINER),
        object::meta_str(pod, &[], "annotations", c::K8S_DEFAULT_CONTAINER),
        framework.name(),
        &facts,
    ) else {
        return Ok(0);
    };
    if let Some(gpus) = object::gpu_count(&containers[i]) {
        return Ok(gpus);
    }
    let pod_claims = spec
        .get("resourceClaims")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let used = containers[i]
        .pointer("/resources/claims")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let mut total: u32 = 0;
    for claim in used {
        let name = claim.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(pod_claim) = pod_claims
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        else {
            continue;
        };
        let request = claim.get("request").and_then(Value::as_str);
        let devices = match pod_claim.get("resourceClaimTemplateName").and_then(Value::as_str) {
            Some(template) => template_devices(claims, template, request)?,
            None => {
                return Err(format!(
                    "claim \"{name}\" is a ResourceClaim shared by name (resourceClaimName), whose devices dljob label does not read"
                ))
            }
        };
        total = total.saturating_add(devices);
    }
    Ok(total)
}

/// Replicas a member adds to its role: 1 for a plain Pod, a StatefulSet's
/// `replicas` (default 1; a stopped one's `dljob.dev/scaled-from`), a
/// Job's `completions`.
fn size_of(m: &Member<'_>, problems: &mut Vec<String>) -> Option<u32> {
    let num = |path: &[&str]| {
        object::at(m.value, path)
            .and_then(Value::as_u64)
            .map(|n| n.min(u64::from(u32::MAX)) as u32)
    };
    match m.kind {
        Kind::Pod => Some(1),
        Kind::StatefulSet => {
            let replicas = num(&["spec", "replicas"]).unwrap_or(1);
            let scaled_from = m
                .own("annotations", c::SCALED_FROM)
                .and_then(|s| s.trim().parse::<u32>().ok());
            Some(match (replicas, scaled_from) {
                (0, Some(n)) => n,
                _ => replicas,
            })
        }
        Kind::Job => {
            let n = num(&["spec", "completions"]);
            if n.is_none() {
                problems.push(format!(
                    "{}: spec.completions is missing: a Job member needs it (the number of replicas of its role), with completionMode: Indexed",
                    m.display
                ));
            }
            n
        }
    }
}

/// Where new metadata keys go among their siblings.
const ROOT_ORDER: &[&str] = &["apiVersion", "kind", "metadata"];
const TEMPLATE_ORDER: &[&str] = &["metadata", "spec"];
const META_ORDER: &[&str] = &["name", "generateName", "namespace", "labels", "annotations"];

/// Applies `edits` to the document's text with yaml-edit, keeping the rest
/// of it as written; `None` unless the result reads back as `want`. Values
/// are written plain where YAML reads them back as the same string, else
/// double-quoted.
fn edit_text(text: &str, edits: &[Edit], want: &Value) -> Option<String> {
    for quote_all in [false, true] {
        let Ok(doc) = yaml_edit::Document::from_str(text) else {
            return None;
        };
        let root = doc.as_mapping()?;
        for e in edits {
            let meta = if e.template {
                let spec = child(&root, "spec", ROOT_ORDER)?;
                let template = child(&spec, "template", &[])?;
                child(&template, "metadata", TEMPLATE_ORDER)?
            } else {
                child(&root, "metadata", ROOT_ORDER)?
            };
            let map = child(&meta, e.which, META_ORDER)?;
            if quote_all || !reads_back_as_string(&e.value) {
                map.set(
                    e.key,
                    yaml_edit::ScalarValue::double_quoted(e.value.as_str()),
                );
            } else {
                map.set(e.key, e.value.as_str());
            }
        }
        let edited = doc.to_string();
        let back: Option<Value> = serde_saphyr::from_str(&edited).ok()?;
        if back.as_ref() == Some(want) {
            return Some(edited);
        }
    }
    None
}

/// Whether a plain scalar `s` is read back as the string `s`.
pub(crate) fn reads_back_as_string(s: &str) -> bool {
    serde_saphyr::from_str::<Value>(&format!("k: {s}\n"))
        .ok()
        .and_then(|v| v.get("k").cloned())
        == Some(Value::String(s.to_owned()))
}

/// The mapping under `key`, created (where `order` places it) when absent
/// or null.
pub(crate) fn child(
    map: &yaml_edit::Mapping,
    key: &str,
    order: &[&str],
) -> Option<yaml_edit::Mapping> {
    if let Some(m) = map.get_mapping(key) {
        return Some(m);
    }
    map.set_with_field_order(key, yaml_edit::Mapping::new(), order.iter().copied());
    map.get_mapping(key)
}
