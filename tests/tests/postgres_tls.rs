//! TLS to PostgreSQL end to end, against a PostgreSQL instance of the
//! test's own that accepts only TLS (`hostssl`), with a test CA: the
//! daemon started on it with `verify-full` and the right CA works; a wrong
//! CA or a wrong host name is refused with a clear error; `verify-ca`
//! checks the chain only; `disable` is refused by the server; a client
//! certificate authenticates a role whose `pg_hba` line says `cert`. The
//! password never appears in what the daemon logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;
use tinycode_tests::pg_tls::{TlsServer, server_bin};

use tinycode_tests::{Desk, Output, wait_until};

fn available() -> bool {
    let tools = tinycode_tests::tool_available(&["openssl", "version"], "apt install openssl");
    let server = server_bin().is_some();
    if !server {
        assert!(
            std::env::var_os("CI").is_none(),
            "PostgreSQL's server binaries must be installed in CI (apt install postgresql)"
        );
        eprintln!("no initdb under /usr/lib/postgresql; skipping");
    }
    tools && server
}

/// `ticket list` on a desk whose log is at `url` (the daemon starts).
fn list_on(url: &str) -> (Desk, Output) {
    let desk = Desk::fixture().with_env("TINYCODE_STORE_URL", url);
    let out = desk.run(&["ticket", "list"]);
    (desk, out)
}

fn said(out: &Output) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

#[test]
fn verify_full_with_the_right_ca_connects_and_anything_less_sure_is_refused() {
    if !available() {
        return;
    }
    let pg = TlsServer::start();
    let ca = pg.ca.display().to_string();

    // The right CA and the name on the certificate: the desk works.
    let url = pg.url(
        "postgres:tls-secret-pw",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let (desk, out) = list_on(&url);
    assert_eq!(out.code, 0, "{}\n{}\n{}", said(&out), desk.log(), pg.log());
    assert!(out.stdout.contains("T-1001"), "{}", out.stdout);
    desk.stop();
    assert!(
        !desk.log().contains("tls-secret-pw"),
        "the password was logged"
    );

    // Another CA: refused, saying why.
    let other = pg.other_ca.display().to_string();
    let url = pg.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={other}"),
    );
    let (desk, out) = list_on(&url);
    assert_ne!(out.code, 0, "{}", said(&out));
    let text = format!("{}{}", said(&out), desk.log());
    assert!(
        text.contains("certificate") && text.contains("sslrootcert"),
        "{text}"
    );

    // A name the certificate does not carry: verify-full refuses,
    // verify-ca (the chain only) accepts.
    let url = pg.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let (desk, out) = list_on(&url);
    assert_ne!(out.code, 0, "{}", said(&out));
    let text = format!("{}{}", said(&out), desk.log());
    assert!(text.contains("certificate"), "{text}");
    let url = pg.url(
        "postgres",
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    let (desk, out) = list_on(&url);
    assert_eq!(out.code, 0, "{}\n{}", said(&out), desk.log());
    desk.stop();

    // In clear, to a server that takes only TLS: the server refuses.
    let url = pg.url("postgres", "localhost", "sslmode=disable");
    let (desk, out) = list_on(&url);
    assert_ne!(out.code, 0, "{}", said(&out));
    let text = format!("{}{}", said(&out), desk.log());
    assert!(
        text.contains("no encryption") || text.contains("pg_hba"),
        "{text}"
    );
}

#[test]
fn a_client_certificate_authenticates_its_role() {
    if !available() {
        return;
    }
    let pg = TlsServer::start();
    let ca = pg.ca.display().to_string();
    let (cert, key) = (pg.client_cert.display(), pg.client_key.display());
    let url = pg.url(
        "certuser",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"),
    );
    let (desk, out) = list_on(&url);
    assert_eq!(out.code, 0, "{}\n{}\n{}", said(&out), desk.log(), pg.log());
    desk.stop();
    // Without it, the role's `cert` line refuses the connection.
    let url = pg.url(
        "certuser",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let (desk, out) = list_on(&url);
    assert_ne!(out.code, 0, "{}", said(&out));
    let text = format!("{}{}", said(&out), desk.log());
    assert!(text.contains("certificate"), "{text}");
}

#[test]
fn a_database_that_goes_away_is_said_in_status_and_appends_resume_when_it_returns() {
    if !available() {
        return;
    }
    let pg = TlsServer::start();
    let url = pg.url("postgres", "localhost", "sslmode=require");
    let (desk, out) = list_on(&url);
    assert_eq!(out.code, 0, "{}\n{}", said(&out), desk.log());
    pg.stop();
    // Reads are served from the read models; the status says since when
    // the store is out of reach.
    let said_so = wait_until(Duration::from_secs(30), || {
        desk.ok(&["daemon", "status"])
            .contains("store unreachable since")
    });
    assert!(
        said_so,
        "{}\n{}",
        desk.ok(&["daemon", "status"]),
        desk.log()
    );
    let during = desk.run(&[
        "ticket",
        "create",
        "--subject",
        "during",
        "--customer",
        "x",
        "--body",
        "y",
    ]);
    assert_ne!(
        during.code, 0,
        "an append was acknowledged with the database down: {during:?}"
    );
    pg.start_again();
    let back = wait_until(Duration::from_secs(60), || {
        !desk.ok(&["daemon", "status"]).contains("unreachable")
    });
    assert!(back, "{}", desk.log());
    let created = desk.json(&[
        "ticket",
        "create",
        "--subject",
        "after",
        "--customer",
        "x",
        "--body",
        "y",
    ]);
    let id = created["id"].as_str().unwrap().to_string();
    assert!(desk.ok(&["ticket", "list"]).contains(&id));
    desk.stop();
}

/// Several hosts in the URL with `target_session_attrs=read-write`: the
/// daemon skips a server that takes no writes (a standby, here one set
/// `default_transaction_read_only`) and works on the one that does; the
/// log is only there.
#[test]
fn of_several_hosts_the_daemon_works_on_the_one_that_takes_writes() {
    if !available() {
        return;
    }
    let (standby, primary) = (TlsServer::start(), TlsServer::start());
    standby.psql("ALTER SYSTEM SET default_transaction_read_only = on");
    standby.psql("SELECT pg_reload_conf()");
    let url = format!(
        "postgres://postgres@localhost:{},localhost:{}/postgres?hostaddr=127.0.0.1,127.0.0.1&sslmode=require&target_session_attrs=read-write",
        standby.port, primary.port
    );
    let (desk, out) = list_on(&url);
    assert_eq!(out.code, 0, "{}\n{}", said(&out), desk.log());
    let created = desk.create_ticket("on the primary");
    assert_eq!(created.code, 0, "{}", created.stderr);
    let count = |server: &TlsServer| {
        server.query("SELECT count(*) FROM pg_tables WHERE tablename = 'tinycode_events'")
    };
    assert_eq!(count(&primary), "1");
    assert_eq!(count(&standby), "0");
    desk.stop();
}
