// tinycode's page script: live updates over server-sent events, forms that
// post in place, and a notification when an approval waits while the tab is
// hidden. Hand-written, no library, no build step; served by tinycode-web
// from its binary. Everything shown comes from the server already escaped;
// what this script writes itself goes through textContent.

const csrf = document.querySelector('meta[name="csrf"]')?.content ?? "";
const liveState = document.getElementById("live-state");
const WATCHDOG_MS = 25000; // the server pings every 10 s

function showState(s) {
  if (!liveState) return;
  liveState.dataset.state = s;
  liveState.textContent = s === "live" ? "●" : "○";
  liveState.title = s === "live" ? "live" : "reconnecting…";
}

// One server-sent event stream that survives real networks: the browser's
// own retry sends Last-Event-ID; when the stream is closed for good, goes
// quiet past the watchdog, or the tab comes back from the background, it
// is opened again after the last event this page applied.
class Live {
  constructor(url, handlers, after, unordered = [], opened = () => {}) {
    this.unordered = new Set(unordered);
    this.opened = opened;
    this.url = url; // (after) => string
    this.handlers = handlers; // name -> (event) => void
    this.after = after; // the last sequence this page holds
    this.open();
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && (!this.source || this.source.readyState !== EventSource.OPEN)) this.reopen();
    });
    window.addEventListener("online", () => this.reopen());
  }
  open() {
    const source = new EventSource(this.url(this.after));
    this.source = source;
    source.onopen = () => { showState("live"); this.beat(); this.opened(); };
    source.onerror = () => {
      showState("offline");
      if (source.readyState === EventSource.CLOSED) setTimeout(() => this.source === source && this.reopen(), 1000);
    };
    source.addEventListener("ping", () => this.beat());
    source.addEventListener("gone", () => { source.close(); setTimeout(() => this.reopen(), 2000); });
    for (const [name, handle] of Object.entries(this.handlers)) {
      source.addEventListener(name, (e) => {
        this.beat();
        // Live-only events (deltas) carry no id of their own: a message's
        // lastEventId is then the stream's last id, not theirs.
        if (this.unordered.has(name)) return handle(e);
        const seq = Number(e.lastEventId || 0);
        if (seq <= this.after) return; // seen already
        handle(e);
        this.after = seq;
      });
    }
    this.beat();
  }
  beat() {
    clearTimeout(this.dog);
    this.dog = setTimeout(() => this.reopen(), WATCHDOG_MS);
  }
  reopen() {
    this.source?.close();
    this.open();
  }
}

// ---- parts of the page that refresh when their streams change

const regions = [...document.querySelectorAll("[data-live]")];
const dirty = new Set();
let flushTimer = null;

function typingIn(region) {
  const a = document.activeElement;
  return a && region.contains(a) && (a.tagName === "TEXTAREA" || a.tagName === "INPUT") && a.value !== "";
}

function touched(stream) {
  for (const r of regions) {
    if (r.dataset.live.split(",").some((p) => stream.startsWith(p))) dirty.add(r);
  }
  if (dirty.size && !flushTimer) flushTimer = setTimeout(flush, 100);
}

// Each refresh of a part is numbered: an older answer that lands after a
// newer one is dropped.
const asked = new Map();

async function flush() {
  flushTimer = null;
  for (const r of [...dirty]) {
    if (typingIn(r)) continue; // refreshed when the person leaves the field
    dirty.delete(r);
    const n = (asked.get(r) ?? 0) + 1;
    asked.set(r, n);
    try {
      const res = await fetch(r.dataset.src, { credentials: "same-origin" });
      const html = res.ok ? await res.text() : null;
      if (asked.get(r) !== n) continue; // a newer refresh is on its way
      if (html === null) {
        dirty.add(r);
        continue;
      }
      r.innerHTML = html;
      r.dispatchEvent(new CustomEvent("refreshed", { bubbles: true }));
    } catch {
      if (asked.get(r) === n) dirty.add(r);
    }
  }
  if (dirty.size && !flushTimer) flushTimer = setTimeout(flush, 1000);
}
document.addEventListener("focusout", () => { if (dirty.size && !flushTimer) flushTimer = setTimeout(flush, 100); });

// ---- notifications

const notifyButton = document.getElementById("notify");
if (notifyButton && "Notification" in window && Notification.permission === "default") {
  notifyButton.hidden = false;
  notifyButton.addEventListener("click", async () => {
    await Notification.requestPermission();
    notifyButton.hidden = true;
  });
}

function notify(approval) {
  if (!document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
  const what = approval.question ? `asks: ${approval.question}` : `${approval.tool} waits for a decision`;
  const n = new Notification(`Approval ${approval.id}`, { body: what, tag: approval.id });
  n.onclick = () => {
    window.focus();
    location.href = `/approvals#${encodeURIComponent(approval.id)}`;
  };
}

// ---- live: a session's timeline, or the desk's changes
//
// One stream per page: a browser opens at most six connections to a
// server over HTTP/1.1, and each open tab holds one.

const timeline = document.getElementById("timeline");
if (timeline) {
  const streaming = document.getElementById("streaming");
  const streamingText = document.getElementById("streaming-text");
  const session = timeline.dataset.session;
  const clearStreaming = () => {
    streamingText.textContent = "";
    streaming.hidden = true;
  };
  new Live(
    (after) => `/live/session/${encodeURIComponent(session)}?after=${after}`,
    {
      item(e) {
        const t = document.createElement("template");
        t.innerHTML = e.data;
        const kind = t.content.firstElementChild?.dataset.kind ?? "";
        timeline.append(t.content);
        clearStreaming();
        // The session's stream holds copies of its approvals' events.
        if (kind.startsWith("approval")) touched("approval-");
        if (nearBottom()) window.scrollTo(0, document.body.scrollHeight);
      },
      delta(e) {
        const d = JSON.parse(e.data);
        if (d.kind !== "text") return;
        streamingText.textContent += d.text;
        streaming.hidden = false;
      },
    },
    Number(timeline.dataset.after || 0),
    ["delta"],
    // A new connection starts with the running step's text so far.
    clearStreaming,
  );
} else {
  const prefixes = new Set(["approval-"]);
  for (const r of regions) for (const p of r.dataset.live.split(",")) prefixes.add(p);
  new Live(
    (after) => `/live?p=${encodeURIComponent([...prefixes].join(","))}&after=${after}`,
    {
      change(e) {
        const c = JSON.parse(e.data);
        touched(c.stream);
        if (c.approval) notify(c.approval);
      },
    },
    Number(document.body.dataset.after || 0),
  );
}

function nearBottom() {
  return window.innerHeight + window.scrollY >= document.body.scrollHeight - 200;
}

// ---- forms that post in place (the composer, cancel)

for (const form of document.querySelectorAll("form[data-async]")) {
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const button = form.querySelector("button");
    if (button) button.disabled = true;
    let error = form.querySelector(".form-error");
    if (!error) {
      error = document.createElement("p");
      error.className = "form-error";
      form.append(error);
    }
    error.textContent = "";
    try {
      const res = await fetch(form.action, {
        method: "POST",
        credentials: "same-origin",
        headers: { "x-csrf-token": csrf, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams(new FormData(form)),
      });
      if (res.ok) {
        const text = form.querySelector("textarea");
        if (text) text.value = "";
      } else {
        const page = new DOMParser().parseFromString(await res.text(), "text/html");
        error.textContent = page.getElementById("why")?.textContent ?? `failed (${res.status})`;
      }
    } catch {
      error.textContent = "the page could not reach tinycode-web; try again";
    } finally {
      if (button) button.disabled = false;
    }
  });
}

// Ctrl/Cmd+Enter sends the composer.
document.getElementById("composer")?.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
    e.preventDefault();
    e.currentTarget.requestSubmit();
  }
});
