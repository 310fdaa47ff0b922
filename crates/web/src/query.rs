//! Query strings: `key=value` pairs, percent-decoded. The API has a handful of keys, so the
//! router's own query extractor (and its serde_urlencoded dependency) is not needed.

/// Every `key=value` pair in order; `+` is a space; undecodable escapes are kept as written.
pub fn pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            (decode(key), decode(value))
        })
        .collect()
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(query: Option<&str>, expected: &[(&str, &str)]) {
        let got = pairs(query);
        let got: Vec<(&str, &str)> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, expected, "{query:?}");
    }

    #[test]
    fn query_pairs_are_split_and_decoded() {
        check(None, &[]);
        check(
            Some("a=1&b=x%20y&c"),
            &[("a", "1"), ("b", "x y"), ("c", "")],
        );
        check(
            Some("type=step&type=egress.deny&&after=3"),
            &[("type", "step"), ("type", "egress.deny"), ("after", "3")],
        );
        check(Some("t=a+b%2"), &[("t", "a b%2")]);
        check(Some("t=%zz%41"), &[("t", "%zzA")]);
    }
}
