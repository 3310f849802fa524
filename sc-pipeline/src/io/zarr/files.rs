//! The files of a zarr store being written, as `zarrs`' `FilesystemStore` writes them but
//! without its `fsync` after every file. That one waits for the disk on each 8 MiB chunk while
//! thousands queue behind it: writing 1 M cells' X and `.raw` to the GPU machine's disk took
//! 10.3-14.8 s, and the small rest of the store 1.4-4.7 s against the h5ad writer's 0.65
//! (`benches/RESULTS.md` (h)). Like the h5ad writer (and anndata), the store is left to the
//! kernel's write-back; a failed write(2), such as a full disk, is still an error, and the store
//! only takes its name once whole ([`crate::io::StagedFile`]).

use std::sync::Arc;
use zarrs::filesystem::FilesystemStore;
use zarrs::storage::byte_range::ByteRangeIterator;
use zarrs::storage::{
    Bytes, MaybeBytesIterator, OffsetBytesIterator, ReadableStorageTraits, StorageError, StoreKey,
    StorePrefix, WritableStorageTraits,
};

/// A store's files under its directory, written whole and left to write-back.
pub(crate) struct UnsyncedFiles {
    /// Maps keys to paths, and serves the rarer writes (partial ones, erasures).
    store: Arc<FilesystemStore>,
}

impl UnsyncedFiles {
    pub(crate) fn new(store: Arc<FilesystemStore>) -> UnsyncedFiles {
        UnsyncedFiles { store }
    }
}

impl WritableStorageTraits for UnsyncedFiles {
    fn set(&self, key: &StoreKey, value: Bytes) -> Result<(), StorageError> {
        let path = self.store.key_to_fspath(key);
        if let Some(parent) = path.parent() {
            if !parent.exists() {
                std::fs::create_dir_all(parent)?;
            }
        }
        std::fs::write(path, &value)?;
        Ok(())
    }

    fn set_partial_many(
        &self,
        key: &StoreKey,
        offset_values: OffsetBytesIterator,
    ) -> Result<(), StorageError> {
        self.store.set_partial_many(key, offset_values)
    }

    fn erase(&self, key: &StoreKey) -> Result<(), StorageError> {
        self.store.erase(key)
    }

    fn erase_prefix(&self, prefix: &StorePrefix) -> Result<(), StorageError> {
        self.store.erase_prefix(prefix)
    }

    fn supports_set_partial(&self) -> bool {
        self.store.supports_set_partial()
    }
}

/// Reads (zarrs' partial chunk writes read the chunk first) go to the file system store.
impl ReadableStorageTraits for UnsyncedFiles {
    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        self.store.get_partial_many(key, byte_ranges)
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        self.store.size_key(key)
    }

    fn supports_get_partial(&self) -> bool {
        self.store.supports_get_partial()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key's bytes land in its file (folders made as needed, a second write replaces the
    /// first), and erasing removes it.
    #[test]
    fn writes_files_whole_and_erases_them() {
        let dir = std::env::temp_dir().join(format!("unsynced-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = UnsyncedFiles::new(Arc::new(FilesystemStore::new(&dir).unwrap()));
        let key = StoreKey::new("a/b/c/0.0").unwrap();
        files
            .set(&key, Bytes::from_static(b"longer bytes"))
            .unwrap();
        files.set(&key, Bytes::from_static(b"short")).unwrap();
        assert_eq!(std::fs::read(dir.join("a/b/c/0.0")).unwrap(), b"short");
        files.erase(&key).unwrap();
        assert!(!dir.join("a/b/c/0.0").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
