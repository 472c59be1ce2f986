//! Benchmarks of the storage engine's metadata path through the public `Store` API: open,
//! small PUTs with and without fsync (and group commit under 32 concurrent writers), HEAD and
//! a listing page. Moved here from `benches/benches/micro.rs` so the load-generator package
//! (`gristmill-bench`) needs no server crate; results in `docs/benchmarks.md`.
//!
//! Run: `cargo bench -p gristmill-target --bench store` (add `-- --quick` for a short pass).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use gristmill_core::{Bck, Provider};
use gristmill_target::Store;
use gristmill_target::store::PutOptions;

/// A store on a fresh temp dir with two mountpaths, plus the runtime its async API needs.
struct Fixture {
    rt: tokio::runtime::Runtime,
    store: Arc<Store>,
    bck: Bck,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new(objects: usize) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mps: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("mp{i}"))).collect();
        let store = rt.block_on(Store::open(&mps)).unwrap();
        let bck = Bck::new("bench", Provider::Ais).unwrap();
        let f = Self {
            rt,
            store,
            bck,
            _dir: dir,
        };
        // Fill concurrently so group commit batches the index writes.
        f.rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for chunk in 0..8 {
                let store = f.store.clone();
                let bck = f.bck.clone();
                set.spawn(async move {
                    for i in (chunk..objects).step_by(8) {
                        put(&store, &bck, &format!("obj-{i:06}"), false).await;
                    }
                });
            }
            while set.join_next().await.is_some() {}
        });
        f
    }
}

const SMALL: Bytes = Bytes::from_static(&[7u8; 4096]);

async fn put(store: &Store, bck: &Bck, name: &str, durable: bool) {
    let body = futures::stream::once(async { Ok::<_, std::io::Error>(SMALL) });
    store
        .put(
            bck,
            name,
            body,
            PutOptions {
                durable,
                expected_size: Some(SMALL.len() as u64),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

fn store_metadata(c: &mut Criterion) {
    let mut g = c.benchmark_group("store");
    g.sample_size(20);

    g.bench_function("open-empty", |b| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        b.iter_batched(
            || tempfile::tempdir().unwrap(),
            |dir| {
                let mps = vec![dir.path().join("mp0"), dir.path().join("mp1")];
                rt.block_on(Store::open(&mps)).unwrap();
                dir
            },
            BatchSize::PerIteration,
        )
    });

    let f = Fixture::new(10_000);
    let mut n = 0u64;
    g.bench_function("put-4KiB-nofsync", |b| {
        b.iter(|| {
            n += 1;
            f.rt.block_on(put(&f.store, &f.bck, &format!("new-{n:08}"), false))
        })
    });
    g.bench_function("put-4KiB-durable", |b| {
        b.iter(|| {
            n += 1;
            f.rt.block_on(put(&f.store, &f.bck, &format!("dur-{n:08}"), true))
        })
    });
    // 32 writers at once: group commit shares one index transaction (one fsync) among them.
    g.throughput(Throughput::Elements(32));
    g.bench_function("put-4KiB-durable-x32-concurrent", |b| {
        b.iter(|| {
            n += 1;
            let batch = n;
            f.rt.block_on(async {
                let mut set = tokio::task::JoinSet::new();
                for j in 0..32 {
                    let store = f.store.clone();
                    let bck = f.bck.clone();
                    set.spawn(async move {
                        put(&store, &bck, &format!("conc-{batch:08}-{j:02}"), true).await
                    });
                }
                while set.join_next().await.is_some() {}
            })
        })
    });
    g.throughput(Throughput::Elements(1));
    g.sample_size(50);
    let mut k = 0usize;
    g.bench_function("head-of-10k", |b| {
        b.iter(|| {
            k = (k + 7919) % 10_000;
            f.store
                .head(&f.bck, black_box(&format!("obj-{k:06}")))
                .unwrap()
        })
    });
    g.throughput(Throughput::Elements(1000));
    g.bench_function("list-page-1000-of-10k", |b| {
        b.iter(|| {
            k = (k + 7919) % 9_000;
            let after = format!("obj-{k:06}");
            let page =
                f.rt.block_on(f.store.list(&f.bck, "obj-", &after, 1000, false))
                    .unwrap();
            assert_eq!(page.len(), 1000);
            page
        })
    });
    g.finish();
}

criterion_group!(benches, store_metadata);
criterion_main!(benches);
