//! Latency percentiles and process CPU time.

use std::time::Duration;

/// Collected latencies of one workload.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    samples: Vec<Duration>,
    sorted: bool,
}

impl Latencies {
    /// Records one latency.
    pub fn push(&mut self, latency: Duration) {
        self.samples.push(latency);
        self.sorted = false;
    }

    /// Adds all samples of `other`.
    pub fn extend(&mut self, other: &Latencies) {
        self.samples.extend_from_slice(&other.samples);
        self.sorted = false;
    }

    /// How many samples were recorded.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The nearest-rank percentile `p` (0–100); zero when empty.
    pub fn percentile(&mut self, p: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        if !self.sorted {
            self.samples.sort_unstable();
            self.sorted = true;
        }
        let n = self.samples.len();
        // Nearest rank: ceil(p/100 * n), 1-based.
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        self.samples[rank.clamp(1, n) - 1]
    }
}

/// A duration in milliseconds (fractional).
pub fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Clock ticks per second of `/proc/self/stat` (`getconf CLK_TCK`, 100 when unknown).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// User plus system CPU time consumed by this process so far (all threads), from
/// `/proc/self/stat`; `None` where that file does not exist.
pub fn process_cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    cpu_from_stat(&stat, clock_ticks())
}

/// Parses `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line.
fn cpu_from_stat(stat: &str, ticks_per_second: f64) -> Option<Duration> {
    // The command name (field 2) may contain spaces: fields restart after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / ticks_per_second))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut l = Latencies::default();
        assert_eq!(l.percentile(50.0), Duration::ZERO);
        for ms in [5u64, 1, 4, 2, 3] {
            l.push(Duration::from_millis(ms));
        }
        assert_eq!(l.percentile(0.0), Duration::from_millis(1));
        assert_eq!(l.percentile(50.0), Duration::from_millis(3));
        assert_eq!(l.percentile(99.0), Duration::from_millis(5));
        assert_eq!(l.len(), 5);
    }

    #[test]
    fn stat_lines_with_spaces_in_the_name_parse() {
        let line = "42 (my (odd) name) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        let cpu = cpu_from_stat(line, 100.0).unwrap();
        assert_eq!(cpu, Duration::from_secs(3));
        assert!(cpu_from_stat("garbage", 100.0).is_none());
    }

    #[test]
    fn this_process_has_used_some_cpu() {
        if std::path::Path::new("/proc/self/stat").exists() {
            let mut spin = 0u64;
            for i in 0..2_000_000u64 {
                spin = spin.wrapping_add(std::hint::black_box(i));
            }
            std::hint::black_box(spin);
            assert!(process_cpu_time().is_some());
        }
    }
}
