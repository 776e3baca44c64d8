//! What the tests that run the `dljob` binary share: run it bounded by a
//! deadline, with standard input, and capture what it prints.

#![allow(dead_code)] // each test crate uses its own part of it

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest any one `dljob` run may take.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

pub(crate) struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

pub(crate) fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `dljob args…` from the repository root with `stdin` (if any),
/// killing it if it outlives [`DEADLINE`].
pub(crate) fn dljob(args: &[&str], stdin: Option<&str>) -> Run {
    dljob_with_env(args, stdin, &[])
}

/// [`dljob`] with environment variables set (`Some`) or removed (`None`).
pub(crate) fn dljob_with_env(
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, Option<&str>)],
) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dljob"));
    for (key, value) in env {
        match value {
            Some(v) => command.env(key, v),
            None => command.env_remove(key),
        };
    }
    let mut child = command
        .args(args)
        .current_dir(repo())
        // Errors are for users: no backtrace even when one is asked for.
        .env("RUST_BACKTRACE", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the dljob binary runs");
    let writer = stdin.map(|text| {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        let text = text.to_owned();
        thread::spawn(move || {
            // The child may exit before reading everything; that is its answer.
            let _ = pipe.write_all(text.as_bytes());
        })
    });
    let reader = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut s = String::new();
            pipe.read_to_string(&mut s).expect("UTF-8 output");
            s
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("stdout pipe")));
    let err = reader(Box::new(child.stderr.take().expect("stderr pipe")));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for dljob") {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dljob {args:?} ran longer than {DEADLINE:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    if let Some(w) = writer {
        w.join().expect("stdin writer");
    }
    Run {
        code: status.code(),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// A document dljob must not touch, with comments, odd spacing and quoting.
pub(crate) const CONFIG_MAP: &str = "\
# Settings the trainer reads; dljob leaves this document alone.
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings   # keep this comment
data:
  lr: \"0.1\"    
  flags: '--fast'
  script: |
    echo   \"spaces kept\"
";

/// A scratch directory under the target directory: `group/name`, emptied.
pub(crate) fn scratch_dir(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(group)
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The objects of a multi-document YAML text, in order.
pub(crate) fn values(text: &str) -> Vec<serde_json::Value> {
    dljob::manifest::parse(text)
        .expect("parses")
        .into_iter()
        .filter_map(|d| d.value)
        .collect()
}
