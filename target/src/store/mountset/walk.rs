//! The resilver's walk: every index, a page at a time, for objects not on their HRW
//! mountpath. Memory holds one page whatever the object count; a move drops the record from
//! the source index, so a walk after a crash finds only what is left to move.

use std::sync::Arc;

use super::Misplaced;
use crate::store::Store;
use crate::store::error::StoreError;

/// Records read per page.
const PAGE: usize = 1024;

/// Where a walk stands: a mountpath's position in the set, and the last key read there.
#[derive(Debug, Clone, Default)]
pub struct WalkCursor {
    mountpath: usize,
    after: Option<Vec<u8>>,
}

impl Store {
    /// The misplaced objects among the next page of records from `cursor` (possibly none),
    /// and where to go on from (`None`: every index was walked). Off the runtime.
    pub async fn misplaced_page(
        &self,
        cursor: WalkCursor,
    ) -> Result<(Vec<Misplaced>, Option<WalkCursor>), StoreError> {
        let set = self.set();
        tokio::task::spawn_blocking(move || {
            let mps: Vec<_> = set.all().cloned().collect();
            let mut c = cursor;
            while let Some(mp) = mps.get(c.mountpath) {
                let page = mp.index.scan_after(c.after.as_deref(), PAGE)?;
                let Some((last, _)) = page.last() else {
                    c = WalkCursor {
                        mountpath: c.mountpath + 1,
                        after: None,
                    };
                    continue;
                };
                c.after = Some(last.clone());
                let out = page
                    .into_iter()
                    .filter_map(|(_, meta)| {
                        let to = set.owner(&meta.bucket, &meta.name);
                        (!Arc::ptr_eq(to, mp)).then(|| Misplaced {
                            from: mp.clone(),
                            to: to.clone(),
                            meta,
                        })
                    })
                    .collect();
                return Ok((out, Some(c)));
            }
            Ok((Vec::new(), None))
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?
    }

    /// Every misplaced object at once (tests; the resilver walks by page).
    #[cfg(test)]
    pub async fn misplaced(&self) -> Result<Vec<Misplaced>, StoreError> {
        let (mut out, mut cursor) = (Vec::new(), Some(WalkCursor::default()));
        while let Some(c) = cursor {
            let (page, next) = self.misplaced_page(c).await?;
            out.extend(page);
            cursor = next;
        }
        Ok(out)
    }
}
