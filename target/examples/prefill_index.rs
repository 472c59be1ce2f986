//! Fills one stopped target's mountpath with empty objects of a native bucket, through the
//! store's own write path (data file, xattr, index record) but without fsyncs: how
//! `benches/list_bench.py --prefill` builds buckets of millions of objects in minutes instead
//! of hours of durable PUTs. Only the names the target owns in the given cluster map are
//! written, so the cluster that starts on the directories afterwards finds everything placed.
//!
//! Run (the target stopped; the map from `GET /v1/daemon?what=smap` of its cluster):
//! `build/release/examples/prefill_index --smap smap.json --target ID --mountpath DIR
//! --bucket NAME --objects N [--prefix o/] [--in-flight 256]`

use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use gristmill_core::{Bck, ClusterMap, Provider};
use gristmill_target::Store;
use gristmill_target::store::PutOptions;

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
    let in_flight: usize = arg("--in-flight").map_or(256, |v| v.parse().expect("--in-flight N"));
    let bck = Bck::new(&required("--bucket"), Provider::Ais).expect("--bucket: a bucket name");
    let store = Store::open_with_state(
        &[PathBuf::from(required("--mountpath"))],
        None,
        Default::default(),
    )
    .await
    .expect("opening the mountpath");

    let started = Instant::now();
    // Every name of the bucket, kept where this target owns it.
    let names = (0..objects)
        .map(|i| format!("{prefix}{i:010}"))
        .filter(|name| {
            smap.owner(&bck.object_uname(name))
                .is_some_and(|n| n.daemon_id == target)
        });
    let mut puts = futures::stream::iter(names.map(|name| {
        let (store, bck) = (store.clone(), bck.clone());
        async move {
            let opts = PutOptions {
                relaxed_index: true,
                ..Default::default()
            };
            let empty = futures::stream::empty::<Result<Bytes, std::io::Error>>();
            store.put(&bck, &name, empty, opts).await
        }
    }))
    .buffer_unordered(in_flight);
    let mut written = 0u64;
    while let Some(put) = puts.next().await {
        put.expect("put");
        written += 1;
    }
    for mp in store.mountpaths() {
        mp.index.sync().await.expect("index sync");
    }
    println!(
        "{target}: {written} of {objects} objects written in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
