//! The first operators' forms: the tf-operator's TfJob `mlkube.io/v1beta1`
//! (`replica_specs`, `tf_replica_type`, `tf_port`) and TFJob
//! `kubeflow.org/v1alpha1` (`replicaSpecs`, `tfReplicaType`, `tfPort`), and
//! the mxnet-operator's MXJob `kubeflow.org/v1alpha1` (`replicaSpecs`,
//! `mxReplicaType`, `PsRootPort`) and the first MXJob of all, the
//! mx-operator's `fioravanzo.org/v1alpha1` (`replicaSpecs`,
//! `mxReplicaType`, `mxPort`). Each names its replicas in a list with
//! a type field, its port beside them and each replica's restart policy in
//! its pod template. A job is read into the replica-spec form
//! ([`super::kubeflow`]) and converted as one; what that form has no field
//! for is checked here, by the names the job uses.

use serde_json::{json, Map, Value};

use super::kubeflow::{self, Operator};
use crate::contract as c;
use crate::object;

/// One list form.
#[derive(Debug)]
pub(crate) struct Form {
    /// `kind`, as the form spells it.
    kind: &'static str,
    /// The replica-spec operator its jobs are converted as.
    operator: &'static Operator,
    /// The spec field holding the list of replicas.
    specs: &'static str,
    /// The replica's type field, and the types (as spelled) to the
    /// replica-spec form's.
    type_field: &'static str,
    types: &'static [(&'static str, &'static str)],
    /// The replica's port field, and the port when no replica gives one.
    port_field: &'static str,
    default_port: u16,
    /// Spec fields besides the list that dljob reads.
    fields: &'static [&'static str],
    /// What every job of this form should know, said as a warning.
    note: Option<&'static str>,
}

pub(crate) const TFJOB_MLKUBE: Form = Form {
    kind: "TfJob",
    operator: &kubeflow::TENSORFLOW,
    specs: "replica_specs",
    type_field: "tf_replica_type",
    types: &[("MASTER", "Master"), ("WORKER", "Worker"), ("PS", "PS")],
    port_field: "tf_port",
    default_port: 2222,
    fields: &[
        "tf_image",
        "tfImage",
        "termination_policy",
        "terminationPolicy",
        "RuntimeId",
        "runtime_id",
    ],
    note: None,
};

pub(crate) const TFJOB_V1ALPHA1: Form = Form {
    kind: "TFJob",
    specs: "replicaSpecs",
    type_field: "tfReplicaType",
    port_field: "tfPort",
    fields: &["tfImage", "terminationPolicy", "schedulerName", "RuntimeId"],
    ..TFJOB_MLKUBE
};

pub(crate) const MXJOB_V1ALPHA1: Form = Form {
    kind: "MXJob",
    operator: &kubeflow::MXNET,
    specs: "replicaSpecs",
    type_field: "mxReplicaType",
    types: &[
        ("SCHEDULER", "Scheduler"),
        ("SERVER", "Server"),
        ("WORKER", "Worker"),
    ],
    port_field: "PsRootPort",
    default_port: 9091,
    fields: &["jobMode", "mxImage", "terminationPolicy", "RuntimeId"],
    note: None,
};

/// The first MXJob, `fioravanzo.org/v1alpha1` (StefanoFioravanzo/mx-operator,
/// a fork of the tf-operator): its replica's port is `mxPort`, 9000 when
/// none is given, and the scheduler ends the job.
pub(crate) const MXJOB_FIORAVANZO: Form = Form {
    port_field: "mxPort",
    default_port: 9000,
    fields: &["mxImage", "terminationPolicy", "schedulerName", "RuntimeId"],
    note: Some(
        "the operator also set PS_VERBOSE=2 (ps-lite's logging) on its pods; add it to a template's env to keep those logs",
    ),
    ..MXJOB_V1ALPHA1
};

/// The replicas as read from the form's list: the replica-spec form of
/// the same job (by replica kind), where each was in the list, and the
/// job's one port if any replica names it.
struct Read {
    specs: Map<String, Value>,
    places: Vec<(&'static str, usize)>,
    port: Option<(u16, String)>,
}

/// Converts one job of `form`, as named steps: the spec's own fields, its
/// replica list read into the replica-spec form, the coordinator and job
/// mode, the conversion of that form, and what these operators did that it
/// does not say. Every problem found, not the first.
pub(crate) fn convert(form: &Form, job: &Value) -> Result<kubeflow::ConvertedJob, Vec<String>> {
    let mut problems = Vec::new();
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    for key in spec.keys() {
        if key != form.specs && !form.fields.contains(&key.as_str()) {
            problems.push(format!(
                "spec.{key} is not a field of {} that dljob convert knows, so it cannot carry it over: remove it",
                form.kind
            ));
        }
    }
    let Some(list) = spec.get(form.specs).and_then(Value::as_array) else {
        problems.push(format!(
            "spec.{} is missing or not a list: a {} names its replicas there",
            form.specs, form.kind
        ));
        return Err(problems);
    };
    let read = read_replicas(form, spec, list, &mut problems);
    termination_policy(form, spec, &read.places, &mut problems);
    if let Some(mode) = spec.get("jobMode").and_then(Value::as_str) {
        if mode != "dist" {
            problems.push(format!(
                "spec.jobMode \"{}\": only a distributed job (dist) is a dljob job",
                c::quoted(mode)
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // The replica-spec form of the same job.
    let mut normalized = job.clone();
    normalized["spec"] = json!({ form.operator.specs_field(): read.specs });
    let port = read.port.map_or(form.default_port, |(p, _)| p);
    let mut converted = kubeflow::convert_with_port(form.operator, &normalized, Some(port))?;
    as_these_operators_did(form, spec, &read.places, &mut converted);
    Ok(converted)
}

/// Each entry of the form's replica list: its fields, its type (given
/// once), its port (one for the job), its template and restart policy (the
/// operator's scheduler name carried into it).
fn read_replicas(
    form: &Form,
    spec: &Map<String, Value>,
    list: &[Value],
    problems: &mut Vec<String>,
) -> Read {
    let mut specs = Map::new();
    let mut places: Vec<(&'static str, usize)> = Vec::new();
    let mut port: Option<(u16, String)> = None;
    let scheduler = spec.get("schedulerName").and_then(Value::as_str);
    for (i, rs) in list.iter().enumerate() {
        let at = format!("spec.{}[{i}]", form.specs);
        let Some(rs) = rs.as_object() else {
            problems.push(format!("{at} is not a mapping"));
            continue;
        };
        for key in rs.keys() {
            let known = [form.type_field, form.port_field, "replicas", "template"];
            if !known.contains(&key.as_str()) {
                problems.push(format!(
                    "{at}.{key} is not a replica field of {} that dljob convert knows: remove it",
                    form.kind
                ));
            }
        }
        // The operators' default type is their first (MASTER; SCHEDULER).
        let named = rs.get(form.type_field).and_then(Value::as_str);
        let Some((_, kind)) = form
            .types
            .iter()
            .find(|(t, _)| Some(*t) == named.or(Some(form.types[0].0)))
        else {
            problems.push(format!(
                "{at}.{}: {} has no replica type \"{}\"; its types are {}",
                form.type_field,
                form.kind,
                c::quoted(named.unwrap_or("")),
                form.types
                    .iter()
                    .map(|(t, _)| *t)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        };
        if places.iter().any(|(k, _)| k == kind) {
            problems.push(format!(
                "{at}: replica type {} is given twice",
                named.unwrap_or(form.types[0].0)
            ));
            continue;
        }
        if let Some(p) = rs.get(form.port_field).filter(|v| !v.is_null()) {
            match p.as_u64().and_then(|p| u16::try_from(p).ok()) {
                Some(p) => match &port {
                    Some((other, by)) if *other != p => problems.push(format!(
                        "{at}.{} is {p} and {by} is {other}: every replica listens on the job's one port (dljob.dev/port); make them equal",
                        form.port_field
                    )),
                    Some(_) => {}
                    None => port = Some((p, format!("{at}.{}", form.port_field))),
                },
                None => problems.push(format!("{at}.{} is {p}, not a port", form.port_field)),
            }
        }
        let Some(template) = rs.get("template").filter(|t| t.is_object()) else {
            problems.push(format!(
                "{at}.template is missing: dljob runs each replica from its own pod template (the operator's default image is not carried over); give it one"
            ));
            continue;
        };
        // The operator ran each replica as a batch Job of the template's
        // restartPolicy.
        let restart = object::str_at(template, &["spec", "restartPolicy"]);
        let Some(restart @ ("OnFailure" | "Never" | "Always")) = restart else {
            problems.push(format!(
                "{at}.template.spec.restartPolicy is {}: the operator ran each replica as a Job of the template's policy; set OnFailure or Never (Always makes the replica a StatefulSet)",
                restart.map_or("missing".to_owned(), |r| format!("\"{}\"", c::quoted(r)))
            ));
            continue;
        };
        let mut template = template.clone();
        if let Some(s) = scheduler {
            if let Some(pod) = object::object_at_mut(&mut template, &["spec"]) {
                pod.entry("schedulerName").or_insert_with(|| json!(s));
            }
        }
        let mut replica = Map::new();
        if let Some(n) = rs.get("replicas") {
            replica.insert("replicas".into(), n.clone());
        }
        replica.insert("restartPolicy".into(), json!(restart));
        replica.insert("template".into(), template);
        specs.insert((*kind).to_owned(), Value::Object(replica));
        places.push((kind, i));
    }
    Read {
        specs,
        places,
        port,
    }
}

/// What these operators did that the replica-spec form does not say: every
/// pod of a finished job deleted; each template's place in the job as
/// written (for its comments); the retries said as the workloads' own key;
/// the form's note; the image fields not carried over.
fn as_these_operators_did(
    form: &Form,
    spec: &Map<String, Value>,
    places: &[(&'static str, usize)],
    converted: &mut kubeflow::ConvertedJob,
) {
    for r in &mut converted.replicas {
        // These operators deleted every pod of a finished job.
        r.workload["metadata"]["annotations"][c::CLEAN_POD_POLICY] = json!("All");
        // The template's place in the job as written, for its comments.
        if let Some((_, i)) = places
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(&r.template_path[2]))
        {
            r.template_path = vec![
                "spec".into(),
                form.specs.into(),
                i.to_string(),
                "template".into(),
            ];
        }
    }
    // These forms have no runPolicy to name: the retries are said as the
    // converted workloads' own key.
    let before = converted.warnings.len();
    converted
        .warnings
        .retain(|w| !w.starts_with(kubeflow::NO_BACKOFF_LIMIT));
    if converted.warnings.len() < before {
        converted.warnings.push(format!(
            "this {} sets no retry limit, and the operator restarted its OnFailure replicas' pods; the converted Jobs fail after dljob's default of 3 restarts: set dljob.dev/backoff-limit on them to allow more",
            form.kind
        ));
    }
    if let Some(note) = form.note {
        converted.warnings.push(note.to_owned());
    }
    for field in ["tf_image", "tfImage", "mxImage"] {
        if spec.contains_key(field) {
            converted.warnings.push(format!(
                "spec.{field} is not carried over: the operator used it only for a replica without a template, and every replica here has one"
            ));
        }
    }
}

/// The replica whose end ends the job must be dljob's coordinator: the
/// master (or scheduler), else worker 0.
fn termination_policy(
    form: &Form,
    spec: &Map<String, Value>,
    places: &[(&'static str, usize)],
    problems: &mut Vec<String>,
) {
    let field = ["terminationPolicy", "termination_policy"]
        .into_iter()
        .find(|f| spec.contains_key(*f));
    let Some(field) = field else { return };
    let chief = &spec[field]["chief"];
    let name = chief
        .get("replicaName")
        .or_else(|| chief.get("replica_name"))
        .and_then(Value::as_str);
    let index = chief
        .get("replicaIndex")
        .or_else(|| chief.get("replica_index"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let first = form.types[0].0;
    let has_first = places.iter().any(|(k, _)| *k == form.types[0].1);
    let coordinator = if has_first { first } else { "WORKER" };
    if name.is_some_and(|n| n != coordinator) || index != 0 {
        problems.push(format!(
            "spec.{field}.chief is {} {index}: a dljob job ends when its coordinator ({coordinator} 0) exits; remove the termination policy, or make {coordinator} 0 the replica that ends the job",
            c::quoted(name.unwrap_or(first))
        ));
    }
}
