//! System calls that leave `errno` alone, for a child that shares the parent's memory
//! (`CLONE_VM`) and thread-local storage.
//!
//! Why: a `CLONE_VM` child made by `clone(2)` without `CLONE_SETTLS` runs on the parent thread's
//! thread pointer, so libc's `errno` — a thread-local — is the very variable of the thread that
//! cloned it. Any libc wrapper that fails in the child (`write`, `unshare`, `syscall`) would
//! overwrite that thread's `errno` under its feet, while it may be between a failing call and
//! reading the error. These issue the instruction directly and return the kernel's raw result:
//! a value, or `-errno`.

/// A system call with up to three arguments; the kernel's raw return value.
///
/// # Safety
///
/// As for the system call `number` with these arguments: any pointer among them must be valid
/// for what the call does with it.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn syscall3(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: the x86_64 system call convention: number in rax, arguments in rdi, rsi, rdx,
    // result in rax; the instruction clobbers rcx and r11. The caller vouches for the call.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") number as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A system call with up to three arguments; the kernel's raw return value.
///
/// # Safety
///
/// As for the system call `number` with these arguments: any pointer among them must be valid
/// for what the call does with it.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn syscall3(number: libc::c_long, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: the aarch64 system call convention: number in x8, arguments in x0 to x2, result
    // in x0. The caller vouches for the call.
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") number,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("cordon's raw system calls know the x86_64 and aarch64 conventions only");

/// The errno of a failed raw call (`-4095..0`), as one byte for the report pipe (`u8::MAX` if
/// it does not fit); 0 for success.
pub(crate) fn status(ret: isize) -> u8 {
    if ret >= 0 {
        0
    } else {
        u8::try_from(-ret).unwrap_or(u8::MAX)
    }
}

/// Closes every descriptor from 3 up except `a` and `b`, with raw `close_range` calls; the raw
/// result of the first that fails, else 0.
///
/// # Safety
///
/// Only in a child whose descriptor table is its own (no `CLONE_FILES`) and that will use no
/// descriptor it inherited other than `a` and `b`.
pub(crate) unsafe fn close_all_except(a: libc::c_int, b: libc::c_int) -> isize {
    let (low, high) = if a <= b { (a, b) } else { (b, a) };
    let mut from: libc::c_uint = 3;
    for keep in [low, high] {
        let Ok(keep) = libc::c_uint::try_from(keep) else {
            continue;
        };
        // Below 3 (stdio, untouched) or equal to the other one.
        if keep < from {
            continue;
        }
        if keep > from {
            // SAFETY: close_range on integers; the caller guarantees nothing uses what closes.
            let ret =
                unsafe { syscall3(libc::SYS_close_range, from as usize, (keep - 1) as usize, 0) };
            if ret < 0 {
                return ret;
            }
        }
        // A descriptor number is below `c_int::MAX`, so this cannot overflow.
        from = keep + 1;
    }
    // SAFETY: as above.
    unsafe {
        syscall3(
            libc::SYS_close_range,
            from as usize,
            libc::c_uint::MAX as usize,
            0,
        )
    }
}
