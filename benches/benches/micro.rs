//! Micro-benchmarks of the per-request CPU costs: HRW placement and checksums. The storage
//! engine's metadata path is benchmarked beside the engine (`target/benches/store.rs`), so
//! this package needs no server crate.
//!
//! Run: `cargo bench -p gristmill-bench --bench micro` (add `-- --quick` for a short pass).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gristmill_core::hrw;
use gristmill_core::smap::{self, ClusterMap, Node};
use md5::Digest;

/// Object unames the placement benchmarks cycle through.
fn unames(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("ais/@#/bench/dataset/shard-{i:06}.tar"))
        .collect()
}

fn cluster_map(targets: usize) -> ClusterMap {
    let mut m = ClusterMap::new(
        Node::new("p0", smap::PROXY, "http://127.0.0.1:8080"),
        "uuid".into(),
        String::new(),
    );
    for i in 0..targets {
        let id = format!("t{i:04}");
        m.tmap.insert(
            id.clone(),
            Node::new(&id, smap::TARGET, &format!("http://127.0.0.1:{}", 9000 + i)),
        );
    }
    m
}

fn placement(c: &mut Criterion) {
    let names = unames(1024);
    let mut g = c.benchmark_group("hrw");
    for targets in [3usize, 10, 100] {
        let digests: Vec<u64> = (0..targets)
            .map(|i| hrw::digest(&format!("t{i:04}")))
            .collect();
        let mut k = 0usize;
        // What a proxy does per request: hash the uname, pick the best target.
        g.bench_function(BenchmarkId::new("digest+pick", targets), |b| {
            b.iter(|| {
                k = (k + 1) & 1023;
                let d = hrw::digest(black_box(&names[k]));
                hrw::pick(d, digests.iter().copied())
            })
        });
        // The same through the cluster map (collects the active targets first).
        let map = cluster_map(targets);
        g.bench_function(BenchmarkId::new("smap.owner", targets), |b| {
            b.iter(|| {
                k = (k + 1) & 1023;
                map.owner(black_box(&names[k])).map(|n| n.id_digest)
            })
        });
    }
    g.finish();
}

fn checksums(c: &mut Criterion) {
    let data: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut g = c.benchmark_group("checksum-1MiB");
    g.throughput(Throughput::Bytes(data.len() as u64));
    g.bench_function("xxhash64", |b| {
        b.iter(|| xxhash_rust::xxh64::xxh64(black_box(&data), 0))
    });
    g.bench_function("md5", |b| b.iter(|| md5::Md5::digest(black_box(&data))));
    g.bench_function("crc32c", |b| b.iter(|| crc32c::crc32c(black_box(&data))));
    g.finish();
}

criterion_group!(benches, placement, checksums);
criterion_main!(benches);
