//! The TCP forwarder of the `partition` phase of `cargo xtask faults`: the worker cut off in a
//! network namespace reaches PostgreSQL through it (on the private link's outer address), so
//! the server's own configuration stays untouched. On the drill's command it also
//!
//! - **delays** every chunk, each way, by a set time (a delay line: a reader thread stamps each
//!   chunk with its due time and a writer thread sends it then, so the throughput stays);
//! - makes the link **lossy**: each transmission of a chunk is lost with a set probability and
//!   the chunk is sent again after a retransmission timeout that doubles with every loss in a
//!   row (200 ms, 400 ms, … at most 3.2 s), and everything behind it waits, in order: what a
//!   TCP connection shows its application over a link that drops packets. (This kernel has
//!   neither `netem` nor a traffic-control classifier to drop real packets with, and the tools
//!   that drive netfilter are not among the components the project installs.)
//! - **loses the answer of a COMMIT**: it reads the PostgreSQL wire protocol the worker sends
//!   (the simple `Query` message, and the extended protocol's `Parse`/`Bind`, whose statements
//!   are named once and bound by name afterwards), recognises the COMMIT of a transaction that
//!   wrote the drill's fence (`chaos_fence`), forwards it to the server, swallows the server's
//!   answer (noting whether it was `COMMIT`, `ROLLBACK` or an error) and closes both sides: the
//!   worker sees its COMMIT fail with the outcome unknown to it, while the drill knows it.
//!
//! A `SSLRequest` is answered `N` by the forwarder itself, so the conversation stays readable.

use std::collections::HashMap;
use std::io::{Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A COMMIT whose answer the forwarder swallowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LostCommit {
    /// When the forwarder saw the COMMIT (ms since the Unix epoch), before sending it on.
    pub(crate) at_ms: u128,
    /// The server's answer the worker never got: `COMMIT`, `ROLLBACK`, `error`, or `none`
    /// (no answer within 5 s).
    pub(crate) answer: String,
}

/// What the drill commands, shared with every connection.
#[derive(Debug, Default)]
pub(crate) struct Control {
    delay_ms: AtomicU64,
    loss_percent: AtomicU64,
    armed: AtomicBool,
    lost: Mutex<Vec<LostCommit>>,
}

impl Control {
    /// Delays each chunk, each way, by `ms` (0: no delay).
    pub(crate) fn delay(&self, ms: u64) {
        self.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Loses each transmission of a chunk, each way, with probability `percent` / 100 (0: no
    /// loss; see the module documentation).
    pub(crate) fn lose(&self, percent: u64) {
        self.loss_percent.store(percent.min(100), Ordering::SeqCst);
    }

    /// Loses the answer of the next COMMIT of a fenced write (`true`), or no longer.
    pub(crate) fn arm_lost_commit(&self, armed: bool) {
        self.armed.store(armed, Ordering::SeqCst);
    }

    /// The COMMITs whose answer was lost so far.
    pub(crate) fn lost_commits(&self) -> Vec<LostCommit> {
        self.lost.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// The forwarder: its accept loop runs until it is dropped.
pub(crate) struct Forwarder {
    pub(crate) control: Arc<Control>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Forwarder {
    pub(crate) fn start(listen: &str, upstream: &str) -> Result<Self, String> {
        let listener = TcpListener::bind(listen).map_err(|e| format!("bind {listen}: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("nonblocking: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let control = Arc::new(Control::default());
        let (stop2, control2) = (stop.clone(), control.clone());
        let upstream = upstream.to_owned();
        let thread = thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    sleep(Duration::from_millis(20));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                if let Err(e) = connection(client, server, control2.clone()) {
                    crate::say(&format!("    forwarder: cannot serve a connection: {e}"));
                }
            }
        });
        Ok(Self {
            control,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// First retransmission timeout of a lost chunk (Linux's minimum RTO).
const FIRST_RTO: Duration = Duration::from_millis(200);
/// Largest retransmission timeout of a lost chunk.
const MAX_RTO: Duration = Duration::from_millis(3_200);
/// Most retransmissions of one chunk: with the timeouts capped at [`MAX_RTO`], a chunk is held
/// at most 15.8 s even at 100 % loss, so a drill always ends.
const MAX_RETRANSMISSIONS: u32 = 8;

/// When a chunk read now is due, from the drill's delay and loss. The delay line writes
/// chunks in the order they were read, so a chunk behind a lost one waits for it, as on a TCP
/// connection.
fn due_at(control: &Control, rng: &mut crate::chaos::Rng) -> Instant {
    Instant::now()
        + Duration::from_millis(control.delay_ms.load(Ordering::SeqCst))
        + retransmission_wait(control.loss_percent.load(Ordering::SeqCst), || {
            rng.below(100)
        })
}

/// How long a chunk waits for its transmissions to get through when each is lost with
/// probability `percent` / 100: the retransmission timeouts of the lost ones. `roll` draws a
/// number in `0..100` per transmission.
fn retransmission_wait(percent: u64, mut roll: impl FnMut() -> u64) -> Duration {
    let mut wait = Duration::ZERO;
    let mut rto = FIRST_RTO;
    for _ in 0..MAX_RETRANSMISSIONS {
        if percent == 0 || roll() >= percent {
            break;
        }
        wait += rto;
        rto = (rto * 2).min(MAX_RTO);
    }
    wait
}

/// A delay line into `to`: chunks are written when due.
fn delay_line(mut to: TcpStream) -> mpsc::Sender<(Instant, Vec<u8>)> {
    let (send, receive) = mpsc::channel::<(Instant, Vec<u8>)>();
    thread::spawn(move || {
        for (due, chunk) in receive {
            sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
    send
}

fn connection(client: TcpStream, server: TcpStream, control: Arc<Control>) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let to_server = delay_line(server.try_clone().map_err(io)?);
    let to_client = delay_line(client.try_clone().map_err(io)?);
    // Set before a chosen COMMIT goes to the server: from then on the server's bytes are
    // swallowed; holds the COMMIT's time.
    let swallow: Arc<Mutex<Option<u128>>> = Arc::new(Mutex::new(None));

    // Client to server: whole messages, read before they are sent on.
    {
        let (mut from, mut answer) = (
            client.try_clone().map_err(io)?,
            client.try_clone().map_err(io)?,
        );
        let (control, swallow, to_server) = (control.clone(), swallow.clone(), to_server);
        thread::spawn(move || {
            let mut frontend = Frontend::default();
            let mut rng = crate::chaos::Rng::new();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                frontend.feed(&buf[..n]);
                while let Some(message) = frontend.next() {
                    match message {
                        Message::Refuse => {
                            // SSLRequest / GSSENCRequest: not here.
                            if answer.write_all(b"N").is_err() {
                                return;
                            }
                        }
                        Message::Forward { bytes, commit } => {
                            if commit
                                && control.armed.swap(false, Ordering::SeqCst)
                                && let Ok(mut s) = swallow.lock()
                            {
                                *s = Some(now_ms());
                            }
                            let due = due_at(&control, &mut rng);
                            if to_server.send((due, bytes)).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
    }

    // Server to client: sent on as read, unless swallowing after a chosen COMMIT.
    thread::spawn(move || {
        let mut from = server;
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        let mut backend = Backend::default();
        let mut rng = crate::chaos::Rng::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let read = from.read(&mut buf);
            // Read after the bytes came: the flag is set before the COMMIT goes out, so
            // whatever arrives once it is set is the COMMIT's answer.
            let commit_at = swallow.lock().ok().and_then(|s| *s);
            match read {
                Ok(0) => break,
                Ok(n) => match commit_at {
                    None => {
                        backend.feed(&buf[..n], false);
                        let due = due_at(&control, &mut rng);
                        if to_client.send((due, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                    Some(_) => {
                        if let Some(answer) = backend.feed(&buf[..n], true) {
                            lose(&control, &client, &from, commit_at, answer);
                            break;
                        }
                    }
                },
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Some(at) = commit_at
                        && now_ms() > at + 5_000
                    {
                        lose(&control, &client, &from, commit_at, "none".to_owned());
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    Ok(())
}

/// Records a lost COMMIT and closes both sides of its connection.
fn lose(
    control: &Control,
    client: &TcpStream,
    server: &TcpStream,
    at: Option<u128>,
    answer: String,
) {
    if let (Some(at_ms), Ok(mut lost)) = (at, control.lost.lock()) {
        lost.push(LostCommit { at_ms, answer });
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

/// One message of the client, as the forwarder treats it.
#[derive(Debug, PartialEq, Eq)]
enum Message {
    /// Answer `N` (an encryption request), send nothing on.
    Refuse,
    /// Send these bytes on; `commit`: they run the COMMIT of a transaction that wrote the fence.
    Forward { bytes: Vec<u8>, commit: bool },
}

/// The client's side of the PostgreSQL wire protocol, as far as the forwarder needs it.
#[derive(Debug, Default)]
struct Frontend {
    buf: Vec<u8>,
    /// Past the startup message: every message is typed.
    typed: bool,
    /// Named prepared statements: (is a COMMIT, writes the fence).
    statements: HashMap<Vec<u8>, (bool, bool)>,
    /// The open transaction wrote the fence.
    fenced: bool,
}

/// Whether `sql` ends a transaction by committing it.
fn is_commit(sql: &[u8]) -> bool {
    let text = String::from_utf8_lossy(sql);
    let head = text.trim_start().to_ascii_uppercase();
    head.starts_with("COMMIT") || head.starts_with("END")
}

fn is_rollback(sql: &[u8]) -> bool {
    let text = String::from_utf8_lossy(sql);
    let head = text.trim_start().to_ascii_uppercase();
    head.starts_with("ROLLBACK") && !head.starts_with("ROLLBACK TO")
}

fn writes_fence(sql: &[u8]) -> bool {
    sql.windows(b"chaos_fence".len())
        .any(|w| w == b"chaos_fence")
}

/// The NUL-terminated string at the start of `bytes`, and what follows it.
fn cstring(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = bytes.iter().position(|b| *b == 0)?;
    Some((&bytes[..end], &bytes[end + 1..]))
}

fn be32(bytes: &[u8]) -> Option<usize> {
    let b: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
    usize::try_from(u32::from_be_bytes(b)).ok()
}

impl Frontend {
    fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, if one is buffered.
    fn next(&mut self) -> Option<Message> {
        if !self.typed {
            // Startup: length, then a request code or the protocol version.
            let len = be32(&self.buf)?;
            if len < 8 || self.buf.len() < len {
                return None;
            }
            let bytes: Vec<u8> = self.buf.drain(..len).collect();
            let code = be32(&bytes[4..]).unwrap_or(0);
            return Some(match code {
                // SSLRequest, GSSENCRequest.
                80_877_103 | 80_877_104 => Message::Refuse,
                _ => {
                    // A StartupMessage (or a CancelRequest, after which nothing follows).
                    self.typed = true;
                    Message::Forward {
                        bytes,
                        commit: false,
                    }
                }
            });
        }
        let len = be32(self.buf.get(1..)?)?;
        if len < 4 || self.buf.len() < 1 + len {
            return None;
        }
        let bytes: Vec<u8> = self.buf.drain(..=len).collect();
        let body = &bytes[5..];
        let mut commit = false;
        match bytes[0] {
            b'Q' => {
                let sql = cstring(body).map_or(body, |(s, _)| s);
                if writes_fence(sql) {
                    self.fenced = true;
                }
                if is_commit(sql) {
                    commit = self.fenced;
                    self.fenced = false;
                } else if is_rollback(sql) {
                    self.fenced = false;
                }
            }
            b'P' => {
                if let Some((name, rest)) = cstring(body) {
                    let sql = cstring(rest).map_or(rest, |(s, _)| s);
                    self.statements
                        .insert(name.to_vec(), (is_commit(sql), writes_fence(sql)));
                    if is_rollback(sql) {
                        self.fenced = false;
                    }
                }
            }
            b'B' => {
                if let Some((_portal, rest)) = cstring(body)
                    && let Some((statement, _)) = cstring(rest)
                    && let Some(&(is_commit, fence)) = self.statements.get(statement)
                {
                    if fence {
                        self.fenced = true;
                    }
                    if is_commit {
                        commit = self.fenced;
                        self.fenced = false;
                    }
                }
            }
            _ => {}
        }
        Some(Message::Forward { bytes, commit })
    }
}

/// The server's side, read to find the answer to a swallowed COMMIT.
#[derive(Debug, Default)]
struct Backend {
    buf: Vec<u8>,
    /// The last command tag, or `error`, seen while swallowing.
    answer: Option<String>,
}

impl Backend {
    /// Takes in `bytes`; while `swallowing`, returns the answer once `ReadyForQuery` ended it.
    fn feed(&mut self, bytes: &[u8], swallowing: bool) -> Option<String> {
        self.buf.extend_from_slice(bytes);
        loop {
            let len = be32(self.buf.get(1..)?)?;
            if len < 4 || self.buf.len() < 1 + len {
                return None;
            }
            let message: Vec<u8> = self.buf.drain(..=len).collect();
            if !swallowing {
                continue;
            }
            match message[0] {
                b'C' => {
                    let tag = cstring(&message[5..]).map_or(&message[5..], |(t, _)| t);
                    self.answer = Some(String::from_utf8_lossy(tag).into_owned());
                }
                b'E' => self.answer = Some("error".to_owned()),
                b'Z' => return Some(self.answer.take().unwrap_or_else(|| "none".to_owned())),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Backend, Frontend, Message, delay_line, retransmission_wait};

    #[test]
    fn a_lost_transmission_waits_a_doubling_timeout() {
        let ms = Duration::from_millis;
        // No loss: nothing is drawn, nothing waits.
        assert_eq!(retransmission_wait(0, || unreachable!()), Duration::ZERO);
        // At 30 %, a roll below 30 is a loss: lost twice, then through.
        let mut rolls = [5, 29, 30].into_iter();
        assert_eq!(
            retransmission_wait(30, || rolls.next().unwrap()),
            ms(200 + 400)
        );
        // Every transmission lost: the timeouts stop doubling at 3.2 s, and the chunk goes
        // through after the last retransmission.
        assert_eq!(
            retransmission_wait(100, || 0),
            ms(200 + 400 + 800 + 1_600 + 3_200 + 3_200 + 3_200 + 3_200)
        );
    }

    #[test]
    fn a_chunk_never_overtakes_one_held_before_it() {
        use std::io::Read as _;
        use std::net::{TcpListener, TcpStream};
        use std::time::Instant;

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut reader, _) = listener.accept().unwrap();
        let line = delay_line(writer);
        // A chunk held 300 ms (lost once), then one due at once.
        line.send((
            Instant::now() + Duration::from_millis(300),
            b"held".to_vec(),
        ))
        .unwrap();
        line.send((Instant::now(), b"next".to_vec())).unwrap();
        drop(line);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"heldnext");
    }

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![kind];
        out.extend_from_slice(&u32::try_from(body.len() + 4).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn startup() -> Vec<u8> {
        let mut body = 196_608_u32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0postgres\0\0");
        let mut out = u32::try_from(body.len() + 4)
            .unwrap_or(0)
            .to_be_bytes()
            .to_vec();
        out.extend_from_slice(&body);
        out
    }

    fn commits(frontend: &mut Frontend) -> Vec<bool> {
        std::iter::from_fn(|| frontend.next())
            .filter_map(|m| match m {
                Message::Forward { commit, .. } => Some(commit),
                Message::Refuse => None,
            })
            .collect()
    }

    #[test]
    fn ssl_requests_are_refused_and_startup_is_forwarded() {
        let mut f = Frontend::default();
        let mut ssl = 8_u32.to_be_bytes().to_vec();
        ssl.extend_from_slice(&80_877_103_u32.to_be_bytes());
        f.feed(&ssl);
        assert_eq!(f.next(), Some(Message::Refuse));
        // Byte by byte: nothing until the message is whole.
        let start = startup();
        for b in &start[..start.len() - 1] {
            f.feed(std::slice::from_ref(b));
            assert_eq!(f.next(), None);
        }
        f.feed(&start[start.len() - 1..]);
        assert!(matches!(
            f.next(),
            Some(Message::Forward { commit: false, .. })
        ));
    }

    #[test]
    fn the_commit_of_a_fenced_write_is_recognised_in_both_protocols() {
        let mut f = Frontend::default();
        f.feed(&startup());
        // Simple protocol, as sqlx sends BEGIN and COMMIT; the fence statement prepared once
        // (named) and bound by name afterwards.
        f.feed(&typed(b'Q', b"BEGIN\0"));
        f.feed(&typed(
            b'P',
            b"sqlx_s_1\0UPDATE chaos_fence SET epoch = $1\0\0\0",
        ));
        f.feed(&typed(b'B', b"\0sqlx_s_1\0\0\0\0\0"));
        f.feed(&typed(b'E', b"\0\0\0\0\0"));
        f.feed(&typed(b'S', b""));
        f.feed(&typed(b'Q', b"COMMIT\0"));
        // A transaction that does not touch the fence: its COMMIT is not chosen.
        f.feed(&typed(b'Q', b"BEGIN\0"));
        f.feed(&typed(b'Q', b"UPDATE bindings SET x = 1\0"));
        f.feed(&typed(b'Q', b"COMMIT\0"));
        // The fence bound again by name only, rolled back: not chosen; then committed.
        f.feed(&typed(b'Q', b"BEGIN\0"));
        f.feed(&typed(b'B', b"\0sqlx_s_1\0\0\0\0\0"));
        f.feed(&typed(b'Q', b"ROLLBACK\0"));
        f.feed(&typed(b'Q', b"BEGIN\0"));
        f.feed(&typed(b'B', b"\0sqlx_s_1\0\0\0\0\0"));
        // The extended protocol's COMMIT, prepared and bound.
        f.feed(&typed(b'P', b"sqlx_s_2\0COMMIT\0\0\0"));
        f.feed(&typed(b'B', b"\0sqlx_s_2\0\0\0\0\0"));
        let commits = commits(&mut f);
        let chosen: Vec<usize> = commits
            .iter()
            .enumerate()
            .filter(|(_, c)| **c)
            .map(|(i, _)| i)
            .collect();
        // startup 0, BEGIN 1, P 2, B 3, E 4, S 5, COMMIT 6, BEGIN 7, UPDATE 8, COMMIT 9,
        // BEGIN 10, B 11, ROLLBACK 12, BEGIN 13, B 14, P 15, B 16.
        assert_eq!(chosen, vec![6, 16]);
    }

    #[test]
    fn the_swallowed_answer_is_read_to_ready_for_query() {
        let mut b = Backend::default();
        assert_eq!(b.feed(&typed(b'Z', b"I"), false), None);
        let mut answer = typed(b'C', b"COMMIT\0");
        answer.extend(typed(b'Z', b"I"));
        assert_eq!(b.feed(&answer[..3], true), None);
        assert_eq!(b.feed(&answer[3..], true).as_deref(), Some("COMMIT"));
        let mut failed = typed(b'E', b"SERROR\0\0");
        failed.extend(typed(b'Z', b"E"));
        assert_eq!(b.feed(&failed, true).as_deref(), Some("error"));
    }
}
