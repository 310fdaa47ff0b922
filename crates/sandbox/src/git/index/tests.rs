//! Index parsing over hand-built index bytes: versions 2, 3 and 4, SHA-1 and SHA-256, split
//! and sparse indexes, and malformed input that must be refused rather than guessed at.

use super::*;

const FILE: u32 = 0o100644;
const LINK: u32 = 0o160000;
const TREE: u32 = 0o040000;

/// One entry as git writes it. `name_len` overrides the length in the flags (for forgeries).
struct Entry {
    mode: u32,
    name: &'static str,
    extended: bool,
    name_len: Option<u16>,
}

fn e(mode: u32, name: &'static str) -> Entry {
    Entry {
        mode,
        name,
        extended: false,
        name_len: None,
    }
}

/// Builds an index: header, entries (prefix-compressed for version 4), `extensions`, and a
/// trailing hash of `hash_len` zero bytes.
fn index(version: u32, hash_len: usize, entries: &[Entry], extensions: &[u8]) -> Vec<u8> {
    let mut out = b"DIRC".to_vec();
    out.extend(version.to_be_bytes());
    out.extend((entries.len() as u32).to_be_bytes());
    let mut previous = "";
    for entry in entries {
        let start = out.len();
        out.extend([0u8; MODE_AT]);
        out.extend(entry.mode.to_be_bytes());
        out.extend([0u8; STAT - MODE_AT - 4]);
        out.extend(vec![0xab; hash_len]);
        let len = entry.name_len.unwrap_or(entry.name.len().min(0xFFF) as u16);
        let flags = len | if entry.extended { EXTENDED } else { 0 };
        out.extend(flags.to_be_bytes());
        if entry.extended {
            out.extend(0u16.to_be_bytes());
        }
        if version == 4 {
            let common = previous
                .bytes()
                .zip(entry.name.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            let strip = previous.len() - common;
            assert!(strip < 128, "the builder writes one-byte varints only");
            out.push(strip as u8);
            out.extend(&entry.name.as_bytes()[common..]);
            out.push(0);
        } else {
            out.extend(entry.name.as_bytes());
            let size = (out.len() - start + 8) & !7;
            out.resize(start + size, 0);
        }
        previous = entry.name;
    }
    out.extend(extensions);
    out.extend(vec![0u8; hash_len]);
    out
}

fn extension(signature: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut out = signature.to_vec();
    out.extend((data.len() as u32).to_be_bytes());
    out.extend(data);
    out
}

/// What a parse should give: the gitlinks and the shared index's name, or the error.
type Expected<'a> = Result<(&'a [&'a str], Option<&'a str>), IndexError>;

fn check(bytes: &[u8], expected: Expected<'_>, what: &str) {
    let actual = parse(bytes).map(|parsed| (parsed.gitlinks, parsed.shared.map(|s| s.name)));
    let expected = expected.map(|(links, shared)| {
        (
            links.iter().map(PathBuf::from).collect(),
            shared.map(str::to_owned),
        )
    });
    assert_eq!(actual, expected, "{what}");
}

/// An EWAH bitmap with `positions` set: one run-length word announcing the literal words, then
/// the literals (what git writes for a sparse bitmap).
fn ewah(positions: &[u64]) -> Vec<u8> {
    let words = positions.iter().max().map_or(0, |max| max / 64 + 1);
    let mut literals = vec![0u64; words as usize];
    for p in positions {
        literals[(p / 64) as usize] |= 1 << (p % 64);
    }
    let bits = words * 64;
    let mut out = (bits as u32).to_be_bytes().to_vec();
    out.extend((words as u32 + 1).to_be_bytes());
    out.extend((words << 33).to_be_bytes());
    for literal in literals {
        out.extend(literal.to_be_bytes());
    }
    out.extend(0u32.to_be_bytes());
    out
}

/// A `link` extension naming a shared index of `0x5a` bytes, with the delete and replace
/// bitmaps.
fn link(deleted: &[u64], replaced: &[u64]) -> Vec<u8> {
    let data = [&[0x5au8; 20][..], &ewah(deleted), &ewah(replaced)].concat();
    extension(b"link", &data)
}

#[test]
fn gitlinks_are_found_in_every_version_and_hash() {
    let entries = [
        e(FILE, ".gitmodules"),
        e(LINK, "lib/a"),
        e(FILE, "lib/a.txt"),
        e(LINK, "lib/b"),
        e(FILE, "src/main.rs"),
        e(LINK, "vendor/deep/c"),
    ];
    let links: &[&str] = &["lib/a", "lib/b", "vendor/deep/c"];
    for version in [2, 3, 4] {
        for hash_len in [20, 32] {
            check(
                &index(version, hash_len, &entries, &[]),
                Ok((links, None)),
                &format!("v{version} hash {hash_len}"),
            );
        }
    }
}

#[test]
fn version_four_prefix_compression_is_applied_to_every_entry() {
    // Each name shares a prefix with the previous one, so each gitlink's full path exists only
    // after stripping and appending.
    let entries = [
        e(FILE, "modules/alpha/file"),
        e(LINK, "modules/alpha2"),
        e(FILE, "modules/beta"),
        e(LINK, "modules/beta-sub"),
        e(LINK, "z"),
    ];
    check(
        &index(4, 20, &entries, &[]),
        Ok((&["modules/alpha2", "modules/beta-sub", "z"], None)),
        "v4",
    );
}

#[test]
fn index_edge_cases_parse_exactly_or_are_refused() {
    let mut extended = e(LINK, "ext/sub");
    extended.extended = true;
    let mut extended_v2 = e(LINK, "ext/sub");
    extended_v2.extended = true;
    let mut wrong_len = e(LINK, "sub");
    wrong_len.name_len = Some(7);
    let long: &'static str =
        Box::leak(format!("{}/sub", "d".repeat(MAX_NAME - 4)).into_boxed_str());
    let too_long: &'static str = Box::leak(format!("{long}x").into_boxed_str());
    let shared_name = [0x5au8; 20];
    let link = link(&[], &[]);
    let bare_link = extension(b"link", &shared_name);
    let sparse = extension(b"sdir", &[]);
    let tree = extension(b"TREE", b"\0-1 0\n");
    let mut truncated = index(2, 20, &[e(LINK, "sub")], &[]);
    truncated.truncate(30);
    let mut bad_padding = index(2, 20, &[e(LINK, "sub")], &[]);
    bad_padding[HEADER + STAT + 20 + 2 + 4] = b'x';
    let mut over_strip = index(4, 20, &[e(LINK, "sub")], &[]);
    over_strip[HEADER + STAT + 20 + 2] = 9;
    let mut bad_version = index(2, 20, &[], &[]);
    bad_version[7] = 5;
    let mut huge_count = index(2, 20, &[e(LINK, "sub")], &[]);
    huge_count[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    let shared_hex = "5a".repeat(20);
    let long_links = [long];
    let rows: Vec<(&str, Vec<u8>, Expected<'_>)> = vec![
        ("empty index", index(2, 20, &[], &[]), Ok((&[], None))),
        ("no bytes at all", Vec::new(), Err(IndexError::Truncated(0))),
        (
            "extended flags in version 3",
            index(3, 20, &[extended], &[]),
            Ok((&["ext/sub"], None)),
        ),
        (
            "extended flags are refused in version 2",
            index(2, 20, &[extended_v2], &[]),
            Err(IndexError::Entry(0)),
        ),
        (
            "a name length that disagrees with the name",
            index(2, 20, &[wrong_len], &[]),
            Err(IndexError::Entry(0)),
        ),
        (
            "a name longer than the flags can say",
            index(2, 20, &[e(LINK, long)], &[]),
            Ok((&long_links, None)),
        ),
        (
            "a name longer than PATH_MAX",
            index(2, 20, &[e(LINK, too_long)], &[]),
            Err(IndexError::NameTooLong(0)),
        ),
        (
            "a version 4 name rebuilt longer than PATH_MAX from a short suffix",
            index(4, 20, &[e(FILE, long), e(LINK, too_long)], &[]),
            Err(IndexError::NameTooLong(1)),
        ),
        (
            "a version 4 name of exactly PATH_MAX",
            index(4, 20, &[e(FILE, "a"), e(LINK, long)], &[]),
            Ok((&long_links, None)),
        ),
        (
            "a split index names its shared index",
            index(2, 20, &[e(LINK, "sub")], &link),
            Ok((&["sub"], Some(shared_hex.as_str()))),
        ),
        (
            "a link extension without bitmaps",
            index(2, 20, &[e(LINK, "sub")], &bare_link),
            Ok((&["sub"], Some(shared_hex.as_str()))),
        ),
        (
            "a sparse index's directory entries are not gitlinks",
            index(3, 20, &[e(TREE, "dir/"), e(LINK, "sub")], &sparse),
            Ok((&["sub"], None)),
        ),
        (
            "extensions are skipped",
            index(2, 20, &[e(LINK, "sub")], &tree),
            Ok((&["sub"], None)),
        ),
        (
            "a duplicate gitlink (conflict stages) is listed once",
            index(2, 20, &[e(LINK, "sub"), e(LINK, "sub")], &[]),
            Ok((&["sub"], None)),
        ),
        (
            "a truncated entry",
            truncated,
            Err(IndexError::Truncated(0)),
        ),
        (
            "padding that is not NUL",
            bad_padding,
            Err(IndexError::Entry(0)),
        ),
        (
            "a version 4 strip longer than the previous name",
            over_strip,
            Err(IndexError::Entry(0)),
        ),
        (
            "an unknown version",
            bad_version,
            Err(IndexError::Version(5)),
        ),
        (
            "a forged entry count runs out of bytes",
            huge_count,
            Err(IndexError::Truncated(1)),
        ),
        (
            "a wrong signature",
            b"DIRX\0\0\0\x02\0\0\0\0"
                .iter()
                .copied()
                .chain([0; 20])
                .collect(),
            Err(IndexError::Signature),
        ),
        (
            "a dangling extension header",
            index(2, 20, &[e(LINK, "sub")], b"TRE"),
            Err(IndexError::Extensions),
        ),
    ];
    for (what, bytes, expected) in rows {
        check(&bytes, expected, what);
    }
}

#[test]
fn gitlink_paths_that_git_would_refuse_are_refused() {
    for name in [
        "/abs", "../up", "a/../b", "a//b", "./a", "a/.", ".git", "a/.GIT/b", "a/",
    ] {
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        let bytes = index(2, 20, &[e(FILE, "ok"), e(LINK, leaked)], &[]);
        assert_eq!(parse(&bytes), Err(IndexError::Path(1)), "{name:?}");
    }
    // An empty name is a split index's replacement, refused anywhere else (see
    // `split_index_replacements_are_mapped_to_their_shared_positions`).
    let bytes = index(2, 20, &[e(FILE, "ok"), e(LINK, "")], &[]);
    assert_eq!(parse(&bytes), Err(IndexError::Entry(1)));
    // The same names are not checked on ordinary entries (cordon only mounts gitlinks).
    let bytes = index(2, 20, &[e(FILE, "a//b")], &[]);
    assert_eq!(parse(&bytes), Ok(Parsed::default()));
}

#[test]
fn every_prefix_of_an_index_parses_without_panicking_and_cut_entries_are_refused() {
    let entries = [e(FILE, "a"), e(LINK, "lib/sub"), e(LINK, "lib/sub2")];
    for version in [2, 4] {
        let bytes = index(version, 20, &entries, &extension(b"TREE", b"x"));
        // The trailing checksum is not verified (see the module documentation), so a prefix
        // ending after the last entry may look like a shorter valid index; one that cuts an
        // entry never does.
        let entries_end = index(version, 20, &entries, &[]).len() - 20;
        for len in 0..bytes.len() {
            let parsed = parse(&bytes[..len]);
            if len < entries_end + 20 {
                assert!(parsed.is_err(), "v{version} cut at {len}");
            }
        }
    }
}

#[test]
fn a_real_git_index_parses_to_its_gitlinks() {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
            .args(args)
            .current_dir(dir.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "."]);
    std::fs::write(dir.path().join("file"), "x").unwrap();
    git(&["add", "file"]);
    let oid = "0123456789abcdef0123456789abcdef01234567";
    git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{oid},deps/one"),
    ]);
    git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{oid},two"),
    ]);
    for version in ["2", "3", "4"] {
        git(&["update-index", "--index-version", version]);
        let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
        check(&bytes, Ok((&["deps/one", "two"], None)), version);
    }
}

#[test]
fn an_index_with_more_gitlinks_than_the_limit_is_refused() {
    let names: Vec<&'static str> = (0..=MAX_GITLINKS)
        .map(|n| &*Box::leak(format!("m/{n:05}").into_boxed_str()))
        .collect();
    let entries: Vec<Entry> = names.iter().map(|name| e(LINK, name)).collect();
    assert_eq!(
        parse(&index(2, 20, &entries, &[])),
        Err(IndexError::TooManyGitlinks)
    );
    assert_eq!(
        parse(&index(2, 20, &entries[1..], &[])).map(|p| p.gitlinks.len()),
        Ok(MAX_GITLINKS)
    );
}

#[test]
fn a_version_four_index_cannot_amplify_into_gigabytes_of_paths() {
    // The reviewer's forgery: one name of nearly PATH_MAX, then thousands of gitlinks each
    // stripping nothing and appending one byte. Every rebuilt name would be as long as the first,
    // so 4096 of them would be ~16 MiB at PATH_MAX — and gigabytes without the cap, since the
    // first name could be as long as the file. Built by hand: the builder's strip is one byte.
    let first = vec![b'd'; MAX_NAME - 8];
    let mut out = b"DIRC".to_vec();
    out.extend(4u32.to_be_bytes());
    let count = MAX_GITLINKS as u32;
    out.extend(count.to_be_bytes());
    for n in 0..count {
        out.extend([0u8; MODE_AT]);
        out.extend(LINK.to_be_bytes());
        out.extend([0u8; STAT - MODE_AT - 4]);
        out.extend([0xabu8; 20]);
        out.extend(0xFFFu16.to_be_bytes());
        out.push(0);
        if n == 0 {
            out.extend(&first);
        } else {
            out.push(b'x');
        }
        out.push(0);
    }
    out.extend([0u8; 20]);
    // Entries 1 to 8 fit (first + 8 bytes = MAX_NAME), entry 9 would not.
    assert_eq!(parse(&out), Err(IndexError::NameTooLong(9)));
}

/// What a split index parse should give: its gitlinks and the replaced gitlinks' positions.
type SplitExpected<'a> = Result<(&'a [&'a str], &'a [u64]), IndexError>;

#[test]
fn split_index_replacements_are_mapped_to_their_shared_positions() {
    let stripped_link = e(LINK, "");
    let stripped_file = e(FILE, "");
    let with_tail = extension(
        b"link",
        &[&[0x5au8; 20][..], &ewah(&[]), &ewah(&[3]), &[0]].concat(),
    );
    // A run of ones standing for 2^32 words: far more set bits than replacements.
    let mut huge_run = [0x5au8; 20].to_vec();
    huge_run.extend(ewah(&[]));
    huge_run.extend(0u32.to_be_bytes());
    huge_run.extend(1u32.to_be_bytes());
    huge_run.extend(((0xFFFF_FFFFu64 << 1) | 1).to_be_bytes());
    huge_run.extend(0u32.to_be_bytes());
    let huge_run = extension(b"link", &huge_run);
    let rows: Vec<(&str, Vec<u8>, SplitExpected<'_>)> = vec![
        (
            "a replaced gitlink names its shared position",
            index(2, 20, &[e(LINK, ""), e(LINK, "new")], &link(&[], &[3])),
            Ok((&["new"], &[3])),
        ),
        (
            "a replaced file is no gitlink",
            index(2, 20, &[e(FILE, ""), e(LINK, "new")], &link(&[1], &[70])),
            Ok((&["new"], &[])),
        ),
        (
            "replacements map in order, across literal words",
            index(
                4,
                20,
                &[e(FILE, ""), e(LINK, ""), e(LINK, "z")],
                &link(&[], &[2, 130]),
            ),
            Ok((&["z"], &[130])),
        ),
        (
            "more replace bits than replacements",
            index(2, 20, &[e(LINK, "")], &link(&[], &[1, 2])),
            Err(IndexError::Split),
        ),
        (
            "fewer replace bits than replacements",
            index(2, 20, &[e(LINK, ""), e(LINK, "")], &link(&[], &[1])),
            Err(IndexError::Split),
        ),
        (
            "a replacement without a link extension",
            index(2, 20, &[stripped_link], &[]),
            Err(IndexError::Split),
        ),
        (
            "an empty name after a named entry",
            index(2, 20, &[e(FILE, "a"), stripped_file], &link(&[], &[0])),
            Err(IndexError::Entry(1)),
        ),
        (
            "bytes after the bitmaps",
            index(2, 20, &[e(LINK, "")], &with_tail),
            Err(IndexError::Extensions),
        ),
        (
            "a run of ones is refused without being expanded",
            index(2, 20, &[e(LINK, "")], &huge_run),
            Err(IndexError::Split),
        ),
    ];
    for (what, bytes, expected) in rows {
        let actual = parse(&bytes).map(|parsed| {
            let replaced = parsed.shared.map(|s| s.replaced).unwrap_or_default();
            (parsed.gitlinks, replaced)
        });
        let expected = expected.map(|(links, replaced)| {
            (links.iter().map(PathBuf::from).collect(), replaced.to_vec())
        });
        assert_eq!(actual, expected, "{what}");
    }
}

#[test]
fn a_shared_index_gives_the_names_at_the_replaced_positions() {
    let shared = index(
        2,
        20,
        &[e(FILE, "a"), e(LINK, "lib/sub"), e(FILE, "z")],
        &[],
    );
    let at = |wanted: &[u64]| parse_at(&shared, wanted, b"").map(|parsed| parsed.at);
    assert_eq!(at(&[1]), Ok(vec![PathBuf::from("lib/sub")]));
    // The mode may have changed (a file replaced by a gitlink): the name is what counts.
    assert_eq!(
        at(&[0, 2]),
        Ok(vec![PathBuf::from("a"), PathBuf::from("z")])
    );
    assert_eq!(at(&[3]), Err(IndexError::Split), "past the last entry");
    let bad = index(2, 20, &[e(FILE, "a/../b")], &[]);
    assert_eq!(parse_at(&bad, &[0], b""), Err(IndexError::Path(0)));
}

#[test]
fn only_gitlinks_within_the_prefix_are_kept_and_counted() {
    // More gitlinks than cordon keeps, all outside the prefix (leaked: the builder takes
    // `&'static str` names, and this is one test).
    let mut entries: Vec<Entry> = (0..=MAX_GITLINKS)
        .map(|n| e(LINK, format!("elsewhere/{n:05}").leak()))
        .collect();
    for name in ["libs", "libs/sub", "libsx/sub", "lib"] {
        entries.push(e(LINK, name));
    }
    entries.sort_by(|a, b| a.name.cmp(b.name));
    let bytes = index(2, 20, &entries, &[]);
    // Each row: the prefix, the gitlinks kept (or the refusal).
    type Row<'a> = (&'a [u8], Result<Vec<&'a str>, IndexError>);
    let rows: [Row<'_>; 3] = [
        (b"libs", Ok(vec!["libs", "libs/sub"])),
        (b"libs/sub", Ok(vec!["libs/sub"])),
        (b"", Err(IndexError::TooManyGitlinks)),
    ];
    for (within, expected) in rows {
        let expected = expected.map(|names| names.into_iter().map(PathBuf::from).collect());
        let actual = parse_at(&bytes, &[], within).map(|parsed| parsed.gitlinks);
        assert_eq!(actual, expected, "{:?}", String::from_utf8_lossy(within));
    }
}
