//! Re-reading files when they change: the config file and the TLS pair.
//!
//! Polling, not inotify: a Kubernetes Secret or ConfigMap mount swaps a
//! `..data` symlink, which inotify watches on the file miss. Contents are
//! compared (not mtimes), so a rewrite within the same second still counts
//! and a touch without change does not.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;

/// A set of files and the contents last handed out.
#[derive(Debug)]
pub(crate) struct WatchedFiles {
    paths: Vec<PathBuf>,
    last: Vec<Vec<u8>>,
    last_error: Option<String>,
}

impl WatchedFiles {
    /// Watches `paths`, whose current contents are `current`.
    pub(crate) fn new(paths: Vec<PathBuf>, current: Vec<Vec<u8>>) -> Self {
        Self {
            paths,
            last: current,
            last_error: None,
        }
    }

    /// Reads the files again. `Some(contents)` when any of them differs from
    /// the contents last returned (or given to `new`); then those become the
    /// reference, whether or not the caller can use them, so a bad file is
    /// reported once, not every poll. A read error (a file missing in the
    /// middle of a rotation) is logged once and retried on the next poll.
    pub(crate) async fn changed(&mut self) -> Option<Vec<Vec<u8>>> {
        let mut now = Vec::with_capacity(self.paths.len());
        for p in &self.paths {
            match tokio::fs::read(p).await {
                Ok(bytes) => now.push(bytes),
                Err(e) => {
                    let msg = format!("{}: {e}", p.display());
                    if self.last_error.as_ref() != Some(&msg) {
                        tracing::warn!(error = %msg, "cannot re-read a watched file; keeping what was loaded");
                        self.last_error = Some(msg);
                    }
                    return None;
                }
            }
        }
        self.last_error = None;
        if now == self.last {
            return None;
        }
        self.last.clone_from(&now);
        Some(now)
    }
}

/// Loads the config file (the default config without one) and, when there
/// is a file, re-reads it every `interval`: each valid new version is
/// published on the returned channel; an invalid one is logged and the
/// previous config kept. Must be called inside a tokio runtime; abort the
/// task to stop watching. `serving_image`, the image dljob runs from, is
/// the default of every version's `waitForNamesImage`.
pub fn watch_config(
    path: Option<PathBuf>,
    interval: Duration,
    serving_image: Option<String>,
) -> Result<(watch::Receiver<Config>, JoinHandle<()>), ConfigLoadError> {
    let Some(path) = path else {
        let (tx, rx) = watch::channel(Config::default().with_serving_image(serving_image));
        // The sender lives as long as someone reads the channel.
        return Ok((rx, tokio::spawn(async move { tx.closed().await })));
    };
    let bytes = std::fs::read(&path).map_err(|e| ConfigLoadError::Read(path.clone(), e))?;
    let config = parse(&bytes)
        .map_err(|e| ConfigLoadError::Invalid(path.clone(), e))?
        .with_serving_image(serving_image.clone());
    warn_of(&path, &config);
    let (tx, rx) = watch::channel(config);
    let mut files = WatchedFiles::new(vec![path.clone()], vec![bytes]);
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(mut contents) = files.changed().await else {
                continue;
            };
            match parse(&contents.remove(0)) {
                Ok(new) => {
                    let new = new.with_serving_image(serving_image.clone());
                    tracing::info!(path = %path.display(), "config reloaded");
                    warn_of(&path, &new);
                    tx.send_replace(new);
                }
                Err(e) => tracing::error!(
                    path = %path.display(),
                    error = %e,
                    "new config is invalid; keeping the previous one"
                ),
            }
        }
    });
    Ok((rx, task))
}

/// Logs what the config does that may not be meant ([`Config::warnings`]).
fn warn_of(path: &std::path::Path, config: &Config) {
    for warning in config.warnings() {
        tracing::warn!(path = %path.display(), "{warning}");
    }
}

fn parse(bytes: &[u8]) -> Result<Config, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    Config::from_yaml(text).map_err(|e| e.to_string())
}

/// Why the config file could not be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    #[error("reading config {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("config {0}: {1}")]
    Invalid(PathBuf, String),
}
