//! The cores this process may run on, which a group's `pin` must name.

/// The cores this process may run on: its main thread's CPU affinity on Linux (so a
/// configuration checked on a thread already pinned to one core is not refused the
/// others), else the calling thread's, else every core up to the machine's
/// parallelism.
pub(in crate::config) fn available_cores() -> Vec<usize> {
    if let Some(cores) = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| cpus_allowed_list(&status))
    {
        return cores;
    }
    match core_affinity::get_core_ids() {
        Some(ids) if !ids.is_empty() => ids.into_iter().map(|id| id.id).collect(),
        _ => (0..std::thread::available_parallelism().map_or(1, |count| count.get())).collect(),
    }
}

/// The cores of the `Cpus_allowed_list:` line of a `/proc/<pid>/status` text
/// (`0-3,8,10-11`), if it has a well-formed one.
pub(in crate::config) fn cpus_allowed_list(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut cores = Vec::new();
    for part in list.split(',') {
        let (first, last): (usize, usize) = match part.split_once('-') {
            Some((first, last)) => (first.parse().ok()?, last.parse().ok()?),
            None => {
                let core = part.parse().ok()?;
                (core, core)
            }
        };
        if first > last || last - first > 1 << 16 {
            return None;
        }
        cores.extend(first..=last);
    }
    (!cores.is_empty()).then_some(cores)
}
