//! What the filter refuses and why, and the generator that turns that policy into BPF.
//!
//! The program checks the architecture and the x32 bit, then finds the call's rule by a binary
//! search over ranges of call numbers that share one rule (allow, refuse with an errno, or a short
//! block that checks arguments). Every leaf ends in a return.
//!
//! Why a search rather than one test per listed call: when a filter is loaded the kernel runs it
//! once for every call number to find the calls it always allows (which then skip the filter), and
//! it does so with interrupts off. Through a straight line of ~65 tests that walk cost ~80 µs on
//! every exec; through the search it is ~8 tests per number. The decisions are the same, and the
//! tests check them against the tables below for every call number.

use super::bpf::{OFFSET_ARCH, OFFSET_NR};
use super::bpf::{
    RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, SockFilter, jump_always, jump_eq, jump_ge, jump_set,
    load, offset_arg_low, ret,
};

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("cordon's seccomp filter knows the x86_64 and aarch64 system call tables only");

/// `AUDIT_ARCH_*` of the only ABI the sandbox allows (linux/audit.h).
#[cfg(target_arch = "x86_64")]
pub const NATIVE_ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
pub const NATIVE_ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64

/// The compat ABI a native process can still reach: i386 through `int 0x80` on x86_64, arm32 on
/// aarch64. Listed for the tests; the filter refuses every arch that is not [`NATIVE_ARCH`].
#[cfg(target_arch = "x86_64")]
pub const COMPAT_ARCH: u32 = 0x4000_0003; // AUDIT_ARCH_I386
#[cfg(target_arch = "aarch64")]
pub const COMPAT_ARCH: u32 = 0x4000_0028; // AUDIT_ARCH_ARM

/// On x86_64, x32 system calls arrive with the native arch and this bit set in `nr`.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `open_tree_attr(2)` (Linux 6.15), not yet in `libc`. Since 424 the numbers are shared by every
/// architecture.
const SYS_OPEN_TREE_ATTR: u32 = 467;

/// A system call number from `libc`'s table for the target.
const fn nr(number: libc::c_long) -> u32 {
    number as u32
}

/// System calls refused outright with `EPERM`, each with the reason. Most of them also need a
/// capability the sandbox never has; refusing them here as well removes their code paths from the
/// kernel attack surface reachable by hostile code, which is the point of the filter.
pub const REFUSED: &[(&str, u32)] = &[
    // Reading or writing another process's memory or fds. Everything in the sandbox runs as one
    // uid, and PID 1 (cordon's init) holds the pipe to the host: none of it may be inspected.
    ("ptrace", nr(libc::SYS_ptrace)),
    ("process_vm_readv", nr(libc::SYS_process_vm_readv)),
    ("process_vm_writev", nr(libc::SYS_process_vm_writev)),
    ("pidfd_getfd", nr(libc::SYS_pidfd_getfd)),
    ("kcmp", nr(libc::SYS_kcmp)),
    // The mount family: the root layout is final before the workload starts; new mounts could
    // uncover masked paths or the read-only git directory.
    ("mount", nr(libc::SYS_mount)),
    ("umount2", nr(libc::SYS_umount2)),
    ("pivot_root", nr(libc::SYS_pivot_root)),
    ("fsopen", nr(libc::SYS_fsopen)),
    ("fsconfig", nr(libc::SYS_fsconfig)),
    ("fsmount", nr(libc::SYS_fsmount)),
    ("fspick", nr(libc::SYS_fspick)),
    ("move_mount", nr(libc::SYS_move_mount)),
    ("open_tree", nr(libc::SYS_open_tree)),
    ("open_tree_attr", SYS_OPEN_TREE_ATTR),
    ("mount_setattr", nr(libc::SYS_mount_setattr)),
    // New namespaces: a nested user namespace hands out a full capability set again (and with it
    // mounts and much more kernel surface); `setns` would join namespaces reachable through fds.
    ("unshare", nr(libc::SYS_unshare)),
    ("setns", nr(libc::SYS_setns)),
    // The kernel keyring is shared across namespaces and a frequent source of bugs.
    ("keyctl", nr(libc::SYS_keyctl)),
    ("add_key", nr(libc::SYS_add_key)),
    ("request_key", nr(libc::SYS_request_key)),
    // eBPF programs: a large verifier attack surface.
    ("bpf", nr(libc::SYS_bpf)),
    // Performance counters: side channels and a long list of exploits.
    ("perf_event_open", nr(libc::SYS_perf_event_open)),
    // userfaultfd lets an exploit pause the kernel mid-copy to win races.
    ("userfaultfd", nr(libc::SYS_userfaultfd)),
    // io_uring performs operations without passing through this filter, and is a large surface.
    ("io_uring_setup", nr(libc::SYS_io_uring_setup)),
    ("io_uring_enter", nr(libc::SYS_io_uring_enter)),
    ("io_uring_register", nr(libc::SYS_io_uring_register)),
    // Replacing the kernel or loading code into it.
    ("kexec_load", nr(libc::SYS_kexec_load)),
    ("kexec_file_load", nr(libc::SYS_kexec_file_load)),
    ("init_module", nr(libc::SYS_init_module)),
    ("finit_module", nr(libc::SYS_finit_module)),
    ("delete_module", nr(libc::SYS_delete_module)),
    // Host-wide state: process accounting, swap, reboot, the clock.
    ("acct", nr(libc::SYS_acct)),
    ("swapon", nr(libc::SYS_swapon)),
    ("swapoff", nr(libc::SYS_swapoff)),
    ("reboot", nr(libc::SYS_reboot)),
    ("settimeofday", nr(libc::SYS_settimeofday)),
    ("clock_settime", nr(libc::SYS_clock_settime)),
    // File handles bypass path-based checks (the "shocker" container escape).
    ("open_by_handle_at", nr(libc::SYS_open_by_handle_at)),
    ("name_to_handle_at", nr(libc::SYS_name_to_handle_at)),
    // Disk quotas of host filesystems.
    ("quotactl", nr(libc::SYS_quotactl)),
    ("quotactl_fd", nr(libc::SYS_quotactl_fd)),
    // Obsolete profiling interface.
    ("lookup_dcookie", nr(libc::SYS_lookup_dcookie)),
    // The kernel log leaks kernel addresses.
    ("syslog", nr(libc::SYS_syslog)),
    // x86 legacy: loading a.out libraries, raw I/O ports, and the LDT (historic exploit surface).
    // `vm86` exists only in the i386 table, which the arch check already refuses.
    #[cfg(target_arch = "x86_64")]
    ("uselib", nr(libc::SYS_uselib)),
    #[cfg(target_arch = "x86_64")]
    ("iopl", nr(libc::SYS_iopl)),
    #[cfg(target_arch = "x86_64")]
    ("ioperm", nr(libc::SYS_ioperm)),
    #[cfg(target_arch = "x86_64")]
    ("modify_ldt", nr(libc::SYS_modify_ldt)),
];

/// `clone3` passes its flags in memory the filter cannot read, so it fails with `ENOSYS`: libc
/// then falls back to `clone`, whose flags are checked.
pub const SYS_CLONE3: u32 = nr(libc::SYS_clone3);

/// Namespace-creating `clone` flags. `CLONE_NEWTIME` (0x80) is absent on purpose: `clone(2)` reads
/// that bit as part of the exit signal (`CSIGNAL`), and only `unshare`/`clone3`, both refused, can
/// create a time namespace.
pub const CLONE_NEW_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// Terminal ioctls refused on any descriptor, since stdin may be the host's terminal: `TIOCSTI`
/// (inject input) and `TIOCLINUX` (reach the virtual console) would type commands into the user's
/// shell; `TIOCSETD` would switch the host terminal's line discipline (a denial of service, and a
/// path into line-discipline kernel code); `TIOCCONS` would redirect the console to it.
pub const REFUSED_IOCTLS: [u32; 4] = [
    libc::TIOCSTI as u32,
    libc::TIOCLINUX as u32,
    libc::TIOCSETD as u32,
    libc::TIOCCONS as u32,
];

/// `personality(2)` values allowed: `PER_LINUX` and the query `0xffffffff`. Anything else could
/// turn off address-space randomisation or make data executable.
pub const ALLOWED_PERSONALITIES: [u32; 2] = [0, 0xffff_ffff];

/// Socket families allowed for `socket(2)`; `AF_NETLINK` is allowed separately, with protocol
/// `NETLINK_ROUTE` only (so `ip addr` works inside the session's own network namespace).
pub const ALLOWED_FAMILIES: [u32; 3] = [
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
];

/// The one family allowed for `socketpair(2)`: among the allowed families only `AF_UNIX` has pairs.
pub const PAIR_FAMILY: u32 = libc::AF_UNIX as u32;

/// `openat2` passes its flags and mode in memory the filter cannot read (the same problem as
/// `clone3`), so it fails with `ENOSYS`: libc and language runtimes fall back to `openat`, whose
/// mode is checked.
pub const SYS_OPENAT2: u32 = nr(libc::SYS_openat2);

/// The set-user-ID and set-group-ID bits, refused in every mode argument.
pub const SETID_BITS: u32 = libc::S_ISUID | libc::S_ISGID;

/// The calls that set a file's mode or create a file with one, and the index of their `mode`
/// argument. A file the sandbox writes in the workspace is a file on the host, owned by the
/// workspace owner (root, for a root-owned workspace): with the set-user-ID bit a later run on the
/// host would execute as that owner. The workspace mount is `nosuid`, but only inside the
/// sandbox; on the host only refusing the bit here protects. (`mkdir` ignores `S_ISUID` and the
/// kernel takes `S_ISGID` of a new directory from its parent, but refusing the bits in its mode
/// costs nothing and keeps the rule simple.)
pub const MODE_ARGUMENT: &[(&str, u32, u32)] = &[
    ("fchmod", nr(libc::SYS_fchmod), 1),
    ("fchmodat", nr(libc::SYS_fchmodat), 2),
    ("fchmodat2", SYS_FCHMODAT2, 2),
    ("openat", nr(libc::SYS_openat), 3),
    ("mkdirat", nr(libc::SYS_mkdirat), 2),
    ("mknodat", nr(libc::SYS_mknodat), 2),
    #[cfg(target_arch = "x86_64")]
    ("chmod", nr(libc::SYS_chmod), 1),
    #[cfg(target_arch = "x86_64")]
    ("open", nr(libc::SYS_open), 2),
    #[cfg(target_arch = "x86_64")]
    ("creat", nr(libc::SYS_creat), 1),
    #[cfg(target_arch = "x86_64")]
    ("mkdir", nr(libc::SYS_mkdir), 1),
    #[cfg(target_arch = "x86_64")]
    ("mknod", nr(libc::SYS_mknod), 1),
];

/// `fchmodat2(2)` (Linux 6.6), not in every `libc`; a shared number on every architecture.
const SYS_FCHMODAT2: u32 = 452;

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;

/// Where a conditional jump inside an argument block goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum To {
    Next,
    Refuse,
    Allow,
}

/// One instruction of an argument block before its jumps are resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    LoadArgLow(u32),
    JumpEq(u32, To, To),
    JumpSet(u32, To, To),
}

/// What the filter does with one call number once the architecture checks have passed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Rule {
    Allow,
    /// Fail with this errno.
    Errno(u32),
    /// Check the arguments: the steps end by refusing (`EPERM`) or allowing.
    Guarded(Vec<Step>),
}

/// The call numbers from `start` up to the next range's start (the last range runs to
/// `u32::MAX`), which all share `rule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u32,
    pub rule: Rule,
}

/// Compiles the policy above into a complete seccomp program.
pub(crate) fn compile() -> Vec<SockFilter> {
    let mut program = vec![
        // Any ABI but the native one (i386 through `int 0x80` on x86_64, arm32 on aarch64) is
        // never a legitimate workload here, and its numbers mean other calls: kill outright.
        load(OFFSET_ARCH),
        jump_eq(NATIVE_ARCH, 1, 0),
        ret(RET_KILL_PROCESS),
        load(OFFSET_NR),
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 calls use the native arch with bit 30 set in `nr`; they reach different entry points
        // and are refused the same way.
        program.extend([jump_set(X32_SYSCALL_BIT, 0, 1), ret(RET_KILL_PROCESS)]);
    }
    program.extend(search(&ranges(&rules())));
    program
}

/// Every call number with a rule other than [`Rule::Allow`]. A number listed twice keeps its first
/// rule (the tests check that none is).
pub(crate) fn rules() -> Vec<(u32, Rule)> {
    let mut rules: Vec<(u32, Rule)> = Vec::new();
    for &(_, number) in REFUSED {
        rules.push((number, Rule::Errno(EPERM)));
    }
    rules.push((SYS_CLONE3, Rule::Errno(ENOSYS)));
    rules.push((SYS_OPENAT2, Rule::Errno(ENOSYS)));
    // Modes are `umode_t`/unsigned int: only the low 32 bits count.
    for &(_, number, index) in MODE_ARGUMENT {
        let steps = vec![
            Step::LoadArgLow(index),
            Step::JumpSet(SETID_BITS, To::Refuse, To::Allow),
        ];
        rules.push((number, Rule::Guarded(steps)));
    }
    // clone(flags, ...): flags is args[0] on every architecture; the kernel uses its low 32 bits.
    let clone = vec![
        Step::LoadArgLow(0),
        Step::JumpSet(CLONE_NEW_FLAGS, To::Refuse, To::Allow),
    ];
    rules.push((nr(libc::SYS_clone), Rule::Guarded(clone)));
    // ioctl(fd, cmd, ...): the kernel's `cmd` is an unsigned int, so only the low 32 bits count;
    // high bits set by the caller must not dodge the comparison.
    let ioctl = vec![
        Step::LoadArgLow(1),
        Step::JumpEq(REFUSED_IOCTLS[0], To::Refuse, To::Next),
        Step::JumpEq(REFUSED_IOCTLS[1], To::Refuse, To::Next),
        Step::JumpEq(REFUSED_IOCTLS[2], To::Refuse, To::Next),
        Step::JumpEq(REFUSED_IOCTLS[3], To::Refuse, To::Allow),
    ];
    rules.push((nr(libc::SYS_ioctl), Rule::Guarded(ioctl)));
    // personality(persona): an unsigned int as well.
    let personality = vec![
        Step::LoadArgLow(0),
        Step::JumpEq(ALLOWED_PERSONALITIES[0], To::Allow, To::Next),
        Step::JumpEq(ALLOWED_PERSONALITIES[1], To::Allow, To::Refuse),
    ];
    rules.push((nr(libc::SYS_personality), Rule::Guarded(personality)));
    // socket(family, type, protocol): family and protocol are ints.
    let mut socket = vec![Step::LoadArgLow(0)];
    socket.extend(ALLOWED_FAMILIES.map(|family| Step::JumpEq(family, To::Allow, To::Next)));
    socket.extend([
        Step::JumpEq(libc::AF_NETLINK as u32, To::Next, To::Refuse),
        Step::LoadArgLow(2),
        Step::JumpEq(libc::NETLINK_ROUTE as u32, To::Allow, To::Refuse),
    ]);
    rules.push((nr(libc::SYS_socket), Rule::Guarded(socket)));
    let socketpair = vec![
        Step::LoadArgLow(0),
        Step::JumpEq(PAIR_FAMILY, To::Allow, To::Refuse),
    ];
    rules.push((nr(libc::SYS_socketpair), Rule::Guarded(socketpair)));
    rules
}

/// Turns per-number rules into ranges covering every number from 0: neighbours with equal rules
/// (e.g. `mount`, `umount2`, `swapon`, ... all `EPERM`) share one range, and the numbers between
/// listed ones are [`Rule::Allow`].
pub(crate) fn ranges(rules: &[(u32, Rule)]) -> Vec<Range> {
    let mut sorted: Vec<&(u32, Rule)> = Vec::with_capacity(rules.len());
    for rule in rules {
        // The first rule for a number wins, as it did when the program tested them in order.
        if !sorted.iter().any(|(number, _)| *number == rule.0) {
            sorted.push(rule);
        }
    }
    sorted.sort_by_key(|(number, _)| *number);
    let mut ranges = vec![Range {
        start: 0,
        rule: Rule::Allow,
    }];
    for (number, rule) in sorted {
        push_range(&mut ranges, *number, rule.clone());
        if let Some(after) = number.checked_add(1) {
            push_range(&mut ranges, after, Rule::Allow);
        }
    }
    ranges
}

/// Appends a range starting at `start` (not below the last one's), merging it into the last range
/// when the rules are equal and replacing the last one when it would be empty.
fn push_range(ranges: &mut Vec<Range>, start: u32, rule: Rule) {
    if let Some(last) = ranges.last_mut() {
        if last.rule == rule {
            return;
        }
        if last.start == start {
            last.rule = rule;
            // The replacement may now equal the range before it.
            if ranges.len() >= 2 && ranges[ranges.len() - 2].rule == ranges[ranges.len() - 1].rule {
                ranges.pop();
            }
            return;
        }
    }
    ranges.push(Range { start, rule });
}

/// The binary search over `ranges` (non-empty, sorted, the first starting at the lowest number
/// that can reach it), with the call number in the accumulator. Each comparison sends the numbers
/// at or above the upper half's start past the lower half's code.
pub(crate) fn search(ranges: &[Range]) -> Vec<SockFilter> {
    let [first, rest @ ..] = ranges else {
        // An empty table allows everything; `ranges` never returns one.
        return vec![ret(RET_ALLOW)];
    };
    if rest.is_empty() {
        return leaf(&first.rule);
    }
    let (lower, upper) = ranges.split_at(ranges.len() / 2);
    let below = search(lower);
    let above = search(upper);
    let mut code = Vec::with_capacity(below.len() + above.len() + 2);
    match u8::try_from(below.len()) {
        Ok(skip) => code.push(jump_ge(upper[0].start, skip, 0)),
        // Classic BPF's conditional jumps reach 255 instructions; go further with `ja`.
        Err(_) => code.extend([
            jump_ge(upper[0].start, 0, 1),
            jump_always(u32::try_from(below.len()).unwrap_or(u32::MAX)),
        ]),
    }
    code.extend(below);
    code.extend(above);
    code
}

/// The code for one range: a return, or an argument block ending in its two returns.
fn leaf(rule: &Rule) -> Vec<SockFilter> {
    match rule {
        Rule::Allow => vec![ret(RET_ALLOW)],
        Rule::Errno(errno) => vec![ret(RET_ERRNO | errno)],
        Rule::Guarded(steps) => {
            // The block is the steps plus two returns: `Refuse` at `len`, `Allow` at `len + 1`.
            let len = steps.len();
            let offset = |at: usize, to: To| -> u8 {
                let target = match to {
                    To::Next => at + 1,
                    To::Refuse => len,
                    To::Allow => len + 1,
                };
                short_jump(target - at - 1)
            };
            let mut code: Vec<SockFilter> = steps
                .iter()
                .enumerate()
                .map(|(at, step)| match *step {
                    Step::LoadArgLow(index) => load(offset_arg_low(index)),
                    Step::JumpEq(k, yes, no) => jump_eq(k, offset(at, yes), offset(at, no)),
                    Step::JumpSet(k, yes, no) => jump_set(k, offset(at, yes), offset(at, no)),
                })
                .collect();
            code.extend([ret(RET_ERRNO | EPERM), ret(RET_ALLOW)]);
            code
        }
    }
}

/// A jump inside one argument block. Blocks are a handful of instructions written above, so this
/// cannot fail for any input; the tests walk every jump of the compiled program as well.
fn short_jump(distance: usize) -> u8 {
    u8::try_from(distance).expect("an argument block is far shorter than 256 instructions")
}
