// kiq dashboard: local times, confirmations, select-all, and the live graph. No framework, no build step;
// loaded with `defer` from the dashboard's own origin (its Content-Security-Policy allows nothing else).
"use strict";

const numbers = new Intl.NumberFormat();
const moments = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  timeZoneName: "short",
});
const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

function ago(seconds) {
  const units = [["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  for (const [unit, size] of units) {
    if (Math.abs(seconds) >= size || unit === "second") return relative.format(Math.round(seconds / size), unit);
  }
  return "";
}

function localiseTimes(root) {
  for (const node of root.querySelectorAll("time[data-epoch]")) {
    const epoch = Number(node.dataset.epoch);
    if (!Number.isFinite(epoch)) continue;
    node.title = node.textContent;  // the UTC text stays as the tooltip
    node.textContent = moments.format(new Date(epoch * 1000));
    node.dataset.ago = ago(epoch - Date.now() / 1000);
    node.setAttribute("aria-label", `${node.textContent} (${node.dataset.ago})`);
  }
}

function confirmations() {
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-confirm]");
    if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
  });
}

function selectAll() {
  for (const box of document.querySelectorAll("input.select-all")) {
    box.addEventListener("change", () => {
      const selector = `input[type=checkbox][name=key][form="${box.dataset.form}"]`;
      for (const item of document.querySelectorAll(selector)) item.checked = box.checked;
    });
  }
}

const SVG = "http://www.w3.org/2000/svg";

function liveGraph(container) {
  const source = container.dataset.source;
  const every = Math.max(1, Number(container.dataset.poll) || 5) * 1000;
  const width = 900, height = 160, keep = 60;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", "jobs processed and failed per poll");
  const lines = {};
  for (const name of ["processed", "failed"]) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", name);
    svg.appendChild(line);
    lines[name] = line;
  }
  container.appendChild(svg);
  const status = document.getElementById("live-status");
  const points = { processed: [], failed: [] };
  let last = null;

  function draw() {
    const highest = Math.max(1, ...points.processed, ...points.failed);
    for (const name of ["processed", "failed"]) {
      const values = points[name];
      const step = width / (keep - 1);
      const offset = keep - values.length;
      lines[name].setAttribute("points", values.map(
        (value, index) => `${((offset + index) * step).toFixed(1)},${(height - 4 - (height - 8) * value / highest).toFixed(1)}`
      ).join(" "));
    }
    container.dataset.points = String(points.processed.length);
  }

  async function poll() {
    try {
      const answer = await fetch(source, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
      const stats = await answer.json();
      for (const [key, id] of [["processed", "processed"], ["failed", "failed"], ["workers_size", "busy"],
        ["enqueued", "enqueued"], ["retry_size", "retries"], ["scheduled_size", "scheduled"],
        ["dead_size", "dead"], ["processes_size", "processes"]]) {
        const node = document.getElementById(`stat-${id}`);
        if (node) node.textContent = numbers.format(stats[key]);
      }
      if (last !== null) {
        for (const name of ["processed", "failed"]) {
          points[name].push(Math.max(0, stats[name] - last[name]));
          if (points[name].length > keep) points[name].shift();
        }
        draw();
      }
      last = stats;
      status.textContent = `updated ${new Date().toLocaleTimeString()}`;
      status.classList.remove("error");
    } catch (error) {
      status.textContent = `not updated: ${error.message}`;
      status.classList.add("error");
    }
  }
  poll();
  setInterval(poll, every);
}

document.addEventListener("DOMContentLoaded", () => {
  localiseTimes(document);
  confirmations();
  selectAll();
  const graph = document.getElementById("live-graph");
  if (graph) liveGraph(graph);
});
