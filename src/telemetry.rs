//! Logging: `tracing` to standard error, as text or one JSON object per
//! line. `RUST_LOG` overrides the default `info` filter. Errors are shown
//! with their causes, each once ([`Chain`]).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// Installs the global subscriber. Calling it again (tests) is harmless.
pub(crate) fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}

/// An error and its causes, `: `-separated, each said once: dljob's own
/// error messages never repeat their source, but some dependencies' do
/// (`ApiError: {0}` with that Status as its source), so a cause whose text
/// is already shown is left out.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !shown.contains(&text) {
                shown.push_str(": ");
                shown.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&shown)
    }
}

#[cfg(test)]
mod tests {
    use super::Chain;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("the self-signed CA")]
        Ca(#[source] Inner),
    }

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("generating a certificate")]
        Generate(#[source] std::io::Error),
        /// A message that repeats its source, as some dependencies' do.
        #[error("ApiError: {0}")]
        Api(#[source] std::io::Error),
    }

    #[test]
    fn each_cause_is_said_once() {
        let e = Outer::Ca(Inner::Generate(std::io::Error::other(
            "Could not parse certificate",
        )));
        assert_eq!(
            Chain(&e).to_string(),
            "the self-signed CA: generating a certificate: Could not parse certificate"
        );
        let e = Outer::Ca(Inner::Api(std::io::Error::other("403 Forbidden")));
        assert_eq!(
            Chain(&e).to_string(),
            "the self-signed CA: ApiError: 403 Forbidden"
        );
    }
}
