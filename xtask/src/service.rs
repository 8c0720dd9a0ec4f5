//! `tether serve` started by a task, on a port the kernel picks.
//!
//! A task used to pick a random port and start the service on it. A port picked that way can be
//! taken (another listener, or the local end of one of the many connections a CI run opens to
//! PostgreSQL), and the service then exits at once, unseen; a phase that later asked it
//! something read "no answer". Binding port 0 and reading the address the service announces on
//! its standard output never collides, and a service that does not start is reported with what
//! it wrote on its standard error.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// How long a service may take to open its database and listen.
const START_WITHIN: Duration = Duration::from_secs(60);

/// Starts `command` (`tether serve` and its arguments except `--bind`) on `127.0.0.1:0`, its
/// standard error written to `log`, and waits until it announces where it listens. Returns the
/// running service and that address (`127.0.0.1:PORT`). A service that exits first, or says
/// nothing for [`START_WITHIN`], is an error quoting the end of `log`.
pub(crate) fn start(mut command: Command, log: &Path) -> Result<(Child, String), String> {
    let stderr = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut child = command
        .args(["--bind", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("cannot start tether serve: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        unreachable!("the standard output is piped")
    };
    let (tx, rx) = mpsc::channel();
    // Reads the announcement, then drains the rest so that the service never blocks on a
    // full pipe.
    thread::spawn(move || {
        let mut announced = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if !announced && let Some(addr) = announced_address(&line) {
                announced = tx.send(addr).is_ok();
            }
        }
    });
    match rx.recv_timeout(START_WITHIN) {
        Ok(addr) => Ok((child, addr)),
        Err(waited) => {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            let why = match waited {
                mpsc::RecvTimeoutError::Timeout => {
                    format!("did not listen within {} s", START_WITHIN.as_secs())
                }
                mpsc::RecvTimeoutError::Disconnected => format!("exited ({status})"),
            };
            Err(format!(
                "tether serve {why}; its last words: {}",
                last_words(log)
            ))
        }
    }
}

/// The last lines the service wrote to `log` (its standard error), on one line.
pub(crate) fn last_words(log: &Path) -> String {
    let said = std::fs::read_to_string(log).unwrap_or_default();
    let mut tail: Vec<&str> = said.lines().rev().take(5).collect();
    tail.reverse();
    tail.join(" | ")
}

/// The address in the service's first line (`Tether admin dashboard: http://ADDR/`).
fn announced_address(line: &str) -> Option<String> {
    let (_, rest) = line.split_once("http://")?;
    let addr = rest.split('/').next()?;
    addr.parse::<SocketAddr>().ok().map(|_| addr.to_owned())
}

#[cfg(test)]
mod tests {
    use super::announced_address;

    #[test]
    fn the_address_is_read_off_the_announcement() {
        assert_eq!(
            announced_address("Tether admin dashboard: http://127.0.0.1:41234/").as_deref(),
            Some("127.0.0.1:41234")
        );
        assert_eq!(announced_address("Press Ctrl-C to stop."), None);
        assert_eq!(announced_address("see http://not-an-address/"), None);
    }
}
