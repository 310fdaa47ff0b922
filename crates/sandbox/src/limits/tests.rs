use super::*;

#[test]
fn a_share_is_a_quarter_at_least_the_floor_and_never_more_than_half() {
    // (host, floor, share)
    let rows: [(u64, u64, u64); 10] = [
        (128, 16, 32),
        (8192, 16, 2048),
        (192_530, 1024, 48_132),
        (40, 16, 16),
        (20, 16, 10),
        (2, 16, 1),
        (1, 16, 0),
        (0, 16, 0),
        (819_200, 96 << 10, 204_800),
        (u64::MAX, 0, u64::MAX / 4),
    ];
    for (host, floor, expected) in rows {
        let got = share(host, floor);
        assert_eq!(got, expected, "share({host}, {floor})");
        assert!(
            got <= host / 2,
            "share({host}, {floor}) = {got} is over half"
        );
    }
}

fn host(counts: &[(Count, u64)], rlimits: &[(Rlimit, Option<u64>)]) -> HostLimits {
    HostLimits {
        counts: counts.to_vec(),
        rlimits: rlimits.to_vec(),
    }
}

#[test]
fn a_session_gets_a_share_of_each_host_count_and_no_user_namespaces() {
    let limits = plan(&host(
        &[
            (Count::InotifyInstances, 128),
            (Count::InotifyWatches, 192_530),
            (Count::FanotifyGroups, 128),
            (Count::FanotifyMarks, 205_032),
        ],
        &[
            (Rlimit::MessageQueueBytes, Some(819_200)),
            (Rlimit::PendingSignals, Some(96_363)),
        ],
    ));
    assert_eq!(
        limits,
        Limits {
            counts: vec![
                (Count::InotifyInstances, 32),
                (Count::InotifyWatches, 48_132),
                (Count::FanotifyGroups, 32),
                (Count::FanotifyMarks, 51_258),
                (Count::UserNamespaces, 0),
            ],
            rlimits: vec![
                (Rlimit::MessageQueueBytes, 204_800),
                (Rlimit::PendingSignals, 24_090),
            ],
        }
    );
}

#[test]
fn a_count_the_kernel_lacks_is_not_set_but_user_namespaces_always_are() {
    // A kernel without fanotify has no `max_fanotify_*` files, on the host or in the session.
    let limits = plan(&host(
        &[
            (Count::InotifyInstances, 128),
            (Count::InotifyWatches, 8192),
        ],
        &[],
    ));
    assert_eq!(
        limits.counts,
        [
            (Count::InotifyInstances, 32),
            (Count::InotifyWatches, 2048),
            (Count::UserNamespaces, 0),
        ]
    );
    // Even a host value of user namespaces, were one read, does not become a share.
    let with_namespaces = plan(&host(&[(Count::UserNamespaces, 1000)], &[]));
    assert_eq!(with_namespaces.counts, [(Count::UserNamespaces, 0)]);
}

#[test]
fn an_unlimited_host_process_still_gives_bounded_resource_limits() {
    let limits = plan(&host(
        &[],
        &[
            (Rlimit::MessageQueueBytes, None),
            (Rlimit::PendingSignals, None),
        ],
    ));
    assert_eq!(
        limits.rlimits,
        [
            (Rlimit::MessageQueueBytes, MSGQUEUE_WITHOUT_LIMIT / 4),
            (Rlimit::PendingSignals, SIGPENDING_WITHOUT_LIMIT / 4),
        ]
    );
    // A host value that was not read at all counts as unlimited too.
    assert_eq!(plan(&HostLimits::default()).rlimits, limits.rlimits);
}

#[test]
fn every_count_names_a_distinct_file_of_proc_sys_user() {
    let mut files: Vec<&str> = Count::ALL.iter().map(|c| c.file()).collect();
    assert!(
        files
            .iter()
            .all(|f| f.starts_with("max_") && !f.contains('/'))
    );
    files.sort_unstable();
    files.dedup();
    assert_eq!(files.len(), Count::ALL.len());
}

#[test]
fn the_host_values_read_here_are_the_hosts_own() {
    // This test process runs on the host: every shared count this kernel has is read, with the
    // value the host's file shows.
    let read = HostLimits::read().expect("the host's limits are readable");
    for count in Count::ALL {
        let file = format!("{USER_SYSCTLS}/{}", count.file());
        let on_disk = std::fs::read_to_string(&file).ok();
        let got = read
            .counts
            .iter()
            .find(|(c, _)| *c == count)
            .map(|(_, v)| *v);
        match (count.rule(), on_disk) {
            (Rule::Share { .. }, Some(text)) => {
                assert_eq!(got, text.trim().parse().ok(), "{file}");
            }
            (Rule::Share { .. }, None) | (Rule::Zero, _) => assert_eq!(got, None, "{file}"),
        }
    }
    assert_eq!(
        read.rlimits.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        RLIMITS
    );
}

#[test]
fn a_limit_that_cannot_be_set_names_the_limit_and_the_remedy() {
    let err = LimitError {
        what: "`/proc/sys/user/max_inotify_instances` (32)".into(),
        source: io::Error::from_raw_os_error(libc::EACCES),
    };
    let text = err.to_string();
    assert!(text.contains("max_inotify_instances` (32)"), "{text}");
    assert!(text.contains("CAP_SYS_RESOURCE"), "{text}");
    assert!(text.contains("allow cordon's user namespaces"), "{text}");
}
