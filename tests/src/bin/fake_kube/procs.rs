//! Signals to a container's processes.
//!
//! Each container's program is started in a process group of its own (its pid is the group's
//! id, as PID 1 of a container would be). SIGTERM goes to that process only, as a kubelet
//! signals PID 1; a kill takes the whole tree: the group, and every descendant found through
//! the parent pids in `/proc/*/stat` (a descendant may have left the group).

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// (pid, parent pid, process group) of every process, from `/proc/*/stat`.
fn table() -> Vec<(i32, i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `PID (COMM) STATE PPID PGRP ...`: COMM may hold spaces and parentheses.
            let (_, rest) = stat.rsplit_once(')')?;
            let mut f = rest.split_whitespace();
            let state = f.next()?;
            if state == "Z" || state == "X" {
                return None;
            }
            let ppid = f.next()?.parse().ok()?;
            let pgrp = f.next()?.parse().ok()?;
            Some((pid, ppid, pgrp))
        })
        .collect()
}

/// Every live process below `root`, and every one in its process group.
pub fn tree(root: i32) -> Vec<i32> {
    let all = table();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        for &(pid, ppid, _) in &all {
            if ppid == parent && !found.contains(&pid) {
                found.push(pid);
            }
        }
        i += 1;
    }
    for &(pid, _, pgrp) in &all {
        if pgrp == root && !found.contains(&pid) {
            found.push(pid);
        }
    }
    found
}

/// SIGTERM to the process alone.
pub fn term(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
}

/// SIGKILL to the whole tree of `root` (a few rounds, for children forked meanwhile).
pub fn kill_tree(root: i32) {
    for _ in 0..3 {
        let pids = tree(root);
        let _ = killpg(Pid::from_raw(root), Signal::SIGKILL);
        for pid in &pids {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        if pids.len() <= 1 {
            break;
        }
    }
}
