//! Request body bytes → `webhook::admission::review` on both endpoints.
//!
//! Never panics, and the answer is either a 400 (`Answer::BadRequest`) or a
//! 200 whose body is an `admission.k8s.io/v1` AdmissionReview answering the
//! request's uid; a denial carries a 4xx status code, and a patch is a
//! base64 JSON Patch that applies to `request.object`. Only UTF-8 JSON is
//! answered; a string escape that does not decode (a lone surrogate) is
//! refused where the webhook reads it and ignored where it skips it unread.
#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use dljob::config::Config;
use dljob::validate::NoPeers;
use dljob::webhook::admission::{review, Answer, Endpoint};
use dljob::webhook::wire::{self, ReviewView, API_VERSION};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const CONFIG: &str = "
clusterDomain: cluster.local
ports:
  jax: 7777
accelerators:
  nvidia.com/gpu:
    volumes:
    - name: nvidia-libraries
      hostPath: /home/kubernetes/bin/nvidia/lib64
      mountPath: /usr/local/nvidia/lib64
    env:
    - name: LD_LIBRARY_PATH
      value: /usr/local/nvidia/lib64
";

fn config() -> &'static Config {
    static C: OnceLock<Config> = OnceLock::new();
    C.get_or_init(|| Config::from_yaml(CONFIG).expect("the fuzz config is valid"))
}

fuzz_target!(|body: &[u8]| {
    for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
        check(endpoint, body, review(endpoint, body, config(), &NoPeers));
    }
});

fn check(endpoint: Endpoint, body: &[u8], answer: Answer) {
    let (out, summary) = match answer {
        Answer::BadRequest(message) => {
            assert!(!message.is_empty(), "a 400 explains itself");
            return;
        }
        Answer::Review { body, summary } => (body, summary),
    };
    // Only a body that is JSON with a non-empty string request.uid is answered.
    let text = std::str::from_utf8(body).expect("an answered body is UTF-8");
    serde_json::from_str::<&serde_json::value::RawValue>(text).expect("an answered body is JSON");
    let input: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        // JSON whose string escapes serde_json will not decode into a tree
        // (a lone surrogate, `\ud800`) in a field the webhook skips unread:
        // what the webhook read is checked, through its own view.
        Err(e) => {
            let view = ReviewView::parse(body).expect("an answered body is read by the view");
            let request = view.request.expect("an answered body has a request");
            assert!(e.to_string().contains("surrogate"), "{e}");
            serde_json::json!({"request": {
                "uid": wire::string(request.uid).expect("a string uid"),
                "object": request.object,
            }})
        }
    };
    let uid = input["request"]["uid"]
        .as_str()
        .expect("an answered body has a string request.uid");
    assert!(!uid.is_empty());
    assert_eq!(summary.uid, uid);

    let out: Value = serde_json::from_slice(&out).expect("the response is JSON");
    assert_eq!(out["apiVersion"], API_VERSION);
    assert_eq!(out["kind"], "AdmissionReview");
    let response = &out["response"];
    assert_eq!(response["uid"].as_str(), Some(uid), "response.uid");
    let allowed = response["allowed"].as_bool().expect("response.allowed");
    assert_eq!(allowed, summary.allowed);
    if allowed {
        assert!(response.get("status").is_none());
    } else {
        let code = response["status"]["code"].as_u64().expect("status.code");
        assert!((400..500).contains(&code), "denial code {code}");
        assert_eq!(response["status"]["status"], "Failure");
        assert!(!response["status"]["message"]
            .as_str()
            .expect("status.message")
            .is_empty());
        assert!(response.get("patch").is_none(), "a denial has no patch");
    }
    if let Some(warnings) = response.get("warnings") {
        assert!(warnings.as_array().is_some_and(|w| !w.is_empty()));
    }
    match response.get("patch") {
        None => {
            assert!(response.get("patchType").is_none());
            assert_eq!(summary.patch_ops, 0);
        }
        Some(patch) => {
            assert_eq!(
                endpoint,
                Endpoint::Mutate,
                "only the mutating webhook patches"
            );
            assert_eq!(response["patchType"], "JSONPatch");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(patch.as_str().expect("patch is a string"))
                .expect("patch is base64");
            let patch: json_patch::Patch =
                serde_json::from_slice(&bytes).expect("patch is a JSON Patch");
            assert!(!patch.0.is_empty(), "no empty patch is sent");
            assert_eq!(patch.0.len(), summary.patch_ops);
            let mut object = input["request"]["object"].clone();
            assert!(object.is_object(), "a patched review has an object");
            json_patch::patch(&mut object, &patch).unwrap_or_else(|e| {
                panic!(
                    "the patch does not apply to request.object: {e}\npatch: {}",
                    serde_json::to_string(&patch).unwrap_or_default()
                )
            });
        }
    }
}
