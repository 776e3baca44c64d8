//! The objects `benches/replay.rs` replays: PyTorch jobs of bare pods
//! (`master=1,worker=3`), shaped as the API server stores them.
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
pub(crate) const TOPOLOGY: &str = "master=1,worker=3";
/// (role, index) of the pods of one job.
pub(crate) const MEMBERS: [(&str, usize); 4] =
    [("master", 0), ("worker", 0), ("worker", 1), ("worker", 2)];

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
}

/// One pod of the replay: the user's object (what the mutating webhook
/// sees), and what the API server stores.
pub(crate) struct GenPod {
    pub namespace: String,
    pub name: String,
    pub user: Value,
    pub pending: Value,
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
    pub(crate) fn new(namespaces: usize, tensorboard: bool, gang: Option<String>) -> Self {
        Self {
            tensorboard,
            gang,
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

    /// Pod `i` (job `i / 4`, member `i % 4`), mutated, with a uid.
    pub(crate) fn pod(&self, i: usize, uid: String) -> GenPod {
        let job = i / MEMBERS.len();
        let (role, index) = MEMBERS[i % MEMBERS.len()];
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
            "dljob.dev/replicas": TOPOLOGY,
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

        let mutated = mutate::mutate(
            Subject::new(Kind::Pod, &user, Some(&namespace)),
            Operation::Create,
            &self.config,
        )
        .unwrap_or_else(|v| panic!("{name} refused by the mutation: {v:?}"))
        .unwrap_or_else(|| panic!("{name} is not a member"))
        .object;
        let mut pending = mutated;
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
        pending["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        GenPod {
            namespace,
            name,
            user,
            pending,
        }
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
