//! The objects `benches/replay.rs` replays: PyTorch jobs of bare pods
//! (`master=1,worker=N-1`, N = 4 by default), or of one StatefulSet or
//! Indexed Job each (`worker=N`) and the pods its controller makes, shaped
//! as the API server stores them.
//!
//! A workload starts from the captured StatefulSet or Job of
//! `tests/fixtures/admission/mutate-create-{statefulset-resnet,job-gpt}-worker.json`
//! and is mutated by the real mutation; its pods are named, labelled and
//! owned as the StatefulSet controller (`<sts>-<ordinal>`,
//! `apps.kubernetes.io/pod-index`, `statefulset.kubernetes.io/pod-name`,
//! `controller-revision-hash`) and the Job controller
//! (`<job>-<index>-<5 chars>`, `batch.kubernetes.io/job-completion-index`
//! as label and annotation, `batch.kubernetes.io/controller-uid`,
//! `job-name`) make them from the mutated template, then mutated as pods.
//!
//! Each pod starts from the captured pod of
//! `tests/fixtures/admission/mutate-create-pod-ddp-worker.json` (a
//! `kubectl create`d PyTorch pod with its managedFields, service-account
//! volume and the server's defaults), gets its job's labels and
//! annotations (ARCHITECTURE.md §1: `dljob.dev/job`, `dljob.dev/role`,
//! `dljob.dev/framework`, `dljob.dev/replicas`, `dljob.dev/index` on the
//! workers), and is mutated by the real mutation (`dljob::mutate::mutate`,
//! the function behind the webhook's `/mutate`) so the stored pod carries
//! what `dljob serve` injects. It is stored Pending, then Running with the
//! status a kubelet writes (conditions, containerStatuses, IPs) and the
//! scheduler's nodeName, with a managedFields entry per writer.

use dljob::config::Config;
use dljob::mutate::{self, Operation};
use dljob::object::Kind;
use serde_json::{json, Value};

use super::apiserver::{fields_v1, set_managed};
use dljob::object::Subject;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/admission");

/// What a job's members are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Members {
    /// Bare pods, `master=1,worker=N-1`.
    Pod,
    /// One StatefulSet of N, `worker=N`.
    StatefulSet,
    /// One Indexed Job of N, `worker=N`.
    Job,
}

impl Members {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "pod" => Ok(Self::Pod),
            "statefulset" => Ok(Self::StatefulSet),
            "job" => Ok(Self::Job),
            other => Err(format!("--members {other}: pod, statefulset or job")),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Pod => "bare pods",
            Self::StatefulSet => "a StatefulSet",
            Self::Job => "an Indexed Job",
        }
    }
}

/// One workload of the replay: what the user creates (the mutating
/// webhook's object) and what the API server stores.
pub(crate) struct GenWorkload {
    pub group: &'static str,
    pub plural: &'static str,
    pub namespace: String,
    pub name: String,
    pub user: Value,
    pub stored: Value,
}

pub(crate) struct Generator {
    mutate_review: Value,
    validate_review: Value,
    config: Config,
    namespaces: usize,
    stamp: String,
    /// Every job has a TensorBoard (`dljob.dev/tensorboard: logs:runs` on an
    /// nfs volume `logs` the framework container mounts).
    tensorboard: bool,
    /// Every job's `dljob.dev/gang`.
    gang: Option<String>,
    members: Members,
    per_job: usize,
    workload_reviews: [Value; 2],
}

/// One pod of the replay: the user's object (what the mutating webhook
/// sees), and what the API server stores.
pub(crate) struct GenPod {
    pub namespace: String,
    pub name: String,
    pub user: Value,
    pub pending: Value,
}

impl GenPod {
    /// The pod as the API server stores it at creation: Pending.
    fn pending(namespace: String, name: String, user: Value, mut pending: Value) -> Self {
        pending["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        Self {
            namespace,
            name,
            user,
            pending,
        }
    }
}

/// A small deterministic generator of hex strings.
fn hex(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = String::with_capacity(len);
    while s.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(len);
    s
}

fn alnum5(seed: u64) -> String {
    const A: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
    (0..5)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            A[(x % A.len() as u64) as usize] as char
        })
        .collect()
}

fn read(name: &str) -> Value {
    let path = format!("{FIXTURES}/{name}");
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

impl Generator {
    pub(crate) fn new(
        namespaces: usize,
        tensorboard: bool,
        gang: Option<String>,
        members: Members,
        per_job: usize,
    ) -> Self {
        Self {
            tensorboard,
            gang,
            members,
            per_job: per_job.max(1),
            workload_reviews: [
                read("mutate-create-statefulset-resnet-worker.json"),
                read("mutate-create-job-gpt-worker.json"),
            ],
            mutate_review: read("mutate-create-pod-ddp-worker.json"),
            validate_review: read("validate-create-pod-ddp-worker-rkzbv.json"),
            config: Config::default(),
            namespaces: namespaces.max(1),
            stamp: k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second(),
            )
            .unwrap()
            .to_string(),
        }
    }

    pub(crate) fn namespace(&self, job: usize) -> String {
        format!("team-{}", job % self.namespaces)
    }

    pub(crate) fn job_name(job: usize) -> String {
        format!("ddp-{job:04}")
    }

    pub(crate) fn members(&self) -> Members {
        self.members
    }

    /// `user` as the real mutation (the webhook's `/mutate`) admits it.
    fn mutated(&self, kind: Kind, user: &Value, namespace: &str, name: &str) -> Value {
        mutate::mutate(
            Subject::new(kind, user, Some(namespace)),
            Operation::Create,
            &self.config,
        )
        .unwrap_or_else(|v| panic!("{name} refused by the mutation: {v:?}"))
        .unwrap_or_else(|| panic!("{name} is not a member"))
        .object
    }

    /// Every member's `dljob.dev/replicas`.
    pub(crate) fn topology(&self) -> String {
        match (self.members, self.per_job) {
            (Members::Pod, 1) => "master=1".into(),
            (Members::Pod, n) => format!("master=1,worker={}", n - 1),
            (_, n) => format!("worker={n}"),
        }
    }

    /// The role and index of pod `i` in its job.
    fn member(&self, i: usize) -> (&'static str, usize) {
        match (self.members, i % self.per_job) {
            (Members::Pod, 0) => ("master", 0),
            (Members::Pod, k) => ("worker", k - 1),
            (_, k) => ("worker", k),
        }
    }

    /// The uid of job `job`'s workload (its pods' owner).
    fn workload_uid(job: usize) -> String {
        format!("00000000-0000-4000-9000-{job:012x}")
    }

    /// Job `job`'s workload (none for bare pods), mutated.
    pub(crate) fn workload(&self, job: usize) -> Option<GenWorkload> {
        let (review, group, plural) = match self.members {
            Members::Pod => return None,
            Members::StatefulSet => (&self.workload_reviews[0], "apps", "statefulsets"),
            Members::Job => (&self.workload_reviews[1], "batch", "jobs"),
        };
        let job_name = Self::job_name(job);
        let namespace = self.namespace(job);
        let name = format!("{job_name}-worker");
        let n = self.per_job;
        let mut user = review["request"]["object"].clone();
        let labels = json!({"dljob.dev/job": job_name, "dljob.dev/role": "worker"});
        let mut annotations = json!({
            "dljob.dev/framework": "pytorch",
            "dljob.dev/replicas": self.topology(),
        });
        if let Some(gang) = &self.gang {
            annotations["dljob.dev/gang"] = json!(gang);
        }
        user["metadata"] = json!({
            "name": name, "namespace": namespace, "labels": labels, "annotations": annotations,
        });
        let spec = &mut user["spec"];
        spec["template"]["metadata"] = json!({"labels": labels, "annotations": annotations});
        match self.members {
            Members::StatefulSet => {
                spec["replicas"] = json!(n);
                spec["serviceName"] = json!(job_name);
                spec["selector"] = json!({"matchLabels": labels});
            }
            _ => {
                spec["completions"] = json!(n);
                spec["parallelism"] = json!(n);
            }
        }
        let kind = if self.members == Members::StatefulSet {
            Kind::StatefulSet
        } else {
            Kind::Job
        };
        let mut stored = self.mutated(kind, &user, &namespace, &name);
        let meta = &mut stored["metadata"];
        meta["uid"] = json!(Self::workload_uid(job));
        meta["creationTimestamp"] = json!(self.stamp);
        meta["generation"] = json!(1);
        stored["status"] = match self.members {
            Members::StatefulSet => json!({
                "replicas": n, "readyReplicas": n, "currentReplicas": n, "updatedReplicas": n,
                "availableReplicas": n, "observedGeneration": 1,
                "currentRevision": format!("{name}-7d9f8b6c5d"), "updateRevision": format!("{name}-7d9f8b6c5d"),
                "collisionCount": 0,
            }),
            _ => {
                json!({"active": n, "ready": n, "startTime": self.stamp, "terminating": 0, "uncountedTerminatedPods": {}})
            }
        };
        Some(GenWorkload {
            group,
            plural,
            namespace,
            name,
            user,
            stored,
        })
    }

    /// The pod the workload's controller makes for `index`, before
    /// admission.
    fn controlled_pod(&self, job: usize, index: usize) -> (String, Value) {
        let w = self.workload(job).expect("a workload");
        let template = &w.stored["spec"]["template"];
        let mut meta = template["metadata"].clone();
        let owner = json!([{
            "apiVersion": if w.group == "apps" { "apps/v1" } else { "batch/v1" },
            "kind": if w.group == "apps" { "StatefulSet" } else { "Job" },
            "name": w.name, "uid": Self::workload_uid(job),
            "controller": true, "blockOwnerDeletion": true,
        }]);
        let name = if self.members == Members::StatefulSet {
            let name = format!("{}-{index}", w.name);
            meta["labels"]["apps.kubernetes.io/pod-index"] = json!(index.to_string());
            meta["labels"]["statefulset.kubernetes.io/pod-name"] = json!(name);
            meta["labels"]["controller-revision-hash"] = json!(format!("{}-7d9f8b6c5d", w.name));
            name
        } else {
            let name = format!(
                "{}-{index}-{}",
                w.name,
                alnum5((job * self.per_job + index) as u64)
            );
            for (k, v) in [
                (
                    "batch.kubernetes.io/controller-uid",
                    Self::workload_uid(job),
                ),
                ("batch.kubernetes.io/job-name", w.name.clone()),
                ("controller-uid", Self::workload_uid(job)),
                ("job-name", w.name.clone()),
                (
                    "batch.kubernetes.io/job-completion-index",
                    index.to_string(),
                ),
            ] {
                meta["labels"][k] = json!(v);
            }
            meta["annotations"]["batch.kubernetes.io/job-completion-index"] =
                json!(index.to_string());
            meta["generateName"] = json!(format!("{}-{index}-", w.name));
            name
        };
        meta["name"] = json!(name);
        meta["namespace"] = json!(w.namespace);
        meta["ownerReferences"] = owner;
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]});
        (name, pod)
    }

    /// Pod `i` (job `i / N`, member `i % N`), mutated, with a uid.
    pub(crate) fn pod(&self, i: usize, uid: String) -> GenPod {
        let job = i / self.per_job;
        let (role, index) = self.member(i);
        if self.members != Members::Pod {
            return self.workload_pod(job, index, uid);
        }
        let job_name = Self::job_name(job);
        let namespace = self.namespace(job);
        let name = format!("{job_name}-{role}-{index}");
        let mut user = self.mutate_review["request"]["object"].clone();
        let meta = &mut user["metadata"];
        meta.as_object_mut().unwrap().remove("generateName");
        meta["name"] = json!(name);
        meta["namespace"] = json!(namespace);
        meta["labels"] = json!({"dljob.dev/job": job_name, "dljob.dev/role": role});
        meta["annotations"] = json!({
            "dljob.dev/framework": "pytorch",
            "dljob.dev/replicas": self.topology(),
        });
        if role == "worker" {
            meta["annotations"]["dljob.dev/index"] = json!(index.to_string());
        }
        if self.tensorboard {
            meta["annotations"]["dljob.dev/tensorboard"] = json!("logs:runs");
        }
        if let Some(gang) = &self.gang {
            meta["annotations"]["dljob.dev/gang"] = json!(gang);
        }
        // kubectl-create's entry as captured, for this pod's fields.
        let mf = &mut meta["managedFields"][0];
        mf["time"] = json!(self.stamp);
        let fm = &mut mf["fieldsV1"]["f:metadata"];
        fm.as_object_mut().unwrap().remove("f:generateName");
        fm["f:name"] = json!({});
        if role == "worker" {
            fm["f:annotations"]["f:dljob.dev/index"] = json!({});
        }
        // The service-account volume has a random suffix per pod.
        let volume = format!("kube-api-access-{}", alnum5(i as u64));
        user["spec"]["volumes"][0]["name"] = json!(volume);
        user["spec"]["containers"][0]["volumeMounts"][0]["name"] = json!(volume);
        if self.tensorboard {
            let logs = json!({"name": "logs", "nfs": {"server": "nfs.example.internal", "path": "/exports/ml"}});
            user["spec"]["volumes"].as_array_mut().unwrap().push(logs);
            let mount = json!({"name": "logs", "mountPath": "/logs"});
            user["spec"]["containers"][0]["volumeMounts"]
                .as_array_mut()
                .unwrap()
                .push(mount);
        }

        let mut pending = self.mutated(Kind::Pod, &user, &namespace, &name);
        let meta = &mut pending["metadata"];
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(self.stamp);
        meta["generation"] = json!(1);
        // The webhook's additions belong to the request's manager.
        let owned = json!({
            "metadata": {"name": name, "labels": meta["labels"], "annotations": meta["annotations"]},
            "spec": {
                "containers": pending["spec"]["containers"],
                "hostname": pending["spec"]["hostname"],
                "subdomain": pending["spec"]["subdomain"],
                "dnsPolicy": pending["spec"]["dnsPolicy"],
                "enableServiceLinks": pending["spec"]["enableServiceLinks"],
                "restartPolicy": pending["spec"]["restartPolicy"],
                "schedulerName": pending["spec"]["schedulerName"],
                "securityContext": pending["spec"]["securityContext"],
                "terminationGracePeriodSeconds": pending["spec"]["terminationGracePeriodSeconds"],
                "volumes": pending["spec"]["volumes"].as_array().map(|v| v.iter().filter(|v| !v["name"].as_str().unwrap_or("").starts_with("kube-api-access")).cloned().collect::<Vec<_>>()),
            }
        });
        pending["metadata"]["managedFields"][0]["fieldsV1"] = fields_v1(&owned);
        GenPod::pending(namespace, name, user, pending)
    }

    /// The `index`th pod of job `job`'s workload, as its controller
    /// makes it and admission mutates it, with a uid.
    fn workload_pod(&self, job: usize, index: usize, uid: String) -> GenPod {
        let (name, user) = self.controlled_pod(job, index);
        let namespace = self.namespace(job);
        let mut pending = self.mutated(Kind::Pod, &user, &namespace, &name);
        let meta = &mut pending["metadata"];
        meta["uid"] = json!(uid);
        meta["creationTimestamp"] = json!(self.stamp);
        let manager = if self.members == Members::StatefulSet {
            "kube-controller-manager"
        } else {
            "job-controller"
        };
        let fields = fields_v1(
            &json!({"metadata": pending["metadata"].clone(), "spec": pending["spec"].clone()}),
        );
        set_managed(&mut pending, manager, "Update", "v1", None, fields);
        GenPod::pending(namespace, name, user, pending)
    }

    /// The workload's review, compact: the user's object for the
    /// mutating webhook, the mutated one for the validating one.
    pub(crate) fn workload_review(&self, w: &GenWorkload, uid: &str, validate: bool) -> String {
        let i = usize::from(w.group != "apps");
        let mut r = self.workload_reviews[i].clone();
        let req = &mut r["request"];
        req["uid"] = json!(uid);
        req["name"] = json!(w.name);
        req["namespace"] = json!(w.namespace);
        req["object"] = if validate {
            let mut object = w.stored.clone();
            object["status"] = json!({});
            object
        } else {
            w.user.clone()
        };
        r.to_string()
    }

    /// The pod scheduled and running, as its kubelet reports it.
    pub(crate) fn running(&self, i: usize, pending: &Value) -> Value {
        let mut pod = pending.clone();
        let node = format!("gpu-node-{:03}", (i / 8) % 400);
        pod["spec"]["nodeName"] = json!(node);
        let t = &self.stamp;
        let container = &pod["spec"]["containers"][0];
        let host_ip = format!("10.0.{}.{}", (i / 8 / 250) % 250, (i / 8) % 250 + 1);
        let pod_ip = format!("10.244.{}.{}", (i / 250) % 250, i % 250 + 2);
        let cond = |ty: &str| json!({"type": ty, "status": "True", "lastProbeTime": null, "lastTransitionTime": t});
        let status = json!({
            "phase": "Running",
            "conditions": [
                cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                cond("ContainersReady"), cond("PodScheduled"),
            ],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": t,
            "containerStatuses": [{
                "name": container["name"],
                "state": {"running": {"startedAt": t}},
                "lastState": {},
                "ready": true,
                "restartCount": 0,
                "image": format!("docker.io/{}", container["image"].as_str().unwrap_or("")),
                "imageID": format!("docker.io/pytorch/pytorch@sha256:{}", hex(7, 64)),
                "containerID": format!("containerd://{}", hex(i as u64 + 1000, 64)),
                "started": true,
                "volumeMounts": container["volumeMounts"].as_array().map(|m| m.iter().map(|v| {
                    let mut v = v.clone();
                    v["recursiveReadOnly"] = if v["readOnly"] == true { json!("Disabled") } else { Value::Null };
                    if v["recursiveReadOnly"].is_null() { v.as_object_mut().unwrap().remove("recursiveReadOnly"); }
                    v
                }).collect::<Vec<_>>()),
                "user": {"linux": {"uid": 0, "gid": 0, "supplementalGroups": [0]}},
            }],
            "qosClass": "BestEffort",
        });
        pod["status"] = status;
        let scheduler = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": t}]}});
        set_managed(
            &mut pod,
            "kube-scheduler",
            "Update",
            "v1",
            Some("status"),
            fields_v1(&scheduler),
        );
        let mut kubelet = json!({"status": pod["status"].clone()});
        kubelet["status"]
            .as_object_mut()
            .unwrap()
            .remove("qosClass");
        set_managed(
            &mut pod,
            "kubelet",
            "Update",
            "v1",
            Some("status"),
            fields_v1(&kubelet),
        );
        pod
    }

    /// The mutating review the API server sends for `p`, compact.
    pub(crate) fn mutate_review(&self, p: &GenPod, uid: &str) -> String {
        let mut r = self.mutate_review.clone();
        let req = &mut r["request"];
        req["uid"] = json!(uid);
        req["name"] = json!(p.name);
        req["namespace"] = json!(p.namespace);
        req["object"] = p.user.clone();
        r.to_string()
    }

    /// The validating review: the mutated object before it is stored.
    pub(crate) fn validate_review(&self, p: &GenPod, uid: &str) -> String {
        let mut r = self.validate_review.clone();
        let req = &mut r["request"];
        req["uid"] = json!(uid);
        req["name"] = json!(p.name);
        req["namespace"] = json!(p.namespace);
        let mut object = p.pending.clone();
        object["status"] = json!({});
        req["object"] = object;
        r.to_string()
    }
}
