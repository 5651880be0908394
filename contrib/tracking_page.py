"""The task status page: plain HTML and JavaScript, no build step. Served at ``/tasks/<id>/page`` (or ``.../page/``);
it reads the JSON endpoints next to it (found from its own path, so it works wherever the app is mounted) and polls
every second: the task summary for the counts, and ``events?since=<cursor>`` for the rows that changed.

Its inline script and style carry a nonce that is new in every response, and its Content-Security-Policy allows
nothing else: no other script, style, image, frame, form or base URL, and requests only to its own origin.
"""

from __future__ import annotations

import secrets

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kiq task __TASK_ID__</title>
<style nonce="__NONCE__">
  body { font: 14px system-ui, sans-serif; margin: 2em; color: #222; }
  .bar { background: #eee; border-radius: 4px; height: 22px; width: 100%; max-width: 640px; }
  .fill { background: #3a7; height: 100%; border-radius: 4px; width: 0; transition: width .3s; }
  .counts span { margin-right: 1.2em; }
  table { border-collapse: collapse; margin-top: 1em; }
  td, th { padding: 2px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
  .finished { color: #285; } .failed { color: #b60; } .error { color: #c22; } .working { color: #26b; }
  code { font-size: 12px; }
</style>
</head>
<body data-task="__TASK_ID__" data-complete="false">
<h1 id="name">Task</h1>
<div class="bar"><div class="fill" id="fill"></div></div>
<p><strong id="percent">0</strong>% done (<span id="done">0</span> of <span id="total">?</span>)
   <span id="state"></span></p>
<p class="counts">
  <span>enqueued <b id="count-enqueued">0</b></span><span>working <b id="count-working">0</b></span>
  <span>finished <b id="count-finished">0</b></span><span>failed <b id="count-failed">0</b></span>
  <span>error <b id="count-error">0</b></span>
</p>
<p id="push-error" class="error"></p>
<table><thead><tr><th>job</th><th>args</th><th>status</th><th>attempts</th><th>last message</th>
<th>last error</th></tr></thead><tbody id="jobs"></tbody></table>
<script nonce="__NONCE__">
"use strict";
const taskId = document.body.dataset.task;
// the page is at <prefix>/tasks/<id>/page, with or without a trailing slash: a relative URL would break on one
const base = location.pathname.replace(/\/page\/*$/, "");
let cursor = 0;
const rows = new Map();

function cell(row, index, text) { row.cells[index].textContent = text == null ? "" : String(text); }

// a running job's latest self.progress(done, total): " 40%" (capped: done may pass an estimated total), or " 400"
function progressText(progress) {
  if (!progress) return "";
  if (!progress.total) return " " + progress.done;
  return " " + Math.min(100, Math.floor(100 * progress.done / progress.total)) + "%";
}

function showEvent(event) {
  let row = rows.get(event.job_id);
  if (!row) {
    row = document.getElementById("jobs").insertRow();
    for (let i = 0; i < 6; i++) row.insertCell();
    row.dataset.job = event.job_id;
    rows.set(event.job_id, row);
  }
  const last = event.messages.length ? event.messages[event.messages.length - 1].text : "";
  cell(row, 0, event.job_id); cell(row, 1, JSON.stringify(event.params));
  cell(row, 2, event.status + (event.status === "working" ? progressText(event.progress) : ""));
  cell(row, 3, event.attempts); cell(row, 4, last); cell(row, 5, event.last_error);
  row.cells[2].className = event.status;
  row.dataset.status = event.status;
}

function showSummary(task) {
  const percent = Math.floor(task.progress * 100);
  document.getElementById("name").textContent = task.name;
  document.getElementById("fill").style.width = percent + "%";
  document.getElementById("percent").textContent = percent;
  document.getElementById("done").textContent = task.done;
  document.getElementById("total").textContent = task.total;
  for (const [status, count] of Object.entries(task.counts)) {
    document.getElementById("count-" + status).textContent = count;
  }
  document.getElementById("push-error").textContent = task.push_error ? "push failed: " + task.push_error : "";
  document.getElementById("state").textContent = task.complete ? "complete" : "running";
  document.body.dataset.complete = String(task.complete);
}

async function getJSON(url) {
  const response = await fetch(url, {cache: "no-store"});
  if (!response.ok) throw new Error(url + ": " + response.status);
  return response.json();
}

async function poll() {
  try {
    const summary = await getJSON(base + "?events=0");
    let changes;
    do {  // every change since the last poll, page by page
      changes = await getJSON(base + "/events?since=" + cursor);
      changes.events.forEach(showEvent);
      cursor = changes.cursor;
    } while (changes.more);
    showSummary(summary);
    if (summary.complete && cursor >= summary.cursor) return;  // final: stop polling
  } catch (error) {
    document.getElementById("state").textContent = "(retrying: " + error.message + ")";
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
"""


def new_nonce() -> str:
    return secrets.token_urlsafe(18)


def content_security_policy(nonce: str) -> str:
    """The page's policy: its own inline script and style (by ``nonce``), fetches to its origin, nothing else."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def render_page(task_id: str, nonce: str) -> str:
    """The page for one task (``task_id`` must already be validated: 32 hex digits; ``nonce``: from new_nonce)."""
    return PAGE.replace("__TASK_ID__", task_id).replace("__NONCE__", nonce)
