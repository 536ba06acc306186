"""The desk in a real browser: Debian's Chromium driven by Playwright.

Run by tests/tests/web.rs, which starts the daemon on the demo desk (its
triage left escalations waiting for approval), a session on the scripted
model that asks for a knowledge edit, and `tinycode web --no-open`. The
environment says where things are:

  TC_LINK       the one-time link tinycode-web printed
  TC_CLI        the tinycode binary (run in the workspace, as a person would)
  TC_SESSION    the session on the scripted model
  TC_XSS        the id of a ticket whose subject and body are markup
  TC_SHOTS      where the screenshots go

Each check raises on failure; the process exits non-zero then.
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

LINK = os.environ["TC_LINK"]
BASE = LINK.split("/?")[0]
CLI = os.environ["TC_CLI"]
SESSION = os.environ["TC_SESSION"]
XSS = os.environ["TC_XSS"]
SHOTS = os.environ["TC_SHOTS"]
os.makedirs(SHOTS, exist_ok=True)


def cli(*args):
    out = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"tinycode {args} failed: {out.stderr}"
    return out.stdout


def cli_json(*args):
    return json.loads(cli("--json", *args))


def events(prefix):
    return [json.loads(line) for line in cli("--json", "events", "--stream", prefix).splitlines()]


def wait(what, cond, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def fresh_link():
    return cli("web", "--url").strip()


def watched(page):
    """Print what the page's script says and throws (for a failure's story)."""
    page.on("console", lambda m: print(f"   console.{m.type}: {m.text}"))
    page.on("pageerror", lambda e: print(f"   page error: {e}"))
    return page


def signed_in(browser, name):
    """A browser context holding a session of `name`, and its page on /."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = watched(context.new_page())
    page.on("dialog", lambda d: (_ for _ in ()).throw(AssertionError(f"a dialog opened: {d.message}")))
    page.goto(fresh_link())
    expect(page.locator("h1")).to_have_text("Who is working?")
    page.fill("#name", name)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Desk")
    return context, page


def step(name):
    print(f"-- {name}", flush=True)


def security(browser):
    step("the one-time link opens the desk once")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = watched(context.new_page())
    page.goto(LINK)
    expect(page.locator("h1")).to_have_text("Who is working?")
    page.fill("#name", "Ana")
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Desk")
    assert page.locator("tr.ticket").count() > 0, "the desk lists no ticket"
    page.wait_for_selector("#live-state[data-state=live]")
    page.screenshot(path=f"{SHOTS}/desk.png")

    other = browser.new_context()
    again = other.new_page().goto(LINK)
    assert again.status == 401, f"a spent link answered {again.status}"
    other.close()

    step("another Host (DNS rebinding): refused")
    port = BASE.rsplit(":", 1)[1]
    try:
        urllib.request.urlopen(urllib.request.Request(BASE + "/", headers={"Host": f"evil.example:{port}"}))
        raise AssertionError("a request naming another host was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 421, e.code

    step("no cookie: 401")
    try:
        urllib.request.urlopen(BASE + "/tickets/T-1001")
        raise AssertionError("a request without a cookie was answered")
    except urllib.error.HTTPError as e:
        assert e.code == 401, e.code

    step("a foreign Origin, or no CSRF token: 403, nothing stored")
    before = len(cli_json("ticket", "show", "T-1001")["notes"])
    csrf = page.locator('meta[name="csrf"]').get_attribute("content")
    foreign = context.request.post(
        BASE + "/tickets/T-1001/note",
        form={"csrf": csrf, "text": "from evil"},
        headers={"Origin": "http://evil.example"},
    )
    assert foreign.status == 403, foreign.status
    no_token = context.request.post(
        BASE + "/tickets/T-1001/note", form={"text": "no token"}, headers={"Origin": BASE}
    )
    assert no_token.status == 403, no_token.status
    too_large = context.request.post(
        BASE + "/tickets/T-1001/note",
        form={"csrf": csrf, "text": "x" * 300_000},
        headers={"Origin": BASE},
    )
    assert too_large.status == 413, too_large.status
    after = cli_json("ticket", "show", "T-1001")
    assert len(after["notes"]) == before, "a refused change stored a note"
    headers = page.goto(BASE + "/").headers
    assert "script-src 'self'" in headers["content-security-policy"], headers
    return context, page


def markup_is_text(page):
    step("a ticket written as markup renders as text; no script runs")
    page.goto(f"{BASE}/tickets/{XSS}")
    expect(page.locator("h1 .subject")).to_contain_text("<img src=x onerror=")
    expect(page.locator("ol.messages pre.text").first).to_contain_text("<script>")
    assert page.evaluate("window.__xss") is None, "a customer's markup ran"
    assert page.locator("main img").count() == 0
    page.goto(f"{BASE}/?q=onerror")
    assert page.evaluate("window.__xss") is None


def sla_clock(page):
    step("every ticket shows its SLA clock: on the desk and on its page")
    page.goto(BASE + "/")
    row = page.locator(f'tr[data-id="{XSS}"]')
    expect(row.locator("span.sla")).to_contain_text("ok · in 7h")
    page.goto(f"{BASE}/tickets/{XSS}")
    expect(page.locator("dd.sla-clock").first).to_contain_text("first_response · 8h00m (ticket): due ")


def reports_page(page):
    step("a report made in the page shows its figures and both charts; one made in a terminal appears live")
    # The day the markup ticket came in (UTC, the desk's zone): the
    # report counts it.
    day = cli_json("ticket", "show", XSS)["createdAt"][:10]
    page.goto(BASE + "/reports")
    page.locator('form.make-report input[name="day"]').fill(day)
    page.locator("form.make-report button[type=submit]").click()
    page.wait_for_url(lambda url: "/reports/R-" in url)
    expect(page.locator("#report-summary")).to_contain_text(" new, ")
    expect(page.locator('table[data-table="byChannel"] tbody tr').first).to_be_visible()
    charts = page.locator(".charts img")
    expect(charts).to_have_count(2)
    for i in range(2):
        wait("a chart drawn", lambda: charts.nth(i).evaluate("i => i.complete && i.naturalWidth > 0"))
    # A chart is an image with a policy of its own: no script at all.
    chart = page.request.get(BASE + charts.nth(0).get_attribute("src"))
    assert chart.headers["content-type"] == "image/svg+xml", chart.headers
    policy = chart.headers["content-security-policy"]
    assert policy.startswith("default-src 'none'") and "script-src" not in policy, policy
    made = page.url.rsplit("/", 1)[1]
    assert made in [r["reportId"] for r in cli_json("report", "list")]
    page.screenshot(path=os.path.join(SHOTS, "report.png"), full_page=True)
    page.goto(BASE + "/reports")
    expect(page.locator("table.reports tbody tr")).to_have_count(1)
    other = cli_json("report")["report"]["reportId"]
    expect(page.locator(f'table.reports a[href="/reports/{other}"]')).to_be_visible(timeout=5000)


def escalation_waiting(page):
    """The id, and ticket, of an escalation the demo's triage waits on."""
    page.goto(BASE + "/approvals")
    card = page.locator("article.approval", has=page.locator("code.tool", has_text="escalate_ticket")).first
    approval = card.get_attribute("data-id")
    args = json.loads(card.locator("pre.args").inner_text())
    return approval, args["ticket_id"]


def approvals(browser, page):
    step("two tabs on /approvals: a decision in one shows in the other within a second")
    approval, ticket = escalation_waiting(page)
    other_context, other = signed_in(browser, "Bo")
    other.goto(BASE + "/approvals")
    other.wait_for_selector("#live-state[data-state=live]")
    expect(other.locator(f"article.approval[data-id='{approval}']")).to_be_visible()
    page.locator(f"article.approval[data-id='{approval}'] button.allow").click()
    page.wait_for_load_state()
    decided = time.time()
    row = other.locator(f"#decided-{approval}")
    expect(row.locator("td.by")).to_contain_text("Ana (via tinycode-web", timeout=1000)
    print(f"   seen in the other tab {1000 * (time.time() - decided):.0f} ms after the decision")
    expect(other.locator(f"article.approval[data-id='{approval}']")).to_have_count(0)

    step("Enter in a denial's reason denies, never approves")
    page.goto(BASE + "/approvals")
    card = page.locator("article.approval", has=page.locator("code.tool", has_text="escalate_ticket")).first
    denied = card.get_attribute("data-id")
    card.locator("input[name=reason]").fill("not without the order number")
    card.locator("input[name=reason]").press("Enter")
    page.wait_for_load_state()
    expect(page.locator(f"#decided-{denied}")).to_have_attribute("data-state", "denied")
    shown = cli_json("approvals", "show", denied)
    assert shown["decision"]["decision"] == "APPROVAL_DECISION_DENY", shown["decision"]
    assert shown["decision"]["reason"] == "not without the order number", shown["decision"]

    step("the waiting triage resumes; the ticket is escalated once; the CLI agrees")
    shown = cli_json("approvals", "show", approval)
    assert shown["decision"]["by"]["name"].startswith("Ana (via tinycode-web/"), shown
    wait("the escalation", lambda: cli_json("ticket", "show", ticket).get("escalateLevel", 0) > 0)
    wait("the triage to finish", lambda: any("triageFinished" in e for e in events(f"triage-{ticket}")))
    escalations = [e for e in events(f"ticket-{ticket}") if "ticketEscalated" in e]
    assert len(escalations) == 1, escalations

    step("a knowledge edit waits with its diff")
    page.goto(BASE + "/approvals")
    expect(page.locator("pre.diff .add").first).to_be_visible()
    page.screenshot(path=f"{SHOTS}/approvals.png", full_page=True)
    other_context.close()


def ticket_actions(page):
    step("a reply, a route and a close made in the page")
    ticket = "T-1002"
    page.goto(f"{BASE}/tickets/{ticket}")
    reply = "您好，包裹已在途中，预计明天送达。"
    page.fill("form.reply textarea", reply)
    page.click("form.reply button")
    expect(page.locator("ol.messages")).to_contain_text(reply)
    current = cli_json("ticket", "show", ticket)["queue"]
    options = page.locator("form.route select option").all_inner_texts()
    target = next(q for q in options if q and q != current)
    page.select_option("form.route select", target)
    page.fill("form.route input[name=reason]", "物流组今天满了")
    page.click("form.route button")
    expect(page.locator("dd.queue")).to_have_text(target)
    page.click("form.status button")
    expect(page.locator("dd.status")).to_have_text("resolved")
    expect(page.locator("ol.history")).to_contain_text("by Ana (via tinycode-web")

    shown = cli_json("ticket", "show", ticket)
    assert shown["status"] == "resolved" and shown["queue"] == target, shown
    assert shown["messages"][-1]["text"] == reply, shown["messages"][-1]
    stream = events(f"ticket-{ticket}")
    routed = [e["ticketRouted"] for e in stream if "ticketRouted" in e]
    assert routed[-1]["by"]["name"].startswith("Ana (via tinycode-web/"), routed[-1]
    assert "origin" not in routed[-1], "a person's routing has no tool origin"
    closed = [e["ticketStatusChanged"] for e in stream if "ticketStatusChanged" in e]
    assert closed[-1]["by"]["name"].startswith("Ana (via"), closed[-1]
    workspace = os.getcwd()

    def in_file():
        with open(f"{workspace}/tickets/{ticket}.json", encoding="utf-8") as f:
            t = json.load(f)
        return t["status"] == "resolved" and any(m.get("text") == reply for m in t["messages"])

    wait("the ticket file to hold the reply and the close", in_file)


def timeline_sequences(page):
    return [int(s) for s in page.eval_on_selector_all("#timeline li.ev", "els => els.map(e => e.dataset.seq)")]


def turns_completed():
    return sum(1 for e in events(f"session-{SESSION}") if "turnCompleted" in e)


def live_session(context, page):
    step("a session streams its text into the page; a message from a terminal appears")
    page.goto(f"{BASE}/sessions/{SESSION}")
    page.wait_for_selector("#live-state[data-state=live]")
    done = turns_completed()
    cli("session", "send", SESSION, "hello from the terminal")
    expect(page.locator("#timeline")).to_contain_text("hello from the terminal")
    lengths = set()
    end = time.time() + 20
    while time.time() < end and turns_completed() == done:
        lengths.add(len(page.locator("#streaming-text").text_content() or ""))
        time.sleep(0.05)
    grew = sorted(n for n in lengths if n > 0)
    if len(grew) < 3:
        print(page.locator("#timeline").inner_html()[-3000:])
    assert len(grew) >= 3, f"the reply did not stream into the page: lengths seen {grew}"
    expect(page.locator("#timeline")).to_contain_text("streamed reply", timeout=5000)
    page.screenshot(path=f"{SHOTS}/session.png", full_page=True)

    step("offline while events are appended: after reconnecting, each once, in order")
    done = turns_completed()
    context.set_offline(True)
    cli("session", "send", SESSION, "first while offline")
    cli("session", "send", SESSION, "second while offline")
    wait("both turns", lambda: turns_completed() >= done + 2, timeout=30)
    context.set_offline(False)
    expect(page.locator("#timeline")).to_contain_text("second while offline", timeout=10000)
    wait("the last event", lambda: timeline_sequences(page)[-1] == int(events(f"session-{SESSION}")[-1]["sequence"]))
    shown = timeline_sequences(page)
    stored = [int(e["sequence"]) for e in events(f"session-{SESSION}")]
    assert shown == stored, f"the page shows {shown}, the log holds {stored}"


FAKE_NOTIFICATIONS = """
Object.defineProperty(document, "hidden", { get: () => true });
window.__notes = [];
window.Notification = class {
  static permission = "granted";
  static requestPermission() { return Promise.resolve("granted"); }
  constructor(title, options) { this.title = title; this.options = options; window.__notes.push(this); }
};
"""


def notification(browser):
    step("an approval requested while the tab is hidden raises a notification that opens it")
    context, page = signed_in(browser, "Cy")
    context.add_init_script(FAKE_NOTIFICATIONS)
    page.goto(BASE + "/sessions")
    page.wait_for_selector("#live-state[data-state=live]")
    session = cli("session", "new", "--model", "openai/gpt-test", "--approve", "ask").split()[0]
    cli("session", "send", session, "update the refund time again")
    wait("a notification", lambda: page.evaluate("window.__notes.length") > 0)
    title = page.evaluate("window.__notes[0].title")
    approval = title.split()[-1]
    assert title.startswith("Approval A-"), title
    assert "propose_knowledge_edit" in page.evaluate("window.__notes[0].options.body")
    page.evaluate("window.__notes[0].onclick()")
    page.wait_for_url(f"**/approvals#{approval}")
    expect(page.locator(f"article.approval[data-id='{approval}']")).to_be_visible()
    context.close()


def main():
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless=new", "--no-sandbox", "--disable-gpu"],
        )
        context, page = security(browser)
        markup_is_text(page)
        sla_clock(page)
        reports_page(page)
        approvals(browser, page)
        ticket_actions(page)
        live_session(context, page)
        notification(browser)
        browser.close()
    print("all browser checks passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 — any failure fails the test, with its message
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        raise
