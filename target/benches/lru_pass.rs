//! One eviction pass over a large cache: how many index entries it reads and how long it takes
//! to free 1 % of the cached bytes, against a walk of every record (what a pass did before the
//! access-time order) in the same run; then how long the background sweep takes to remove the
//! records the pass hid. Records only (no data files: a pass's cost is the
//! index's, and deleting a missing file is a no-op), read in an order unlike their names'.
//!
//! Run: `cargo bench -p gristmill-target --bench lru_pass -- --objects 10000000 [--dir D]
//! [--index-cache-mib N] [--free-percent P]`
//! (the index of 10 M records takes about 3 GiB of disk). Results in `docs/benchmarks.md`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gristmill_core::{Bck, BucketMetadata, BucketRecord, Provider};
use gristmill_target::{ObjectMeta, SharedSpaceConfig, SpaceConfig, Store, store::space::Space};

const SIZE: u64 = 4096;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Resident and peak resident set size of this process, MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() {
    let objects: u64 = arg("--objects").map_or(1_000_000, |v| v.parse().expect("--objects N"));
    let tmp = tempfile::tempdir_in(arg("--dir").map_or_else(std::env::temp_dir, PathBuf::from))
        .expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(objects, tmp.path().join("mp0")));
}

async fn run(objects: u64, mountpath: PathBuf) {
    // `--index-cache-mib N`: the index's page cache (gristd's `target.index_cache_mib`).
    let tuning = gristmill_target::StoreTuning {
        index_cache_bytes: arg("--index-cache-mib").map_or(
            gristmill_target::StoreTuning::default().index_cache_bytes,
            |v| v.parse::<usize>().expect("--index-cache-mib N") << 20,
        ),
        ..Default::default()
    };
    let store: Arc<Store> = Store::open_with_state(&[mountpath], None, tuning)
        .await
        .expect("store");
    let bck = Bck::new("cache", Provider::Aws).unwrap();
    let uname = bck.uname();
    let base = gristmill_target::store::now_ns() - 3_600_000_000_000;
    // Read times a permutation of the names (i * P mod N, P prime to N): the access order
    // is unlike the key order, as after real reads.
    let prime = 1_000_003u64;
    let started = Instant::now();
    let mut next = 0u64;
    while next < objects {
        let end = (next + 100_000).min(objects);
        let batch = (next..end)
            .map(|i| ObjectMeta {
                bucket: uname.clone(),
                name: format!("train/shard-{:05}/sample-{i:09}.jpg", i / 10_000),
                size: SIZE,
                cksum_type: "xxhash".into(),
                cksum_value: format!("{i:016x}"),
                version: String::new(),
                atime_ns: base + ((i * prime) % objects) as i64 * 1_000,
                mtime_ns: base,
                file: format!("obj/none/{i}"),
                custom: Default::default(),
                generation: 1,
            })
            .collect();
        store
            .put_records_without_data(batch)
            .await
            .expect("records");
        next = end;
    }
    println!(
        "filled {objects} records in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // The walk every pass made before: read and decode every record.
    let walk = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut n = 0u64;
            store.for_each_object(|_, _| n += 1).expect("walk");
            (n, started.elapsed())
        })
        .await
        .unwrap()
    };
    println!(
        "walk of every record (the pass before): {} records in {:.2} s",
        walk.0,
        walk.1.as_secs_f64()
    );

    // A cache limit whose low mark is 99 % of what is cached: the pass frees 1 %
    // (`--free-percent P`: P %, for profiles of the pass at smaller sizes).
    let free: u64 = arg("--free-percent").map_or(1, |v| v.parse().expect("--free-percent P"));
    let cached = objects * SIZE;
    let config = SpaceConfig {
        high_wm: 100 - free as u8,
        low_wm: 100 - free as u8,
        out_of_space: 100,
        dont_evict_time: Duration::ZERO,
        max_cache_bytes: cached,
        ..Default::default()
    };
    let space = Space::new(SharedSpaceConfig::new(config), store.clone());
    let mut bmd = BucketMetadata {
        version: 1,
        ..Default::default()
    };
    bmd.buckets.insert(
        uname.clone(),
        BucketRecord {
            bck: bck.clone(),
            props: Default::default(),
        },
    );
    // Peak RSS from here on (writing 5 to clear_refs resets VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let (rss_before, _) = rss_mib();
    let started = Instant::now();
    let done = space.evict(&bmd, false, &[]).await;
    let took = started.elapsed();
    let (rss_after, peak) = rss_mib();
    println!(
        "pass: evicted {} objects ({:.2} % of {objects}, {} MiB) reading {} entries ({:.3} % of the records) in {:.3} s; RSS {rss_before:.0} -> {rss_after:.0} MiB, peak {peak:.0} MiB",
        done.objects,
        done.objects as f64 * 100.0 / objects as f64,
        done.bytes >> 20,
        done.examined,
        done.examined as f64 * 100.0 / objects as f64,
        took.as_secs_f64(),
    );
    assert!(
        done.objects * 100 >= (objects * free).saturating_sub(100),
        "the pass freed less than asked"
    );

    // The pass hid the evicted records; a background sweep removes them from the index.
    let waiting = store.evicted_pending().expect("evicted count");
    while store.evicted_pending().expect("evicted count") > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (_, peak) = rss_mib();
    println!(
        "sweep: removed the {waiting} evicted records {:.3} s after the pass ended ({:.3} s after it started); peak RSS {peak:.0} MiB",
        (started.elapsed() - took).as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
}
