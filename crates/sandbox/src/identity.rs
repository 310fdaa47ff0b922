//! Who the sandboxed processes are: uid and gid, user name and home, the maps of the session's user
//! namespace, the idmapping of the workspace, and the generated `/etc/passwd` and `/etc/group`.
//! Pure: host facts go in ([`HostUser`], the subordinate-id files), data comes out.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The uid (and gid) used as root when `/etc/subuid` (`/etc/subgid`) gives root no range: high,
/// and owning nothing on an ordinary host.
pub const UNOWNED_ID: u32 = 2_147_000_000;

/// Whether cordon itself runs as root, which decides the identity rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Privilege {
    Root,
    Unprivileged,
}

/// The user who invoked cordon, as read from the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostUser {
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub group: String,
    pub home: PathBuf,
}

/// The identity the sandboxed processes run with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub privilege: Privilege,
    pub uid: u32,
    pub gid: u32,
    pub name: String,
    pub group: String,
    pub home: PathBuf,
}

/// Whether the namespace may call `setgroups` (written to `/proc/PID/setgroups`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetGroups {
    /// Required before an unprivileged writer may write `gid_map`; also stops a process from
    /// dropping a group that a file's permissions deny it through.
    Deny,
    /// Root: init clears the inherited supplementary groups with `setgroups(0)` first. The
    /// workload, having no CAP_SETGID, cannot call it afterwards.
    Allow,
}

/// The contents of `uid_map` and `gid_map` for a user namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMaps {
    pub uid_map: String,
    pub gid_map: String,
    pub setgroups: SetGroups,
}

impl Identity {
    /// The identity rules of DESIGN §4. Unprivileged: the invoking user's own uid and gid (the only
    /// ids it may map). Root: a uid that owns nothing on the host, the start of root's
    /// subordinate range or [`UNOWNED_ID`], so root-owned files stay unreadable and a write
    /// outside the idmapped workspace cannot create root-owned files.
    pub fn resolve(host: &HostUser, subuid: Option<&str>, subgid: Option<&str>) -> Identity {
        let (privilege, uid, gid) = if host.uid == 0 {
            let uid = subordinate_start(subuid, host).unwrap_or(UNOWNED_ID);
            let gid = subordinate_start(subgid, host).unwrap_or(UNOWNED_ID);
            (Privilege::Root, uid, gid)
        } else {
            (Privilege::Unprivileged, host.uid, host.gid)
        };
        Identity {
            privilege,
            uid,
            gid,
            name: host.name.clone(),
            group: host.group.clone(),
            home: host.home.clone(),
        }
    }

    /// The session namespace's maps: the sandbox ids map to themselves, one id each, so `id`
    /// inside shows the same numbers as `ps` outside. Root maps nothing else, in particular not
    /// host uid 0: no id in the sandbox is root on the host.
    pub fn maps(&self) -> IdMaps {
        IdMaps {
            uid_map: format!("{0} {0} 1\n", self.uid),
            gid_map: format!("{0} {0} 1\n", self.gid),
            setgroups: match self.privilege {
                Privilege::Root => SetGroups::Allow,
                Privilege::Unprivileged => SetGroups::Deny,
            },
        }
    }

    /// As root, the idmapping of the workspace mount: the workspace owner's ids on disk appear as
    /// the sandbox ids, and files the sandbox creates are stored as the owner's. Unprivileged,
    /// none: the sandbox already runs as the invoking user.
    pub fn workspace_idmap(&self, owner_uid: u32, owner_gid: u32) -> Option<IdMaps> {
        match self.privilege {
            Privilege::Unprivileged => None,
            Privilege::Root => Some(IdMaps {
                uid_map: format!("{owner_uid} {} 1\n", self.uid),
                gid_map: format!("{owner_gid} {} 1\n", self.gid),
                setgroups: SetGroups::Deny,
            }),
        }
    }

    /// `/etc/passwd` inside the sandbox: the sandbox user, named after the invoking user, and
    /// `nobody` (what unmapped ids show as).
    pub fn passwd(&self) -> String {
        let mut text = format!(
            "{0}:x:{1}:{2}:{0}:{3}:/bin/sh\n",
            self.name,
            self.uid,
            self.gid,
            self.home.display()
        );
        if self.uid != NOBODY && self.name != "nobody" {
            text.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
        }
        text
    }

    /// `/etc/group` inside the sandbox: the sandbox user's group and `nogroup`.
    pub fn group_file(&self) -> String {
        let mut text = format!("{}:x:{}:\n", self.group, self.gid);
        if self.gid != NOBODY && self.group != "nogroup" {
            text.push_str("nogroup:x:65534:\n");
        }
        text
    }
}

const NOBODY: u32 = 65534;

/// The first id of the host user's range in an `/etc/subuid`-style file (`name:start:count`, the
/// name may also be the numeric uid).
fn subordinate_start(file: Option<&str>, host: &HostUser) -> Option<u32> {
    let uid = host.uid.to_string();
    file?.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let (owner, start, count) = (fields.next()?, fields.next()?, fields.next()?);
        let count: u32 = count.parse().ok()?;
        ((owner == host.name || owner == uid) && count > 0)
            .then(|| start.parse().ok())
            .flatten()
    })
}

/// Looks a uid up in `/etc/passwd` text: `(name, home)`.
pub fn passwd_entry(passwd: &str, uid: u32) -> Option<(String, PathBuf)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2].parse() == Ok(uid))
            .then(|| (fields[0].to_owned(), PathBuf::from(fields[5])))
    })
}

/// Looks a gid up in `/etc/group` text.
pub fn group_name(group: &str, gid: u32) -> Option<String> {
    group.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 3 && fields[2].parse() == Ok(gid)).then(|| fields[0].to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(uid: u32, name: &str) -> HostUser {
        HostUser {
            uid,
            gid: uid,
            name: name.into(),
            group: name.into(),
            home: PathBuf::from(format!("/home/{name}")),
        }
    }

    /// What a row expects: privilege, uid, uid_map, setgroups.
    type Expected<'a> = (Privilege, u32, &'a str, SetGroups);

    fn check(host: HostUser, subuid: Option<&str>, expected: Expected<'_>) {
        let identity = Identity::resolve(&host, subuid, subuid);
        let maps = identity.maps();
        assert_eq!(
            (
                identity.privilege,
                identity.uid,
                maps.uid_map.as_str(),
                maps.setgroups
            ),
            expected,
            "{host:?} {subuid:?}"
        );
        assert_eq!(identity.gid, identity.uid);
    }

    #[test]
    fn identity_follows_the_rules_for_root_and_users() {
        let rows: [(HostUser, Option<&str>, Expected<'_>); 6] = [
            (
                user(1000, "ada"),
                None,
                (
                    Privilege::Unprivileged,
                    1000,
                    "1000 1000 1\n",
                    SetGroups::Deny,
                ),
            ),
            (
                user(1000, "ada"),
                Some("root:100000:65536\n"),
                (
                    Privilege::Unprivileged,
                    1000,
                    "1000 1000 1\n",
                    SetGroups::Deny,
                ),
            ),
            (
                user(0, "root"),
                None,
                (
                    Privilege::Root,
                    UNOWNED_ID,
                    "2147000000 2147000000 1\n",
                    SetGroups::Allow,
                ),
            ),
            (
                user(0, "root"),
                Some("ada:165536:65536\nroot:100000:65536\n"),
                (
                    Privilege::Root,
                    100000,
                    "100000 100000 1\n",
                    SetGroups::Allow,
                ),
            ),
            (
                user(0, "root"),
                Some("0:231072:65536\n"),
                (
                    Privilege::Root,
                    231072,
                    "231072 231072 1\n",
                    SetGroups::Allow,
                ),
            ),
            (
                user(0, "root"),
                Some("root:100000:0\nbroken\n"),
                (
                    Privilege::Root,
                    UNOWNED_ID,
                    "2147000000 2147000000 1\n",
                    SetGroups::Allow,
                ),
            ),
        ];
        for (host, subuid, expected) in rows {
            check(host, subuid, expected);
        }
    }

    #[test]
    fn workspace_is_idmapped_from_its_owner_only_as_root() {
        let root = Identity::resolve(
            &user(0, "root"),
            Some("root:100000:65536"),
            Some("root:100000:65536"),
        );
        let maps = root
            .workspace_idmap(1000, 1001)
            .expect("root idmaps the workspace");
        assert_eq!(
            (maps.uid_map.as_str(), maps.gid_map.as_str()),
            ("1000 100000 1\n", "1001 100000 1\n")
        );
        let ada = Identity::resolve(&user(1000, "ada"), None, None);
        assert_eq!(ada.workspace_idmap(1000, 1000), None);
    }

    #[test]
    fn generated_passwd_names_the_sandbox_user_after_the_invoking_user() {
        let root = Identity::resolve(&user(0, "root"), None, None);
        assert_eq!(
            root.passwd(),
            "root:x:2147000000:2147000000:root:/home/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        );
        let nobody = Identity::resolve(
            &HostUser {
                uid: 65534,
                gid: 65534,
                name: "nobody".into(),
                group: "nogroup".into(),
                home: "/tmp/h".into(),
            },
            None,
            None,
        );
        assert_eq!(
            nobody.passwd(),
            "nobody:x:65534:65534:nobody:/tmp/h:/bin/sh\n"
        );
        assert_eq!(nobody.group_file(), "nogroup:x:65534:\n");
    }

    #[test]
    fn passwd_and_group_lookups_find_the_entry() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nada:x:1000:1000:Ada:/home/ada:/bin/sh\n";
        assert_eq!(
            passwd_entry(passwd, 1000),
            Some(("ada".into(), PathBuf::from("/home/ada")))
        );
        assert_eq!(passwd_entry(passwd, 7), None);
        assert_eq!(
            group_name("root:x:0:\nstaff:x:50:ada\n", 50),
            Some("staff".into())
        );
    }
}
