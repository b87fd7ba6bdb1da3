//! A tenant's "database" that answers a check with an ErrorResponse claiming 2 GiB and streams
//! bytes at it (issue 54 point 1): tokio-postgres waited for the declared length, and the
//! operator's resident memory went from 64 MiB to 4,153 MiB in seconds (OOM-killed under its
//! 512 Mi limit, every tenant's Clairs unreconciled). A check now reads a few kilobytes at
//! most: it fails at the header naming why, the operator's memory stays flat, and another
//! namespace's Clair becomes Available meanwhile.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::ensure;
use clair_operator::api::{Clair, Phase};

use crate::operator::fleet_namespace;
use crate::support::TestEnv;
use crate::support::clair::{create_clair, external_spec, phase_is, wait_clair, wait_clair_within};

/// What the hostile server streams at one connection at most, and for how long.
const STREAMED_AT_MOST: u64 = 2 << 30;
const STREAMING_AT_MOST: Duration = Duration::from_secs(30);
/// The peak resident memory the attack may add to the operator (it added 4 GiB).
const GROWTH_BOUND: u64 = 32 << 20;
/// The other tenant's Clair must become Available within this while the attack runs.
const BOUND: Duration = Duration::from_secs(60);

/// One connection the hostile server served: how many bytes the kernel took before the
/// check closed it, and how long it stayed open.
#[derive(Debug, Clone, Copy)]
struct Served {
    written: u64,
    open_for: Duration,
}

/// Answers an SSL request with `N`, then, to the startup message, an ErrorResponse whose
/// length claims 2 GiB, followed by bytes until the client closes (bounded in count and time).
fn serve(mut stream: TcpStream) -> std::io::Result<Served> {
    let opened = Instant::now();
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    let mut request = [0u8; 1024];
    let n = stream.read(&mut request)?;
    // An SSL request: length 8, code 80877103.
    if n >= 8 && request[..8] == [0, 0, 0, 8, 4, 210, 22, 47] {
        stream.write_all(b"N")?;
        let _startup = stream.read(&mut request)?;
    }
    let mut header = vec![b'E'];
    header.extend_from_slice(&0x7fff_fff0u32.to_be_bytes());
    stream.write_all(&header)?;
    let chunk = vec![b'x'; 64 * 1024];
    let mut written = 0;
    while written < STREAMED_AT_MOST && opened.elapsed() < STREAMING_AT_MOST {
        match stream.write(&chunk) {
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    Ok(Served {
        written,
        open_for: opened.elapsed(),
    })
}

pub async fn a_database_that_declares_gigabytes_is_cut_off_and_slows_no_one(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, good) = fleet_namespace(env, "oversized-good").await?;
    let hostile = env.namespace("oversized-hostile").await?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let served = Arc::new(Mutex::new(Vec::<Served>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    listener.set_nonblocking(true)?;
    let accepting = {
        let (served, stop) = (served.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                let served = served.clone();
                std::thread::spawn(move || {
                    if let Ok(one) = stream.set_nonblocking(false).and_then(|()| serve(stream)) {
                        served.lock().unwrap().push(one);
                    }
                });
            }
        })
    };
    let result = attack(env, &client, &good, &hostile, port, &served).await;
    stop.store(true, Ordering::Relaxed);
    let _ = accepting.join();
    result
}

async fn attack(
    env: &TestEnv,
    client: &kube::Client,
    good: &str,
    hostile: &str,
    port: u16,
    served: &Mutex<Vec<Served>>,
) -> anyhow::Result<()> {
    let (client, good, hostile) = (client.clone(), good.to_string(), hostile.to_string());
    let string = format!("host=127.0.0.1 port={port} user=x password=y dbname=z");
    crate::fairness::every_database_at(&client, &hostile, &string).await?;
    let mut operator = crate::operator::start(env, "operator-oversized", &["--no-webhook"])?;
    create_clair(&client, &good, "before", external_spec()).await?;
    wait_clair(
        &client,
        &good,
        "before",
        "a Clair Available before the attack",
        phase_is(Phase::Available),
    )
    .await?;
    let baseline = operator.peak_rss()?;

    let attacked = Instant::now();
    create_clair(&client, &hostile, "oversized", external_spec()).await?;
    let stuck = wait_clair_within(
        BOUND,
        &client,
        &hostile,
        "oversized",
        "the hostile Clair's DatabaseReady=False, no server answering",
        |c: &Clair| {
            crate::support::clair::condition(c, "DatabaseReady").is_some_and(|d| {
                d.status == "False" && d.message.contains("no PostgreSQL server answered")
            })
        },
    )
    .await?;
    let named_after = attacked.elapsed();
    let message = crate::support::clair::condition(&stuck, "DatabaseReady")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    ensure!(
        message.len() <= 1024,
        "a condition of {} bytes: {message}",
        message.len()
    );
    // What the server did is the operator's log's to say, not the tenant's condition's.
    let log = std::fs::read_to_string(operator.log_path())?;
    ensure!(
        log.lines()
            .any(|line| line.contains("database check failed")
                && line.contains("more than a check reads")),
        "the operator's log names the oversized message ({})",
        operator.log_path().display()
    );

    // Another tenant's Clair, while the hostile checks go on.
    let other = other_tenant_available(&client, &good).await?;
    // Let the checks be retried a few times more (each used to read 2 GiB).
    tokio::time::sleep(Duration::from_secs(20)).await;
    operator.check_running()?;
    let peak = operator.peak_rss()?;
    let served = served.lock().unwrap().clone();
    let longest = served.iter().map(|s| s.open_for).max().unwrap_or_default();
    let most = served.iter().map(|s| s.written).max().unwrap_or_default();
    println!(
        "| hostile database (2 GiB ErrorResponse) | |\n|---|---|\n\
         | DatabaseReady=False naming it after | {:.1} s |\n\
         | connections served | {} |\n| longest open | {:.1} s |\n\
         | most bytes the kernel took from one | {} KiB |\n\
         | operator peak RSS before, after | {} MiB, {} MiB |\n\
         | another namespace's Clair Available after | {:.1} s |\n| condition | {message} |",
        named_after.as_secs_f64(),
        served.len(),
        longest.as_secs_f64(),
        most / 1024,
        baseline >> 20,
        peak >> 20,
        other.as_secs_f64(),
    );
    ensure!(!served.is_empty(), "the hostile server was never checked");
    // The check closes the connection at the header: what the kernel's buffers take, not 2 GiB.
    ensure!(
        longest < Duration::from_secs(10) && most < 64 << 20,
        "a check held a hostile connection {longest:?} and took {most} bytes"
    );
    ensure!(
        peak.saturating_sub(baseline) < GROWTH_BOUND,
        "the operator's peak RSS grew from {} to {} MiB under the attack",
        baseline >> 20,
        peak >> 20
    );
    Ok(())
}

/// How many times the tenant rewrites its connection string, and how long each value is
/// (three of them fill a Secret's 1 MiB).
const REWRITES: usize = 100;
const PADDED_TO: usize = 300 * 1024;

/// A tenant rewriting a connection string of 300 KiB a hundred times, against a database
/// that never answers (issue 54 point 4): each value's check used to wait for its turn
/// holding copies of the string, and stay an hour; now a service has one live check, a
/// replaced value's goes, and the operator's memory stays where it was.
pub async fn a_string_rewritten_a_hundred_times_leaves_memory_flat(
    env: &TestEnv,
) -> anyhow::Result<()> {
    let (client, good) = fleet_namespace(env, "rewrites-good").await?;
    let hostile = env.namespace("rewrites-hostile").await?;
    // Takes connections into its backlog and never answers them.
    let silent = TcpListener::bind("127.0.0.1:0")?;
    let port = silent.local_addr()?.port();
    let string = |i: usize| {
        let base =
            format!("host=127.0.0.1 port={port} user=x password=y dbname=z application_name=");
        let pad = PADDED_TO - base.len() - 8;
        format!("{base}{i:08}{}", "a".repeat(pad))
    };
    crate::fairness::every_database_at(&client, &hostile, &string(0)).await?;
    let mut operator = crate::operator::start(env, "operator-rewrites", &["--no-webhook"])?;
    create_clair(&client, &hostile, "rewritten", external_spec()).await?;
    wait_clair(
        &client,
        &hostile,
        "rewritten",
        "the hostile Clair waiting on its database",
        |c: &Clair| crate::support::clair::condition(c, "DatabaseReady").is_some(),
    )
    .await?;
    let baseline = operator.peak_rss()?;
    let started = Instant::now();
    for i in 1..=REWRITES {
        crate::fairness::every_database_at(&client, &hostile, &string(i)).await?;
        // Slow enough that the reconciles see most values, each a check asked for.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rewriting = started.elapsed();
    // Another tenant's Clair meanwhile, and the checks of the last value under way.
    let other = other_tenant_available(&client, &good).await?;
    operator.check_running()?;
    let peak = operator.peak_rss()?;
    println!(
        "| {REWRITES} rewrites of three {} KiB strings | |\n|---|---|\n| rewriting took | {:.1} s |\n\
         | operator peak RSS before, after | {} MiB, {} MiB |\n\
         | another namespace's Clair Available after | {:.1} s |",
        PADDED_TO / 1024,
        rewriting.as_secs_f64(),
        baseline >> 20,
        peak >> 20,
        other.as_secs_f64(),
    );
    ensure!(
        peak.saturating_sub(baseline) < GROWTH_BOUND,
        "the operator's peak RSS grew from {} to {} MiB over {REWRITES} rewrites",
        baseline >> 20,
        peak >> 20
    );
    Ok(())
}

/// How long a new Clair of another tenant (namespace `good`) takes to become Available,
/// within [`BOUND`], while an attack goes on.
async fn other_tenant_available(client: &kube::Client, good: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    create_clair(client, good, "clair", external_spec()).await?;
    wait_clair_within(
        BOUND,
        client,
        good,
        "clair",
        "the other tenant's Clair Available",
        phase_is(Phase::Available),
    )
    .await?;
    Ok(start.elapsed())
}
