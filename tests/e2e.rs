//! End-to-end against a real cluster where dljob is installed (see
//! docs/install.md, "End-to-end against a cluster"). Runs only when
//! `DLJOB_E2E_KUBECONFIG` names a kubeconfig; otherwise it returns at once,
//! since no cluster exists on the machines CI runs on.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

async fn client(path: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("DLJOB_E2E_KUBECONFIG is a kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("the kubeconfig's current context is usable");
    Client::try_from(config).expect("a client")
}

fn member(name: &str, role: &str, index: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"dljob.dev/job": "ddp", "dljob.dev/role": role},
            "annotations": {
                "dljob.dev/framework": "pytorch",
                "dljob.dev/replicas": "master=1,worker=1",
                "dljob.dev/index": index.to_string()
            }
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pytorch", "image": "busybox:1.36", "command": ["sh", "-c", "env | sort; sleep 20"]}]
        }
    }))
    .expect("a pod")
}

fn env_of(pod: &Pod) -> Vec<(String, String)> {
    pod.spec.as_ref().unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn labelled_pods_are_wired_and_get_a_dljob() {
    let Ok(path) = std::env::var("DLJOB_E2E_KUBECONFIG") else {
        eprintln!("DLJOB_E2E_KUBECONFIG is not set: no cluster to test against");
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = client(&path).await;
    let ns_name = format!(
        "dljob-e2e-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns_name}})).unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");

    let result = tokio::time::timeout(Duration::from_secs(120), async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns_name);
        let master = pods
            .create(&PostParams::default(), &member("ddp-master", "master", 0))
            .await
            .expect("the webhook admits the master");
        let worker = pods
            .create(&PostParams::default(), &member("ddp-worker", "worker", 0))
            .await
            .expect("the webhook admits the worker");
        let master_host = format!("ddp-master-0.ddp.{ns_name}.svc");
        for (pod, rank) in [(&master, "0"), (&worker, "1")] {
            let env = env_of(pod);
            let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
            assert_eq!(get("MASTER_ADDR"), Some(master_host.as_str()));
            assert_eq!(get("WORLD_SIZE"), Some("2"));
            assert_eq!(get("RANK"), Some(rank));
        }
        assert_eq!(
            worker.spec.as_ref().unwrap().hostname.as_deref(),
            Some("ddp-worker-0")
        );
        assert_eq!(
            worker.spec.as_ref().unwrap().subdomain.as_deref(),
            Some("ddp")
        );

        // A member that disagrees on the topology is refused.
        let mut bad = member("ddp-bad", "worker", 0);
        bad.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("dljob.dev/replicas".into(), "worker=3".into());
        let refused = pods.create(&PostParams::default(), &bad).await;
        assert!(refused.is_err(), "a disagreeing member was admitted");

        // The reconciler creates the DLJob and its headless Service.
        let dljobs: Api<dljob::crd::DLJob> = Api::namespaced(client.clone(), &ns_name);
        loop {
            if let Ok(job) = dljobs.get("ddp").await {
                assert_eq!(job.spec.framework, "pytorch");
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await;
    let _ = namespaces.delete(&ns_name, &DeleteParams::default()).await;
    result.expect("the cluster answered within 120 s");
}

/// `kubectl` with the e2e kubeconfig: its status and output.
fn kubectl(kubeconfig: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("kubectl on PATH");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The install as docs/install.md gives it, against a cluster where dljob is
/// not installed yet (its image loaded): `dljob certs`, `deploy/install`
/// twice (the second changes nothing: every object `unchanged`), the mxnet
/// example admitted and given its DLJob, then the documented uninstall,
/// twice (idempotent). Runs only with `DLJOB_E2E_INSTALL=1` as well, since
/// it installs and removes dljob itself.
#[tokio::test]
async fn install_twice_run_an_example_and_uninstall_twice() {
    let (Ok(kubeconfig), Ok("1")) = (
        std::env::var("DLJOB_E2E_KUBECONFIG"),
        std::env::var("DLJOB_E2E_INSTALL").as_deref(),
    ) else {
        eprintln!("DLJOB_E2E_KUBECONFIG and DLJOB_E2E_INSTALL=1 are not both set: not installing");
        return;
    };
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = |program: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(program)
            .args(args)
            .current_dir(repo)
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .expect("runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{} {args:?}:\n{text}",
            program.display()
        );
        text
    };
    run(
        std::path::Path::new(env!("CARGO_BIN_EXE_dljob")),
        &["certs"],
    );
    let install = repo.join("deploy/install");
    run(&install, &[]);
    let again = run(&install, &[]);
    let changed: Vec<&str> = again
        .lines()
        .filter(|l| l.ends_with(" configured") || l.ends_with(" created"))
        .collect();
    assert!(
        changed.is_empty(),
        "a second install changed {changed:?}:\n{again}"
    );

    let (ok, out) = kubectl(
        &kubeconfig,
        &["apply", "-f", "examples/mxnet-linear/job.yaml"],
    );
    assert!(ok, "{out}");
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !kubectl(&kubeconfig, &["get", "dljob", "mxnet-linear"]).0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no DLJob within 120 s"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for _ in 0..2 {
        for args in [
            &[
                "delete",
                "--ignore-not-found",
                "-f",
                "examples/mxnet-linear/job.yaml",
            ][..],
            &[
                "delete",
                "--ignore-not-found",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                "dljob",
            ],
            &["delete", "--ignore-not-found", "-k", "deploy/"],
        ] {
            let (ok, out) = kubectl(&kubeconfig, args);
            assert!(ok, "kubectl {args:?}:\n{out}");
        }
    }
}
