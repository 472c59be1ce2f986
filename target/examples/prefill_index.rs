//! Fills one stopped target's mountpath with empty objects of a native bucket: an index
//! record each and an empty data file it names, without fsyncs and without the metadata
//! xattr (on ext4 a xattr that does not fit in the inode takes a 4 KiB block: 40 GB for
//! 10 M objects). How `benches/list_bench.py --prefill` builds buckets of millions of
//! objects in minutes instead of hours of durable PUTs, for listing benchmarks; only the
//! names the target owns in the given cluster map are written, so the cluster that starts on
//! the directories afterwards finds everything placed (and its startup scan finds every
//! record's file).
//!
//! Run (the target stopped; the map from `GET /v1/daemon?what=smap` of its cluster):
//! `build/release/examples/prefill_index --smap smap.json --target ID --mountpath DIR
//! --bucket NAME --objects N [--prefix o/]`

use std::path::PathBuf;
use std::time::Instant;

use gristmill_core::{Bck, ClusterMap, Provider};
use gristmill_target::{ObjectMeta, Store};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn required(name: &str) -> String {
    arg(name).unwrap_or_else(|| panic!("{name} is required (see the file's doc comment)"))
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let smap: ClusterMap =
        serde_json::from_slice(&std::fs::read(required("--smap")).expect("reading --smap"))
            .expect("--smap: a cluster map as JSON");
    let target = required("--target");
    let objects: u64 = required("--objects").parse().expect("--objects N");
    let prefix = arg("--prefix").unwrap_or_else(|| "o/".into());
    let bck = Bck::new(&required("--bucket"), Provider::Ais).expect("--bucket: a bucket name");
    let store = Store::open_with_state(
        &[PathBuf::from(required("--mountpath"))],
        None,
        Default::default(),
    )
    .await
    .expect("opening the mountpath");

    let started = Instant::now();
    let uname = bck.uname();
    let now = gristmill_target::store::now_ns();
    let empty = format!("{:016x}", xxhash_rust::xxh64::xxh64(b"", 0));
    // Every name of the bucket, kept where this target owns it.
    let mut names = (0..objects).filter_map(|i| {
        let name = format!("{prefix}{i:010}");
        let owned = smap
            .owner(&bck.object_uname(&name))
            .is_some_and(|n| n.daemon_id == target);
        owned.then_some((i, name))
    });
    let mut written = 0u64;
    loop {
        let batch: Vec<(u64, String)> = names.by_ref().take(100_000).collect();
        if batch.is_empty() {
            break;
        }
        let records: Vec<ObjectMeta> = batch
            .into_iter()
            .map(|(i, name)| ObjectMeta {
                bucket: uname.clone(),
                size: 0,
                cksum_type: "xxhash".into(),
                cksum_value: empty.clone(),
                version: "1".into(),
                atime_ns: now,
                mtime_ns: now,
                // Any path under `obj/` is a data file to the startup scan.
                file: format!("obj/prefill/{:03x}/{i:010}", i % 4096),
                custom: Default::default(),
                generation: 1,
                name,
            })
            .collect();
        let files: Vec<PathBuf> = records
            .iter()
            .map(|m| store.mountpath_for(&bck, &m.name).path.join(&m.file))
            .collect();
        tokio::task::spawn_blocking(move || {
            for f in files {
                let dir = f.parent().expect("a data file's directory");
                if !dir.is_dir() {
                    std::fs::create_dir_all(dir).expect("fan-out directory");
                }
                std::fs::File::create(&f).expect("data file");
            }
        })
        .await
        .expect("files");
        written += records.len() as u64;
        store
            .put_records_without_data(records)
            .await
            .expect("records");
    }
    for mp in store.mountpaths() {
        mp.index.sync().await.expect("index sync");
    }
    println!(
        "{target}: {written} of {objects} objects written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
