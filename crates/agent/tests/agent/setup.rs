//! Building a provider from a pipeline's `llm` block: keys, base URLs, `SSL_CERT_FILE`,
//! transcripts.

use std::ffi::OsString;

use cordon_agent::provider::{self, HttpOptions, Inputs};
use cordon_pipeline::{EnvName, Llm, RelPath};

fn build(llm: &Llm, env: &[(&str, &str)], transcript: Option<(&str, &str)>) -> Result<(), String> {
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| OsString::from(v))
    };
    provider::from_llm(
        llm,
        Inputs {
            transcript,
            env: &lookup,
            http: HttpOptions::default(),
        },
    )
    .map(drop)
    .map_err(|e| e.to_string())
}

fn openai(base_url: Option<&str>, key_env: Option<&str>) -> Llm {
    Llm::OpenAi {
        model: "m".to_owned(),
        base_url: base_url.map(str::to_owned),
        api_key_env: key_env.map(|k| EnvName::parse(k).expect("name")),
    }
}

fn check(llm: &Llm, env: &[(&str, &str)], expected: Result<(), &str>) {
    match (build(llm, env, None), expected) {
        (Ok(()), Ok(())) => {}
        (Err(got), Err(want)) => assert_eq!(got, want),
        (got, want) => panic!("{llm:?}: got {got:?}, want {want:?}"),
    }
}

#[test]
fn providers_are_built_only_with_their_key_and_usable_settings() {
    check(
        &openai(None, Some("OPENAI_API_KEY")),
        &[("OPENAI_API_KEY", "sk-1")],
        Ok(()),
    );
    check(&openai(Some("http://127.0.0.1:8080/v1"), None), &[], Ok(()));
    check(
        &openai(None, Some("OPENAI_API_KEY")),
        &[],
        Err(
            "the API key variable `OPENAI_API_KEY` is not set; export it in the shell that runs cordon (cordon sends it only to the provider, never into a sandbox)",
        ),
    );
    check(
        &Llm::Anthropic {
            model: "m".to_owned(),
            base_url: None,
            api_key_env: EnvName::parse("ANTHROPIC_API_KEY").expect("name"),
        },
        &[("ANTHROPIC_API_KEY", "")],
        Err("the API key variable `ANTHROPIC_API_KEY` is empty; set it to the provider's key"),
    );
    check(
        &openai(Some("localhost:8080"), None),
        &[],
        Err(
            "`llm.base_url` `localhost:8080` is not a URL cordon can use (the scheme must be `http` or `https`); write it like `https://api.example.com/v1`",
        ),
    );
}

#[test]
fn ssl_cert_file_must_name_a_readable_pem_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("write");
    let llm = openai(Some("https://api.example.com/v1"), None);
    let got = build(
        &llm,
        &[("SSL_CERT_FILE", missing.to_str().expect("utf-8"))],
        None,
    )
    .expect_err("missing file");
    assert!(
        got.starts_with(&format!(
            "cannot read the CA file `{}` named by `SSL_CERT_FILE`: ",
            missing.display()
        )) && got.ends_with("; point the variable at a PEM file or unset it"),
        "{got}"
    );
    let got = build(
        &llm,
        &[("SSL_CERT_FILE", garbage.to_str().expect("utf-8"))],
        None,
    )
    .expect_err("no certificate");
    assert!(got.contains("holds no PEM certificate"), "{got}");
}

#[test]
fn replay_needs_its_transcript_and_reports_bad_lines() {
    let llm = Llm::Replay {
        transcript: RelPath::parse("replay/fix.jsonl").expect("path"),
        model: None,
    };
    assert_eq!(
        build(&llm, &[], None),
        Err(
            "the replay transcript `replay/fix.jsonl` was not read; commit it and run again"
                .to_owned()
        )
    );
    assert_eq!(
        build(&llm, &[], Some(("replay/fix.jsonl", "{\"text\":\"hi\"}\n"))),
        Ok(())
    );
    let err = build(&llm, &[], Some(("replay/fix.jsonl", "\n{oops\n"))).expect_err("bad line");
    assert!(
        err.starts_with("replay/fix.jsonl:2: not a replay turn: "),
        "{err}"
    );
}
