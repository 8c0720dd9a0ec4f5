//! `cargo xtask ui-check`: drives the operator console in headless Chromium, as an operator
//! would, through ChromeDriver's WebDriver protocol.
//!
//! It populates a database with `tether demo`, starts `tether serve` on it with an admin token,
//! and walks: the sign-in page (a browser without a session is sent there), signing in with the
//! token, the overview, a session page, a filtered session list, the holder view, each action
//! (force-expire a lease, delete a session, release a quarantined key) through its confirmation
//! page, the audit trail that records them, signing out, and Swagger UI. At each step it checks
//! the rendered DOM and saves a screenshot under `<target>/ui-check/` (`CARGO_TARGET_DIR` is
//! honoured). Debian's `chromium` and `chromium-driver` are installed with apt-get when missing.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{cargo, say};

/// Chromium flags: headless, no sandbox (containers), nothing fetched in the background.
const CHROMIUM_ARGS: &[&str] = &[
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--window-size=1280,1600",
];

/// The admin token the served console is started with (a throwaway database, loopback only).
const ADMIN_TOKEN: &str = "ui-check-admin-token";

/// A screenshot below this size is a blank page.
const MIN_PNG_BYTES: usize = 8 * 1024;

/// The W3C WebDriver element reference key.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A child process killed when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Chromium and ChromeDriver binaries, installed from Debian's packages when missing.
fn browser() -> Result<(String, String), String> {
    let find = || {
        let chromium = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find(|c| runs(c));
        let driver = ["chromedriver"].into_iter().find(|c| runs(c));
        chromium.zip(driver)
    };
    if let Some((chromium, driver)) = find() {
        return Ok((chromium.to_owned(), driver.to_owned()));
    }
    say("ui-check: installing Debian's chromium and chromium-driver with apt-get");
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !(apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])) {
        return Err(
            "Chromium is missing and `apt-get install -y chromium chromium-driver` failed (run \
             it as root)"
                .into(),
        );
    }
    find()
        .map(|(c, d)| (c.to_owned(), d.to_owned()))
        .ok_or_else(|| "chromium or chromedriver still not found after apt-get install".into())
}

/// A free loopback port (bound and released).
fn free_port() -> Result<u16, String> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// One HTTP/1.1 request to `127.0.0.1:port`; answers the status and the body.
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("cannot reach 127.0.0.1:{port}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{method} {path}: {e}"))?;
    // Read the head, then exactly the body its Content-Length announces (ChromeDriver keeps
    // the connection open), or to the end of a chunked or unsized body.
    let mut reader = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = reader
            .read_line(&mut line)
            .map_err(|e| format!("{method} {path}: {e}"))?;
        if n == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path}: no HTTP answer"))?;
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let length = header("content-length").and_then(|v| v.parse::<usize>().ok());
    let mut raw = Vec::new();
    match length {
        Some(n) if !chunked => {
            raw.resize(n, 0);
            reader
                .read_exact(&mut raw)
                .map_err(|e| format!("{method} {path}: {e}"))?;
        }
        _ => {
            reader
                .read_to_end(&mut raw)
                .map_err(|e| format!("{method} {path}: {e}"))?;
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let body = if chunked { dechunk(&text) } else { text };
    Ok((status, body))
}

/// The payload of a chunked body.
fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// A JSON string literal of `text`.
fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON string value that starts right after `"key":` in `json` (unescaped).
fn string_field(json: &str, key: &str) -> Option<String> {
    let at = json.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = json[at..].trim_start().strip_prefix(':')?.trim_start();
    let mut chars = rest.strip_prefix('"')?.chars();
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let mut code = u32::from_str_radix(&hex, 16).ok()?;
                    if (0xD800..0xDC00).contains(&code) {
                        let low: String = chars.by_ref().skip(2).take(4).collect();
                        let low = u32::from_str_radix(&low, 16).ok()?;
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    }
                    out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// Decodes standard base64 (a WebDriver screenshot).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let sextets: Vec<u8> = text.bytes().filter_map(value).collect();
    let mut out = Vec::with_capacity(sextets.len() * 3 / 4);
    for chunk in sextets.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &s)| acc | (u32::from(s) << (18 - 6 * i)));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}

/// A WebDriver session on ChromeDriver.
struct Browser {
    port: u16,
    session: String,
    out_dir: PathBuf,
}

impl Browser {
    fn start(port: u16, chromium: &str, out_dir: &Path) -> Result<Self, String> {
        let binary = Command::new("which")
            .arg(chromium)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| chromium.to_owned());
        let args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| json_string(a)).collect();
        let caps = format!(
            "{{\"capabilities\":{{\"alwaysMatch\":{{\"browserName\":\"chrome\",\
             \"goog:chromeOptions\":{{\"binary\":{},\"args\":[{}]}}}}}}}}",
            json_string(&binary),
            args.join(",")
        );
        let (status, body) = http(port, "POST", "/session", Some(&caps))?;
        let session = string_field(&body, "sessionId")
            .filter(|_| status == 200)
            .ok_or_else(|| format!("ChromeDriver refused a session ({status}): {body}"))?;
        Ok(Self {
            port,
            session,
            out_dir: out_dir.to_owned(),
        })
    }

    fn command(&self, method: &str, path: &str, body: Option<&str>) -> Result<String, String> {
        let full = format!("/session/{}{path}", self.session);
        let (status, answer) = http(self.port, method, &full, body)?;
        if status == 200 {
            Ok(answer)
        } else {
            Err(format!(
                "{method} {path}: {}",
                string_field(&answer, "message").unwrap_or(answer)
            ))
        }
    }

    fn open(&self, url: &str) -> Result<(), String> {
        self.command(
            "POST",
            "/url",
            Some(&format!("{{\"url\":{}}}", json_string(url))),
        )
        .map(drop)
    }

    fn url(&self) -> Result<String, String> {
        let answer = self.command("GET", "/url", None)?;
        string_field(&answer, "value").ok_or_else(|| format!("no URL in {answer}"))
    }

    /// The current DOM, serialized.
    fn dom(&self) -> Result<String, String> {
        let answer = self.command("GET", "/source", None)?;
        string_field(&answer, "value").ok_or_else(|| "no page source".to_owned())
    }

    /// The first element matching `css`, waiting up to five seconds for it.
    fn find(&self, css: &str) -> Result<String, String> {
        let body = format!(
            "{{\"using\":\"css selector\",\"value\":{}}}",
            json_string(css)
        );
        let start = Instant::now();
        loop {
            match self.command("POST", "/element", Some(&body)) {
                Ok(answer) => {
                    return string_field(&answer, ELEMENT_KEY)
                        .ok_or_else(|| format!("no element reference for `{css}`"));
                }
                Err(e) if start.elapsed() > Duration::from_secs(5) => {
                    return Err(format!("no element `{css}` on {}: {e}", self.url()?));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Runs `action` on the element matching `css`, finding it again when the page's live
    /// update replaced it in between (a stale element).
    fn on_element(&self, css: &str, action: &str, body: &str) -> Result<(), String> {
        let mut tries = 0;
        loop {
            let element = self.find(css)?;
            match self.command("POST", &format!("/element/{element}/{action}"), Some(body)) {
                Err(e) if e.contains("stale") && tries < 3 => tries += 1,
                other => return other.map(drop),
            }
        }
    }

    fn type_into(&self, css: &str, text: &str) -> Result<(), String> {
        self.on_element(css, "value", &format!("{{\"text\":{}}}", json_string(text)))
    }

    fn click(&self, css: &str) -> Result<(), String> {
        self.on_element(css, "click", "{}")
    }

    /// Checks that the DOM holds each of `needles` and none of `absent`, waiting up to five
    /// seconds, then saves a screenshot `<step>.png`.
    fn check(&self, step: &str, needles: &[&str], absent: &[&str]) -> Result<(), String> {
        let start = Instant::now();
        let (missing, present) = loop {
            let dom = self.dom()?;
            let missing: Vec<&str> = needles
                .iter()
                .copied()
                .filter(|n| !dom.contains(n))
                .collect();
            let present: Vec<&str> = absent.iter().copied().filter(|n| dom.contains(n)).collect();
            if (missing.is_empty() && present.is_empty())
                || start.elapsed() > Duration::from_secs(5)
            {
                break (missing, present);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let answer = self.command("GET", "/screenshot", None)?;
        let png = base64_decode(&string_field(&answer, "value").unwrap_or_default());
        let path = self.out_dir.join(format!("{step}.png"));
        std::fs::write(&path, &png).map_err(|e| format!("{}: {e}", path.display()))?;
        say(&format!(
            "ui-check: {step} -> {} ({} bytes)",
            path.display(),
            png.len()
        ));
        let mut problems = Vec::new();
        if png.len() < MIN_PNG_BYTES {
            problems.push(format!("the screenshot is blank ({} bytes)", png.len()));
        }
        if !missing.is_empty() {
            problems.push(format!("the page lacks {missing:?}"));
        }
        if !present.is_empty() {
            problems.push(format!("the page still shows {present:?}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("{step} ({}): {}", self.url()?, problems.join("; ")))
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = http(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
    }
}

/// Starts `tether serve` on `url` with the admin token; answers the guard and the base URL.
fn serve(tether: &Path, url: &str) -> Result<(Guard, String), String> {
    let mut child = Command::new(tether)
        .args(["serve", "--database-url", url, "--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .env("TETHER_ADMIN_TOKEN", ADMIN_TOKEN)
        .env_remove("TETHER_READ_TOKEN")
        .env_remove("TETHER_ADMIN_TOKENS")
        .env_remove("TETHER_READ_TOKENS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start tether serve: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout from tether serve")?;
    let server = Guard(child);
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
    Ok((server, base))
}

/// Fills the reason of the first action form for `action` on the page, submits it, checks the
/// confirmation page, confirms, and checks the outcome.
fn act(b: &Browser, step: &str, action: &str, verb: &str, outcome: &str) -> Result<(), String> {
    let form = format!("form[action=\"/ui/actions\"]:has(input[name=action][value={action}])");
    b.type_into(
        &format!("{form} input[name=reason]"),
        &format!("ui-check: {step}"),
    )?;
    b.click(&format!("{form} button[type=submit]"))?;
    b.check(
        &format!("{step}-confirm"),
        &["Confirm the action", verb, "id=\"confirm\"", "ui-check: "],
        &[],
    )?;
    b.click("#confirm")?;
    b.check(
        &format!("{step}-done"),
        &["id=\"outcome\"", outcome],
        &["Refused"],
    )
}

/// The walk through the console.
fn walk(b: &Browser, base: &str) -> Result<(), String> {
    // A browser without a session is sent to sign in; a wrong token is refused.
    b.open(&format!("{base}/"))?;
    b.check("signin", &["Read or admin token", "type=\"password\""], &[])?;
    b.type_into("#token", "not-the-token")?;
    b.click("button[type=submit]")?;
    b.check("signin-refused", &["That token is not valid."], &[])?;
    b.type_into("#token", ADMIN_TOKEN)?;
    b.click("button[type=submit]")?;
    b.check(
        "overview",
        &[
            "Signed in as <b>admin</b>",
            "Live leases",
            "agent:main:direct:alice",
            "expires in",
            "Force-expire",
        ],
        &[],
    )?;

    // A session page: lineage, bindings, the lease history, transcript and finalizations.
    b.click("a[href=\"/ui/sessions/agent:ops:cron:nightly\"]")?;
    b.check(
        "session",
        &[
            "Session agent:ops:cron:nightly",
            "Lineage",
            "Lease history",
            "Finalization records",
            "finalization:",
            "Transcript tail",
        ],
        &[],
    )?;

    // A filtered list, filled in as an operator would.
    b.click("nav a[href=\"/ui/sessions\"]")?;
    b.type_into("input[name=q]", "nightly")?;
    b.click("form[role=search] button[type=submit]")?;
    b.check(
        "sessions-filtered",
        &["agent:ops:cron:nightly", "value=\"nightly\"", "1 shown"],
        &[">agent:main:direct:alice<"],
    )?;

    // The holder view: what the stuck worker holds.
    b.click("nav a[href=\"/ui/leases\"]")?;
    b.click("#live td a[title=\"what does it hold?\"]")?;
    b.check("holder", &["id=\"holder-view\"", "What does"], &[])?;

    // Each action, through its confirmation page.
    act(
        b,
        "expire-lease",
        "expire_lease",
        "Force-expire",
        "its holder is fenced",
    )?;
    b.open(&format!("{base}/ui/sessions?q=group%3Arelease"))?;
    act(
        b,
        "delete-session",
        "delete_session",
        "Delete session",
        "were deleted",
    )?;
    b.open(&format!("{base}/ui/quarantine"))?;
    act(
        b,
        "release-quarantine",
        "release_quarantine",
        "Release quarantined key",
        "is released",
    )?;

    // The audit trail names the signed-in token and each reason.
    b.open(&format!("{base}/ui/audit?actor=admin&outcome=succeeded"))?;
    b.check(
        "audit",
        &[
            "ui-check: expire-lease",
            "ui-check: delete-session",
            "ui-check: release-quarantine",
        ],
        &[],
    )?;

    // Signing out ends the session: the overview sends the browser to sign in again.
    b.click("form.signout button[type=submit]")?;
    b.check("signed-out", &["Read or admin token"], &["Signed in as"])?;
    b.open(&format!("{base}/"))?;
    if !b.url()?.ends_with("/signin") {
        return Err(format!("after signing out, / shows {}", b.url()?));
    }

    // Swagger UI, served from the binary.
    b.open(&format!("{base}/docs/"))?;
    b.check(
        "docs",
        &["Tether admin API", "/v1/sessions", "opblock"],
        &[],
    )
}

/// Runs the UI check.
pub(crate) fn ui_check() -> Result<(), String> {
    let started = Instant::now();
    let (chromium, chromedriver) = browser()?;
    let status = cargo()
        .args(["build", "-p", "tether-admin-http", "--bin", "tether"])
        .status()
        .map_err(|e| format!("cannot build tether: {e}"))?;
    if !status.success() {
        return Err("building tether failed".into());
    }
    let target = crate::target_dir()?;
    let tether = target.join("debug/tether");
    if !tether.exists() {
        return Err(format!("{} is missing after the build", tether.display()));
    }
    let out_dir = target.join("ui-check");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let url = format!("sqlite://{}", out_dir.join("ui.db").display());
    let demo = Command::new(&tether)
        .args(["demo", "--database-url", &url])
        .env("RUST_LOG", "warn")
        .output()
        .map_err(|e| format!("cannot run tether demo: {e}"))?;
    if !demo.status.success() {
        return Err(format!(
            "tether demo failed: {}",
            String::from_utf8_lossy(&demo.stderr)
        ));
    }
    let (_server, base) = serve(&tether, &url)?;
    say(&format!("ui-check: serving {base}"));

    let port = free_port()?;
    let _driver = Guard(
        Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {chromedriver}: {e}"))?,
    );
    let ready = Instant::now();
    while http(port, "GET", "/status", None).is_err() {
        if ready.elapsed() > Duration::from_secs(20) {
            return Err("ChromeDriver did not answer within 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let browser = Browser::start(port, &chromium, &out_dir)?;
    let result = walk(&browser, &base);
    drop(browser);
    say(&format!(
        "ui-check: walked the console in {:.0?}",
        started.elapsed()
    ));
    result
}

#[cfg(test)]
mod tests {
    use super::{base64_decode, dechunk, json_string, string_field};

    #[test]
    fn webdriver_json_and_base64_helpers() {
        let json = r#"{"value":{"sessionId":"abc","x":"a\"b\\c\u00e9\ud83d\ude00\n"}}"#;
        assert_eq!(string_field(json, "sessionId").as_deref(), Some("abc"));
        assert_eq!(string_field(json, "x").as_deref(), Some("a\"b\\cé😀\n"));
        assert_eq!(string_field(json, "missing"), None);
        assert_eq!(json_string("a\"b\\\n"), r#""a\"b\\\n""#);
        assert_eq!(base64_decode("aGVsbG8="), b"hello");
        assert_eq!(base64_decode("aGk="), b"hi");
        assert_eq!(base64_decode("aGV5"), b"hey");
        assert_eq!(dechunk("5\r\nhello\r\n3\r\n!!!\r\n0\r\n\r\n"), "hello!!!");
    }
}
