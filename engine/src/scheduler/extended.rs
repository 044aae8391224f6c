//! Extended resources: countable resources beside GPU, CPU and memory, named as Kubernetes
//! names them (`nvidia.com/mig-1g.10gb`, `example.com/fpga`), scheduled, placed, quota'd and
//! priced like GPUs.
//!
//! [`Res`](super::Res) keeps their amounts in a fixed array of [`SLOTS`], so that it stays
//! `Copy` and its arithmetic stays a handful of instructions in the cycle's hot loops. This
//! table gives each name its slot for the whole process: a `Res` is then printed in reasons
//! (`2 nvidia.com/mig-1g.10gb`) without its Cluster at hand, and every part of the engine
//! (cycle, store, executor, usage) reads a name's slot alike. A Cluster naming more than
//! [`SLOTS`] extended resources is refused by its decoder.

use std::sync::RwLock;

/// How many distinct extended resources one process schedules.
pub const SLOTS: usize = 4;

static NAMES: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// An amount as [`Res`](super::Res) keeps it: `u32`, saturating (`u32::MAX` reads as no
/// limit in a quota, which no count of real devices reaches).
pub fn amount(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The slot of `name`, given one if it has none yet; None when every slot is taken.
pub fn slot(name: &str) -> Option<usize> {
    if let Some(i) = lookup(name) {
        return Some(i);
    }
    let mut names = NAMES.write().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(i);
    }
    if names.len() >= SLOTS {
        return None;
    }
    names.push(name.to_owned());
    Some(names.len() - 1)
}

/// The slot of `name`, if it has one.
pub fn lookup(name: &str) -> Option<usize> {
    let names = NAMES.read().unwrap_or_else(|e| e.into_inner());
    names.iter().position(|n| n == name)
}

/// The name in slot `i`.
pub fn name(i: usize) -> Option<String> {
    let names = NAMES.read().unwrap_or_else(|e| e.into_inner());
    names.get(i).cloned()
}

/// The names Kubernetes gives whole GPUs, which sluice counts as `gpu`.
pub const GPU_NAMES: [&str; 2] = ["nvidia.com/gpu", "amd.com/gpu"];

/// Whether `key` names an extended resource: `DOMAIN/NAME`, as Kubernetes requires of them
/// (letters, digits, `-`, `_`, `.`; the name starts and ends with a letter or digit), other
/// than whole GPUs ([`GPU_NAMES`]).
pub fn is_name(key: &str) -> bool {
    if GPU_NAMES.contains(&key) {
        return false;
    }
    let Some((domain, name)) = key.split_once('/') else {
        return false;
    };
    let part = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    part(domain) && domain.contains('.') && part(name) && name.len() <= 63
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_domain_slash_name() {
        assert!(is_name("nvidia.com/mig-1g.10gb"));
        assert!(is_name("example.com/fpga"));
        assert!(!is_name("gpu"));
        assert!(!is_name("nvidia.com/gpu"));
        assert!(!is_name("nvidia/mig"));
        assert!(!is_name("nvidia.com/"));
        assert!(!is_name("nvidia.com/-mig"));
        assert!(!is_name("nvidia.com/mig 1g"));
    }

    #[test]
    fn a_name_keeps_its_slot() {
        let a = slot("test.sluice.dev/a").expect("a free slot");
        assert_eq!(slot("test.sluice.dev/a"), Some(a));
        assert_eq!(lookup("test.sluice.dev/a"), Some(a));
        assert_eq!(name(a).as_deref(), Some("test.sluice.dev/a"));
        assert_eq!(lookup("test.sluice.dev/never-named"), None);
    }
}
