//! A store URL as it may be shown: never a password, never a query (which may carry one); and
//! the checks made before it is used (`postgres://`, no password in it).

use crate::StoreError;

/// The user information and the rest of `url` after `scheme://`: everything up to the *last*
/// `@` is user information, so a password holding a raw `/`, `?`, `#` or `@` is never taken for
/// the host or the path.
fn split(url: &str) -> Option<(&str, Option<&str>, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    Some(match rest.rsplit_once('@') {
        Some((userinfo, host)) => (scheme, Some(userinfo), host),
        None => (scheme, None, rest),
    })
}

/// `postgres://USER:SECRET@HOST/DB?options` → `postgres://USER@HOST/DB`; text that is not a URL
/// is shown as `<store URL>` rather than echoed (it could be a password pasted in the wrong place).
pub(crate) fn shown(url: &str) -> String {
    let Some((scheme, userinfo, rest)) = split(url) else {
        return "<store URL>".to_owned();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let authority = match userinfo {
        Some(userinfo) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{user}@{host}")
        }
        None => host.to_owned(),
    };
    let shown = format!("{scheme}://{authority}/{path}");
    if shown.chars().all(|c| c.is_ascii_graphic()) {
        shown
    } else {
        "<store URL>".to_owned()
    }
}

/// Refuses, before anything is connected to, a store URL that is not `postgres://` or that
/// carries a password (in its user information or as a `password` parameter).
pub(crate) fn check(url: &str) -> Result<(), StoreError> {
    let Some((_, userinfo, rest)) =
        split(url).filter(|(scheme, ..)| matches!(*scheme, "postgres" | "postgresql"))
    else {
        return Err(StoreError::StoreUrl {
            url: shown(url),
            detail: "only postgres:// URLs name a shared store".to_owned(),
        });
    };
    let query = rest.split_once('?').map_or("", |(_, q)| q);
    let password_parameter = query.split('&').any(|pair| {
        pair.split('=')
            .next()
            .is_some_and(|k| k.eq_ignore_ascii_case("password"))
    });
    if userinfo.is_some_and(|u| u.contains(':')) || password_parameter {
        return Err(StoreError::PasswordInUrl(shown(url)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{check, shown};

    #[test]
    fn a_store_url_carrying_a_password_in_any_spelling_is_refused() {
        for url in [
            "postgres://u:pw@db.test/x",
            "postgres://u:SECRET1/x@db.test:5432/postgres",
            "postgres://u:SEC?RET2@db.test/x",
            "postgres://u:SEC#RET3@db.test/x",
            "postgres://:pw@db.test/x",
            "postgres://db.test/x?sslmode=disable&PASSWORD=pw",
            "postgresql://u:pw@db.test",
        ] {
            let err = check(url)
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default();
            assert!(err.contains("carries a password"), "{url}: {err}");
            for secret in ["pw", "SECRET1", "SEC", "RET"] {
                assert!(!err.contains(&format!(":{secret}")), "{url}: {err}");
            }
        }
        for url in [
            "mysql://u@db.test/x",
            "host=db.test password=pw",
            "POSTGRES://u:pw@db.test",
        ] {
            let err = check(url)
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default();
            assert!(err.contains("is not a store URL"), "{url}: {err}");
            assert!(!err.contains("pw"), "{url}: {err}");
        }
        // Controls: a user name alone, and parameters that are not a password.
        assert!(check("postgres://cordon@db.test:5432/runs?options=-csearch_path%3Dx").is_ok());
        assert!(check("postgres://db.test/runs?passwordless=1").is_ok());
    }

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
            (
                "postgres://u:SECRET1/x@db.test:5432/p",
                "postgres://u@db.test:5432/p",
            ),
            ("postgres://u:SEC?RET2@db.test/p", "postgres://u@db.test/p"),
            ("postgres://u:SEC#RET3@db.test/p", "postgres://u@db.test/p"),
            ("postgresql://db.test", "postgresql://db.test/"),
            ("hunter2", "<store URL>"),
            ("postgres://db.test/\u{1b}[2J", "<store URL>"),
        ] {
            assert_eq!(shown(url), want, "{url}");
        }
    }
}
