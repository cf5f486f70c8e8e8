// /train: follow the runs shown (server-sent events) and ask the server for the live block again, at most about
// once a second, so the curve, the heads and the numbers are redrawn as the run trains. Without JavaScript the
// page is still whole: reload it.
(function () {
  "use strict";
  let pending = false;
  let sources = [];

  function refresh() {
    if (pending) return;
    pending = true;
    setTimeout(function () {
      fetch(location.href, { headers: { "HX-Request": "true" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          pending = false;
          const live = document.getElementById("train-live");
          if (html && live) {
            const doc = new DOMParser().parseFromString(html, "text/html");
            const fresh = doc.getElementById("train-live");
            if (fresh) { live.replaceWith(fresh); bind(); }
          }
        })
        .catch(function () { pending = false; });
    }, 1000);
  }

  function follow() {
    sources.forEach(function (s) { s.close(); });
    sources = [];
    const live = document.getElementById("train-live");
    if (!live || live.dataset.live !== "1" || !window.EventSource) return;
    live.dataset.events.split(" ").filter(Boolean).forEach(function (url) {
      const es = new EventSource(url);
      ["step", "eval", "snapshot"].forEach(function (kind) { es.addEventListener(kind, refresh); });
      es.addEventListener("end", function () { es.close(); refresh(); });
      sources.push(es);
    });
  }

  function bind() {
    document.querySelectorAll("form.train-stop").forEach(function (form) {
      form.addEventListener("submit", function (ev) {
        ev.preventDefault();
        fetch(form.action, { method: "POST" }).then(refresh);
      });
    });
    if (!sources.length) follow();
    const live = document.getElementById("train-live");
    if (live && live.dataset.live !== "1") { sources.forEach(function (s) { s.close(); }); sources = []; }
  }

  document.addEventListener("DOMContentLoaded", bind);
})();
