// /train: follow the runs shown (server-sent events) and ask the server for the live block again, at most about
// once a second, so the curve, the heads and the numbers are redrawn as the run trains. Without JavaScript the
// page is still whole: reload it.
//
// The block is the page's own URL asked with HX-Request (the server answers with `block live` alone, see
// templates/train.html), put in place of #train-live. Plain fetch rather than htmx.ajax: a redraw every second
// must not flash the page's "Loading…" indicator. An event that arrives while a redraw is on its way asks for one
// more after it, so the last one (the run's end) is always drawn; a refused redraw is tried again a little later.
(function () {
  "use strict";
  var REDRAW_MS = 1000, RETRY_MS = 5000;
  var timer = null, inflight = false, again = false;
  var sources = [], following = "";

  function live() { return document.getElementById("train-live"); }

  function refresh(delay) {
    if (inflight) { again = true; return; }
    if (timer) return;
    timer = setTimeout(redraw, delay === undefined ? REDRAW_MS : delay);
  }

  function redraw() {
    timer = null;
    inflight = true;
    again = false;
    var failed = false;
    fetch(location.href, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) { failed = true; return null; } return r.text(); })
      .then(function (html) {
        var shown = live();
        if (!html || !shown) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("train-live");
        if (!fresh) { failed = true; return; }
        shown.replaceWith(fresh);
        if (window.htmx) window.htmx.process(fresh);
        bind();
      })
      .catch(function () { failed = true; })
      .then(function () {
        inflight = false;
        var shown = live();
        if (again) refresh();
        else if (failed && shown && shown.dataset.live === "1") refresh(RETRY_MS);
      });
  }

  function stopFollowing() {
    sources.forEach(function (s) { s.close(); });
    sources = [];
    following = "";
  }

  function follow() {
    var shown = live();
    var urls = shown && shown.dataset.live === "1" ? shown.dataset.events || "" : "";
    if (urls === following) return;  // the same runs: the streams open stay open
    stopFollowing();
    if (!urls || !window.EventSource) return;
    following = urls;
    urls.split(" ").filter(Boolean).forEach(function (url) {
      var es = new EventSource(url);
      ["step", "eval", "snapshot"].forEach(function (kind) { es.addEventListener(kind, function () { refresh(); }); });
      es.addEventListener("end", function () { es.close(); refresh(0); });
      sources.push(es);
    });
  }

  function bind() {
    document.querySelectorAll("form.train-stop").forEach(function (form) {
      if (form.dataset.bound) return;
      form.dataset.bound = "1";
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        fetch(form.action, { method: "POST", credentials: "same-origin" }).then(function () { refresh(0); });
      });
    });
    follow();
  }

  document.addEventListener("DOMContentLoaded", bind);
  document.addEventListener("room:followed", bind);  // a class's screen that took the teacher's next view whole
})();
