//! Logging: `tracing` to standard error, as text or one JSON object per
//! line. `RUST_LOG` overrides the default filter ([`DEFAULT_FILTER`]). Errors are shown
//! with their causes, each once ([`Chain`]).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// The filter without `RUST_LOG`: INFO, but kube's watcher, whose own
/// WARN line for each failed retry is a raw `Debug` dump — dljob says each
/// watch failure once per change, with what to do about it.
const DEFAULT_FILTER: &str = "info,kube_runtime::watcher=error";

/// Installs the global subscriber. Calling it again (tests) is harmless.
pub(crate) fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
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
/// (kube's `ApiError: {0} ({0:?})` with that Status as its source; a
/// client's "client error (Connect)" says why only through its source), so
/// a cause its parent's message already says ([`says`]) is left out.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parent = self.0.to_string();
        f.write_str(&parent)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !says(&parent, &text) {
                write!(f, ": {text}")?;
            }
            parent = text;
            source = cause.source();
        }
        Ok(())
    }
}

/// Whether an error's `message` already says its cause's `text`, the way
/// messages embed a source: at the end (`…: {0}`), after a colon, or
/// before a parenthesis (`{0} ({0:?})`). A short cause that is only a word
/// of the message ("EOF") is not taken for said.
fn says(message: &str, text: &str) -> bool {
    message.ends_with(text)
        || message.contains(&format!(": {text}"))
        || message.contains(&format!("{text} ("))
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

    /// An error that names its cause or not, as a client's does.
    #[derive(Debug)]
    struct Wrapping(&'static str, std::io::Error);
    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.1)
        }
    }

    #[test]
    fn a_cause_is_compared_with_its_parent_only() {
        let refused =
            || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        assert_eq!(
            Chain(&Wrapping("client error (Connect)", refused())).to_string(),
            "client error (Connect): Connection refused"
        );
        assert_eq!(
            Chain(&Wrapping("connect: Connection refused", refused())).to_string(),
            "connect: Connection refused"
        );
        // A short cause that happens to be a word of the parent's text is
        // still said.
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "EOF");
        assert_eq!(
            Chain(&Wrapping("reading the EOF-terminated list", eof)).to_string(),
            "reading the EOF-terminated list: EOF"
        );
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
