//! The user's name and e-mail, read once at run start from their own global git config —
//! `$GIT_CONFIG_GLOBAL` when set (alone, as git does), else `$XDG_CONFIG_HOME/git/config` (or
//! `~/.config/git/config`) and then `~/.gitconfig`, the later winning. Parsed by gitoxide;
//! `include` directives are not followed. No git process runs for it.

use std::path::PathBuf;

use crate::repo::Identity;

/// The most bytes read of one config file.
const MAX_CONFIG: u64 = 1 << 20;

/// The identity the global config names, `None` unless it names both a name and an e-mail
/// (each a single line). `env` reads the host environment.
pub fn user_identity(env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Option<Identity> {
    let files: Vec<PathBuf> = match env("GIT_CONFIG_GLOBAL") {
        Some(global) => vec![PathBuf::from(global)],
        None => {
            let home = env("HOME").map(PathBuf::from);
            let xdg = env("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .or_else(|| home.as_ref().map(|h| h.join(".config")));
            [
                xdg.map(|x| x.join("git").join("config")),
                home.map(|h| h.join(".gitconfig")),
            ]
            .into_iter()
            .flatten()
            .collect()
        }
    };
    let mut name = None;
    let mut email = None;
    for file in files {
        let Some(bytes) = read_bounded(&file) else {
            continue;
        };
        let Ok(config) = gix_config::File::from_bytes_no_includes(
            &bytes,
            gix_config::file::Metadata::from(gix_config::Source::User),
            gix_config::file::init::Options::default(),
        ) else {
            continue;
        };
        let single = |value: Option<gix_object::bstr::BString>| {
            value
                .map(|v| v.to_string().trim().to_owned())
                .filter(|v| !v.is_empty() && !v.contains('\n'))
        };
        if let Some(value) = single(config.string("user.name")) {
            name = Some(value);
        }
        if let Some(value) = single(config.string("user.email")) {
            email = Some(value);
        }
    }
    Some(Identity {
        name: name?,
        email: email?,
    })
}

fn read_bounded(path: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<std::ffi::OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.into())
        }
    }

    #[test]
    fn the_global_config_names_the_author() {
        let dir = tempfile::tempdir().unwrap();
        let global = dir.path().join("gitconfig");
        std::fs::write(
            &global,
            "[user]\n\tname = Ada Lovelace\n\temail = ada@example.test\n",
        )
        .unwrap();
        let env = env_of(vec![("GIT_CONFIG_GLOBAL", global.display().to_string())]);
        assert_eq!(
            user_identity(&env),
            Some(Identity {
                name: "Ada Lovelace".to_owned(),
                email: "ada@example.test".to_owned()
            })
        );
    }

    #[test]
    fn home_files_are_read_in_gits_order_and_both_values_are_needed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".config/git")).unwrap();
        std::fs::write(
            dir.path().join(".config/git/config"),
            "[user]\n\tname = From XDG\n\temail = xdg@example.test\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".gitconfig"),
            "[user]\n\tname = From Home\n",
        )
        .unwrap();
        let env = env_of(vec![("HOME", dir.path().display().to_string())]);
        let found = user_identity(&env).unwrap();
        assert_eq!(found.name, "From Home");
        assert_eq!(found.email, "xdg@example.test");
        let empty = tempfile::tempdir().unwrap();
        std::fs::write(
            empty.path().join(".gitconfig"),
            "[user]\n\tname = Only Name\n",
        )
        .unwrap();
        let env = env_of(vec![("HOME", empty.path().display().to_string())]);
        assert_eq!(user_identity(&env), None);
    }
}
