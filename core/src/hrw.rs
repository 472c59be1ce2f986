//! Rendezvous (highest-random-weight) placement, bit-compatible with AIStore.
//!
//! `digest = xxhash64(uname, seed 1103515245)`; every candidate carries its own digest
//! (`xxhash64(id, same seed)`), and the candidate maximising `xoshiro256_mix(candidate ^ digest)`
//! wins. The same formula picks a target for an object and a mountpath inside a target, so any
//! proxy, target or SDK computes the same owner with no lookup. Golden vectors produced by the
//! `aistore` Python package live in `core/testdata/hrw_golden.json`.

use xxhash_rust::xxh64::xxh64;

/// AIStore's `MLCG32`: the xxhash64 seed for every placement digest.
pub const HRW_SEED: u64 = 1_103_515_245;

/// 64-bit digest of a name (object uname, node id or mountpath) as AIStore computes it.
pub fn digest(name: &str) -> u64 {
    xxh64(name.as_bytes(), HRW_SEED)
}

/// AIStore's `xoshiro256.Hash`: two splitmix64 rounds and a xoshiro256** scrambler, used as a
/// keyed mixer rather than as a generator.
pub fn xoshiro256_mix(seed: u64) -> u64 {
    const GOLDEN_RATIO: u64 = 0x9e37_79b9_7f4a_7c15;
    const C1: u64 = 0xbf58_476d_1ce4_e5b9;
    const C2: u64 = 0x94d0_49bb_1331_11eb;
    let mut z = seed.wrapping_add(GOLDEN_RATIO);
    z = (z ^ (z >> 30)).wrapping_mul(C1);
    z = (z ^ (z >> 27)).wrapping_mul(C2);
    z = (z ^ (z >> 31)).wrapping_add(GOLDEN_RATIO);
    z = (z ^ (z >> 30)).wrapping_mul(C1);
    z = (z ^ (z >> 27)).wrapping_mul(C2);
    z = (z ^ (z >> 31)).wrapping_mul(5);
    z.rotate_left(7).wrapping_mul(9)
}

/// The weight of one candidate for one object digest.
pub fn score(candidate_digest: u64, object_digest: u64) -> u64 {
    xoshiro256_mix(candidate_digest ^ object_digest)
}

/// Index of the highest-scoring candidate, or `None` when there are none.
///
/// Exact 64-bit ties (never seen in practice) resolve to the first candidate in iteration order;
/// callers iterate in a deterministic (sorted) order so every node agrees.
pub fn pick<I>(object_digest: u64, candidate_digests: I) -> Option<usize>
where
    I: IntoIterator<Item = u64>,
{
    let mut best: Option<(usize, u64)> = None;
    for (i, d) in candidate_digests.into_iter().enumerate() {
        let s = score(d, object_digest);
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

/// Indices of all candidates ordered by descending score: owner first, then the next replicas.
pub fn rank<I>(object_digest: u64, candidate_digests: I) -> Vec<usize>
where
    I: IntoIterator<Item = u64>,
{
    let mut scored: Vec<(u64, usize)> = candidate_digests
        .into_iter()
        .enumerate()
        .map(|(i, d)| (score(d, object_digest), i))
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().map(|(_, i)| i).collect()
}

/// The weight a node has when it states none: all nodes equal (and placement AIStore's).
pub const DEFAULT_WEIGHT: u32 = 100;

/// Weighted rendezvous key of one candidate: `weight / -ln(u)`, with `u` the candidate's HRW
/// score mapped to (0, 1) (its top 52 bits, centred in their interval: exact in an f64, never
/// 0 or 1). The candidate with
/// the largest key wins, and each wins a share of names in proportion to its weight. Used
/// only when the candidates' weights differ: with equal weights the plain integer score
/// decides (bit-identical with AIStore).
pub fn weighted_key(score: u64, weight: u32) -> f64 {
    let u = ((score >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64);
    f64::from(weight.max(1)) / -u.ln()
}

/// [`pick`] over `(digest, weight)` candidates: plain HRW when every weight is the same,
/// weighted rendezvous ([`weighted_key`]) otherwise.
pub fn pick_weighted<I>(object_digest: u64, candidates: I) -> Option<usize>
where
    I: IntoIterator<Item = (u64, u32)> + Clone,
{
    if uniform(candidates.clone()) {
        return pick(object_digest, candidates.into_iter().map(|(d, _)| d));
    }
    let mut best: Option<(usize, f64)> = None;
    for (i, (d, w)) in candidates.into_iter().enumerate() {
        let k = weighted_key(score(d, object_digest), w);
        if best.is_none_or(|(_, b)| k > b) {
            best = Some((i, k));
        }
    }
    best.map(|(i, _)| i)
}

/// [`rank`] over `(digest, weight)` candidates, as [`pick_weighted`] orders them.
pub fn rank_weighted<I>(object_digest: u64, candidates: I) -> Vec<usize>
where
    I: IntoIterator<Item = (u64, u32)> + Clone,
{
    if uniform(candidates.clone()) {
        return rank(object_digest, candidates.into_iter().map(|(d, _)| d));
    }
    let mut keyed: Vec<(f64, usize)> = candidates
        .into_iter()
        .enumerate()
        .map(|(i, (d, w))| (weighted_key(score(d, object_digest), w), i))
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    keyed.into_iter().map(|(_, i)| i).collect()
}

fn uniform<I: IntoIterator<Item = (u64, u32)>>(candidates: I) -> bool {
    let mut weights = candidates.into_iter().map(|(_, w)| w);
    let first = weights.next();
    weights.all(|w| Some(w) == first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_and_rank_agree() {
        let nodes: Vec<u64> = ["a", "b", "c", "d"].iter().map(|n| digest(n)).collect();
        for i in 0..200 {
            let d = digest(&format!("ais/@#/b/obj-{i}"));
            let winner = pick(d, nodes.iter().copied()).unwrap();
            assert_eq!(rank(d, nodes.iter().copied())[0], winner);
        }
    }

    /// Vectors produced by the `aistore` package's own functions (python/tools/gen_hrw_golden.py).
    #[test]
    fn golden_vectors_match_aistore_sdk() {
        let golden: serde_json::Value =
            serde_json::from_str(include_str!("../testdata/hrw_golden.json")).unwrap();
        for v in golden["xxhash64_vectors"].as_array().unwrap() {
            assert_eq!(
                digest(v["input"].as_str().unwrap()),
                v["digest"].as_u64().unwrap()
            );
        }
        for v in golden["xoshiro256_vectors"].as_array().unwrap() {
            assert_eq!(
                xoshiro256_mix(v["input"].as_u64().unwrap()),
                v["output"].as_u64().unwrap()
            );
        }
        let sets = golden["node_sets"].as_object().unwrap();
        let mut checked = 0;
        for obj in golden["objects"].as_array().unwrap() {
            let uname = obj["uname"].as_str().unwrap();
            assert_eq!(digest(uname), obj["digest"].as_u64().unwrap(), "{uname}");
            for (set, winner) in obj["winners"].as_object().unwrap() {
                let nodes: Vec<&serde_json::Value> = sets[set]["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|n| n["flags"].as_u64().unwrap_or(0) & 0b1100 == 0)
                    .collect();
                for n in &nodes {
                    assert_eq!(
                        digest(n["id"].as_str().unwrap()),
                        n["digest"].as_u64().unwrap()
                    );
                }
                let i = pick(
                    digest(uname),
                    nodes.iter().map(|n| n["digest"].as_u64().unwrap()),
                )
                .unwrap();
                assert_eq!(
                    nodes[i]["id"].as_str().unwrap(),
                    winner.as_str().unwrap(),
                    "{uname} in {set}"
                );
                checked += 1;
            }
        }
        assert!(checked > 500, "only {checked} placements checked");
    }

    /// Equal weights are plain HRW, whatever the weight: AIStore's placement.
    #[test]
    fn weighted_keys_stay_finite_at_the_ends() {
        for score in [0, 1, u64::MAX, u64::MAX - 1, 1 << 63] {
            let k = weighted_key(score, 100);
            assert!(k.is_finite() && k > 0.0, "{score}: {k}");
        }
        assert!(weighted_key(u64::MAX, 1) > weighted_key(u64::MAX - (1 << 13), 1));
    }

    #[test]
    fn equal_weights_place_as_aistore() {
        let nodes: Vec<u64> = (0..7).map(|i| digest(&format!("t{i}"))).collect();
        for w in [1, DEFAULT_WEIGHT, 12345] {
            for i in 0..2000 {
                let d = digest(&format!("ais/@#/b/obj-{i}"));
                let weighted = nodes.iter().map(|&n| (n, w));
                assert_eq!(
                    pick_weighted(d, weighted.clone()),
                    pick(d, nodes.iter().copied())
                );
                assert_eq!(rank_weighted(d, weighted), rank(d, nodes.iter().copied()));
            }
        }
    }

    /// Unequal weights place names in proportion to the weights: within 2 % of each node's
    /// share over 1,000,000 names; ranks start with the pick.
    #[test]
    fn unequal_weights_place_in_proportion() {
        let weights = [100u32, 200, 300, 400, 50];
        let nodes: Vec<(u64, u32)> = weights
            .iter()
            .enumerate()
            .map(|(i, &w)| (digest(&format!("target-{i}")), w))
            .collect();
        let total: u32 = weights.iter().sum();
        let names = 1_000_000;
        let mut won = [0u64; 5];
        for i in 0..names {
            let d = digest(&format!("ais/@#/train/shard-{i:07}.tar"));
            let w = pick_weighted(d, nodes.iter().copied()).unwrap();
            won[w] += 1;
            if i % 1000 == 0 {
                assert_eq!(rank_weighted(d, nodes.iter().copied())[0], w);
            }
        }
        for (i, &w) in weights.iter().enumerate() {
            let want = names as f64 * f64::from(w) / f64::from(total);
            let got = won[i] as f64;
            assert!(
                (got - want).abs() <= 0.02 * want,
                "node {i} (weight {w}): {got} names, want {want:.0} ± 2 %"
            );
        }
    }

    /// `testdata/hrw_weighted.json`: weighted placements as this code computes them, which the
    /// Python SDK's test (`python/tests/test_hrw.py`) checks its own implementation against.
    /// `GRIST_WRITE_GOLDEN=1` rewrites the file.
    #[test]
    fn weighted_vectors_match_the_committed_file() {
        let sets: [&[(&str, u32)]; 3] = [
            &[("t1", 100), ("t2", 100), ("t3", 300)],
            &[("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5)],
            &[("big", 16384), ("small", 512), ("mid", 4096), ("x", 100)],
        ];
        let mut cases = Vec::new();
        for set in sets {
            let nodes: Vec<(u64, u32)> = set.iter().map(|(id, w)| (digest(id), *w)).collect();
            for i in 0..200 {
                let uname = format!("ais/@#/bkt/obj-{i}");
                let d = digest(&uname);
                let ranked: Vec<&str> = rank_weighted(d, nodes.iter().copied())
                    .into_iter()
                    .map(|j| set[j].0)
                    .collect();
                assert_eq!(
                    set[pick_weighted(d, nodes.iter().copied()).unwrap()].0,
                    ranked[0]
                );
                cases.push(serde_json::json!({
                    "nodes": set.iter().map(|(id, w)| serde_json::json!([id, w])).collect::<Vec<_>>(),
                    "uname": uname,
                    "ranked": ranked,
                }));
            }
        }
        let doc = serde_json::to_string(&serde_json::json!({ "cases": cases })).unwrap();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/hrw_weighted.json");
        if std::env::var_os("GRIST_WRITE_GOLDEN").is_some() {
            std::fs::write(path, format!("{doc}\n")).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(path).unwrap().trim_end(),
            doc,
            "weighted placement changed"
        );
    }

    #[test]
    fn empty_has_no_owner() {
        assert_eq!(pick(1, std::iter::empty()), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Adding a target to N moves about 1/(N+1) of the names, all of them to the new target.
        #[test]
        fn adding_a_node_moves_only_its_share(n in 1usize..12, seed in proptest::prelude::any::<u64>()) {
            let ids: Vec<String> = (0..=n).map(|i| format!("t{seed:x}-{i}")).collect();
            let before: Vec<u64> = ids[..n].iter().map(|i| digest(i)).collect();
            let after: Vec<u64> = ids.iter().map(|i| digest(i)).collect();
            let names = 4000;
            let mut moved = 0;
            for k in 0..names {
                let d = digest(&format!("ais/@#/bucket/{seed}/{k}"));
                let old = pick(d, before.iter().copied()).unwrap();
                let new = pick(d, after.iter().copied()).unwrap();
                if old != new {
                    proptest::prop_assert_eq!(new, n, "a name moved between two old nodes");
                    moved += 1;
                }
            }
            let expected = names as f64 / (n + 1) as f64;
            let tolerance = 4.0 * (expected * (1.0 - 1.0 / (n + 1) as f64)).sqrt() + 1.0;
            proptest::prop_assert!(
                (moved as f64 - expected).abs() <= tolerance,
                "moved {} of {}, expected ~{:.0} (±{:.0})", moved, names, expected, tolerance
            );
        }
    }
}
