//! The cluster map ("Smap" in AIStore): which proxies and targets exist, their URLs and flags,
//! who is primary, and a version. Serialized exactly as AIStore does, so the `aistore` SDK can
//! read ours and route objects straight to targets.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hrw;

/// Node roles, as AIStore names them in `daemon_type`.
pub const PROXY: &str = "proxy";
pub const TARGET: &str = "target";

/// Node flag: in maintenance (AIStore bit 2). Excluded from placement.
pub const FLAG_MAINTENANCE: u64 = 1 << 2;
/// Node flag: being decommissioned (AIStore bit 3). Excluded from placement.
pub const FLAG_DECOMMISSION: u64 = 1 << 3;
/// Node flag: restarting (set together with [`FLAG_MAINTENANCE`], so clients that know only
/// AIStore's bits route around it too). Requests skip it as they skip a node in maintenance,
/// but nothing moves: its objects stay where they are, writes meant for it land on the next
/// HRW target as *hinted* copies, and those move back when it re-joins (which clears the
/// flag). Not an AIStore bit.
pub const FLAG_RESTARTING: u64 = 1 << 12;
/// Node flag: restarting because it went silent (the failure detector's suspect), not because
/// an operator said so. Not an AIStore bit.
pub const FLAG_SUSPECT: u64 = 1 << 13;
/// Every flag of a restarting target, cleared together when it is back.
pub const RESTARTING_FLAGS: u64 = FLAG_MAINTENANCE | FLAG_RESTARTING | FLAG_SUSPECT;

/// One network endpoint of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetInfo {
    #[serde(default)]
    pub node_hostname: String,
    #[serde(default)]
    pub daemon_port: String,
    /// Full base URL, e.g. `http://127.0.0.1:8081`.
    #[serde(default)]
    pub direct_url: String,
}

/// One node of the cluster (AIStore's `Snode`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub daemon_id: String,
    pub daemon_type: String,
    pub public_net: NetInfo,
    #[serde(default)]
    pub intra_control_net: NetInfo,
    #[serde(default)]
    pub intra_data_net: NetInfo,
    #[serde(default)]
    pub flags: u64,
    /// `xxhash64(daemon_id)`: the node's HRW digest. Clients use it as sent.
    #[serde(default)]
    pub id_digest: u64,
    /// The map version that last added this node (0: not known). A target that finds its own
    /// entry newer than the last map it held with itself in it was out of the cluster in
    /// between, however briefly, and checks its copies before serving them. (Not an AIStore
    /// field; omitted while 0.)
    #[serde(default, skip_serializing_if = "is_zero")]
    pub member_since: u64,
    /// A target's capacity weight for placement (0: unset, [`hrw::DEFAULT_WEIGHT`]). Targets
    /// of unequal weights own shares of the objects in proportion (weighted rendezvous);
    /// with all weights equal placement is AIStore's. (Not an AIStore field; omitted while 0.)
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub weight: u32,
}

impl Node {
    /// A node reachable at `url` (all three networks share it).
    pub fn new(id: &str, role: &str, url: &str) -> Self {
        let (host, port) = host_port(url);
        let net = NetInfo {
            node_hostname: host,
            daemon_port: port,
            direct_url: url.trim_end_matches('/').to_owned(),
        };
        Self {
            daemon_id: id.to_owned(),
            daemon_type: role.to_owned(),
            public_net: net.clone(),
            intra_control_net: net.clone(),
            intra_data_net: net,
            flags: 0,
            id_digest: hrw::digest(id),
            member_since: 0,
            weight: 0,
        }
    }

    /// The weight placement uses: the stated one, else [`hrw::DEFAULT_WEIGHT`].
    pub fn placement_weight(&self) -> u32 {
        if self.weight == 0 {
            hrw::DEFAULT_WEIGHT
        } else {
            self.weight
        }
    }

    fn placement(&self) -> (u64, u32) {
        (self.id_digest, self.placement_weight())
    }

    /// The node as placement sees it: its id, and `@weight` when that is not the default.
    /// Two maps whose active targets have equal placement ids place every object alike.
    pub fn placement_id(&self) -> String {
        match self.placement_weight() {
            hrw::DEFAULT_WEIGHT => self.daemon_id.clone(),
            w => format!("{}@{w}", self.daemon_id),
        }
    }

    pub fn url(&self) -> &str {
        &self.public_net.direct_url
    }

    /// Excluded from placement (maintenance or decommission).
    pub fn is_inactive(&self) -> bool {
        self.flags & (FLAG_MAINTENANCE | FLAG_DECOMMISSION) != 0
    }

    /// Restarting ([`FLAG_RESTARTING`]): inactive for requests, still an owner of what it holds.
    pub fn is_restarting(&self) -> bool {
        self.flags & FLAG_RESTARTING != 0
    }
}

fn host_port(url: &str) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or("");
    match authority.rsplit_once(':') {
        Some((h, p)) => (h.to_owned(), p.to_owned()),
        None => (authority.to_owned(), String::new()),
    }
}

/// The cluster map. Immutable once published; every change makes a new version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    pub tmap: BTreeMap<String, Node>,
    pub pmap: BTreeMap<String, Node>,
    pub proxy_si: Node,
    pub version: u64,
    pub uuid: String,
    #[serde(default)]
    pub creation_time: String,
    /// Term: never below the Raft term of the proxies' leader that made this version (nor below
    /// the previous map's). Maps order by (term, version), which is their order in the
    /// proxies' committed log, so a node can refuse anything older than what it holds. (Not
    /// an AIStore field; omitted while 0.)
    #[serde(default, skip_serializing_if = "is_zero")]
    pub term: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

impl ClusterMap {
    /// A new cluster with one (primary) proxy.
    pub fn new(primary: Node, uuid: String, creation_time: String) -> Self {
        let mut pmap = BTreeMap::new();
        pmap.insert(primary.daemon_id.clone(), primary.clone());
        Self {
            tmap: BTreeMap::new(),
            pmap,
            proxy_si: primary,
            version: 1,
            uuid,
            creation_time,
            term: 0,
        }
    }

    /// Whether this map is newer than `other`: by term first, then version.
    pub fn supersedes(&self, other: &ClusterMap) -> bool {
        (self.term, self.version) > (other.term, other.version)
    }

    /// Nodes (proxies and targets) in the map.
    pub fn node_count(&self) -> usize {
        self.pmap.len() + self.tmap.len()
    }

    /// A strict majority of the map's nodes.
    pub fn majority(&self) -> usize {
        self.node_count() / 2 + 1
    }

    /// What placement depends on: the active targets' placement ids ([`Node::placement_id`]).
    /// A map change that alters it moves objects.
    pub fn active_placement(&self) -> Vec<String> {
        self.active_targets().map(Node::placement_id).collect()
    }

    /// Targets eligible for placement, in id order.
    pub fn active_targets(&self) -> impl Iterator<Item = &Node> + Clone {
        self.tmap.values().filter(|n| !n.is_inactive())
    }

    /// The target owning the object with this uname.
    pub fn owner(&self, uname: &str) -> Option<&Node> {
        // Two passes over the map rather than a Vec of it: this runs for every request.
        let d = hrw::digest(crate::name::placement_name(uname));
        let i = hrw::pick_weighted(d, self.active_targets().map(Node::placement))?;
        self.active_targets().nth(i)
    }

    /// The first `n` targets for an object in HRW order (owner first): replica placement.
    pub fn owners(&self, uname: &str, n: usize) -> Vec<&Node> {
        rank_among(self.active_targets().collect(), uname, n)
    }

    /// Like [`ClusterMap::owners`], with restarting targets counted as active: where the
    /// object's copies belong once they are back (a write that skipped one of them left a
    /// hinted copy elsewhere).
    pub fn owners_counting_restarting(&self, uname: &str, n: usize) -> Vec<&Node> {
        let targets = self
            .tmap
            .values()
            .filter(|t| !t.is_inactive() || t.is_restarting())
            .collect();
        rank_among(targets, uname, n)
    }

    /// Whether any target is restarting.
    pub fn has_restarting(&self) -> bool {
        self.tmap.values().any(Node::is_restarting)
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.tmap.get(id).or_else(|| self.pmap.get(id))
    }

    pub fn is_primary(&self, id: &str) -> bool {
        self.proxy_si.daemon_id == id
    }
}

/// The first `n` of `targets` for an object in HRW order.
fn rank_among<'a>(targets: Vec<&'a Node>, uname: &str, n: usize) -> Vec<&'a Node> {
    let d = hrw::digest(crate::name::placement_name(uname));
    hrw::rank_weighted(d, targets.iter().map(|t| t.placement()))
        .into_iter()
        .take(n)
        .map(|i| targets[i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_aistores() {
        let mut m = ClusterMap::new(
            Node::new("p1", PROXY, "http://127.0.0.1:8080"),
            "u".into(),
            "now".into(),
        );
        m.tmap.insert(
            "t1".into(),
            Node::new("t1", TARGET, "http://127.0.0.1:8081"),
        );
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["tmap"]["t1"]["public_net"]["daemon_port"], "8081");
        assert_eq!(v["tmap"]["t1"]["public_net"]["node_hostname"], "127.0.0.1");
        assert_eq!(v["tmap"]["t1"]["id_digest"], hrw::digest("t1"));
        assert_eq!(v["proxy_si"]["daemon_type"], "proxy");
        assert_eq!(m.owner("ais/@#/b/o").unwrap().daemon_id, "t1");
    }
}
