//! Chunked caching of large remote objects (`target/src/read/chunks.rs`): a range GET of an
//! uncached object fetches only the chunks that cover it (counted at the relay in front of
//! SeaweedFS: requests and bytes), later ranges in those chunks cost the backend nothing, and
//! a whole GET afterwards fetches only the chunks still missing; an object that changed
//! remotely drops what its partial copy held.

use std::sync::atomic::Ordering::SeqCst;

use gristmill_tests::{Cluster, content};

use super::backend::*;

const MIB: usize = 1 << 20;

async fn get_range(c: &Cluster, url: &str, range: &str) -> Vec<u8> {
    let r = c.http.get(url).header("range", range).send().await.unwrap();
    assert_eq!(r.status(), 206, "{range}");
    r.bytes().await.unwrap().to_vec()
}

async fn get_whole(c: &Cluster, url: &str) -> Vec<u8> {
    let r = c.http.get(url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap().to_vec()
}

async fn present(c: &Cluster, url: &str) -> String {
    let r = c.http.head(url).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let v = r.headers().get("ais-present").expect("ais-present");
    v.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_of_an_uncached_large_object_fetches_only_its_chunks() {
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-chunks").send().await.unwrap();
    // By default 16 chunks of 4 MiB and a 17th of 123 bytes.
    // The 4 GiB acceptance size runs as `benches/cold_get.sh --chunked 4096`.
    let (size, chunk) = (64 * MIB + 123, 4 * MIB);
    let chunks = size.div_ceil(chunk);
    let data = content(33, size);
    put_direct(&s3, "gm-chunks", "big.bin", data.clone()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster_with(
        &relay,
        1,
        &[
            ("GRISTD_COLD_GET_PARALLEL_ABOVE", "8MiB"),
            ("GRISTD_COLD_GET_CHUNK", &chunk.to_string()),
            ("GRISTD_COLD_GET_WORKERS", "4"),
        ],
    )
    .await;
    let url = obj_url(&c, "gm-chunks", "big.bin");
    let gets = || relay.object_gets.load(SeqCst);

    // 1 MiB across the boundary of two chunks in the middle: those two, nothing else.
    let mid = chunks / 2;
    let first = mid * chunk - MIB / 2;
    let got = get_range(&c, &url, &format!("bytes={first}-{}", first + MIB - 1)).await;
    assert!(got == data[first..first + MIB], "the range's bytes");
    assert_eq!(gets(), 2, "two chunk GETs at the backend");
    let forwarded = relay.forwarded.load(SeqCst);
    assert!(
        forwarded <= (2 * chunk + 64 * 1024) as u64,
        "{forwarded} bytes came from the backend for a 1 MiB range"
    );
    assert_eq!(
        present(&c, &url).await,
        "false",
        "a partial copy is not cached"
    );

    // Inside the chunks held: nothing from the backend.
    let (a, b) = ((mid - 1) * chunk + 10, mid * chunk + chunk / 2);
    let got = get_range(&c, &url, &format!("bytes={a}-{b}")).await;
    assert!(got == data[a..=b]);
    assert_eq!(
        gets(),
        2,
        "ranges in the chunks held cost the backend nothing"
    );
    // A suffix range: the last (short) chunk only.
    let got = get_range(&c, &url, "bytes=-100").await;
    assert!(got == data[size - 100..]);
    assert_eq!(gets(), 3);

    // A whole GET: the chunks still missing, each once; the bytes whole and right.
    let before = relay.forwarded.load(SeqCst);
    let whole = get_whole(&c, &url).await;
    assert!(
        whole == data,
        "the whole object ({} of {size} bytes)",
        whole.len()
    );
    assert_eq!(gets(), chunks, "only the missing chunks");
    let fetched = relay.forwarded.load(SeqCst) - before;
    assert!(
        fetched < (size - 2 * chunk) as u64 + MIB as u64,
        "{fetched} bytes fetched for the whole GET: chunks held were fetched again"
    );
    // Cached whole now.
    assert_eq!(present(&c, &url).await, "true");
    let again = get_whole(&c, &url).await;
    assert!(again == data);
    assert_eq!(gets(), chunks, "served from the cache");
    drop((whole, again, data));

    // Another object changes remotely between two ranges: the second range (a chunk not
    // held) sees the new ETag, the partial copy is dropped and the new bytes are served.
    let old = content(34, 32 * MIB);
    put_direct(&s3, "gm-chunks", "moving.bin", old.clone()).await;
    let url = obj_url(&c, "gm-chunks", "moving.bin");
    let got = get_range(&c, &url, &format!("bytes=0-{}", MIB - 1)).await;
    assert!(got == old[..MIB]);
    let new = content(35, 32 * MIB);
    put_direct(&s3, "gm-chunks", "moving.bin", new.clone()).await;
    let (a, b) = (24 * MIB, 25 * MIB - 1);
    let got = get_range(&c, &url, &format!("bytes={a}-{b}")).await;
    assert!(
        got == new[a..=b],
        "a range after the change: the new object's bytes"
    );
    let whole = get_whole(&c, &url).await;
    assert!(whole == new, "the whole object after the change");

    // A change under chunks held: served from the partial copy like any cached copy, until a
    // GET asks for the latest version (`?latest=true` checks the partial with a HEAD).
    let old = content(36, 32 * MIB);
    put_direct(&s3, "gm-chunks", "held.bin", old.clone()).await;
    let url = obj_url(&c, "gm-chunks", "held.bin");
    let first_mib = format!("bytes=0-{}", MIB - 1);
    assert!(get_range(&c, &url, &first_mib).await == old[..MIB]);
    let new = content(37, 32 * MIB);
    put_direct(&s3, "gm-chunks", "held.bin", new.clone()).await;
    assert!(
        get_range(&c, &url, &first_mib).await == old[..MIB],
        "chunks held serve without a HEAD"
    );
    let latest = format!("{url}&latest=true");
    assert!(
        get_range(&c, &latest, &first_mib).await == new[..MIB],
        "?latest=true sees the change"
    );

    // Deleted through the cluster: the chunks held go with it.
    let data = content(38, 32 * MIB);
    put_direct(&s3, "gm-chunks", "gone.bin", data.clone()).await;
    let url = obj_url(&c, "gm-chunks", "gone.bin");
    assert!(get_range(&c, &url, &first_mib).await == data[..MIB]);
    assert_eq!(present(&c, &url).await, "false", "only chunks are held");
    let r = c.http.delete(&url).send().await.unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let r = c
        .http
        .get(&url)
        .header("range", &first_mib)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a range of a deleted object");
}

/// Chunks are cached and evicted one by one: past the bound on chunks held (256 per target),
/// the least recently read chunks go, of this object or another, their holes punched in the
/// partial file; a chunk read again stays, an evicted one is fetched again, and a whole GET
/// afterwards assembles the right bytes from what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_evicted_one_by_one_least_recently_read_first() {
    const CHUNK: usize = 64 * 1024;
    const BOUND: usize = 256;
    let weed = Weed::start().await;
    let s3 = weed.client();
    s3.create_bucket().bucket("gm-evict").send().await.unwrap();
    let size = 260 * CHUNK + 100; // 261 chunks
    let data = content(40, size);
    put_direct(&s3, "gm-evict", "a.bin", data.clone()).await;
    let other = content(41, 20 * CHUNK + 1);
    put_direct(&s3, "gm-evict", "b.bin", other.clone()).await;
    let relay = Relay::start(&weed.endpoint).await;
    let c = remote_cluster_with(
        &relay,
        1,
        &[
            ("GRISTD_COLD_GET_PARALLEL_ABOVE", "1MiB"),
            ("GRISTD_COLD_GET_CHUNK", &CHUNK.to_string()),
        ],
    )
    .await;
    let (a, b) = (
        obj_url(&c, "gm-evict", "a.bin"),
        obj_url(&c, "gm-evict", "b.bin"),
    );
    let gets = || relay.object_gets.load(SeqCst);
    let read = async |url: &str, bytes: &[u8], first: usize, last: usize| {
        let (from, to) = (first * CHUNK + 7, (last * CHUNK + 99).min(bytes.len() - 1));
        let got = get_range(&c, url, &format!("bytes={from}-{to}")).await;
        assert!(got == bytes[from..=to], "chunks {first}..={last}");
    };

    read(&a, &data, 0, 0).await;
    read(&a, &data, 1, 255).await;
    assert_eq!(gets(), 256, "the bound is reached");
    read(&a, &data, 0, 0).await; // the oldest read becomes the newest
    assert_eq!(gets(), 256);
    read(&a, &data, 256, 257).await;
    assert_eq!(gets(), 258);
    // Chunks 1 and 2 (least recently read) made the room; 0 and 3 are still held.
    read(&a, &data, 0, 0).await;
    read(&a, &data, 3, 3).await;
    assert_eq!(gets(), 258, "chunks read again or not yet evicted stay");
    read(&a, &data, 1, 1).await;
    assert_eq!(
        gets(),
        259,
        "an evicted chunk is fetched again (evicting chunk 4)"
    );

    // Another object's chunks take room from this one's oldest (5 and 6).
    read(&b, &other, 0, 1).await;
    assert_eq!(gets(), 261);
    read(&a, &data, 7, 7).await;
    assert_eq!(gets(), 261);
    read(&a, &data, 5, 5).await;
    assert_eq!(
        gets(),
        262,
        "chunk 5 went for the other object (and 8 goes now)"
    );

    // The evicted chunks take no space: holes in the partial files.
    let dir = c.mountpaths[0][0].join("partial");
    let allocated: u64 = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::os::unix::fs::MetadataExt::blocks(&e.unwrap().metadata().unwrap()) * 512)
        .sum();
    assert!(
        allocated <= (BOUND * CHUNK + 64 * 1024) as u64,
        "{allocated} bytes allocated in {} for at most {BOUND} chunks of {CHUNK}",
        dir.display()
    );

    // A whole GET: the 254 chunks held, and only the 7 missing ones (2, 4, 6, 8, 258–260)
    // from the backend; every byte right, none from a punched hole.
    let whole = get_whole(&c, &a).await;
    assert!(whole == data, "the whole object ({} bytes)", whole.len());
    assert_eq!(gets(), 269, "only the chunks not held");
    read(&b, &other, 0, 1).await;
    assert_eq!(gets(), 269, "the other object's chunks are still held");
}

/// `lru.move_cached` off (job-scoped caches): a target joining moves none of the bucket's
/// cached copies — the old owners drop their misplaced ones (the job's `dropped_not_moved`)
/// and the new owner fetches each on its first GET — while a bucket with the default moves
/// its copies and costs the backend nothing afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_bucket_may_opt_out_of_moving_its_cached_copies() {
    use gristmill_core::{Bck, Provider};
    const N: usize = 120;
    let weed = Weed::start().await;
    let s3 = weed.client();
    for b in ["gm-stay", "gm-move"] {
        s3.create_bucket().bucket(b).send().await.unwrap();
        for i in 0..N {
            put_direct(&s3, b, &format!("o{i:03}"), content(i as u64, 3000)).await;
        }
    }
    let relay = Relay::start(&weed.endpoint).await;
    let mut c = remote_cluster_with(&relay, 2, &[]).await;
    let gets = || relay.object_gets.load(SeqCst);
    let read_all = |c: &Cluster, b: &'static str| {
        let (http, urls) = (
            c.http.clone(),
            (0..N).map(|i| obj_url(c, b, &format!("o{i:03}"))),
        );
        let urls: Vec<String> = urls.collect();
        async move {
            for (i, url) in urls.iter().enumerate() {
                let r = http.get(url).send().await.unwrap();
                assert_eq!(r.status(), 200, "{url}");
                assert!(r.bytes().await.unwrap() == content(i as u64, 3000), "{url}");
            }
        }
    };
    read_all(&c, "gm-stay").await;
    read_all(&c, "gm-move").await;
    assert_eq!(gets(), 2 * N, "every object fetched once");
    let props =
        serde_json::json!({"action": "set-bprops", "value": {"lru": {"move_cached": false}}});
    let r = c
        .http
        .patch(c.url("/v1/buckets/gm-stay?provider=aws"))
        .json(&props)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());

    c.add_target().await.unwrap();
    let (smap, job) = super::elastic::rebalanced(&c).await;
    let new_id = c.target_id(2).await.unwrap();
    let to_new = |b: &str| {
        let bck = Bck::new(b, Provider::Aws).unwrap();
        (0..N)
            .filter(|i| {
                smap.owners(&bck.object_uname(&format!("o{i:03}")), 1)[0].daemon_id == new_id
            })
            .count()
    };
    let (stay_moved, move_moved) = (to_new("gm-stay"), to_new("gm-move"));
    assert!(
        stay_moved > 0 && move_moved > 0,
        "the new target owns some of each"
    );
    let job = job.expect("the join's rebalance");
    assert_eq!(
        job.counters.get("dropped_not_moved").copied().unwrap_or(0),
        stay_moved as u64,
        "the old owners dropped the opted-out bucket's misplaced copies: {:?}",
        job.counters
    );

    // The moved bucket is served from the cache; the other one refetches what changed owner.
    read_all(&c, "gm-move").await;
    assert_eq!(gets(), 2 * N, "moved copies cost the backend nothing");
    read_all(&c, "gm-stay").await;
    assert_eq!(
        gets(),
        2 * N + stay_moved,
        "only the opted-out copies that changed owner"
    );
    read_all(&c, "gm-stay").await;
    assert_eq!(gets(), 2 * N + stay_moved, "and they are cached again");
}
