// sluice web UI: the little JavaScript it has, served as a file (the pages' policy allows no
// inline script). Pages work without it; with it, a running step's log grows as it is
// written, a running run's graph and steps refresh, and the changes ask first.
"use strict";

// <form data-confirm="Retry run ID? ...">: asks before the change is sent; dismissed, the
// form is not sent. Listened for on the document, so that the forms of a part the page
// refreshes (a running run's Preempt buttons) ask too.
document.addEventListener("submit", (ev) => {
  const f = ev.target;
  if (f instanceof HTMLFormElement && f.dataset.confirm && !confirm(f.dataset.confirm)) {
    ev.preventDefault();
  }
});

// <pre data-live-log="/runs/ID/steps/S/log.txt" data-from="N">: appends what the step
// writes, until the server says the step has ended.
function followLog(pre) {
  let from = Number(pre.dataset.from || 0);
  const url = pre.dataset.liveLog;
  const tick = async () => {
    try {
      const r = await fetch(url + "?from=" + from, { credentials: "same-origin" });
      if (!r.ok) return;
      const text = await r.text();
      if (text.length > 0) {
        const atEnd = window.innerHeight + window.scrollY >= document.body.offsetHeight - 8;
        pre.append(text);
        if (atEnd) window.scrollTo(0, document.body.scrollHeight);
      }
      from = Number(r.headers.get("x-log-end") || from);
      if (r.headers.get("x-step-ended") === "true") {
        const note = document.getElementById("log-state");
        if (note) note.textContent = "The step has ended.";
        return;
      }
    } catch (e) { /* the server restarting: try again */ }
    setTimeout(tick, 1500);
  };
  setTimeout(tick, 1500);
}

// <div data-live="/runs/ID/live">: replaced by the server's fresh copy every 2 s while the
// run runs.
function followRun(div) {
  const tick = async () => {
    try {
      const r = await fetch(div.dataset.live, { credentials: "same-origin" });
      if (!r.ok) return;
      div.innerHTML = await r.text();
      if (r.headers.get("x-run-ended") === "true") {
        location.reload();
        return;
      }
    } catch (e) { /* try again */ }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("pre[data-live-log]").forEach(followLog);
  document.querySelectorAll("[data-live]").forEach(followRun);
});
