//! A workspace file's size and SHA-256, and whether it contains a needle,
//! read in one pass: the receipt's products after the run
//! ([`receipt::products`](crate::receipt::products)) and
//! `verify`'s read-back of a `file` criterion. What a run proves about its
//! products, so it lives with the evidence (it was `gate::identity`'s, which
//! pins the executable and directories before the run).

use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Stream `file` once: its size, SHA-256, and whether `needle` occurs in it
/// (`true` when no needle is given). Memory stays bounded by the read
/// buffer plus the needle, whatever the file's size; a match may span two
/// reads.
pub(crate) fn hash_and_search(
    mut file: File,
    needle: Option<&[u8]>,
) -> std::io::Result<(u64, String, bool)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    let needle = needle.filter(|n| !n.is_empty());
    let mut found = needle.is_none();
    // The last `needle.len() - 1` bytes seen, for matches across reads.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        total += n as u64;
        if let (Some(nd), false) = (needle, found) {
            let keep = nd.len() - 1;
            let mut seam = std::mem::take(&mut carry);
            seam.extend_from_slice(&chunk[..chunk.len().min(keep)]);
            found = contains_bytes(&seam, nd) || contains_bytes(chunk, nd);
            let joined_tail = if chunk.len() >= keep {
                chunk[chunk.len() - keep..].to_vec()
            } else {
                seam[seam.len().saturating_sub(keep)..].to_vec()
            };
            carry = joined_tail;
        }
    }
    Ok((total, hex::encode(hasher.finalize()), found))
}

fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// A workspace file's size, SHA-256, and whether it contains a needle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileDigest {
    pub size: u64,
    pub sha256: String,
    pub contains: bool,
}

/// Size and SHA-256 of `rel` inside `workspace` (canonical), or `None` when
/// it is missing, not a regular file, or reached through a symlink that
/// leads out of the workspace. Used for products and their read-back.
pub(crate) fn hash_workspace_file(workspace: &Path, rel: &str) -> Option<(u64, String)> {
    read_workspace_file(workspace, rel, None).map(|d| (d.size, d.sha256))
}

/// [`hash_workspace_file`], also searching for `needle` in the same pass
/// (so the search sees exactly the bytes the digest covers).
pub(crate) fn read_workspace_file(
    workspace: &Path,
    rel: &str,
    needle: Option<&[u8]>,
) -> Option<FileDigest> {
    let canonical = fs::canonicalize(workspace.join(rel)).ok()?;
    if !canonical.starts_with(workspace) {
        return None;
    }
    let file = governed_sys::safe_io::open_regular(&canonical, false).ok()?;
    let (size, sha256, contains) = hash_and_search(file, needle).ok()?;
    Some(FileDigest {
        size,
        sha256,
        contains,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_match_spanning_two_reads_is_found() {
        let mut f = tempfile::tempfile().expect("tempfile");
        let mut bytes = vec![b'x'; 256 * 1024 - 3];
        bytes.extend_from_slice(b"NEEDLE");
        f.write_all(&bytes).expect("write");
        use std::io::Seek;
        f.rewind().expect("rewind");
        let (size, _, found) = hash_and_search(f, Some(b"NEEDLE")).expect("read");
        assert_eq!((size, found), (bytes.len() as u64, true));
    }
}
