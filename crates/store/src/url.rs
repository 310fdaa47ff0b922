//! A store URL as it may be shown: never a password, never a query (which may carry one).

/// `postgres://USER:SECRET@HOST/DB?options` → `postgres://USER@HOST/DB`; text that is not a URL
/// is shown as `<store URL>` rather than echoed (it could be a password pasted in the wrong place).
pub(crate) fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<store URL>".to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split(':').next().unwrap_or("");
            format!("{user}@{host}")
        }
        None => authority.to_owned(),
    };
    let shown = format!("{scheme}://{authority}/{path}");
    if shown.chars().all(|c| c.is_ascii_graphic()) {
        shown
    } else {
        "<store URL>".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_shown_store_url_keeps_no_password_query_or_control_bytes() {
        for (url, want) in [
            (
                "postgres://cordon@db.test:5432/runs",
                "postgres://cordon@db.test:5432/runs",
            ),
            (
                "postgres://cordon:hunter2@db.test/runs",
                "postgres://cordon@db.test/runs",
            ),
            (
                "postgres://db.test/runs?password=hunter2",
                "postgres://db.test/runs",
            ),
            ("postgres://a:b@c@db.test/x", "postgres://a@db.test/x"),
            ("postgresql://db.test", "postgresql://db.test/"),
            ("hunter2", "<store URL>"),
            ("postgres://db.test/\u{1b}[2J", "<store URL>"),
        ] {
            assert_eq!(shown(url), want, "{url}");
        }
    }
}
