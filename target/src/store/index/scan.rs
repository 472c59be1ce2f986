//! Enumeration in key order with a cursor: a walk that reads a bounded page at a time, so
//! what walks the whole index (rebalance) holds one page in memory, not the index.

use super::{Hidden, OBJECTS, ObjectIndex};
use crate::store::error::StoreError;
use crate::store::meta::ObjectMeta;

impl ObjectIndex {
    /// Up to `max` records whose keys sort strictly after `after` (from the first with
    /// `None`), in key order, each with its key. Every record, version slots included, as
    /// [`ObjectIndex::for_each`] yields them. Blocking.
    pub fn scan_after(
        &self,
        after: Option<&[u8]>,
        max: usize,
    ) -> Result<Vec<(Vec<u8>, ObjectMeta)>, StoreError> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(OBJECTS)?;
        let hidden = Hidden::of(&tx)?;
        let range = match after {
            Some(key) => table
                .range::<&[u8]>((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded))?,
            None => table.range::<&[u8]>(..)?,
        };
        let mut out = Vec::new();
        for item in range {
            if out.len() == max {
                break;
            }
            let (k, v) = item?;
            if !hidden.hides(k.value())? {
                out.push((k.value().to_vec(), ObjectMeta::decode(v.value())?));
            }
        }
        Ok(out)
    }
}
