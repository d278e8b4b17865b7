//! Facts about the machine recorded with every result, so it can be reproduced.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct System {
    pub cpu_model: String,
    /// Cores this process may run on (respects taskset / cgroups).
    pub cores: usize,
    pub kernel: String,
    /// `ulimit -n`: soft and hard limits on open files.
    pub nofile_soft: u64,
    pub nofile_hard: u64,
}

impl System {
    pub fn detect() -> System {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.to_string());
        // SAFETY: getrlimit fills the zeroed struct.
        let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
        System {
            cpu_model,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
            nofile_soft: if ok { lim.rlim_cur } else { 0 },
            nofile_hard: if ok { lim.rlim_max } else { 0 },
        }
    }
}
