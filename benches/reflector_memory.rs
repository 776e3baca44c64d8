//! Memory of the reconciler's member cache (issue: evidence, point 3): the
//! pod reflector store plus the [`MemberIndex`] for 10 000 member pods, as
//! live heap bytes (a counting allocator) and as process RSS (`VmRSS` and
//! `VmHWM` from /proc/self/status). Target: ≤ 100 MiB total RSS with
//! 10 000 trimmed member pods.
//!
//! `cargo bench --bench reflector_memory` prints the figures for
//! BENCHMARKS.md, for two pod shapes (`minimal`: only what dljob needs;
//! `typical`: with the labels, annotations and sidecar of a real cluster's
//! pod). Each variant (trimmed, untrimmed) runs in a fresh child
//! process, so that one's peak and freed-but-kept pages do not count in the
//! other's RSS. Without `--bench` (`cargo test --benches`) it only checks
//! that the measurement runs, with 1000 pods.

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering};

use dljob::config::Config;
use dljob::reconciler::observe::{self, MemberIndex};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use serde_json::json;

static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The system allocator, counting the bytes currently allocated.
struct Counting;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NS: &str = "ml";
const MIB: f64 = 1024.0 * 1024.0;

/// The `minimal` shape: a StatefulSet pod as a kube-apiserver returns it
/// after mutation: managedFields, the hostfile annotation, 20 env vars,
/// mounts, conditions, only the dljob labels and annotations and one
/// container (what the ignored test in tests/reconciler.rs measured).
fn realistic_pod(index: u32, total: u32) -> Pod {
    let name = format!("worker-{index}");
    let hosts: String = (0..64)
        .map(|i| format!("mnist-worker-{i}.mnist.ml.svc slots=8\n"))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {
                "dljob.dev/job": "mnist", "dljob.dev/role": "worker",
                "apps.kubernetes.io/pod-index": index.to_string(),
            },
            "annotations": {
                "dljob.dev/framework": "pytorch",
                "dljob.dev/replicas": format!("worker={total}"),
                "dljob.dev/hostfile": hosts,
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "worker", "uid": "o", "controller": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"pytorch\"}": {".": {}, "f:image": {}, "f:env": {}}}}}}],
        },
        "spec": {
            "restartPolicy": "Always", "nodeName": "node-1",
            "containers": [{
                "name": "pytorch", "image": "registry.example.com/team/train:2024-06-01",
                "command": ["mpirun", "python", "train.py", "--epochs", "90"],
                "env": (0..20).map(|i| json!({"name": format!("VAR_{i}"), "value": "x".repeat(40)})).collect::<Vec<_>>(),
                "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"}},
                "volumeMounts": [{"name": "dljob-ssh", "mountPath": "/root/.ssh"}, {"name": "dljob-hostfile", "mountPath": "/etc/dljob"}]
            }]
        },
        "status": {
            "phase": "Running", "podIP": "10.1.2.3",
            "conditions": [
                {"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"}, {"type": "ContainersReady", "status": "True"}
            ],
            "containerStatuses": [{
                "name": "pytorch", "image": "train", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2023-11-14T22:00:00Z"}}
            }]
        }
    }))
    .expect("the pod parses")
}

/// The `typical` shape: [`realistic_pod`] with what a StatefulSet pod of a real cluster also
/// carries: the StatefulSet controller's labels, a user label, a CNI
/// annotation and a log-shipping sidecar with its status.
fn typical_pod(index: u32, total: u32) -> Pod {
    let mut pod = realistic_pod(index, total);
    let meta = &mut pod.metadata;
    let labels = meta.labels.as_mut().expect("labels");
    labels.insert(
        "controller-revision-hash".into(),
        "worker-5d8f7b9c6d".into(),
    );
    labels.insert(
        "statefulset.kubernetes.io/pod-name".into(),
        format!("worker-{index}"),
    );
    labels.insert("app.kubernetes.io/name".into(), "mnist".into());
    meta.annotations.as_mut().expect("annotations").insert(
        "k8s.v1.cni.cncf.io/network-status".into(),
        json!([{"name": "cbr0", "interface": "eth0", "ips": ["10.1.2.3"], "mac": "0a:58:0a:01:02:03", "default": true, "dns": {}}])
            .to_string(),
    );
    pod.spec.as_mut().expect("spec").containers.push(
        serde_json::from_value(json!({
            "name": "fluent-bit", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1",
            "args": ["--config=/fluent-bit/etc/fluent-bit.yaml"],
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "logs", "mountPath": "/var/log/train"}]
        }))
        .expect("the sidecar parses"),
    );
    pod.status
        .as_mut()
        .expect("status")
        .container_statuses
        .as_mut()
        .expect("statuses")
        .push(
            serde_json::from_value(json!({
                "name": "fluent-bit", "image": "cr.fluentbit.io/fluent/fluent-bit:3.1",
                "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2023-11-14T22:00:00Z"}}
            }))
            .expect("the sidecar status parses"),
        );
    pod
}

/// `VmRSS` and `VmHWM` of this process, in bytes.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Fills a pod store and a member index with `n` pods, one at a time as
/// the watch delivers them (trimmed by the reflector's `modify` when
/// `trim`), and prints what stays: live heap bytes and process RSS.
fn measure(n: u32, shape: &str, trim: bool) {
    let make = match shape {
        "typical" => typical_pod,
        _ => realistic_pod,
    };
    let config = Config::default();
    let (rss_before, _) = rss();
    let heap_before = LIVE.load(Ordering::Relaxed);
    let index = MemberIndex::default();
    let mut writer: Writer<Pod> = Writer::default();
    let (mut store_bytes, mut index_bytes) = (0, 0);
    for i in 0..n {
        let mut pod = make(i, n);
        if trim {
            observe::trim_pod(&mut pod);
        }
        let event = watcher::Event::Apply(pod);
        let start = LIVE.load(Ordering::Relaxed);
        writer.apply_watcher_event(&event);
        let stored = LIVE.load(Ordering::Relaxed);
        index.apply_event(&event, &config);
        store_bytes += stored - start;
        index_bytes += LIVE.load(Ordering::Relaxed) - stored;
    }
    let heap = (LIVE.load(Ordering::Relaxed) - heap_before) as f64;
    let (rss_after, hwm) = rss();
    assert_eq!(index.members(NS, "mnist").len(), n as usize);
    assert_eq!(writer.as_reader().len(), n as usize);
    let variant = if trim { "trimmed" } else { "untrimmed" };
    println!(
        "{n} {variant} {shape} member pods: store + index heap {:.1} MiB ({:.0} B/pod: store {:.0}, index {:.0}); \
         VmRSS {:.1} MiB before, {:.1} MiB after (+{:.1} MiB); VmHWM {:.1} MiB",
        heap / MIB,
        heap / f64::from(n),
        store_bytes as f64 / f64::from(n),
        index_bytes as f64 / f64::from(n),
        rss_before as f64 / MIB,
        rss_after as f64 / MIB,
        (rss_after as f64 - rss_before as f64) / MIB,
        hwm as f64 / MIB,
    );
    drop((writer, index));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let n: u32 = args[i + 3].parse().expect("a pod count");
        measure(n, &args[i + 1], args[i + 2] == "trimmed");
        return;
    }
    let n = if args.iter().any(|a| a == "--bench") {
        10_000
    } else {
        1_000
    };
    println!(
        "size_of: Pod {} B, PodSpec {} B, PodStatus {} B, ContainerStatus {} B, Container {} B, MemberSpec {} B",
        std::mem::size_of::<Pod>(),
        std::mem::size_of::<k8s_openapi::api::core::v1::PodSpec>(),
        std::mem::size_of::<k8s_openapi::api::core::v1::PodStatus>(),
        std::mem::size_of::<k8s_openapi::api::core::v1::ContainerStatus>(),
        std::mem::size_of::<k8s_openapi::api::core::v1::Container>(),
        std::mem::size_of::<dljob::member::MemberSpec>(),
    );
    let exe = std::env::current_exe().expect("the bench's own path");
    for shape in ["minimal", "typical"] {
        for variant in ["trimmed", "untrimmed"] {
            let status = Command::new(&exe)
                .args(["--child", shape, variant, &n.to_string()])
                .status()
                .expect("the measuring child runs");
            assert!(status.success(), "the {shape} {variant} measurement failed");
        }
    }
}
