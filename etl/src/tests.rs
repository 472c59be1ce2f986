//! The runtimes with real processes (`tr`, `sh`, the Python worker): results, pipelines,
//! failures, timeouts, stopped and unknown ETLs, counters.

use std::collections::BTreeMap;

use bytes::Bytes;
use gristmill_core::etl::{EtlSpec, Runtime};

use super::{EtlConfig, EtlError, Etls};

fn command(name: &str, argv: &[&str]) -> EtlSpec {
    EtlSpec {
        name: name.into(),
        runtime: Runtime::Command,
        code: String::new(),
        command: argv.iter().map(|s| s.to_string()).collect(),
        framed: false,
        url: String::new(),
        env: BTreeMap::new(),
        dependencies: Vec::new(),
        workers: 0,
        timeout_secs: 0,
        memory_limit: 0,
        running: true,
    }
}

fn python(name: &str, code: &str) -> EtlSpec {
    EtlSpec {
        runtime: Runtime::Python,
        code: code.into(),
        command: Vec::new(),
        ..command(name, &[])
    }
}

fn etls(specs: Vec<EtlSpec>) -> Etls {
    let e = Etls::new(EtlConfig::default());
    e.apply(&specs.into_iter().map(|s| (s.name.clone(), s)).collect());
    e
}

#[tokio::test]
async fn a_command_transforms_each_object_and_pipelines_run_in_order() {
    let e = etls(vec![
        command("upper", &["tr", "a-z", "A-Z"]),
        command("rev", &["rev"]),
    ]);
    let out = e
        .transform("upper", Bytes::from_static(b"hello"), "b/x", "")
        .await
        .unwrap();
    assert_eq!(&out[..], b"HELLO");
    let out = e
        .pipeline(
            &["upper".into(), "rev".into()],
            Bytes::from_static(b"abc\n"),
            "b/x",
            "",
        )
        .await
        .unwrap();
    assert_eq!(&out[..], b"CBA\n");
    let stats = e.stats();
    let upper = stats.iter().find(|s| s.name == "upper").unwrap();
    assert_eq!((upper.objects, upper.errors), (2, 0));
}

#[tokio::test]
async fn a_failing_command_reports_its_error_and_counts_it() {
    let e = etls(vec![command(
        "bad",
        &["sh", "-c", "echo broken input >&2; exit 3"],
    )]);
    let err = e
        .transform("bad", Bytes::from_static(b"x"), "b/obj", "")
        .await
        .unwrap_err();
    match &err {
        EtlError::Failed { etl, path, message } => {
            assert_eq!((etl.as_str(), path.as_str()), ("bad", "b/obj"));
            assert!(message.contains("broken input"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(e.stats()[0].errors, 1);
}

#[tokio::test]
async fn a_slow_command_times_out() {
    let mut spec = command("slow", &["sleep", "10"]);
    spec.timeout_secs = 1;
    let e = etls(vec![spec]);
    let started = std::time::Instant::now();
    let err = e
        .transform("slow", Bytes::from_static(b"x"), "b/obj", "")
        .await
        .unwrap_err();
    assert!(matches!(err, EtlError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}

#[tokio::test]
async fn unknown_and_stopped_etls_are_refused() {
    let mut stopped = command("off", &["cat"]);
    stopped.running = false;
    let e = etls(vec![command("on", &["cat"]), stopped]);
    assert!(e.check(&["on".into()]).is_ok());
    for name in ["off", "nope"] {
        let err = e
            .transform(name, Bytes::from_static(b"x"), "b/obj", "")
            .await
            .unwrap_err();
        assert!(
            matches!(err, EtlError::Unknown(ref n) if n == name),
            "{err:?}"
        );
        assert!(e.check(&[name.into()]).is_err());
    }
    // Removed from the definitions: gone.
    e.apply(&BTreeMap::new());
    assert!(e.check(&["on".into()]).is_err());
}

#[tokio::test]
async fn a_python_module_transforms_with_its_arguments() {
    let code = "def transform(data, path, args):\n    return data.upper() + b'|' + path.encode() + b'|' + args.encode()\n";
    let e = etls(vec![python("py", code)]);
    let out = e
        .transform("py", Bytes::from_static(b"abc"), "b/k", "n=1")
        .await
        .unwrap();
    assert_eq!(&out[..], b"ABC|b/k|n=1");
    // An exception in the user's code is that object's failure, not the pool's.
    let e = etls(vec![python(
        "boom",
        "def transform(data, path, args):\n    raise ValueError('no ' + path)\n",
    )]);
    let err = e
        .transform("boom", Bytes::from_static(b"abc"), "b/k", "")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no b/k"), "{err}");
}
