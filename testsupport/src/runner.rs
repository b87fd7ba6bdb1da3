//! The custom test `main` both tiers share (libtest-mimic): the cluster is started once
//! from the main thread (its processes' death signal is tied to the thread that started
//! them), every test runs on a runtime of its own, and the cluster stops whether the tests
//! passed or not.

use std::process::ExitCode;
use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};

use crate::TestEnv;

pub type TestFuture<'a> = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'a>>;
pub type TestFn = for<'a> fn(&'a TestEnv) -> TestFuture<'a>;

/// Every test, by module path: `tests![module::test, ...]`.
#[macro_export]
macro_rules! tests {
    ($($module:ident :: $test:ident),* $(,)?) => {
        vec![$((
            concat!(stringify!($module), "::", stringify!($test)),
            (|env| Box::pin($module::$test(env))) as $crate::runner::TestFn,
        )),*]
    };
}

/// Parses the test arguments, starts the cluster with `start` (unless only listing), runs
/// `tests` on `threads` threads (unless told otherwise) and stops the cluster.
/// A check over what the whole suite did, run once every test has passed (and only when no
/// test was filtered out): `(name, check)`.
pub type SuiteCheck = (&'static str, fn(&TestEnv) -> anyhow::Result<()>);

pub fn main(
    what: &str,
    threads: usize,
    start: fn() -> anyhow::Result<TestEnv>,
    tests: Vec<(&'static str, TestFn)>,
    after: &[SuiteCheck],
) -> ExitCode {
    let whole_suite = {
        let args = Arguments::from_args();
        args.filter.is_none() && args.skip.is_empty() && !args.exact
    };
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(threads);
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
            eprintln!("error: {what} did not start: {e:#}");
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
    let mut failed = conclusion.has_failed();
    // Never left out silently: a filtered or failed run says which checks it did not make.
    if !whole_suite || failed {
        let why = if whole_suite {
            "a test failed"
        } else {
            "the run was filtered"
        };
        for (name, _) in after {
            println!(
                "after the suite: {name} ... not run ({why}; it holds only over the whole suite)"
            );
        }
    }
    if whole_suite && !failed {
        for (name, check) in after {
            match check(&env) {
                Ok(()) => println!("after the suite: {name} ... ok"),
                Err(e) => {
                    println!("after the suite: {name} ... FAILED\n{e:#}");
                    failed = true;
                }
            }
        }
    }
    drop(env);
    if failed {
        ExitCode::from(101)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs one async test on its own runtime (clients are tied to the runtime that made them).
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
