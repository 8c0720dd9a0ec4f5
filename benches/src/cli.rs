//! The tiny command line of the scale harnesses: `--name value` options and `--flag`s.

use std::future::Future;
use std::process::ExitCode;
use std::str::FromStr;

/// Parsed arguments.
#[derive(Debug, Clone, Default)]
pub struct Args {
    raw: Vec<String>,
}

impl Args {
    /// The process arguments (without the program name).
    pub fn from_env() -> Self {
        Self::new(std::env::args().skip(1))
    }

    /// Arguments from a list.
    pub fn new(raw: impl IntoIterator<Item = String>) -> Self {
        Self {
            raw: raw.into_iter().collect(),
        }
    }

    /// Whether `--name` is present.
    pub fn flag(&self, name: &str) -> bool {
        self.raw.iter().any(|a| a == name)
    }

    /// The value after `--name`, parsed; `default` when absent; an error naming the option when
    /// it does not parse.
    pub fn value<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.raw.iter().position(|a| a == name) {
            None => Ok(default),
            Some(i) => {
                let raw = self
                    .raw
                    .get(i + 1)
                    .ok_or_else(|| format!("{name} needs a value"))?;
                raw.parse()
                    .map_err(|_| format!("{name}: cannot parse `{raw}`"))
            }
        }
    }
}

/// Runs a scale harness's `work` (or reports why it could not start) on a two-worker tokio
/// runtime: success exits 0; an error is printed as `<name>: <message>` on stderr and exits 1.
#[allow(clippy::print_stderr)]
pub fn run_harness<F>(name: &str, work: Result<F, String>) -> ExitCode
where
    F: Future<Output = Result<(), String>>,
{
    let result = work.and_then(|work| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?
            .block_on(work)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{name}: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_flags_parse() {
        let args = Args::new(["--leases", "500", "--quick"].map(String::from));
        assert!(args.flag("--quick"));
        assert!(!args.flag("--slow"));
        assert_eq!(args.value("--leases", 1u64).unwrap(), 500);
        assert_eq!(args.value("--periods", 3u32).unwrap(), 3);
        assert!(args.value::<u64>("--quick", 1).is_err());
        assert!(
            Args::new(["--leases".to_owned()])
                .value::<u64>("--leases", 1)
                .is_err()
        );
    }
}
