//! The chainer-operator's ChainerJob (`kubeflow.org/v1alpha1`): its master
//! (a Job that runs `mpiexec`) and its worker sets (StatefulSets), each
//! with its hostfile slots. The operator reached its workers with `kubectl
//! exec` (they ran a sleep loop); dljob's chainer master reaches them over
//! ssh, so a worker set whose command starts no sshd runs `sshd -De`
//! instead (its privilege separation directory made first), said in a
//! warning.

use serde_json::{json, Value};

use super::kubeflow::{self, ConvertedJob, Keys, Replica, ReplicaSpec, TemplateEdits};
use crate::contract as c;
use crate::object;

/// The operator's container name, default slots and the label naming a
/// worker set.
const CONTAINER: &str = "chainer";
const WORKER_SET_LABEL: &str = "chainerjob.kubeflow.org/workersetname";

/// The master as read: its template, hostfile slots and restart policy.
struct Master<'j> {
    template: &'j Value,
    slots: u32,
    restart: &'j str,
}

/// One worker set as read: a range of worker indexes.
struct WorkerSet {
    name: String,
    count: u32,
    slots: u32,
    template: Value,
}

/// Converts one ChainerJob, as named steps: the spec's own fields, the
/// master, the worker sets, the job-wide keys, the workloads. Every
/// problem found, not the first.
pub(crate) fn convert(job: &Value) -> Result<ConvertedJob, Vec<String>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let name = kubeflow::job_name(job, &mut problems)?;
    let Some(spec) = job.get("spec").and_then(Value::as_object) else {
        return Err(vec!["spec is missing or not a mapping".into()]);
    };
    check_spec(spec, &mut problems);
    let mut keys = Keys::new();
    keys.insert(c::FRAMEWORK, "chainer".into());
    let Some(master) = read_master(spec, &mut keys, &mut problems) else {
        return Err(problems);
    };
    let workers = read_worker_sets(spec, &mut problems, &mut warnings);
    topology_and_slots(&master, &workers, &mut keys);
    if !problems.is_empty() {
        return Err(problems);
    }
    let meta = job.get("metadata").and_then(Value::as_object);
    Ok(ConvertedJob {
        warnings,
        replicas: workloads(name, meta, &master, &workers, &keys),
    })
}

/// The spec's fields dljob knows, and its backend: MPI only.
fn check_spec(spec: &serde_json::Map<String, Value>, problems: &mut Vec<String>) {
    for key in spec.keys() {
        if !matches!(key.as_str(), "backend" | "master" | "workerSets") {
            problems.push(format!(
                "spec.{key} is not a field of ChainerJob that dljob convert knows, so it cannot carry it over: remove it"
            ));
        }
    }
    if let Some(b) = spec.get("backend").and_then(Value::as_str) {
        if b != "mpi" {
            problems.push(format!(
                "spec.backend \"{}\": dljob runs ChainerMN over MPI only",
                c::quoted(b)
            ));
        }
    }
}

/// `spec.master`: one replica, its deadline and backoff limit as the job's
/// keys, its template, slots and restart policy. None when it or its
/// template is missing (said).
fn read_master<'j>(
    spec: &'j serde_json::Map<String, Value>,
    keys: &mut Keys,
    problems: &mut Vec<String>,
) -> Option<Master<'j>> {
    let Some(master) = spec.get("master").and_then(Value::as_object) else {
        problems.push("spec.master is missing: a ChainerJob has one master".into());
        return None;
    };
    for key in master.keys() {
        if !matches!(
            key.as_str(),
            "activeDeadlineSeconds" | "backoffLimit" | "mpiConfig" | "template" | "replicas"
        ) {
            problems.push(format!(
                "spec.master.{key} is not a master field dljob convert knows: remove it"
            ));
        }
    }
    if master
        .get("replicas")
        .and_then(Value::as_u64)
        .is_some_and(|n| n != 1)
    {
        problems.push("spec.master.replicas: a ChainerJob has exactly one master".into());
    }
    for (field, key) in [
        ("activeDeadlineSeconds", c::ACTIVE_DEADLINE_SECONDS),
        ("backoffLimit", c::BACKOFF_LIMIT),
    ] {
        if let Some(v) = master.get(field).filter(|v| !v.is_null()) {
            match v.as_u64() {
                Some(n) => {
                    keys.insert(key, n.to_string());
                }
                None => problems.push(format!("spec.master.{field} is {v}, not a whole number")),
            }
        }
    }
    let Some(template) = master.get("template").filter(|t| t.is_object()) else {
        problems.push("spec.master.template is missing".into());
        return None;
    };
    let slots = slots("spec.master", master.get("mpiConfig"), template, problems);
    // The operator ran the master as a Job, Never unless the template says.
    let restart = match object::str_at(template, &["spec", "restartPolicy"]) {
        None => "Never",
        Some(p @ ("OnFailure" | "Never")) => p,
        Some(other) => {
            problems.push(format!(
                "spec.master.template.spec.restartPolicy \"{}\": the master is a Job, which takes OnFailure or Never",
                c::quoted(other)
            ));
            "Never"
        }
    };
    Some(Master {
        template,
        slots,
        restart,
    })
}

/// `spec.workerSets`, in name order (the operator's map has none): each
/// one's count, slots and template (made to start sshd, said in a
/// warning, where it does not).
fn read_worker_sets(
    spec: &serde_json::Map<String, Value>,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Vec<WorkerSet> {
    let empty = serde_json::Map::new();
    let sets = spec
        .get("workerSets")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut workers = Vec::new();
    for (set, ws) in sets {
        let at = format!("spec.workerSets.{set}");
        if !c::is_dns_label(set) {
            problems.push(format!("{at}: a worker set's name is a DNS label"));
            continue;
        }
        for key in ws
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_else(Vec::new)
        {
            if !matches!(key.as_str(), "replicas" | "mpiConfig" | "template") {
                problems.push(format!(
                    "{at}.{key} is not a worker set field dljob convert knows: remove it"
                ));
            }
        }
        let count = match ws
            .get("replicas")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
        {
            Some(n) if n > 0 => n,
            _ => {
                problems.push(format!("{at}.replicas must be a count of at least 1"));
                continue;
            }
        };
        let Some(template) = ws.get("template").filter(|t| t.is_object()) else {
            problems.push(format!("{at}.template is missing"));
            continue;
        };
        let slots = slots(&at, ws.get("mpiConfig"), template, problems);
        let mut template = template.clone();
        sshd(&at, &mut template, warnings);
        workers.push(WorkerSet {
            name: set.clone(),
            count,
            slots,
            template,
        });
    }
    workers
}

/// `dljob.dev/replicas` (the master and every set's workers) and
/// `dljob.dev/slots`: the master's as the bare number, then each set's
/// range of worker indexes where the sets' slots differ from it.
fn topology_and_slots(master: &Master<'_>, workers: &[WorkerSet], keys: &mut Keys) {
    let total_workers: u32 = workers.iter().map(|w| w.count).sum();
    keys.insert(
        c::REPLICAS,
        if total_workers > 0 {
            format!("master=1,worker={total_workers}")
        } else {
            "master=1".into()
        },
    );
    let mut slots_text = master.slots.to_string();
    let mut from = 0;
    if !workers.iter().all(|w| w.slots == master.slots) {
        for w in workers {
            let to = from + w.count - 1;
            if from == to {
                slots_text.push_str(&format!(",{from}={}", w.slots));
            } else {
                slots_text.push_str(&format!(",{from}-{to}={}", w.slots));
            }
            from += w.count;
        }
    }
    keys.insert(c::SLOTS, slots_text);
}

/// The master's Job and one StatefulSet per worker set (with several sets,
/// each its own name, selector label and range of worker indexes).
fn workloads(
    name: &str,
    meta: Option<&serde_json::Map<String, Value>>,
    master: &Master<'_>,
    workers: &[WorkerSet],
    keys: &Keys,
) -> Vec<Replica> {
    let edits = TemplateEdits::default();
    let master_spec = ReplicaSpec {
        type_name: "master".into(),
        role: "master".into(),
        count: 1,
        restart: master.restart,
        template: master.template,
    };
    let mut out = vec![Replica {
        role: "master".into(),
        workload: kubeflow::workload(name, meta, &master_spec, keys, &edits, Some(CONTAINER)),
        template_path: vec!["spec".into(), "master".into(), "template".into()],
    }];
    let several = workers.len() > 1;
    let mut offset = 0u32;
    for set in workers {
        let r = ReplicaSpec {
            type_name: set.name.clone(),
            role: "worker".into(),
            count: set.count,
            restart: "Always",
            template: &set.template,
        };
        let mut w = kubeflow::workload(name, meta, &r, keys, &edits, Some(CONTAINER));
        if several {
            w["metadata"]["name"] = json!(format!("{name}-worker-{}", set.name));
            w["metadata"]["annotations"][c::INDEX_OFFSET] = json!(offset.to_string());
            w["spec"]["selector"]["matchLabels"][WORKER_SET_LABEL] = json!(set.name);
            w["spec"]["template"]["metadata"]["labels"][WORKER_SET_LABEL] = json!(set.name);
        }
        offset += set.count;
        out.push(Replica {
            role: "worker".into(),
            workload: w,
            template_path: vec![
                "spec".into(),
                "workerSets".into(),
                set.name.clone(),
                "template".into(),
            ],
        });
    }
    out
}

/// A member's hostfile slots: its `mpiConfig.slots`, else (as the
/// operator defaults it) the GPUs its `chainer` container's limits ask
/// for, else 1.
fn slots(at: &str, config: Option<&Value>, template: &Value, problems: &mut Vec<String>) -> u32 {
    if let Some(v) = config.and_then(|c| c.get("slots")).filter(|v| !v.is_null()) {
        return match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if n > 0 => n,
            _ => {
                problems.push(format!("{at}.mpiConfig.slots is {v}, not a count"));
                1
            }
        };
    }
    object::containers(&template["spec"])
        .iter()
        .find(|c| object::name_of(c) == CONTAINER)
        .and_then(|c| c.pointer("/resources/limits/nvidia.com~1gpu"))
        .and_then(object::whole_quantity)
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// What a converted worker runs: sshd in the foreground, logging to
/// standard error, after making its privilege separation directory, which
/// an image with Ubuntu's or Debian's sshd lacks (their init scripts make
/// it at boot; a container has none). Where it cannot be made (a non-root
/// user, a read-only root), sshd starts anyway: a non-root sshd needs none.
const SSHD: &str = "mkdir -p /run/sshd 2>/dev/null; exec /usr/sbin/sshd -De";

/// A worker set whose container starts no sshd gets [`SSHD`]:
/// the operator's workers slept while `kubectl exec` reached them, dljob's
/// master reaches them over ssh.
fn sshd(at: &str, template: &mut Value, warnings: &mut Vec<String>) {
    let containers = object::containers(&template["spec"]);
    let i = containers
        .iter()
        .position(|c| object::name_of(c) == CONTAINER)
        .unwrap_or(0);
    let Some(container) = template
        .pointer_mut(&format!("/spec/containers/{i}"))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let words: Vec<String> = ["command", "args"]
        .iter()
        .filter_map(|k| container.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if words.iter().any(|w| w.contains("sshd")) {
        return;
    }
    container.insert("command".into(), json!(["sh", "-c", SSHD]));
    container.remove("args");
    warnings.push(format!(
        "{at}: the workers' command ({}) is replaced by `{SSHD}`: the operator reached its workers with kubectl exec, dljob's master reaches them over ssh, so the image needs sshd and its host keys (the operator's chainermn image has both, from Ubuntu's ssh package; sshd's privilege separation directory, which Ubuntu makes only at boot, is made here)",
        if words.is_empty() {
            "the image's default".to_owned()
        } else {
            let text = words.join(" ").split_whitespace().collect::<Vec<_>>().join(" ");
            format!("\"{}\"", c::cut(&text, c::MAX_QUOTED))
        }
    ));
}
