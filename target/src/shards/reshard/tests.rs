use super::*;

fn rec(key: &str, shard: &str, pos: u64) -> Record {
    Record {
        key: key.into(),
        shard: shard.into(),
        pos,
        files: vec![(format!("{key}.jpg"), 10)],
        size: 10,
    }
}

fn order(kind: &str, seed: &str) -> Orderer {
    Orderer::new(&ReshardSpec {
        algorithm: gristmill_core::shards::ReshardAlgorithm {
            kind: kind.into(),
            decreasing: false,
            seed: seed.into(),
        },
        ..Default::default()
    })
    .unwrap()
}

fn sorted_keys(c: Collector) -> Vec<String> {
    c.into_sorted().unwrap().map(|r| r.unwrap().1.key).collect()
}

fn collector(dir: &std::path::Path, max_mem: usize) -> Collector {
    Collector {
        reported: HashSet::new(),
        errors: Vec::new(),
        buffer: Vec::new(),
        runs: Vec::new(),
        spill_dir: dir.to_owned(),
        max_mem,
        total: 0,
    }
}

#[test]
fn spilled_sort_equals_in_memory_sort() {
    let dir = tempfile::tempdir().unwrap();
    for kind in ["alphanumeric", "shuffle", "none"] {
        let o = order(kind, "7");
        let recs: Vec<Record> = (0..1000)
            .map(|i| {
                rec(
                    &format!("k{:04}", (i * 7919) % 1000),
                    &format!("s{}", i % 13),
                    i,
                )
            })
            .collect();
        let mut mem = collector(dir.path(), usize::MAX);
        mem.add(&o, recs.clone()).unwrap();
        let mut spilled = collector(&dir.path().join(kind), 64);
        for chunk in recs.chunks(100) {
            spilled.add(&o, chunk.to_vec()).unwrap();
        }
        assert!(spilled.runs.len() >= 10);
        assert_eq!(sorted_keys(mem), sorted_keys(spilled), "{kind}");
    }
}

#[test]
fn shuffle_depends_on_seed_only() {
    let dir = tempfile::tempdir().unwrap();
    let recs: Vec<Record> = (0..200).map(|i| rec(&format!("k{i:03}"), "s", i)).collect();
    let run = |seed: &str, reversed: bool| {
        let mut c = collector(dir.path(), usize::MAX);
        let mut r = recs.clone();
        if reversed {
            r.reverse();
        }
        c.add(&order("shuffle", seed), r).unwrap();
        sorted_keys(c)
    };
    assert_eq!(run("a", false), run("a", true));
    assert_ne!(run("a", false), run("b", false));
    let mut alpha = collector(dir.path(), usize::MAX);
    alpha.add(&order("alphanumeric", ""), recs.clone()).unwrap();
    let keys = sorted_keys(alpha);
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
}
