//! S3 versions of an object on this target: one version's record, the noncurrent versions
//! and delete markers, and deleting a version for good (Object Lock checked in the index
//! transaction; see [`index::LockCheck`]).

use super::*;

impl Store {
    /// The record of one version of an object (versioned buckets): the current record if it
    /// has that id, else the noncurrent version or delete marker with it (under its stored
    /// name). NoSuchVersion (404) when there is none.
    pub fn find_version(&self, bck: &Bck, name: &str, id: &str) -> Result<ObjectMeta, StoreError> {
        if let Some((_, m)) = self.locate(bck, name)?
            && index::version_id(&m) == id
        {
            return Ok(m);
        }
        let bucket = bck.uname();
        for mp in self.lookup_order(bck, name) {
            if let Some(m) = mp
                .index
                .versions(&bucket, name)?
                .into_iter()
                .find(|m| index::version_id(m) == id)
            {
                return Ok(m);
            }
        }
        Err(no_such_version(bck, name, id))
    }

    /// The noncurrent versions and delete markers of an object here, newest first.
    pub fn versions(&self, bck: &Bck, name: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let bucket = bck.uname();
        let mut all = Vec::new();
        for mp in self.lookup_order(bck, name) {
            all.extend(mp.index.versions(&bucket, name)?);
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.dedup_by(|later, first| later.name == first.name);
        Ok(all)
    }

    /// Deletes one version of an object for good (versioned buckets); answers with it and,
    /// when a noncurrent version became current again, that record. With `lock`, a version
    /// Object Lock protects is refused (403) and stays.
    pub async fn delete_version(
        &self,
        bck: &Bck,
        name: &str,
        id: &str,
        lock: Option<index::LockCheck>,
    ) -> Result<(ObjectMeta, Option<ObjectMeta>), StoreError> {
        let bucket = bck.uname();
        // Which version becomes current again is decided among all of the object's records;
        // while a resilver has them on two mountpaths, each would decide alone (two current
        // records, or none), so wait until they are together.
        if self.held_off_its_mountpath(bck, name, true)? {
            return Err(StoreError::Api(gristmill_core::ApiError::unavailable(
                format!(
                    "{bck}/{name}: its versions are still being moved between mountpaths; retry"
                ),
            )));
        }
        let mut outcome = None;
        // Every mountpath: a resilver in progress may still hold a copy elsewhere, which it
        // would otherwise move back.
        for mp in self.lookup_order(bck, name) {
            let applied = mp
                .index
                .apply(IndexOp::DeleteVersion {
                    bucket: bucket.clone(),
                    name: name.to_owned(),
                    version_id: id.to_owned(),
                    lock,
                })
                .await?;
            if let Some(why) = applied.locked {
                return Err(StoreError::Api(gristmill_core::ApiError::new(
                    gristmill_core::ErrorKind::Forbidden,
                    format!("{bck}/{name} version {id}: {why}"),
                )));
            }
            if applied.unmet.is_some() {
                continue;
            }
            for old in &applied.freed {
                remove_data_file(&mp, &old.file).await;
                self.usage.account(&old.bucket, None, Some(old));
            }
            if applied.stored.is_some() {
                // The newest remaining version became current again.
                self.usage.moved_current(&bucket, true);
            }
            if outcome.is_none()
                && let Some(removed) = applied.freed.into_iter().next()
            {
                outcome = Some((removed, applied.stored));
            }
        }
        outcome.ok_or_else(|| no_such_version(bck, name, id))
    }

    /// The highest generation among an object's noncurrent versions and delete markers here.
    pub fn versions_gen(&self, bck: &Bck, name: &str) -> Result<u64, StoreError> {
        let bucket = bck.uname();
        let mut generation = 0;
        for mp in self.lookup_order(bck, name) {
            generation = generation.max(mp.index.versions_gen(&bucket, name)?);
        }
        Ok(generation)
    }
}

fn no_such_version(bck: &Bck, name: &str, id: &str) -> StoreError {
    StoreError::Api(gristmill_core::ApiError::new(
        gristmill_core::ErrorKind::NoSuchVersion,
        format!("object {bck}/{name} has no version {id}"),
    ))
}
