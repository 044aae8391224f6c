//! Times checkpoint syncs and a restore against an object store, for `bench/checkpoint_sync.sh`.
//!
//! `checkpoint_bench URL PREFIX DIR CHANGED RESTORE_DIR`: syncs DIR (first sync: every file),
//! rewrites the file CHANGED in DIR (atomically, same size, new bytes), syncs again (only that
//! file), restores the newest checkpoint into RESTORE_DIR, and prints one line of seconds:
//! `first=.. second=.. restore=.. files=.. bytes=..`. S3 is configured from the environment.

use std::time::Instant;

use sluice_runtime::checkpoint::Checkpoints;
use sluice_runtime::objects::Objects;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, prefix, dir, changed, restore] = args.as_slice() else {
        return Err("usage: checkpoint_bench URL PREFIX DIR CHANGED RESTORE_DIR".into());
    };
    let dir = std::path::Path::new(dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let objects = Objects::open(url)?;
    rt.block_on(async {
        let mut c = Checkpoints::open(objects.clone(), prefix, 3).await?;
        let t = Instant::now();
        c.sync(dir).await?.ok_or("the first sync wrote nothing")?;
        let first = t.elapsed().as_secs_f64();

        let path = dir.join(changed);
        let len = std::fs::metadata(&path)?.len() as usize;
        // New bytes every run (the same folder serves several stores).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(7, |d| d.subsec_nanos());
        let bytes: Vec<u8> = (0..len)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as u8)
            .collect();
        let tmp = path.with_extension("tmp-bench");
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, &path)?;
        let t = Instant::now();
        c.sync(dir).await?.ok_or("the second sync wrote nothing")?;
        let second = t.elapsed().as_secs_f64();

        let mut r = Checkpoints::open(objects, prefix, 3).await?;
        let t = Instant::now();
        r.restore(std::path::Path::new(restore)).await?;
        let restore_s = t.elapsed().as_secs_f64();
        let m = r.latest().ok_or("no checkpoint to restore")?;
        let total: u64 = m.files.values().map(|f| f.size).sum();
        println!(
            "first={first:.3} second={second:.3} restore={restore_s:.3} files={} bytes={total}",
            m.files.len()
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
