// Attention Lab: keyboard shortcuts and the heat-map hover readout. Everything else is links, forms and htmx.
(function () {
  "use strict";

  var KEYS = {
    ArrowRight: "[data-action=next]",
    ArrowLeft: "[data-action=prev]",
    m: "[data-toggle=mask]",
    s: "[data-toggle=scale]",
  };

  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    var t = e.target;
    if (t && t.closest && t.closest("input, select, textarea, [contenteditable]")) return;
    var selector = KEYS[e.key];
    if (!selector) return;
    var el = document.querySelector(selector);
    if (el && el.getAttribute("href")) {
      e.preventDefault();
      // A key can arrive right after a swap, before htmx has boosted the new link: process it first, so the
      // step is a panel swap and never a full page load.
      if (window.htmx) window.htmx.process(el);
      el.click();
    }
  });

  // Large traces: the zoomed heat map reads (query, key, value) under the pointer, one row fetched at a time.
  var rowCache = {};

  function readout(img, e) {
    var out = document.getElementById("hover-readout");
    if (!out) return;
    var box = img.getBoundingClientRect();
    var rows = +img.dataset.rows, cols = +img.dataset.cols;
    var r = Math.min(rows - 1, Math.max(0, Math.floor((e.clientY - box.top) / box.height * rows)));
    var c = Math.min(cols - 1, Math.max(0, Math.floor((e.clientX - box.left) / box.width * cols)));
    // The readout follows the pointer (CSSOM, not an inline style attribute: the CSP allows it).
    out.style.left = (e.clientX - box.left + 14) + "px";
    out.style.top = (e.clientY - box.top + 14) + "px";
    var rowLabels = JSON.parse(img.dataset.rowLabels), colLabels = JSON.parse(img.dataset.colLabels);
    var key = img.dataset.window + "#" + r;
    var show = function (values) {
      var v = values[c];
      out.textContent = "(" + r + ": " + rowLabels[r] + ", " + c + ": " + colLabels[c] + ") = " +
        (v === null ? "−∞" : v);
    };
    if (rowCache[key]) return show(rowCache[key]);
    out.textContent = "(" + r + ": " + rowLabels[r] + ", " + c + ": " + colLabels[c] + ") …";
    fetch(img.dataset.window + "&row=" + r + "&col=0&rows=1&cols=" + cols)
      .then(function (res) { return res.ok ? res.json() : Promise.reject(res.status); })
      .then(function (body) { rowCache[key] = body.values[0]; show(rowCache[key]); })
      .catch(function () { /* the readout keeps the labels */ });
  }

  // Clicking the map opens the 16 × 16 window of exact numbers around the clicked cell (an htmx swap, URL pushed).
  document.addEventListener("click", function (e) {
    var img = e.target;
    if (!img || img.id !== "zoom" || !img.dataset.tileUrl) return;
    var box = img.getBoundingClientRect();
    var rows = +img.dataset.rows, cols = +img.dataset.cols;
    var r = Math.floor((e.clientY - box.top) / box.height * rows);
    var c = Math.floor((e.clientX - box.left) / box.width * cols);
    var r0 = Math.max(0, Math.min(rows - 16, r - 8)), c0 = Math.max(0, Math.min(cols - 16, c - 8));
    var a = document.createElement("a");
    a.href = img.dataset.tileUrl.replace("ROW%2CCOL", r0 + "%2C" + c0).replace("ROW,COL", r0 + "," + c0);
    a.hidden = true;
    img.closest("main").appendChild(a);
    if (window.htmx) window.htmx.process(a);
    a.click();
    a.remove();
  });

  var pending = null;
  document.addEventListener("mousemove", function (e) {
    var img = e.target;
    if (!img || img.id !== "zoom") return;
    if (pending) return;
    pending = window.requestAnimationFrame(function () { pending = null; readout(img, e); });
  });
})();

// The language links and the JSON twin in <head> sit outside the swapped panel: after htmx pushes a new URL,
// point them at it, so switching language keeps the stage and the twin stays the view's.
(function () {
  "use strict";
  function relink() {
    var twin = document.querySelector("a[data-twin=json]");
    var alt = document.querySelector('link[rel=alternate][type="application/json"]');
    if (twin && alt) alt.setAttribute("href", twin.getAttribute("href"));
    document.querySelectorAll("a[data-lang]").forEach(function (a) {
      var url = new URL(window.location.href);
      url.searchParams.set("lang", a.dataset.lang);
      a.setAttribute("href", url.pathname + url.search + url.hash);
    });
  }
  document.addEventListener("htmx:pushedIntoHistory", relink);
  document.addEventListener("htmx:historyRestore", relink);
  document.addEventListener("htmx:afterSettle", relink);
})();

// ▶ Play (the generation page): step forward every 0.9 s until the last step, or until anything else is pressed.
(function () {
  var timer = null;
  function stop() { if (timer) { clearInterval(timer); timer = null; } }
  document.addEventListener("click", function (e) {
    var play = e.target.closest && e.target.closest("[data-play]");
    if (!play) { if (e.isTrusted) stop(); return; }
    e.preventDefault();
    if (timer) return stop();
    timer = setInterval(function () {
      var next = document.querySelector("a[data-action=next]");
      if (!next) return stop();
      next.click();
    }, 900);
  });
  document.addEventListener("keydown", stop);
})();

// Long work (the model view of a long text, a long context's first window, generation): while a page or a panel is
// computed, poll /api/v1/progress for it and show how far it has come, rather than a tab that seems frozen.
(function () {
  var timer = null;
  var box = null;
  function stop() {
    if (timer) { clearInterval(timer); timer = null; }
    if (box) box.hidden = true;
  }
  function render(p) {
    if (!box) {
      box = document.createElement("div");
      box.id = "progress";
      box.setAttribute("role", "status");
      box.innerHTML = "<progress></progress> <span></span>";
      document.body.appendChild(box);
    }
    var bar = box.querySelector("progress");
    if (p.total > 0) { bar.max = p.total; bar.value = p.done; } else { bar.removeAttribute("value"); }
    box.querySelector("span").textContent = (p.total > 0 ? p.done + " / " + p.total + " · " : "") + p.seconds + " s";
    box.hidden = false;
  }
  function start(url) {
    stop();
    if (!url || url.indexOf("/api/v1/progress") === 0) return;
    timer = setInterval(function () {
      fetch("/api/v1/progress?for=" + encodeURIComponent(url), { headers: { Accept: "application/json" } })
        .then(function (res) { return res.ok ? res.json() : null; })
        .then(function (p) { if (p && timer) render(p); })
        .catch(function () {});
    }, 600);
  }
  document.addEventListener("htmx:beforeRequest", function (e) {
    var info = e.detail && (e.detail.pathInfo || {});
    start(info.finalRequestPath || (e.detail.requestConfig && e.detail.requestConfig.path));
  });
  document.addEventListener("htmx:afterRequest", stop);
  // Full page loads: a GET form or a plain link; the old page polls until the new one arrives.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (e.defaultPrevented || (form.method || "get").toLowerCase() !== "get") return;
    var action = new URL(form.action, location.href);
    if (action.origin !== location.origin) return;
    start(action.pathname + "?" + new URLSearchParams(new FormData(form)).toString());
  });
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[href]");
    if (!a || e.defaultPrevented || a.hasAttribute("download") || a.origin !== location.origin) return;
    if (a.closest("[hx-boost=true]") && a.getAttribute("hx-boost") !== "false") return;  // htmx's own request
    start(a.pathname + a.search);
  });
  window.addEventListener("pageshow", stop);
})();
