//! `dljob convert`: the training operators' jobs as dljob jobs. Each
//! custom resource becomes one labelled workload per replica type (an
//! Indexed Job, or a StatefulSet for a replica restarted forever), its pod
//! template kept whole and its policies mapped onto dljob's keys; the
//! other documents pass through byte for byte.

mod chainer;
mod kubeflow;
mod legacy;
mod trainer;
mod volcano;

pub(crate) use trainer::not_runtimes;

use std::str::FromStr;

use serde_json::Value;

use crate::config::Config;
use crate::contract as c;
use crate::label::{child, reads_back_as_string};
use crate::manifest::{self, Document};
use crate::object;
use crate::object::{ALPHA_GPU, NVIDIA_GPU as GPU};
use crate::operators::{recognise, Source};

/// What `dljob convert` makes of a manifest.
#[derive(Debug, Default)]
pub(crate) struct Converted {
    /// Per input document, what replaces it (the document itself when it
    /// is not a job of another operator).
    pub documents: Vec<Vec<Document>>,
    /// Per input document, whether it was converted.
    pub changed: Vec<bool>,
    /// What the reader should know, per job.
    pub warnings: Vec<String>,
}

/// Converts every operator job in `docs`. Every problem of every job is
/// returned, and nothing is converted, when there is any; the converted
/// manifest is checked as `dljob validate` checks it.
///
/// `origins` names each document's file where there are several (empty
/// otherwise), for messages. A TrainJob's runtime is looked for in `docs`
/// and in `runtimes` (what `--runtime` read).
pub(crate) fn convert(
    docs: &[Document],
    origins: &[String],
    namespace: &str,
    runtimes: &[Value],
    config: &Config,
) -> Result<Converted, Vec<String>> {
    let mut out = Converted::default();
    let mut problems = Vec::new();
    let runtimes =
        trainer::runtimes_in(docs.iter().filter_map(|d| d.value.as_ref()).chain(runtimes));
    let ctx = Context {
        namespace,
        runtimes: &runtimes,
    };
    // Each job's namespace and name, with where it was first seen.
    let mut seen: Vec<((String, String), String)> = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let Some(value) = &doc.value else {
            out.documents.push(vec![copy(doc)]);
            out.changed.push(false);
            continue;
        };
        if manifest::is_list(value) {
            let (list, changed) = convert_list(value, &ctx, &mut problems, &mut out.warnings);
            out.documents.push(vec![match list {
                Some(list) => rendered(list),
                None => copy(doc),
            }]);
            out.changed.push(changed);
            continue;
        }
        match recognise(value) {
            None => {
                if trainer::is_runtime(value) {
                    out.warnings.push(format!(
                        "{}: a Trainer runtime, printed as it came (a TrainJob's conversion reads it; dljob does not need it: leave it out of what you apply where Trainer is not installed)",
                        manifest::describe(value)
                    ));
                }
                out.documents.push(vec![copy(doc)]);
                out.changed.push(false);
            }
            Some(source) => {
                let name = match origins.get(i).filter(|o| !o.is_empty()) {
                    Some(file) => format!("{file}: {}", manifest::describe(value)),
                    None => manifest::describe(value),
                };
                let id = (
                    object::str_at(value, &["metadata", "namespace"])
                        .unwrap_or(namespace)
                        .to_owned(),
                    object::str_at(value, &["metadata", "name"])
                        .unwrap_or("")
                        .to_owned(),
                );
                if let Some((_, first)) = seen.iter().find(|(s, _)| *s == id && !id.1.is_empty()) {
                    problems.push(format!(
                        "{name}: {first} has the same name in namespace {}: their workloads, Service and DLJob would be one job's; rename one",
                        id.0
                    ));
                    out.documents.push(vec![copy(doc)]);
                    out.changed.push(false);
                    continue;
                }
                seen.push((id, name.clone()));
                let (value, renamed) = current_gpu_name(value);
                let value = &value;
                match convert_one(source, value, &ctx) {
                    Ok(converted) => {
                        out.warnings.extend(
                            renamed
                                .iter()
                                .chain(&converted.warnings)
                                .map(|w| format!("{name}: {w}")),
                        );
                        let mut these = Vec::new();
                        for (i, r) in converted.replicas.iter().enumerate() {
                            let header = header(&name, r, if i == 0 { &doc.text } else { "" });
                            // A TrainJob's templates are its runtime's: no
                            // text of the job's to keep.
                            let kept = if r.template_path.is_empty() {
                                Some(to_yaml(&r.workload))
                            } else {
                                with_comments(&doc.text, value, r)
                            };
                            let text = match kept {
                                Some(text) => format!("{header}{text}"),
                                None => {
                                    out.warnings.push(format!(
                                        "{name}: {} is written anew, without its comments or formatting",
                                        r.template_path.join(".")
                                    ));
                                    format!("{header}{}", to_yaml(&r.workload))
                                }
                            };
                            these.push(Document {
                                text,
                                value: Some(r.workload.clone()),
                            });
                        }
                        out.documents.push(these);
                        out.changed.push(true);
                    }
                    Err(ps) => problems.extend(ps.into_iter().map(|p| format!("{name}: {p}"))),
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let all: Vec<Document> = out.documents.iter().flatten().map(copy).collect();
    let (refused, warnings) = manifest::validate(&all, Some(namespace), config);
    out.warnings.extend(warnings);
    if !refused.is_empty() {
        return Err(refused
            .into_iter()
            .map(|(name, p)| format!("{name} (converted): {p}"))
            .collect());
    }
    Ok(out)
}

/// What a job's conversion may need besides the job.
struct Context<'a> {
    /// The namespace of a job that names none.
    namespace: &'a str,
    /// Trainer's runtimes given.
    runtimes: &'a [&'a Value],
}

/// One operator job, converted.
fn convert_one(
    source: Source,
    value: &Value,
    ctx: &Context<'_>,
) -> Result<kubeflow::ConvertedJob, Vec<String>> {
    use crate::operators::Converter as C;
    let Some(converter) = source.converter else {
        return Err(vec![
            if source.kind == crate::operators::UNKNOWN_KUBEFLOW_JOB {
                format!(
                "{} ({}) is no kind of job dljob convert knows; it converts {}: docs/migration.md says how to write another job as dljob members",
                c::quoted(object::str_at(value, &["kind"]).unwrap_or("")),
                c::quoted(object::str_at(value, &["apiVersion"]).unwrap_or("")),
                crate::operators::convertible_kinds()
            )
            } else {
                format!(
                "dljob convert does not read {} yet: docs/migration.md says how to write it as dljob members",
                source.display()
            )
            },
        ]);
    };
    match converter {
        C::PyTorch => kubeflow::convert(&kubeflow::PYTORCH, value),
        C::TensorFlow => kubeflow::convert(&kubeflow::TENSORFLOW, value),
        C::XGBoost => kubeflow::convert(&kubeflow::XGBOOST, value),
        C::Paddle => kubeflow::convert(&kubeflow::PADDLE, value),
        C::Jax => kubeflow::convert(&kubeflow::JAX, value),
        C::MxNet => kubeflow::convert(kubeflow::mxnet_v1(value), value),
        C::MxNetV1Beta1 => kubeflow::convert(&kubeflow::MXNET_V1BETA1, value),
        C::MpiV1 => kubeflow::convert(&kubeflow::MPI_V1, value),
        C::Mpi => kubeflow::convert(&kubeflow::MPI, value),
        C::ChainerJob => chainer::convert(value),
        C::MxJobV1Alpha1 => legacy::convert(&legacy::MXJOB_V1ALPHA1, value),
        C::MxJobFioravanzo => legacy::convert(&legacy::MXJOB_FIORAVANZO, value),
        C::TfJobV1Alpha1 => legacy::convert(&legacy::TFJOB_V1ALPHA1, value),
        C::TfJobMlkube => legacy::convert(&legacy::TFJOB_MLKUBE, value),
        C::Volcano => volcano::convert(value),
        C::TrainJob => trainer::convert(value, ctx.namespace, ctx.runtimes),
    }
}

/// A `kind: List` with its operator jobs replaced by their workloads
/// (`None` when it holds none).
fn convert_list(
    list: &Value,
    ctx: &Context<'_>,
    problems: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> (Option<Value>, bool) {
    let items = list["items"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if !items.iter().any(|i| recognise(i).is_some()) {
        return (None, false);
    }
    let mut out = Vec::new();
    for item in items {
        let Some(source) = recognise(item) else {
            out.push(item.clone());
            continue;
        };
        let name = manifest::describe(item);
        let (item, renamed) = current_gpu_name(item);
        match convert_one(source, &item, ctx) {
            Ok(c) => {
                warnings.extend(
                    renamed
                        .iter()
                        .chain(&c.warnings)
                        .map(|w| format!("{name}: {w}")),
                );
                out.extend(c.replicas.into_iter().map(|r| r.workload));
            }
            Err(ps) => problems.extend(ps.into_iter().map(|p| format!("{name}: {p}"))),
        }
    }
    let mut list = list.clone();
    list["items"] = Value::Array(out);
    (Some(list), true)
}

/// `job` with every container's `alpha.kubernetes.io/nvidia-gpu` limit or
/// request renamed `nvidia.com/gpu`, and a warning when there was any:
/// a pod asking for the alpha resource is never scheduled.
fn current_gpu_name(job: &Value) -> (Value, Option<String>) {
    fn walk(v: &mut Value, n: &mut usize) {
        match v {
            Value::Object(map) => {
                if let Some(resources) = map.get_mut("resources").and_then(Value::as_object_mut) {
                    for kind in ["limits", "requests"] {
                        let Some(r) = resources.get_mut(kind).and_then(Value::as_object_mut) else {
                            continue;
                        };
                        if let Some(count) = r.remove(ALPHA_GPU) {
                            r.insert(GPU.to_owned(), count);
                            *n += 1;
                        }
                    }
                }
                map.values_mut().for_each(|v| walk(v, n));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, n)),
            _ => {}
        }
    }
    let mut job = job.clone();
    let mut n = 0;
    walk(&mut job, &mut n);
    let warning = (n > 0).then(|| {
        format!(
            "{ALPHA_GPU} is asked for {n} time{} and becomes {GPU}: no current node advertises the alpha resource, so a pod asking for it is never scheduled (the NVIDIA device plugin's is {GPU}; a config's accelerators keyed {ALPHA_GPU} are read as {GPU} too)",
            if n == 1 { "" } else { "s" }
        )
    });
    (job, warning)
}

/// [`current_gpu_name`] in a pod template's text: every container's.
fn current_gpu_name_in(template: &yaml_edit::Mapping) {
    let Some(spec) = template.get_mapping("spec") else {
        return;
    };
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get_sequence(list) else {
            continue;
        };
        for container in containers.values() {
            let Some(resources) = container
                .as_mapping()
                .and_then(|c| c.get_mapping("resources"))
            else {
                continue;
            };
            for kind in ["limits", "requests"] {
                if let Some(r) = resources.get_mapping(kind) {
                    r.rename_key(ALPHA_GPU, GPU);
                }
            }
        }
    }
}

fn copy(doc: &Document) -> Document {
    Document {
        text: doc.text.clone(),
        value: doc.value.clone(),
    }
}

fn rendered(value: Value) -> Document {
    Document {
        text: to_yaml(&value),
        value: Some(value),
    }
}

fn to_yaml(value: &Value) -> String {
    serde_saphyr::to_string(value).expect("a JSON value serialises to YAML")
}

/// The comment that starts each converted document: where it came from,
/// and on the first one the comment lines the job's document started with.
fn header(name: &str, r: &kubeflow::Replica, job_text: &str) -> String {
    let mut h: String = job_text
        .lines()
        .take_while(|l| l.trim_start().starts_with('#') || l.trim().is_empty())
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let mut place = String::new();
    for key in r.template_path.iter().take(3) {
        if key.parse::<usize>().is_ok() {
            place.push_str(&format!("[{key}]"));
        } else {
            if !place.is_empty() {
                place.push('.');
            }
            place.push_str(key);
        }
    }
    let place = if place.is_empty() {
        String::new()
    } else {
        format!(", {place}")
    };
    h.push_str(&format!(
        "# dljob convert: {name}{place} (role {})\n",
        r.role
    ));
    h
}

/// The workload's YAML with the pod template as the job's text has it
/// (comments and formatting kept, re-indented), edited with yaml-edit;
/// `None` unless it reads back as the workload.
fn with_comments(job_text: &str, job: &Value, r: &kubeflow::Replica) -> Option<String> {
    let pointer: String = r.template_path.iter().map(|k| format!("/{k}")).collect();
    let original = job.pointer(&pointer)?;
    let job_doc = yaml_edit::Document::from_str(job_text).ok()?;
    let mut node = yaml_edit::YamlNode::Mapping(job_doc.as_mapping()?);
    for key in &r.template_path {
        node = match (&node, key.parse::<usize>()) {
            (yaml_edit::YamlNode::Sequence(s), Ok(i)) => s.get(i)?,
            (yaml_edit::YamlNode::Mapping(m), _) => m.get(key.as_str())?,
            _ => return None,
        };
    }
    let node = node.as_mapping()?.clone();
    let want = &r.workload;
    let mut skeleton = want.clone();
    skeleton["spec"]["template"] = serde_json::json!({});
    let doc = yaml_edit::Document::from_str(&to_yaml(&skeleton)).ok()?;
    // In the order people write them, not serde's alphabetical one.
    let root = doc.as_mapping()?;
    root.reorder_fields(["apiVersion", "kind", "metadata", "spec"]);
    root.get_mapping("metadata")?
        .reorder_fields(["name", "namespace", "labels", "annotations"]);
    let spec = root.get_mapping("spec")?;
    spec.reorder_fields([
        "replicas",
        "completionMode",
        "completions",
        "parallelism",
        "backoffLimit",
        "serviceName",
        "podManagementPolicy",
        "selector",
        "template",
    ]);
    spec.set("template", node);
    let template = spec.get_mapping("template")?;
    current_gpu_name_in(&template);
    let wanted_template = &want["spec"]["template"];
    // What the conversion changed in the template: its labels and pod
    // spec keys (restartPolicy, priorityClassName).
    if let Some(labels) = wanted_template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        let meta = child(&template, "metadata", &["metadata", "spec"])?;
        let map = child(&meta, "labels", &["name", "labels", "annotations"])?;
        for (k, v) in labels {
            if original.pointer(&format!(
                "/metadata/labels/{}",
                k.replace('~', "~0").replace('/', "~1")
            )) != Some(v)
            {
                set_string(&map, k, v.as_str()?);
            }
        }
    }
    let pod_spec = child(&template, "spec", &["metadata", "spec"])?;
    for key in ["restartPolicy", "priorityClassName"] {
        let v = wanted_template["spec"].get(key);
        if v.is_some() && original["spec"].get(key) != v {
            set_string(&pod_spec, key, v.and_then(Value::as_str)?);
        }
    }
    // Env the conversion gives a container (PyTorchJob's nprocPerNode):
    // appended to its env as written.
    let wanted_containers = wanted_template["spec"]["containers"].as_array();
    for (i, container) in wanted_containers.into_iter().flatten().enumerate() {
        let before = original["spec"]["containers"][i]["env"].as_array();
        let added: Vec<&Value> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| !before.is_some_and(|b| b.contains(e)))
            .collect();
        if added.is_empty() {
            continue;
        }
        let node = pod_spec.get_sequence("containers")?.get(i)?;
        let node = node.as_mapping()?;
        if node.get_sequence("env").is_none() {
            node.set("env", yaml_edit::Sequence::new());
        }
        let env = node.get_sequence("env")?;
        for e in added {
            let entry = yaml_edit::Mapping::new();
            set_string(&entry, "name", e["name"].as_str()?);
            set_string(&entry, "value", e["value"].as_str()?);
            env.push(entry);
        }
    }
    let text = doc.to_string();
    let back: Value = serde_saphyr::from_str(&text).ok()?;
    (&back == want).then_some(text)
}

/// Sets a string value, plain where YAML reads it back as that string.
fn set_string(map: &yaml_edit::Mapping, key: &str, value: &str) {
    if reads_back_as_string(value) {
        map.set(key, value);
    } else {
        map.set(key, yaml_edit::ScalarValue::double_quoted(value));
    }
}
