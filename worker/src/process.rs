//! Process control the daemon, its workers and the benchmarks need:
//! signals to child processes, the worker's parent-death signal, a flag
//! raised by SIGINT/SIGTERM, CPU pinning. The only `unsafe` of the daemon
//! lives here.

use std::io;

/// Sends `sig` to process `pid`.
///
/// Callers pass only children they have not reaped yet, so the pid cannot
/// have been reused by an unrelated process.
pub fn send_signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
    // SAFETY: kill(2) has no memory-safety preconditions; pid > 0 names one
    // process (never a group), an unreaped child of ours (see above).
    let r = unsafe { libc::kill(pid, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to send `sig` to this process when the thread that
/// started it exits, and checks that `parent` (the expected parent pid) is
/// still the parent, closing the race where it died before the request.
pub fn die_with_parent(sig: libc::c_int, parent: u32) -> io::Result<()> {
    let sig = libc::c_ulong::try_from(sig)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad signal number"))?;
    // SAFETY: PR_SET_PDEATHSIG takes a signal number by value and touches no
    // memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig, 0, 0, 0) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if std::os::unix::process::parent_id() != parent {
        return Err(io::Error::other(format!("parent process {parent} is gone")));
    }
    Ok(())
}

/// Makes this process's timed sleeps wake as close to their deadline as
/// the kernel allows (timer slack 1 ns instead of the default 50 µs). A
/// worker measures GPU time as issue-to-end-of-synchronisation, and
/// synchronisation may sleep until the work is done, so the slack would be
/// charged to its VM. Failure only costs precision, so it is logged.
pub fn precise_sleeps() {
    // SAFETY: PR_SET_TIMERSLACK takes a value by value and touches no
    // memory of ours.
    let r = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "cannot lower the timer slack");
    }
}

/// Flags that become true on SIGINT or SIGTERM.
pub fn shutdown_flag() -> io::Result<std::sync::Arc<std::sync::atomic::AtomicBool>> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone())?;
    }
    Ok(flag)
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    pin_to_cpus(&[cpu])
}

/// Restricts the calling thread (and what it starts later) to `cpus`.
/// Allocates nothing, so it may run between fork and exec.
pub fn pin_to_cpus(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "cpu index too large",
            ));
        }
        // SAFETY: cpu < CPU_SETSIZE (checked), so CPU_SET stays inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t.
    let r = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Ends this process at once with `code`, running no exit handlers and no
/// destructors. For a worker whose GPU holds a kernel that never ends: the
/// CUDA driver's own teardown (`cuCtxDestroy`, its exit handlers) would
/// wait for that kernel forever, while the kernel ends when the process
/// does. Flushes nothing: log lines are written unbuffered.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process; it has no memory-safety
    // preconditions and never returns.
    unsafe { libc::_exit(code) }
}
