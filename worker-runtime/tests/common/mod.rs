//! What the runtime's integration tests share.

use std::path::PathBuf;

/// A fresh folder for one test (`sluice-TAG-PID-NANOS` under the temp folder, with an empty
/// `attempt/` in it), removed when dropped.
pub struct Tmp(pub PathBuf);

impl Tmp {
    pub fn new(tag: &str) -> Tmp {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!("sluice-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(p.join("attempt")).expect("temp dir");
        Tmp(p)
    }

    /// The attempt's folder.
    #[allow(dead_code)]
    pub fn dir(&self) -> PathBuf {
        self.0.join("attempt")
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
