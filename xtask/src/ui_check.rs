//! `cargo xtask ui-check`: populates a database with `tether demo`, starts `tether serve` on it,
//! opens `/` (the dashboard) and `/docs/` (Swagger UI) in headless Chromium, saves screenshots
//! under `target/ui-check/` and fails when either page shows no content.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{cargo, say, workspace_root};

/// Chromium flags: headless, no sandbox (containers), nothing fetched in the background.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1280,1600",
    "--virtual-time-budget=8000",
];

/// The pages checked: (name, path, text the rendered DOM must contain).
const PAGES: &[(&str, &str, &[&str])] = &[
    (
        "dashboard",
        "/",
        &[
            "Tether admin",
            "Live leases",
            "agent:main:direct:alice",
            "expires in",
        ],
    ),
    (
        "docs",
        "/docs/",
        &["Tether admin API", "/v1/sessions", "opblock"],
    ),
];

/// A screenshot below this size is a blank page.
const MIN_PNG_BYTES: u64 = 8 * 1024;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn find_chromium() -> Result<String, String> {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return Ok(candidate.to_owned());
        }
    }
    Err("no Chromium found; install it with `apt-get install -y chromium`".into())
}

fn run_tether(root: &Path, args: &[&str]) -> Result<Command, String> {
    let bin = root.join("target/debug/tether");
    if !bin.exists() {
        return Err(format!("{} is missing after the build", bin.display()));
    }
    let mut command = Command::new(bin);
    command.args(args).env("RUST_LOG", "warn");
    Ok(command)
}

fn chromium(browser: &str, profile: &Path, extra: &[String], url: &str) -> Result<Vec<u8>, String> {
    let out = Command::new(browser)
        .args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {browser}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{browser} failed on {url} ({})", out.status));
    }
    Ok(out.stdout)
}

/// Runs the UI check.
pub(crate) fn ui_check() -> Result<(), String> {
    let root = workspace_root()?;
    let browser = find_chromium()?;
    let status = cargo()
        .args(["build", "-p", "tether-admin-http", "--bin", "tether"])
        .status()
        .map_err(|e| format!("cannot build tether: {e}"))?;
    if !status.success() {
        return Err("building tether failed".into());
    }
    let out_dir = root.join("target/ui-check");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let url = format!("sqlite://{}", out_dir.join("ui.db").display());

    let demo = run_tether(&root, &["demo", "--database-url", &url])?
        .output()
        .map_err(|e| format!("cannot run tether demo: {e}"))?;
    if !demo.status.success() {
        return Err(format!(
            "tether demo failed: {}",
            String::from_utf8_lossy(&demo.stderr)
        ));
    }
    let mut child = run_tether(
        &root,
        &["serve", "--database-url", &url, "--bind", "127.0.0.1:0"],
    )?
    .env_remove("TETHER_ADMIN_TOKEN")
    .env_remove("TETHER_READ_TOKEN")
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .map_err(|e| format!("cannot start tether serve: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout from tether serve")?;
    let server = Server(child);
    let mut first = String::new();
    BufReader::new(stdout)
        .read_line(&mut first)
        .map_err(|e| format!("cannot read the server address: {e}"))?;
    let base = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(|addr| format!("http://{addr}"))
        .ok_or_else(|| format!("unexpected first line from tether serve: {first:?}"))?;
    say(&format!("ui-check: serving {base}"));

    let mut failures = Vec::new();
    for (name, path, needles) in PAGES {
        let page = format!("{base}{path}");
        let profile: PathBuf = out_dir.join(format!("profile-{name}"));
        let png = out_dir.join(format!("{name}.png"));
        chromium(
            &browser,
            &profile,
            &[format!("--screenshot={}", png.display())],
            &page,
        )?;
        let dom = chromium(
            &browser,
            &out_dir.join(format!("profile-{name}-dom")),
            &["--dump-dom".to_owned()],
            &page,
        )?;
        let dom = String::from_utf8_lossy(&dom);
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        let missing: Vec<&str> = needles
            .iter()
            .copied()
            .filter(|n| !dom.contains(n))
            .collect();
        if size < MIN_PNG_BYTES {
            failures.push(format!(
                "{name}: screenshot {} is blank ({size} bytes)",
                png.display()
            ));
        }
        if !missing.is_empty() {
            failures.push(format!("{name}: rendered page lacks {missing:?}"));
        }
        say(&format!(
            "ui-check: {name} -> {} ({size} bytes, {} DOM bytes)",
            png.display(),
            dom.len()
        ));
    }
    drop(server);
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
