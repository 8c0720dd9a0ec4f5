//! The etcd peer of [`super`]: a single-node etcd started on loopback ports of its own with a
//! scratch data directory, and the two workloads as an etcd user writes them with the
//! `etcd-client` crate.
//!
//! Every owner uses a clone of one [`Client`] (one HTTP/2 channel shared by all owners, as a
//! service using etcd-client normally does). Leases are granted with a 65 s TTL (Tether's shipped
//! lease); a row is shorter than that, so no keep-alive is needed.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};

use super::{Measured, NAME, Settings, Window, Workload, drive, gated, op_loop};
use crate::report::note;

/// The lease TTL in seconds (Tether's shipped lease duration).
const TTL_SECS: i64 = 65;

/// A running `etcd`, killed (and its data directory removed) when dropped, also on a panic or
/// an early return.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    endpoint: String,
    log: std::path::PathBuf,
    // Declared last: removed after the process is gone.
    _dir: tempfile::TempDir,
}

/// A free loopback port (bound, read and released; etcd binds it right after).
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

impl EtcdServer {
    /// Starts `etcd` from PATH with its data in a new temporary directory (the same file system
    /// as the SQLite benchmark files); an error when there is no `etcd` binary.
    pub fn start() -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let log = dir.path().join("etcd.log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("tether-bench")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("tether-bench={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => "no `etcd` binary on PATH \
                    (install etcd-server and protobuf-compiler: apt-get install etcd-server protobuf-compiler)"
                    .to_owned(),
                _ => format!("cannot start etcd: {e}"),
            })?;
        Ok(Self {
            child,
            endpoint: client_url,
            log,
            _dir: dir,
        })
    }

    /// A client, once the server answers (up to 30 s); the server's version.
    pub async fn client(&mut self) -> Result<(Client, String), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("etcd exited ({status}): {}", tail(&self.log)));
            }
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(10));
            match Client::connect([self.endpoint.as_str()], Some(options)).await {
                Ok(mut client) => match client.status().await {
                    Ok(status) => return Ok((client, status.version().to_owned())),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "etcd did not answer on {} within 30 s ({last}): {}",
            self.endpoint,
            tail(&self.log)
        ))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last lines of etcd's log.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn etcd_err(what: &str) -> impl Fn(etcd_client::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// `cycle`: lease grant, put-if-absent bound to the lease, delete guarded by the lease, revoke.
pub async fn cycle(client: &mut Client, key: &str) -> Result<(), String> {
    let lease = client
        .lease_grant(TTL_SECS, None)
        .await
        .map_err(etcd_err("lease grant"))?
        .id();
    let acquire = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            "held",
            Some(PutOptions::new().with_lease(lease)),
        )]);
    if !client
        .txn(acquire)
        .await
        .map_err(etcd_err("put-if-absent"))?
        .succeeded()
    {
        return Err(format!("{key} already exists"));
    }
    let release = Txn::new()
        .when([Compare::lease(key, CompareOp::Equal, lease)])
        .and_then([TxnOp::delete(key, None)]);
    if !client
        .txn(release)
        .await
        .map_err(etcd_err("guarded delete"))?
        .succeeded()
    {
        return Err(format!("{key} is no longer bound to lease {lease}"));
    }
    client
        .lease_revoke(lease)
        .await
        .map_err(etcd_err("lease revoke"))?;
    Ok(())
}

/// Takes `key` under a new lease (put-if-absent bound to it): the lease id.
pub async fn hold(client: &mut Client, key: &str, value: &str) -> Result<i64, String> {
    let lease = client
        .lease_grant(TTL_SECS, None)
        .await
        .map_err(etcd_err("lease grant"))?
        .id();
    let acquire = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    if client
        .txn(acquire)
        .await
        .map_err(etcd_err("put-if-absent"))?
        .succeeded()
    {
        Ok(lease)
    } else {
        Err(format!("{key} already exists"))
    }
}

/// `transact`: get, then a put guarded by the `mod_revision` read (the key stays bound to the
/// owner's lease).
pub async fn transact(
    client: &mut Client,
    key: &str,
    lease: i64,
    value: String,
) -> Result<(), String> {
    let current = client.get(key, None).await.map_err(etcd_err("get"))?;
    let revision = current
        .kvs()
        .first()
        .ok_or_else(|| format!("{key} is gone"))?
        .mod_revision();
    let write = Txn::new()
        .when([Compare::mod_revision(key, CompareOp::Equal, revision)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    if client
        .txn(write)
        .await
        .map_err(etcd_err("guarded put"))?
        .succeeded()
    {
        Ok(())
    } else {
        Err(format!("{key} moved since revision {revision}"))
    }
}

/// One etcd row.
async fn row(
    client: &Client,
    workload: Workload,
    owners: usize,
    window: Window,
) -> Result<Measured, String> {
    drive(owners, window, |i, gate| {
        let mut client = client.clone();
        let key = format!("/tether-bench/{}/{owners}/owner-{i:08}", workload.as_str());
        async move {
            match workload {
                Workload::Cycle => {
                    let key = &key;
                    // A `Client` clone is a handle on the same channel (cheap).
                    op_loop(&gate, window, move || {
                        let mut client = client.clone();
                        async move { cycle(&mut client, key).await }
                    })
                    .await
                }
                Workload::Transact => {
                    gated(gate, |gate, passed: Arc<AtomicBool>| async move {
                        let lease = hold(&mut client, &key, r#"{"n":0,"thread":"t-1"}"#).await?;
                        passed.store(true, Ordering::SeqCst);
                        let (handle, key) = (&client, &key);
                        let mut n = 0u64;
                        let tally = op_loop(&gate, window, move || {
                            n += 1;
                            let value = format!(r#"{{"n":{n},"thread":"t-1"}}"#);
                            let mut client = handle.clone();
                            async move { transact(&mut client, key, lease, value).await }
                        })
                        .await;
                        client
                            .lease_revoke(lease)
                            .await
                            .map_err(etcd_err("lease revoke"))?;
                        Ok(tally)
                    })
                    .await
                }
            }
        }
    })
    .await
}

/// Starts etcd, runs every (workload, owner count) of `settings`, stops it.
pub async fn rows(settings: &Settings) -> Result<BTreeMap<(Workload, usize), Measured>, String> {
    let mut server = EtcdServer::start()?;
    let (client, version) = server.client().await?;
    note(
        NAME,
        &format!(
            "etcd: single node {version} on {} (data in a temp dir on the same file system as the SQLite files), \
             etcd-client with one shared channel (a Client clone per owner), lease TTL {TTL_SECS} s",
            server.endpoint
        ),
    );
    let mut out = BTreeMap::new();
    for workload in Workload::ALL {
        for &owners in &settings.owners {
            let mut measured = row(&client, workload, owners, settings.window).await?;
            note(
                NAME,
                &format!("{}: {}", workload.row("etcd", owners), measured.summary()),
            );
            out.insert((workload, owners), measured);
        }
    }
    drop(client);
    drop(server);
    Ok(out)
}
