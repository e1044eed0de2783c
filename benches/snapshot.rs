//! `scripts/bench-snapshot.sh` runs this: the cost of executing exactly the
//! bytes that were hashed. For executables of 35 KiB (`/bin/true`), 6 MiB
//! and 256 MiB (`/bin/true` padded with zeros: still a valid ELF), it times
//! `identity::open_executable` hashing only (what `approve` does, and what
//! `run` did before the sealed copy) against hashing while copying into a
//! sealed memfd (what `run` does), interleaved, warm page cache, medians.
//!
//! Usage: cargo bench --bench snapshot -- [REPS]

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use governed_runner::gate::identity::{self, Snapshot, CLEAN_PATH};

fn make_exe(dir: &Path, name: &str, size: u64) -> String {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    let base = std::fs::read("/bin/true").unwrap();
    f.write_all(&base).unwrap();
    if size > base.len() as u64 {
        f.set_len(size).unwrap();
        // Real bytes, not holes: a sparse file would hash faster than a
        // real executable's pages.
        let zeros = vec![0u8; 1 << 20];
        let mut left = size - base.len() as u64;
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(base.len() as u64)).unwrap();
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n]).unwrap();
            left -= n as u64;
        }
    }
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let reps: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "35 KiB (/bin/true)",
            std::fs::metadata("/bin/true").unwrap().len(),
        ),
        ("6 MiB", 6 << 20),
        ("256 MiB", 256 << 20),
    ];
    println!("| executable | hash only | hash + copy into a sealed memfd | added | ratio |");
    println!("|---|---|---|---|---|");
    for (i, (label, size)) in cases.iter().enumerate() {
        let exe = make_exe(dir.path(), &format!("exe{i}"), *size);
        let n = if *size > (64 << 20) {
            reps.min(15)
        } else {
            reps
        };
        let mut plain = Vec::with_capacity(n);
        let mut sealed = Vec::with_capacity(n);
        for _ in 0..n + 1 {
            let t = Instant::now();
            let a = identity::open_executable(
                &exe,
                CLEAN_PATH,
                dir.path(),
                1 << 30,
                Snapshot::HashOnly,
            )
            .unwrap();
            plain.push(t.elapsed());
            let t = Instant::now();
            let b =
                identity::open_executable(&exe, CLEAN_PATH, dir.path(), 1 << 30, Snapshot::Take)
                    .unwrap();
            sealed.push(t.elapsed());
            assert_eq!(a.identity.sha256, b.identity.sha256);
            assert!(b.snapshot.is_some());
        }
        // The first pair warms the page cache.
        plain.remove(0);
        sealed.remove(0);
        let (p, s) = (median(plain), median(sealed));
        println!(
            "| {label} | {:.3} ms | {:.3} ms | {:+.3} ms | {:.2}x |",
            p.as_secs_f64() * 1e3,
            s.as_secs_f64() * 1e3,
            (s.as_secs_f64() - p.as_secs_f64()) * 1e3,
            s.as_secs_f64() / p.as_secs_f64()
        );
    }
}
