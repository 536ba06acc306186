//! The desk in a browser, end to end: the real daemon on the demo desk, the
//! real `tinycode web`, and Debian's Chromium driven by Playwright
//! (`tests/web/desk_in_browser.py`, which holds the browser checks). CI
//! installs chromium and the `playwright` package (`.ci/run`); elsewhere
//! the test skips when they are missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tinycode_tests::mock_llm::{MockLlm, Reply, text, tool};
use tinycode_tests::{Desk, LineReader, bin, start_web, tool_available, wait_until};

/// The scripted model: a knowledge edit when asked about the refund time,
/// else a long reply streamed slowly (the page shows it grow).
fn scripted(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    if last["role"] == "tool" {
        return text("The edit was decided.");
    }
    if last["content"].to_string().contains("refund time") {
        return tool(
            "propose_knowledge_edit",
            json!({"article_id": "refund-policy", "old_text": "款项在 7 个工作日内退回", "new_text": "款项在 5 个工作日内退回", "rationale": "财务已将退款周期缩短为 5 个工作日"}),
        );
    }
    let words: Vec<String> = (1..=30).map(|i| format!("word{i}")).collect();
    text(&format!("This is a streamed reply: {}.", words.join(" ")))
}

#[test]
fn the_desk_works_in_a_real_browser() {
    let browser = tool_available(
        &["/usr/bin/chromium", "--version"],
        "apt-get install chromium",
    ) && tool_available(
        &["python3", "-c", "import playwright"],
        "pip install playwright",
    );
    if !browser {
        return;
    }
    let mock = MockLlm::respond_slowly(scripted, Duration::from_millis(60));
    let desk = Desk::new()
        .with_env("OPENAI_BASE_URL", &mock.base_url)
        .with_env("OPENAI_API_KEY", "sk-test");
    // The demo desk: its triage leaves escalations waiting for a person.
    desk.ok(&["demo", desk.workspace().to_str().unwrap()]);
    let xss = desk.json(&[
        "ticket",
        "create",
        "--subject",
        "<img src=x onerror=\"window.__xss=1\">",
        "--customer",
        "Mallory",
        "--channel",
        "web",
        "--body",
        "<script>window.__xss=2</script> hello",
    ]);
    let xss = xss["id"].as_str().unwrap().to_string();
    // A session that waits for a knowledge edit's approval (its diff is
    // shown), and one that streams.
    let editing = desk.new_session(&["--model", "openai/gpt-test", "--approve", "ask"]);
    desk.ok(&["session", "send", &editing, "update the refund time"]);
    let edit_waits = wait_until(Duration::from_secs(20), || {
        desk.json(&["approvals", "list"])
            .as_array()
            .is_some_and(|l| {
                l.iter()
                    .any(|a| a["request"]["articleId"] == "refund-policy")
            })
    });
    assert!(edit_waits, "the knowledge edit did not ask");
    let streaming = desk.new_session(&["--model", "openai/gpt-test", "--approve", "ask"]);

    let (_web, link) = start_web(&desk);
    assert!(
        link.starts_with("http://127.0.0.1:") && link.contains("/?token="),
        "{link}"
    );

    let shots = std::env::var("TC_SCREENSHOTS").unwrap_or_else(|_| {
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("web-screenshots")
            .display()
            .to_string()
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("web/desk_in_browser.py");
    let mut python = Command::new("python3");
    python
        .arg(&script)
        .current_dir(desk.workspace())
        .env_remove("TINYCODE_HOME")
        .env("TC_LINK", &link)
        .env("TC_CLI", bin("tinycode"))
        .env("TC_SESSION", &streaming)
        .env("TC_XSS", &xss)
        .env("TC_SHOTS", &shots);
    for (k, v) in desk.env_vars() {
        python.env(k, v);
    }
    let out = python.output().expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser checks failed:\n{stdout}\n{stderr}\n--- tinycode-web log ---\n{}",
        std::fs::read_to_string(desk.state_dir().join("logs/tinycode-web.log")).unwrap_or_default()
    );
    assert!(stdout.contains("all browser checks passed"), "{stdout}");
    for shot in ["desk.png", "approvals.png", "session.png"] {
        let size = std::fs::metadata(Path::new(&shots).join(shot)).map(|m| m.len());
        assert!(
            size.as_ref().is_ok_and(|s| *s > 10_000),
            "no screenshot {shot}: {size:?}"
        );
    }
}

#[test]
fn a_page_beyond_loopback_needs_tls_and_serves_https_with_a_secure_cookie() {
    let desk = Desk::new();
    let refused = desk.run(&["web", "--no-open", "--listen", "0.0.0.0:0"]);
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("--tls-cert") && refused.stderr.contains("127.0.0.1"),
        "{refused:?}"
    );
    if !tool_available(&["openssl", "version"], "apt-get install openssl") {
        return;
    }
    let cert = desk.root.join("cert.pem");
    let key = desk.root.join("key.pem");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    // A key that is not PEM: refused with the file named.
    let bad = desk.run(&[
        "web",
        "--no-open",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        cert.to_str().unwrap(),
    ]);
    assert!(
        bad.code != 0 && bad.stderr.contains("private key"),
        "{bad:?}"
    );
    let mut web = LineReader::spawn({
        let mut cmd = desk.cli();
        cmd.args([
            "web",
            "--no-open",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ]);
        cmd
    });
    let link = web.until(Duration::from_secs(20), |l| !l.is_empty())[0].clone();
    assert!(link.starts_with("https://127.0.0.1:"), "{link}");
    let out = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&cert)
        .arg(&link)
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    assert!(
        head.contains("HttpOnly; SameSite=Strict; Path=/; Secure"),
        "{head}"
    );
    let plain = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(link.replace("https://", "http://"))
        .output()
        .unwrap();
    assert_ne!(
        String::from_utf8_lossy(&plain.stdout),
        "303",
        "plain HTTP is not served"
    );
}
