//! The command lines of the example binaries (`example-host`, `codex-gateway`): options given
//! as `--name value` pairs, their logging and their runtime.

use std::collections::HashMap;
use std::time::Duration;

/// The `--name value` options of a command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    values: HashMap<String, String>,
}

impl Options {
    /// Reads `--name value` pairs from `args`; anything else is a usage error, which the
    /// message describes.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = args.into_iter();
        let mut values = HashMap::new();
        while let Some(flag) = args.next() {
            let name = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument `{flag}`"))?;
            let value = args
                .next()
                .ok_or_else(|| format!("`--{name}` needs a value"))?;
            values.insert(name.to_owned(), value);
        }
        Ok(Self { values })
    }

    /// The value of `--name`, when given.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name`, or a usage error saying it is required.
    pub fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name)
            .ok_or_else(|| format!("`--{name}` is required"))
    }

    /// A usage error naming the first option given that is not in `known`.
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        let mut unknown: Vec<&str> = self
            .values
            .keys()
            .map(String::as_str)
            .filter(|name| !known.contains(name))
            .collect();
        unknown.sort_unstable();
        match unknown.first() {
            None => Ok(()),
            Some(name) => Err(format!(
                "unknown option `--{name}`; the options are --{}",
                known.join(", --")
            )),
        }
    }

    /// `--name` as milliseconds (`default` when not given).
    pub fn millis(&self, name: &str, default: u64) -> Result<Duration, String> {
        self.get(name)
            .map_or(Ok(default), str::parse)
            .map(Duration::from_millis)
            .map_err(|e| format!("`--{name}`: {e}"))
    }
}

/// Logs to stderr without colour codes, at `info` unless `RUST_LOG` says otherwise.
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// The binaries' runtime: two worker threads (the machine kind's cores); a failure to start it
/// is logged.
pub fn runtime() -> Result<tokio::runtime::Runtime, std::io::Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .inspect_err(|error| tracing::error!(%error, "cannot start the runtime"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn options_are_name_value_pairs() {
        let options = parse(&["--session", "agent:main:x", "--wait-ms", "250"]).unwrap();
        assert_eq!(options.get("session"), Some("agent:main:x"));
        assert_eq!(options.get("holder"), None);
        assert_eq!(
            options.millis("wait-ms", 1).unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(
            options.millis("hold-ms", 7).unwrap(),
            Duration::from_millis(7)
        );
        assert!(options.required("holder").unwrap_err().contains("--holder"));
        assert!(
            parse(&["--wait-ms", "soon"])
                .unwrap()
                .millis("wait-ms", 1)
                .is_err()
        );
        assert!(options.only(&["session", "wait-ms"]).is_ok());
        let unknown = options.only(&["session"]).unwrap_err();
        assert!(unknown.contains("`--wait-ms`"), "{unknown}");
        assert!(parse(&["stray"]).unwrap_err().contains("stray"));
        assert!(parse(&["--session"]).unwrap_err().contains("needs a value"));
    }
}
