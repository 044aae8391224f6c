//! This machine's pool, which local attempts reserve from: its cores, memory and GPUs.

use crate::executor::Capacity;

/// The GPUs of this machine, by index, as `nvidia-smi` lists them (none without it).
pub fn gpus() -> Vec<u32> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index", "--format=csv,noheader"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// This machine's pool: its cores, memory and GPUs.
pub fn capacity() -> Capacity {
    let (millicpu, memory) = cpu_memory();
    Capacity {
        millicpu,
        memory,
        gpus: gpus(),
    }
}

/// Thousandths of a core and bytes of memory (`/proc/meminfo`; unknown: a very large pool).
fn cpu_memory() -> (i64, i64) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) as i64;
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<i64>().ok())
        })
        .map_or(i64::MAX / 4, |kb| kb.saturating_mul(1024));
    (cores * 1000, mem)
}
