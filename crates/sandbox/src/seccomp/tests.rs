//! The filter as data (through the interpreter) and once for real in a child process.

use super::bpf::{JA, JEQ_K, JGE_K, JSET_K, LD_W_ABS, RET_K};
use super::policy::{
    ALLOWED_FAMILIES, ALLOWED_PERSONALITIES, CLONE_NEW_FLAGS, COMPAT_ARCH, MODE_ARGUMENT,
    NATIVE_ARCH, PAIR_FAMILY, REFUSED, REFUSED_IOCTLS, Range, Rule, SETID_BITS, SYS_CLONE3,
    SYS_OPENAT2, X32_SYSCALL_BIT,
};
use super::{Action, bpf, policy, program};

const EPERM: Action = Action::Errno(libc::EPERM as u16);
const ENOSYS: Action = Action::Errno(libc::ENOSYS as u16);

fn sys(number: libc::c_long) -> u32 {
    number as u32
}

/// An ioctl request as the `u64` argument the filter sees.
#[allow(
    clippy::unnecessary_cast,
    reason = "`libc::Ioctl` is c_ulong on glibc but c_int on musl"
)]
fn ioctl(request: libc::Ioctl) -> u64 {
    request as u64
}

/// One case: a description, the arch, the call number, its arguments and the expected action.
type Case = (&'static str, u32, u32, [u64; 6], Action);

fn check(cases: &[Case]) {
    let program = program();
    for (what, arch, nr, args, expected) in cases {
        assert_eq!(program.evaluate(*arch, *nr, *args), *expected, "{what}");
    }
}

fn native(what: &'static str, nr: libc::c_long, args: [u64; 6], expected: Action) -> Case {
    (what, NATIVE_ARCH, sys(nr), args, expected)
}

fn args(first: &[u64]) -> [u64; 6] {
    let mut all = [0u64; 6];
    all[..first.len()].copy_from_slice(first);
    all
}

#[test]
fn every_refused_call_is_refused_with_eperm_whatever_its_arguments() {
    for &(name, nr) in REFUSED {
        for arguments in [[0; 6], [u64::MAX; 6], args(&[libc::CLONE_NEWUSER as u64])] {
            assert_eq!(
                program().evaluate(NATIVE_ARCH, nr, arguments),
                EPERM,
                "{name}"
            );
        }
    }
}

#[test]
fn common_calls_are_allowed() {
    let thread_flags = (libc::CLONE_VM
        | libc::CLONE_FS
        | libc::CLONE_FILES
        | libc::CLONE_SIGHAND
        | libc::CLONE_THREAD
        | libc::CLONE_SYSVSEM
        | libc::CLONE_SETTLS
        | libc::CLONE_PARENT_SETTID
        | libc::CLONE_CHILD_CLEARTID) as u64;
    let fork_flags = (libc::CLONE_CHILD_SETTID | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD) as u64;
    let stream = libc::SOCK_STREAM as u64;
    check(&[
        native(
            "read",
            libc::SYS_read,
            args(&[0, 0x1000, 10]),
            Action::Allow,
        ),
        native(
            "write",
            libc::SYS_write,
            args(&[1, 0x1000, 10]),
            Action::Allow,
        ),
        native(
            "openat",
            libc::SYS_openat,
            args(&[u64::MAX - 99, 0x1000]),
            Action::Allow,
        ),
        native("execve", libc::SYS_execve, [0; 6], Action::Allow),
        native("mmap", libc::SYS_mmap, [0; 6], Action::Allow),
        native(
            "clone for a thread",
            libc::SYS_clone,
            args(&[thread_flags]),
            Action::Allow,
        ),
        native(
            "clone for fork",
            libc::SYS_clone,
            args(&[fork_flags]),
            Action::Allow,
        ),
        native(
            "socket(AF_INET)",
            libc::SYS_socket,
            args(&[libc::AF_INET as u64, stream]),
            Action::Allow,
        ),
        native(
            "socket(AF_INET6)",
            libc::SYS_socket,
            args(&[libc::AF_INET6 as u64, stream]),
            Action::Allow,
        ),
        native(
            "socket(AF_UNIX)",
            libc::SYS_socket,
            args(&[libc::AF_UNIX as u64, stream]),
            Action::Allow,
        ),
        native(
            "socket(AF_NETLINK, NETLINK_ROUTE)",
            libc::SYS_socket,
            args(&[
                libc::AF_NETLINK as u64,
                libc::SOCK_RAW as u64,
                libc::NETLINK_ROUTE as u64,
            ]),
            Action::Allow,
        ),
        native(
            "socketpair(AF_UNIX)",
            libc::SYS_socketpair,
            args(&[libc::AF_UNIX as u64, stream]),
            Action::Allow,
        ),
        native(
            "ioctl(TCGETS)",
            libc::SYS_ioctl,
            args(&[0, ioctl(libc::TCGETS)]),
            Action::Allow,
        ),
        native(
            "ioctl(FIONREAD)",
            libc::SYS_ioctl,
            args(&[0, ioctl(libc::FIONREAD)]),
            Action::Allow,
        ),
        native(
            "personality query",
            libc::SYS_personality,
            args(&[0xffff_ffff]),
            Action::Allow,
        ),
        native(
            "personality(PER_LINUX)",
            libc::SYS_personality,
            args(&[0]),
            Action::Allow,
        ),
        native(
            "seccomp (only ever tightens)",
            libc::SYS_seccomp,
            [0; 6],
            Action::Allow,
        ),
        native(
            "landlock_create_ruleset",
            libc::SYS_landlock_create_ruleset,
            [0; 6],
            Action::Allow,
        ),
        native("wait4", libc::SYS_wait4, [0; 6], Action::Allow),
        native("getpid", libc::SYS_getpid, [0; 6], Action::Allow),
    ]);
}

#[test]
fn clone_with_any_namespace_flag_is_refused() {
    for flag in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ] {
        let flags = (flag | libc::SIGCHLD) as u64;
        assert_eq!(
            program().evaluate(NATIVE_ARCH, sys(libc::SYS_clone), args(&[flags])),
            EPERM,
            "{flag:#x}"
        );
        assert_ne!(CLONE_NEW_FLAGS & flag as u32, 0);
    }
}

#[test]
fn clone3_fails_with_enosys_so_libc_falls_back_to_clone() {
    check(&[
        (
            "clone3 without flags",
            NATIVE_ARCH,
            SYS_CLONE3,
            [0; 6],
            ENOSYS,
        ),
        (
            "clone3 with a struct",
            NATIVE_ARCH,
            SYS_CLONE3,
            args(&[0x7fff_0000, 88]),
            ENOSYS,
        ),
    ]);
}

#[test]
fn setuid_and_setgid_modes_are_refused_in_every_mode_argument() {
    use super::policy::{MODE_ARGUMENT, SETID_BITS};
    let suid = libc::S_ISUID as u64 | 0o755;
    let sgid = libc::S_ISGID as u64 | 0o755;
    for &(name, nr, index) in MODE_ARGUMENT {
        let with = |mode: u64| {
            let mut all = [0u64; 6];
            all[index as usize] = mode;
            all
        };
        // Each row: the mode argument, the decision.
        let rows: [(u64, Action); 6] = [
            (0o755, Action::Allow),
            (0o1777, Action::Allow),
            (suid, EPERM),
            (sgid, EPERM),
            (u64::from(SETID_BITS) | 0o644, EPERM),
            // High bits do not matter, the kernel reads an unsigned int.
            ((1 << 40) | 0o644, Action::Allow),
        ];
        for (mode, expected) in rows {
            assert_eq!(
                program().evaluate(NATIVE_ARCH, nr, with(mode)),
                expected,
                "{name} with mode {mode:o}"
            );
        }
        // The bits in another argument (a flag word, a path pointer) are not a mode.
        let mut other = [0u64; 6];
        other[(index as usize + 1) % 6] = suid;
        assert_eq!(
            program().evaluate(NATIVE_ARCH, nr, other),
            Action::Allow,
            "{name} with the bits elsewhere"
        );
    }
}

#[test]
fn openat2_fails_with_enosys_so_libc_falls_back_to_openat() {
    check(&[native("openat2", libc::SYS_openat2, [0; 6], ENOSYS)]);
}

#[test]
fn foreign_abis_kill_the_process() {
    let mut cases = vec![
        ("compat read", COMPAT_ARCH, 3, [0; 6], Action::KillProcess),
        ("compat nr 0", COMPAT_ARCH, 0, [0; 6], Action::KillProcess),
        (
            "unknown arch",
            0x1234_5678,
            sys(libc::SYS_read),
            [0; 6],
            Action::KillProcess,
        ),
    ];
    if cfg!(target_arch = "x86_64") {
        cases.extend([
            (
                "x32 read",
                NATIVE_ARCH,
                X32_SYSCALL_BIT,
                [0; 6],
                Action::KillProcess,
            ),
            (
                "x32 socket",
                NATIVE_ARCH,
                X32_SYSCALL_BIT | 41,
                [0; 6],
                Action::KillProcess,
            ),
            (
                "syscall(-1)",
                NATIVE_ARCH,
                u32::MAX,
                [0; 6],
                Action::KillProcess,
            ),
        ]);
    }
    check(&cases);
}

#[test]
fn terminal_injection_ioctls_are_refused_even_with_high_bits_set() {
    let tiocsti = ioctl(libc::TIOCSTI);
    let tioclinux = ioctl(libc::TIOCLINUX);
    check(&[
        native("TIOCSTI", libc::SYS_ioctl, args(&[0, tiocsti]), EPERM),
        native(
            "TIOCSTI with high bits",
            libc::SYS_ioctl,
            args(&[0, 0xffff_ffff_0000_0000 | tiocsti]),
            EPERM,
        ),
        native("TIOCLINUX", libc::SYS_ioctl, args(&[0, tioclinux]), EPERM),
        native(
            "TIOCLINUX with high bits",
            libc::SYS_ioctl,
            args(&[0, 1 << 32 | tioclinux]),
            EPERM,
        ),
        native(
            "TIOCSETD",
            libc::SYS_ioctl,
            args(&[0, ioctl(libc::TIOCSETD)]),
            EPERM,
        ),
        native(
            "TIOCSETD with high bits",
            libc::SYS_ioctl,
            args(&[0, 1 << 40 | ioctl(libc::TIOCSETD)]),
            EPERM,
        ),
        native(
            "TIOCCONS",
            libc::SYS_ioctl,
            args(&[0, ioctl(libc::TIOCCONS)]),
            EPERM,
        ),
        native(
            "TIOCGWINSZ",
            libc::SYS_ioctl,
            args(&[0, ioctl(libc::TIOCGWINSZ)]),
            Action::Allow,
        ),
    ]);
}

#[test]
fn personality_changes_are_refused() {
    check(&[
        native(
            "ADDR_NO_RANDOMIZE",
            libc::SYS_personality,
            args(&[0x0004_0000]),
            EPERM,
        ),
        native(
            "READ_IMPLIES_EXEC",
            libc::SYS_personality,
            args(&[0x0040_0000]),
            EPERM,
        ),
        native("PER_LINUX32", libc::SYS_personality, args(&[0x0008]), EPERM),
        native(
            "PER_LINUX with high bits",
            libc::SYS_personality,
            args(&[1 << 32]),
            Action::Allow,
        ),
    ]);
}

#[test]
fn socket_families_outside_the_allowlist_are_refused() {
    let netlink = libc::AF_NETLINK as u64;
    check(&[
        native(
            "AF_PACKET",
            libc::SYS_socket,
            args(&[libc::AF_PACKET as u64, 3]),
            EPERM,
        ),
        native(
            "AF_ALG",
            libc::SYS_socket,
            args(&[libc::AF_ALG as u64, 5]),
            EPERM,
        ),
        native(
            "AF_VSOCK",
            libc::SYS_socket,
            args(&[libc::AF_VSOCK as u64, 1]),
            EPERM,
        ),
        native(
            "AF_KEY",
            libc::SYS_socket,
            args(&[libc::AF_KEY as u64, 3]),
            EPERM,
        ),
        native(
            "AF_BLUETOOTH",
            libc::SYS_socket,
            args(&[libc::AF_BLUETOOTH as u64, 3]),
            EPERM,
        ),
        native(
            "NETLINK_AUDIT",
            libc::SYS_socket,
            args(&[netlink, 3, libc::NETLINK_AUDIT as u64]),
            EPERM,
        ),
        native(
            "NETLINK_KOBJECT_UEVENT",
            libc::SYS_socket,
            args(&[netlink, 3, libc::NETLINK_KOBJECT_UEVENT as u64]),
            EPERM,
        ),
        native(
            "NETLINK_SOCK_DIAG",
            libc::SYS_socket,
            args(&[netlink, 3, libc::NETLINK_SOCK_DIAG as u64]),
            EPERM,
        ),
        native(
            "AF_PACKET with high bits",
            libc::SYS_socket,
            args(&[1 << 32 | libc::AF_PACKET as u64]),
            EPERM,
        ),
        native(
            "AF_INET with high bits (the kernel reads an int)",
            libc::SYS_socket,
            args(&[1 << 32 | libc::AF_INET as u64]),
            Action::Allow,
        ),
        native(
            "socketpair(AF_INET)",
            libc::SYS_socketpair,
            args(&[libc::AF_INET as u64, 1]),
            EPERM,
        ),
        native(
            "socketpair(AF_TIPC)",
            libc::SYS_socketpair,
            args(&[libc::AF_TIPC as u64, 5]),
            EPERM,
        ),
    ]);
    assert!(
        !ALLOWED_FAMILIES.contains(&(libc::AF_NETLINK as u32)),
        "netlink is allowed only per protocol"
    );
}

#[test]
fn compiled_program_is_well_formed() {
    let instructions = program().instructions();
    assert!(instructions.len() < 4096, "BPF_MAXINSNS");
    for (at, insn) in instructions.iter().enumerate() {
        match insn.code {
            LD_W_ABS => assert!(insn.k < 64 && insn.k.is_multiple_of(4), "load at {at}"),
            JEQ_K | JSET_K | JGE_K => {
                let furthest = at + 1 + usize::from(insn.jt.max(insn.jf));
                assert!(
                    furthest < instructions.len(),
                    "jump at {at} leaves the program"
                );
            }
            JA => assert!(
                at + 1 + (insn.k as usize) < instructions.len(),
                "jump at {at} leaves the program"
            ),
            RET_K => {}
            code => panic!("unexpected opcode {code:#x} at {at}"),
        }
    }
    assert_eq!(instructions.last().map(|insn| insn.code), Some(RET_K));
}

/// What the tables in `policy` say about one native call, written as plainly as possible: the
/// oracle the compiled search is checked against.
fn decided_by_tables(nr: u32, args: [u64; 6]) -> Action {
    let low = |index: usize| args[index] as u32;
    if nr & X32_SYSCALL_BIT != 0 {
        return Action::KillProcess;
    }
    if REFUSED.iter().any(|&(_, number)| number == nr) {
        return EPERM;
    }
    if nr == SYS_CLONE3 || nr == SYS_OPENAT2 {
        return ENOSYS;
    }
    let refuse_if = |refused: bool| if refused { EPERM } else { Action::Allow };
    if let Some(&(_, _, index)) = MODE_ARGUMENT.iter().find(|&&(_, number, _)| number == nr) {
        return refuse_if(low(index as usize) & SETID_BITS != 0);
    }
    match i64::from(nr) {
        libc::SYS_clone => refuse_if(low(0) & CLONE_NEW_FLAGS != 0),
        libc::SYS_ioctl => refuse_if(REFUSED_IOCTLS.contains(&low(1))),
        libc::SYS_personality => refuse_if(!ALLOWED_PERSONALITIES.contains(&low(0))),
        libc::SYS_socket => refuse_if(
            !(ALLOWED_FAMILIES.contains(&low(0))
                || (low(0) == libc::AF_NETLINK as u32 && low(2) == libc::NETLINK_ROUTE as u32)),
        ),
        libc::SYS_socketpair => refuse_if(low(0) != PAIR_FAMILY),
        _ => Action::Allow,
    }
}

#[test]
fn search_decides_like_the_policy_tables_for_every_call_number() {
    // Argument vectors that hit every branch of every argument block, plus extremes.
    let mut vectors = vec![[0u64; 6], [u64::MAX; 6]];
    for value in [
        u64::from(SETID_BITS),
        u64::from(libc::S_ISUID),
        0o755,
        u64::from(CLONE_NEW_FLAGS),
        libc::CLONE_NEWUSER as u64,
        libc::SIGCHLD as u64,
        libc::AF_NETLINK as u64,
        libc::AF_PACKET as u64,
        u64::from(PAIR_FAMILY),
        libc::NETLINK_ROUTE as u64,
        libc::NETLINK_AUDIT as u64,
        0xffff_ffff,
        0x1_0000_0000,
    ]
    .into_iter()
    .chain(ALLOWED_FAMILIES.map(u64::from))
    .chain(REFUSED_IOCTLS.map(u64::from))
    .chain(REFUSED_IOCTLS.map(|cmd| u64::from(cmd) | 0xdead_0000_0000))
    {
        for index in 0..6 {
            let mut vector = [0u64; 6];
            vector[index] = value;
            vectors.push(vector);
            // socket(AF_NETLINK, _, protocol) needs two arguments at once.
            vector[0] = libc::AF_NETLINK as u64;
            vectors.push(vector);
        }
    }
    let numbers = (0..1024u32).chain([
        X32_SYSCALL_BIT - 1,
        X32_SYSCALL_BIT,
        X32_SYSCALL_BIT | libc::SYS_read as u32,
        0x8000_0000,
        u32::MAX,
    ]);
    for nr in numbers {
        for &arguments in &vectors {
            assert_eq!(
                program().evaluate(NATIVE_ARCH, nr, arguments),
                decided_by_tables(nr, arguments),
                "nr {nr} args {arguments:x?}"
            );
        }
    }
}

#[test]
fn no_call_number_has_two_rules() {
    let mut numbers: Vec<u32> = policy::rules().iter().map(|(number, _)| *number).collect();
    let listed = numbers.len();
    numbers.sort_unstable();
    numbers.dedup();
    assert_eq!(numbers.len(), listed);
}

#[test]
fn neighbouring_numbers_with_one_rule_share_a_range() {
    let eperm = Rule::Errno(libc::EPERM as u32);
    let rules = [(5, eperm.clone()), (6, eperm.clone()), (8, eperm.clone())];
    let at = |start, rule: &Rule| Range {
        start,
        rule: rule.clone(),
    };
    assert_eq!(
        policy::ranges(&rules),
        [
            at(0, &Rule::Allow),
            at(5, &eperm),
            at(7, &Rule::Allow),
            at(8, &eperm),
            at(9, &Rule::Allow),
        ]
    );
    assert_eq!(
        policy::ranges(&[(0, eperm.clone()), (u32::MAX, eperm.clone())]),
        [at(0, &eperm), at(1, &Rule::Allow), at(u32::MAX, &eperm)]
    );
}

#[test]
fn search_jumps_past_lower_halves_longer_than_a_conditional_jump_reaches() {
    // 600 alternating ranges: the top comparison's lower half is ~600 instructions, so it
    // needs `ja`; every number must still land in its own range.
    let ranges: Vec<Range> = (0..600u32)
        .map(|start| Range {
            start,
            rule: if start % 2 == 0 {
                Rule::Errno(start % 4095 + 1)
            } else {
                Rule::Allow
            },
        })
        .collect();
    let code = policy::search(&ranges);
    assert!(code.iter().any(|insn| insn.code == JA), "no long jump");
    let mut program = vec![bpf::load(bpf::OFFSET_NR)];
    program.extend(code);
    for nr in 0..700u32 {
        let expected = match nr {
            n if n >= 599 => Action::Allow,
            n if n % 2 == 0 => Action::Errno((n % 4095 + 1) as u16),
            _ => Action::Allow,
        };
        assert_eq!(bpf::evaluate(&program, 0, nr, [0; 6]), expected, "nr {nr}");
    }
}

/// The environment variable that turns the test binary, re-executed, into the child below.
const CHILD: &str = "CORDON_SECCOMP_TEST_CHILD";
const TEST_NAME: &str = "seccomp::tests::installed_filter_refuses_a_nested_user_namespace";

#[test]
fn installed_filter_refuses_a_nested_user_namespace() {
    if let Some(mode) = std::env::var_os(CHILD) {
        // Child: optionally seal this process, then become `unshare --user /bin/true`.
        use std::os::unix::process::CommandExt;
        if mode == "filtered" {
            program().install().expect("install the filter");
        }
        let error = std::process::Command::new("unshare")
            .args(["--user", "/bin/true"])
            .exec();
        panic!("cannot execute unshare: {error}");
    }
    let run = |mode: &str| {
        std::process::Command::new(std::env::current_exe().expect("test binary path"))
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .output()
            .expect("run the test binary as a child")
    };
    let control = run("control");
    assert!(
        control.status.success(),
        "control: unshare --user must work without the filter: {}",
        String::from_utf8_lossy(&control.stderr)
    );
    let filtered = run("filtered");
    let stderr = String::from_utf8_lossy(&filtered.stderr);
    assert!(
        !filtered.status.success(),
        "unshare --user succeeded under the filter"
    );
    assert!(
        stderr.contains("unshare failed: Operation not permitted"),
        "unexpected failure: {stderr}"
    );
}
