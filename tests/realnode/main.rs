//! The real-node tier: the same control plane as the integration tests with one real node
//! (containerd, runc, kubelet, kube-proxy, CoreDNS) instead of kwok's fake ones, so every pod
//! the operator renders truly starts, passes its real probes and talks to the others. The
//! operator runs in this process as in the kwok tier; PostgreSQL listens where pods reach it.

#[path = "../integration/support/mod.rs"]
mod support;

mod fixtures;
mod managed;
mod scan;
mod upgrade;

use std::process::ExitCode;
use std::sync::Arc;

use clair_testenv::{RealNodeImages, clair_binaries};
use libtest_mimic::{Arguments, Failed, Trial};
use support::TestEnv;

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // Each test runs real containers on two cores: a few at a time.
    args.test_threads.get_or_insert(2);
    let tests = registry();
    if args.list {
        let trials = tests
            .iter()
            .map(|(name, _)| Trial::test(*name, || Ok(())))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    let env = match start() {
        Ok(env) => Arc::new(env),
        Err(e) => {
            eprintln!("error: the real-node test cluster did not start: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            let env = Arc::clone(&env);
            Trial::test(name, move || run(&env, test))
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    drop(env);
    conclusion.exit_code()
}

/// The control plane with a real node holding Clair's image at the pinned version, and the
/// same binaries tagged as an older version for the upgrade test (the module proxy serves
/// no older Clair here).
fn start() -> anyhow::Result<TestEnv> {
    let pinned = clair_binaries()?;
    TestEnv::start_real_node(RealNodeImages {
        clair: vec![
            (pinned.clone(), "4.9.0".to_string()),
            (pinned, "4.8.0".to_string()),
        ],
    })
}

type TestFuture<'a> = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;
type TestFn = for<'a> fn(&'a TestEnv) -> TestFuture<'a>;

fn run(env: &TestEnv, test: TestFn) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("cannot start a runtime: {e}")))?;
    runtime
        .block_on(test(env))
        .map_err(|e| Failed::from(format!("{e:#}")))
}

macro_rules! tests {
    ($($module:ident :: $test:ident),* $(,)?) => {
        vec![$((
            concat!(stringify!($module), "::", stringify!($test)),
            (|env| Box::pin($module::$test(env))) as TestFn,
        )),*]
    };
}

fn registry() -> Vec<(&'static str, TestFn)> {
    tests![
        scan::a_clair_on_a_real_node_finds_a_known_vulnerability,
        managed::a_managed_database_initialises_and_keeps_its_data_across_a_pod_restart,
        upgrade::an_upgrade_runs_clairctl_admin_in_real_jobs_and_the_scan_still_answers,
    ]
}
