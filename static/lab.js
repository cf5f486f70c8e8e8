// Attention Lab's page behaviour, one module: each section below is a function that binds its listeners, run in
// order at the end (the presenter fitter before the arithmetic's scroll, which measures what it sized). Exports
// window.lab: `onLayout(fn)`, `largest(lo, hi, set, fits)` and `settleFormulas()`.
// Everything else is links, forms and htmx.
(function () {
"use strict";

// Keyboard shortcuts and the heat-map readout (hover or tap).
function keyboard() {

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

  // A text box that keeps line breaks (a textarea): Enter starts a new line, Ctrl+Enter (⌘+Enter) applies the form.
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" || !(e.ctrlKey || e.metaKey)) return;
    var box = e.target && e.target.closest && e.target.closest("textarea[data-apply-keys]");
    if (!box || !box.form) return;
    e.preventDefault();
    if (box.form.requestSubmit) box.form.requestSubmit(); else box.form.submit();
  });

  // A view given token ids (a head opened from /model) shows what they spell in the text box: editing the text
  // empties the ids, so the form computes the text typed (the server lets ids win over a text sent beside them).
  document.addEventListener("input", function (e) {
    var box = e.target;
    if (!box || !box.form || box.name !== "text") return;
    var ids = box.form.querySelector("input[name=token_ids]");
    if (!ids || !ids.value) return;
    ids.value = "";
    var said = box.form.querySelector("[data-ids-shown]");
    if (said && said.dataset.replaced) said.textContent = said.dataset.replaced;
  });

  // Large traces: the zoomed heat map reads (query, key, value) under the pointer, one row fetched at a time.
  var rowCache = {};

  function readout(img, e) {
    var box = img.getBoundingClientRect();
    readoutAt(img, (e.clientX - box.left) / box.width, (e.clientY - box.top) / box.height);
  }

  // The readout for the point (fx, fy) of the map, as fractions of its width and height: a pointer over it, or a
  // tap (touch screens have no hover), also after the tap's tile swap has redrawn the panel.
  function readoutAt(img, fx, fy) {
    var out = document.getElementById("hover-readout");
    if (!out) return;
    var box = img.getBoundingClientRect();
    var rows = +img.dataset.rows, cols = +img.dataset.cols;
    var r = Math.min(rows - 1, Math.max(0, Math.floor(fy * rows)));
    var c = Math.min(cols - 1, Math.max(0, Math.floor(fx * cols)));
    var place = function () {
      // Beside the point, kept inside the map on a narrow screen (CSSOM, not an inline style attribute: the CSP
      // allows it).
      var x = fx * box.width + 14, y = fy * box.height + 14;
      out.style.left = Math.max(0, Math.min(x, box.width - out.offsetWidth)) + "px";
      out.style.top = Math.max(0, Math.min(y, box.height - out.offsetHeight)) + "px";
    };
    var rowLabels = JSON.parse(img.dataset.rowLabels), colLabels = JSON.parse(img.dataset.colLabels);
    var key = img.dataset.window + "#" + r;
    var show = function (values) {
      var v = values[c];
      out.textContent = "(" + r + ": " + rowLabels[r] + ", " + c + ": " + colLabels[c] + ") = " +
        (v === null ? "−∞" : v);
      place();
    };
    if (rowCache[key]) return show(rowCache[key]);
    out.textContent = "(" + r + ": " + rowLabels[r] + ", " + c + ": " + colLabels[c] + ") …";
    place();
    fetch(img.dataset.window + "&row=" + r + "&col=0&rows=1&cols=" + cols)
      .then(function (res) { return res.ok ? res.json() : Promise.reject(res.status); })
      .then(function (body) { rowCache[key] = body.values[0]; if (out.isConnected) show(rowCache[key]); })
      .catch(function () { /* the readout keeps the labels */ });
  }

  // A tap (or click) on the map shows its readout too: now, and again once the tile swap has redrawn the panel.
  var tapped = null;
  document.addEventListener("htmx:afterSettle", function () {
    var img = document.getElementById("zoom");
    var at = tapped;
    tapped = null;
    if (!img || !at || img.dataset.window !== at.window) return;
    if (img.complete && img.naturalWidth) return readoutAt(img, at.fx, at.fy);
    img.addEventListener("load", function () { readoutAt(img, at.fx, at.fy); }, { once: true });
  });

  // Clicking the map opens the 16 × 16 window of exact numbers around the clicked cell (an htmx swap, URL pushed).
  document.addEventListener("click", function (e) {
    var img = e.target;
    if (!img || img.id !== "zoom" || !img.dataset.tileUrl) return;
    var box = img.getBoundingClientRect();
    var rows = +img.dataset.rows, cols = +img.dataset.cols;
    var r = Math.floor((e.clientY - box.top) / box.height * rows);
    var c = Math.floor((e.clientX - box.left) / box.width * cols);
    var r0 = Math.max(0, Math.min(rows - 16, r - 8)), c0 = Math.max(0, Math.min(cols - 16, c - 8));
    readout(img, e);
    tapped = { window: img.dataset.window, fx: (e.clientX - box.left) / box.width, fy: (e.clientY - box.top) / box.height };
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
}

// The language links, the JSON twin in <head> and "Start a class" sit outside the swapped panel: after htmx pushes a
// new URL, point them at it, so switching language keeps the stage and the twin stays the view's.
function relink() {
  // The toy's example a page shows when its URL names no tokens is its language's (#42: "cat sat on the mat", "猫 坐
  // 在 垫子 上"; <meta name=lab-example>): the address names it, so what leaves the page (a class started or followed,
  // a link copied) shows the same numbers in any language; the language links leave it unnamed, so the other
  // language shows its own example.
  var meta = document.querySelector('meta[name="lab-example"]');
  var example = meta && meta.getAttribute("content");
  function unnamed(q) {
    return !q.get("tokens") && !q.get("text") && !q.get("token_ids") && (q.get("preset") || "toy") === "toy";
  }
  function pin() {
    var url = new URL(window.location.href);
    if (!example || !unnamed(url.searchParams)) return;
    url.searchParams.set("tokens", example);
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }
  pin();  // now, before room.js announces this view to a class
  function relink() {
    pin();
    var twin = document.querySelector("a[data-twin=json]");
    var alt = document.querySelector('link[rel=alternate][type="application/json"]');
    if (twin && alt) alt.setAttribute("href", twin.getAttribute("href"));
    document.querySelectorAll("a[data-lang]").forEach(function (a) {
      var url = new URL(window.location.href);
      url.searchParams.set("lang", a.dataset.lang);
      if (example && url.searchParams.get("tokens") === example) url.searchParams.delete("tokens");
      a.setAttribute("href", url.pathname + url.search + url.hash);
    });
    // "Start a class" starts it on the view now shown, not on the one the page was loaded with.
    var start = document.querySelector("form[data-room-start] input[name=query]");
    if (start) start.value = window.location.search.replace(/^\?/, "");
    document.querySelectorAll("a[data-toggle=present][data-kernel]").forEach(function (a) {
      var url = new URL(window.location.href);
      if (url.searchParams.get("present") === "1") url.searchParams.delete("present");
      else url.searchParams.set("present", "1");
      a.setAttribute("href", url.pathname + url.search + url.hash);
    });
  }
  document.addEventListener("htmx:pushedIntoHistory", relink);
  document.addEventListener("htmx:historyRestore", relink);
  document.addEventListener("htmx:afterSettle", relink);
  document.addEventListener("DOMContentLoaded", relink);  // "Start a class" names the example too
}

// ▶ Play (the generation page): from the current step (from the first when already at the last) one step every
// 0.9 s, the button reading "Pause" meanwhile (aria-pressed); at the last step, or when anything else is clicked or
// a key pressed, it stops and reads "Play" again. Each step is an htmx swap of #stage, the button included: the
// state lives here, and every new button is drawn from it (and keeps the keyboard focus the old one had).
function play() {
  var playing = false, timer = null, hadFocus = false;
  var stepping = null, asked = null;  // the link Play followed, and its step's request while on its way
  function draw() {
    document.querySelectorAll("[data-play]").forEach(function (b) {
      b.setAttribute("aria-pressed", playing ? "true" : "false");
      var label = playing ? b.dataset.labelPause : b.dataset.labelPlay;
      if (label && b.textContent !== label) b.textContent = label;
    });
  }
  function stop() {
    if (timer) { clearTimeout(timer); timer = null; }
    // A step asked for just before Pause (a slow server) would still arrive and move the paused page on: dropped.
    if (asked) asked.abort();
    stepping = asked = null;
    if (playing) { playing = false; draw(); }
  }
  function follow(a) {  // a step as a panel swap, like the keyboard's (htmx may not have boosted a new link yet)
    if (window.htmx) window.htmx.process(a);
    stepping = a;
    a.click();
  }
  function nextLink() { return document.querySelector("a[data-action=next][href]"); }
  function schedule() {
    if (timer || !playing) return;
    timer = setTimeout(function () {
      timer = null;
      var next = nextLink();
      if (!playing) return;
      if (!next) return stop();
      follow(next);
    }, 900);
  }
  function start(button) {
    playing = true;
    draw();
    if (nextLink()) return schedule();
    var first = button.dataset.first;  // at the last step: start again from the first
    if (!first) return stop();
    // The first token's own link when the text shows it; else a link made for it, kept until the swap is done
    // (htmx needs the element that asked to be in the page when the answer arrives).
    var a = Array.prototype.find.call(document.querySelectorAll("#stage a[href]"), function (link) {
      return link.getAttribute("href") === first;
    });
    if (!a) {
      a = document.createElement("a");
      a.href = first;
      a.hidden = true;
      a.setAttribute("data-play-link", "");
      (button.closest("main") || document.body).appendChild(a);
    }
    follow(a);
  }
  document.addEventListener("click", function (e) {
    var play = e.target.closest && e.target.closest("[data-play]");
    if (!play) { if (e.isTrusted) stop(); return; }
    e.preventDefault();
    if (playing) stop(); else start(play);
  });
  document.addEventListener("keydown", function (e) {
    if (e.target && e.target.closest && e.target.closest("[data-play]")) return;  // Enter or Space: the click toggles
    stop();
  });
  document.addEventListener("htmx:beforeSwap", function () {
    var active = document.activeElement;
    hadFocus = !!(active && active.matches && active.matches("[data-play]"));
  });
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("a[data-play-link]").forEach(function (a) { a.remove(); });
    draw();
    if (hadFocus) {
      var b = document.querySelector("[data-play]");
      if (b) b.focus();
      hadFocus = false;
    }
    if (!playing) return;
    if (!nextLink()) return stop();  // the last step: done, the button reads "Play" again
    schedule();
  });
  document.addEventListener("htmx:beforeSend", function (e) {
    if (e.detail && stepping && e.detail.elt === stepping) asked = e.detail.xhr;
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (e.detail && e.detail.elt === stepping) stepping = asked = null;
  });
  ["htmx:responseError", "htmx:sendError", "htmx:historyRestore"].forEach(function (name) {
    document.addEventListener(name, stop);
  });
}

// A request htmx sent that the server turned away for now (429: this reader's share of the heavy work is taken;
// 503: the server is full): say so, in the page's language, with the wait the server named (Retry-After), rather
// than leave the page showing the answer to an earlier setting as if it were this one's.
function refusedRequests() {
  var box = null, timer = null;
  document.addEventListener("htmx:responseError", function (e) {
    var xhr = e.detail.xhr;
    if (!xhr || (xhr.status !== 429 && xhr.status !== 503) || e.detail.elt.closest("[data-quiet]")) return;
    var wait = parseInt(xhr.getResponseHeader("Retry-After") || "1", 10) || 1;
    if (!box) {
      box = document.createElement("div");
      box.id = "refused";
      box.setAttribute("role", "alert");
      document.body.appendChild(box);
    }
    box.textContent = (document.body.getAttribute("data-busy-text") || "{s}").replace("{s}", String(wait));
    box.hidden = false;
    if (timer) clearTimeout(timer);
    timer = setTimeout(function () { box.hidden = true; }, Math.max(4, wait + 2) * 1000);
  });
  document.addEventListener("htmx:afterSwap", function () { if (box) box.hidden = true; });
}

// A request's progress key: 16 random hex digits an htmx request names itself by (its X-Progress-Key header, which
// the server adopts: app/lab/keys.py), made before the request leaves, so the page polls while it waits.
function newKey() {
  var bytes = new Uint8Array(8);
  crypto.getRandomValues(bytes);
  return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
}

// Long work (the model view of a long text, a long context's first window, generation, a page's first load): while
// a page or a panel is computed, poll /api/v1/progress for it, by its key, and show how far it has come, in the
// server's words ("21 / 31 layers · 6.2 s", in the page's language), rather than a tab that seems frozen. The server
// knows every page request it is serving (app/health.py `Served`), so a poll is answered for as long as the page
// waits, and for a few seconds after its answer left (`answered`: a poll that crossed the answer stops there), so
// the console logs no failed request.
function progress() {
  var timer = null;
  var box = null;
  var asking = null;  // the poll in flight, aborted when the wait ends
  function stop() {
    if (timer) { clearInterval(timer); timer = null; }
    if (asking) { asking.abort(); asking = null; }
    if (box) box.hidden = true;
  }
  function render(p) {
    if (!(p.total > 0) && p.seconds < 1) return;  // a page that counts nothing: shown once it takes a while
    if (!box) {
      box = document.createElement("div");
      box.id = "progress";
      box.setAttribute("role", "status");
      box.innerHTML = "<progress></progress> <span></span>";
      document.body.appendChild(box);
    }
    var bar = box.querySelector("progress");
    if (p.total > 0) { bar.max = p.total; bar.value = p.done; } else { bar.removeAttribute("value"); }
    box.querySelector("span").textContent = p.text ||
      ((p.total > 0 ? p.done + " / " + p.total + " " + (p.unit || "") + " · " : "") + p.seconds + " s");
    box.hidden = false;
  }
  // A page: what the browser shows in place of this one when it comes (not the API's files and JSON, which a link
  // downloads or opens beside the page: nothing waits for them here).
  function isPage(path) {
    return !/^\/(api|static|vendor)\//.test(path) && !/\.(json|npz|csv|svg|png|zip)$/.test(path.split("?")[0]);
  }
  // `query`: the poll's query naming the request, "key=…" (an htmx request's own key) or "for=…" (a page's URL).
  function start(query) {
    stop();
    var lang = (document.documentElement.lang || "en").slice(0, 2) === "zh" ? "zh" : "en";
    timer = setInterval(function () {
      if (asking) return;  // the last poll not answered yet
      var ask = asking = window.AbortController ? new AbortController() : null;
      fetch("/api/v1/progress?" + query + "&lang=" + lang,
            { headers: { Accept: "application/json" }, signal: ask ? ask.signal : undefined })
        .then(function (res) { return res.ok ? res.json() : null; })
        .then(function (p) {
          if (asking === ask) asking = null;
          if (!timer) return;
          if (p && !p.answered) render(p); else stop();  // answered (or not served here): nothing more to wait for
        })
        .catch(function () { if (asking === ask) asking = null; });
    }, 600);
  }
  // A full page load is known by its URL, which the poll sends when it is short enough (a long text's is not).
  function startFor(url) {
    if (isPage(url) && url.length <= 8000) start("for=" + encodeURIComponent(url)); else stop();
  }
  document.addEventListener("htmx:configRequest", function (e) {
    if (e.detail.elt.closest("[data-quiet]")) return;  // a live run's redraw (_train.html): never waited for
    if (!isPage(e.detail.path || "")) return stop();
    var key = newKey();
    e.detail.headers["X-Progress-Key"] = key;
    start("key=" + key);
  });
  document.addEventListener("htmx:afterRequest", function (e) { if (!e.detail.elt.closest("[data-quiet]")) stop(); });
  // Full page loads: a GET form or a plain link; the old page polls until the new one arrives.
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (e.defaultPrevented || (form.method || "get").toLowerCase() !== "get") return;
    if (form.target && form.target !== "_self") return;  // another tab: this page is not waiting for it
    var action = new URL(form.action, location.href);
    if (action.origin !== location.origin) return;
    startFor(action.pathname + "?" + new URLSearchParams(new FormData(form)).toString());
  });
  document.addEventListener("click", function (e) {
    var a = e.target.closest && e.target.closest("a[href]");
    if (!a || e.defaultPrevented || a.hasAttribute("download") || a.origin !== location.origin) return;
    if (a.target && a.target !== "_self") return;  // another tab: this page is not waiting for it
    if (a.hash && a.pathname === location.pathname && a.search === location.search) return;  // a place on this page
    if (a.closest("[hx-boost=true]") && a.getAttribute("hx-boost") !== "false") return;  // htmx's own request
    startFor(a.pathname + a.search);
  });
  // Back to a page that polled (restored from the back-forward cache); not the first load's own pageshow, which
  // would stop a page's first request (a deferred page's shell asks for its page by htmx as it loads, #42).
  window.addEventListener("pageshow", function (e) { if (e.persisted) stop(); });
}

// A lesson step's place on its page (the step's #fragment, e.g. /demos#scaling, as data-anchor on its panel): a
// screen that reached the step without it — stepped by the teacher's remote, joined by the room's link (a room's
// view has no fragment) — scrolls there as the step's own link would have.
function toAnchor() {
  function toAnchor() {
    var panel = document.querySelector(".lesson-panel[data-anchor]");
    var place = panel && document.getElementById(panel.getAttribute("data-anchor"));
    var own = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!place || own) return;  // the address's own place (not a room's #follow) is the browser's to scroll to
    place.scrollIntoView();
    window.requestAnimationFrame(function () { place.scrollIntoView(); });  // under the lesson's panel, once measured
  }
  document.addEventListener("DOMContentLoaded", toAnchor);
  document.addEventListener("room:followed", toAnchor);
}

// Whenever the page's layout may have changed (loaded, fonts in, resized, a panel swapped, a class step followed),
// run `fn`: the one list of those moments for the measuring code below.
function onLayout(fn) {
  document.addEventListener("DOMContentLoaded", fn);
  window.addEventListener("load", fn);
  if (document.fonts && document.fonts.ready) document.fonts.ready.then(fn); // the math font changes widths
  window.addEventListener("resize", fn);
  document.addEventListener("htmx:afterSettle", fn);
  document.addEventListener("room:followed", fn);
  document.addEventListener("room:resized", fn);
  // A lesson's answer opened or shut: the page's explanations come and go with it (static/lab.css, data-hint).
  document.addEventListener("toggle", function (e) {
    if (e.target.matches && e.target.matches(".lesson-panel details.answer")) fn();
  }, true);
}

// A deferred page's shell (templates/_deferred.html: /heads and /patch answer a browser's navigation at once and ask
// for their numbers by htmx, the progress box counting meanwhile): once the page is swapped in, scroll to the place
// its #fragment (or the lesson step's anchor) names, as a plain load would have; if it could not come (a busy
// server, an error), say so beside the plain link to it.
function deferredPage() {
  var arrived = false;
  function deferred(e) { var elt = e.detail && e.detail.elt; return !!(elt && elt.closest && elt.closest("[data-deferred]")); }
  document.addEventListener("htmx:beforeSwap", function (e) { if (deferred(e)) arrived = true; });
  document.addEventListener("htmx:afterSettle", function () {
    if (!arrived) return;
    arrived = false;
    var panel = document.querySelector(".lesson-panel[data-anchor]");
    var id = location.hash ? decodeURIComponent(location.hash.slice(1)) : panel && panel.getAttribute("data-anchor");
    var place = id && document.getElementById(id);
    if (!place) return;
    place.scrollIntoView();
    window.requestAnimationFrame(function () { place.scrollIntoView(); });  // after the fitters have sized the page
  });
  function failed(e) {
    if (!deferred(e)) return;
    var shell = e.detail.elt.closest("[data-deferred]");
    var said = shell.querySelector("[data-deferred-failed]");
    if (said) said.hidden = false;
    var status = shell.querySelector("#deferred-status");
    if (status) status.hidden = true;
  }
  document.addEventListener("htmx:responseError", failed);
  document.addEventListener("htmx:sendError", failed);
}

// Presenter mode on /heads and /patch, and a step that lands on a place on any page: the lesson's panel stays at the
// top of the screen (lab.css) while the page scrolls to the step's figure, so the question is read beside it; the
// figures and the scroll's stop are sized to the room it leaves (--lesson-h: the height on screen, 0 when it does not
// stay; a phone's panel keeps only its question and buttons there, --lesson-fold: the height above them). Until the
// reader scrolls, the page stays at the step's place as the layout settles (the panel measured after the step's
// scroll, a class's bar and a follower's page swapped in, fonts).
function stickyLesson() {
  var held = true;
  ["wheel", "touchstart", "keydown", "mousedown"].forEach(function (e) {
    window.addEventListener(e, function () { held = false; }, { passive: true });
  });
  document.addEventListener("room:followed", function () { held = true; });
  function measure() {
    var beside = document.querySelector("body > .lesson-beside"), root = document.documentElement.style;
    var box = beside && beside.getBoundingClientRect(), question = beside && beside.querySelector(".question");
    var fold = question ? question.getBoundingClientRect().top - box.top - 4 : 0;
    root.setProperty("--lesson-fold", Math.max(0, Math.floor(fold)) + "px");
    var style = beside && getComputedStyle(beside);  // its top: 0, or minus the fold on a phone
    var h = style && style.position === "sticky" ? box.height + Math.min(0, parseFloat(style.top) || 0) : 0;
    root.setProperty("--lesson-h", Math.ceil(h) + "px");
    var anchor = question && question.closest(".lesson-panel").getAttribute("data-anchor");
    var place = h && anchor && document.getElementById(anchor), hash = decodeURIComponent(location.hash.slice(1));
    if (!held || !place || (hash !== anchor && document.getElementById(hash))) return;
    if (Math.abs(place.getBoundingClientRect().top - parseFloat(getComputedStyle(place).scrollMarginTop)) > 2) {
      place.scrollIntoView();
    }
  }
  onLayout(measure);
  document.addEventListener("toggle", measure, true);  // the answer opened in the panel
}

// The class bar along the bottom arrives, and grows when a question opens or its reveal comes: one observer of it
// tells every fitter above (onLayout's "room:resized"), at most once a frame, so the numbers make room for it.
function barResized() {
  var watched = null, queued = false;
  function resized() {  // its height also as --room-h: the page's end and a scrolled-to cell stay above it
    var room = document.getElementById("room");
    document.documentElement.style.setProperty("--room-h", (room ? Math.ceil(room.offsetHeight) : 0) + "px");
    document.dispatchEvent(new CustomEvent("room:resized"));
  }
  document.addEventListener("room:bar", function () {
    var room = document.getElementById("room");
    if (!room || watched === room || !window.ResizeObserver) return resized();
    watched = room;
    new ResizeObserver(function () {
      if (queued) return;
      queued = true;
      window.requestAnimationFrame(function () { queued = false; resized(); });
    }).observe(room);
  });
}

// The largest whole size in lo…hi at which `fits()` holds once `set(size)` is applied (lo when none does), left
// applied: the one search behind every "as large as the projector allows" below.
function largest(lo, hi, set, fits) {
  set(hi);
  if (fits()) return hi;
  while (hi - lo > 1) {
    var mid = (lo + hi) >> 1;
    set(mid);
    if (fits()) lo = mid; else hi = mid;
  }
  set(lo);
  return lo;
}

// Presenter mode: size the numbers to the projector. The largest font (8–64 px) at which the stage's matrices fit
// their column and the stage (matrices and the open cell's arithmetic included) ends above the bottom of the screen
// (and above the class bar). Measured, not guessed: a 5 × 5 softmax gets big numbers, stage 1's three matrices less.
function presenterNumbers() {
  function fit() {
    if (!document.body.classList.contains("present")) return;
    var stage = document.getElementById("stage");
    var data = stage && stage.querySelector(".stage-data");
    if (!data || !data.querySelector("table[data-matrix]")) return;
    // A phone opened in presenter mode: the phone layout, no projector sizing (its layout width: a page zoomed out
    // to show something too wide has a wide innerWidth, and the numbers sized to it kept it wide).
    if (document.documentElement.clientWidth <= 700) {
      stage.style.removeProperty("--fit");
      stage.style.removeProperty("--fit-arith");
      return;
    }
    var room = document.getElementById("room");
    var bottom = window.innerHeight - (room ? room.getBoundingClientRect().height : 0) - 4;
    var boxes = data.querySelectorAll(".scroll, figure.matrix");
    function fits() {
      if (data.scrollWidth > data.clientWidth + 1) return false;
      for (var i = 0; i < boxes.length; i++) {  // a matrix in its own scrolling box must not need to scroll
        if (boxes[i].offsetParent !== null && boxes[i].scrollWidth > boxes[i].clientWidth + 1) return false;
      }
      return data.getBoundingClientRect().bottom <= bottom;
    }
    function set(px) {
      stage.style.setProperty("--fit", px + "px");
      stage.style.setProperty("--fit-arith", Math.min(30, Math.max(12, Math.round(px * 0.7))) + "px");
    }
    function numbers() { return largest(8, 64, set, fits); }
    // The words' column (the class's QR and address, the lesson's question, what happens, what to notice) must end
    // on screen too. It takes width from the numbers (the stylesheet's share, then 1 : 1.5 … 1 : 0.8) while they keep
    // 24 px (or what they had) and their column ends on screen, then its type shrinks, to 14 px at the least: readable
    // from the room at 1280×720 (#32: 10 px was not); what still does not fit ends under the screen, after the
    // question, which keeps its size throughout.
    var body = stage.querySelector(".stage-body"), text = stage.querySelector(".stage-text");
    function textFits() { return !text || text.getBoundingClientRect().bottom <= bottom; }
    if (body) body.style.removeProperty("grid-template-columns");
    stage.style.removeProperty("--fit-text");
    var px = numbers(), floor = Math.min(24, px), shares = [1.5, 1.2, 1, 0.8], i = 0;
    function widen() {
      for (; body && i < shares.length && !textFits(); i++) {
        var was = body.style.getPropertyValue("grid-template-columns");
        body.style.setProperty("grid-template-columns", "minmax(0, 1fr) minmax(0, " + shares[i] + "fr)");
        var got = numbers();
        if (got < floor || !fits()) {  // nor may the numbers' column then end under the screen
          if (was) body.style.setProperty("grid-template-columns", was);
          else body.style.removeProperty("grid-template-columns");
          px = numbers();
          return;
        }
        px = got;
      }
    }
    function shrink(least) {
      if (!text || textFits()) return;
      var size = parseFloat(getComputedStyle(text.querySelector(".explain") || text).fontSize);
      while (size > least && !textFits()) {
        size -= 1;
        stage.style.setProperty("--fit-text", size + "px");
      }
      px = numbers();
    }
    widen();
    shrink(14);
    stage.setAttribute("data-fit", String(px));
    settleFormulas();  // the arithmetic's new size: its lines fit again
  }
  onLayout(fit);
}

// The header's "More" menu (#42): a disclosure that closes as a menu does, on a click elsewhere or Escape.
function moreMenu() {
  function close(except) {
    document.querySelectorAll("details[data-more-nav][open]").forEach(function (d) { if (d !== except) d.open = false; });
  }
  document.addEventListener("click", function (e) { close(e.target.closest && e.target.closest("details[data-more-nav]")); });
  document.addEventListener("keydown", function (e) {
    if (e.key !== "Escape") return;
    var open = document.querySelector("details[data-more-nav][open]");
    if (!open) return;
    open.open = false;
    open.querySelector("summary").focus();
  });
}

// The open cell's arithmetic (#42): a number clicked, or a view loaded or followed with a cell open, scrolls the page
// only as far as needed for its box (under the matrices) to be on screen, and never so far that the clicked number
// leaves the top of the screen (outside presenter mode the box waits at the window's foot: the number is lifted
// above it); once per cell opened, so a reader scrolling away is not pulled back. Runs after the
// presenter-mode fitter above (registered before it), which sizes the numbers for the screen first.
function arithmeticInView() {
  var shown = null;
  function reveal() {
    var box = document.getElementById("arithmetic");
    var key = box && (location.pathname + "#" + box.getAttribute("data-cell"));
    var sticky = box && getComputedStyle(box).position === "sticky";
    // Waiting at the window's foot (lab.css), the box may grow as the math font arrives: the number is lifted above
    // it again then (never moved when it is clear of the box, so a reader scrolling away is not pulled back).
    var again = key === shown;
    if (!box || (again && !sticky)) { shown = key || null; return; }
    var r = box.getBoundingClientRect();
    if (!r.height) return;  // not laid out yet (a hidden panel): the next layout moment tries again
    shown = key;
    var cell = document.querySelector("#stage td.selected");
    var top = cell ? cell.getBoundingClientRect().top : r.top;
    var margin = 8, room = document.getElementById("room");
    var bottom = window.innerHeight - (room ? room.getBoundingClientRect().height : 0) - margin;
    var by = 0;
    if (cell && sticky) {  // the box waits at the window's foot: lift the cell above it, if it is on screen
      var c = cell.getBoundingClientRect();
      if (!again || (c.bottom > r.top - margin && c.top < r.top)) by = Math.max(0, c.bottom - (r.top - margin));
    } else if (r.bottom > bottom) by = Math.min(r.bottom - bottom, top - margin);  // up to the box's end, keeping the cell
    else if (r.top < margin) by = r.top - margin;
    if (cell && top - by < margin) by = top - margin;  // the cell itself above the screen: bring it back
    if (Math.abs(by) >= 1) window.scrollBy(0, by);
  }
  onLayout(reveal);
}

// A formula wider than its box is scaled down to fit rather than clipped; so is a line of the open cell's arithmetic
// (its Σ line ended cut at the right, in a box that scrolls): on the projector as far as it takes, elsewhere to 70 %
// of its size at most (a phone's line past that scrolls, rather than shrink out of reach of the eye).
function formulas() { onLayout(settleFormulas); }
function settleFormulas() {
  document.querySelectorAll(".explain .formula, .stage-data > .arithmetic li").forEach(function (box) {
    var m = box.querySelector("math");
    if (!m) return;
    m.style.removeProperty("font-size");
    // A block formula's own box is as wide as its column, whatever it holds: what overflows is the column's scroll.
    var w = Math.max(m.getBoundingClientRect().width, box.scrollWidth), room = box.clientWidth;
    if (w > room && room > 0) {
      var size = parseFloat(getComputedStyle(m).fontSize);
      var least = box.closest("body.present") || !box.closest(".arithmetic") ? 8 : Math.ceil(size * 0.7);
      m.style.setProperty("font-size", Math.max(least, Math.floor(size * room / w * 0.98)) + "px");
    }
  });
}

// Phones: the step tabs, the block's flow and /predict's table are one row that scrolls sideways; keep the current
// step (the chosen position: a following student's phone shows the one the teacher picked) in view, after a load
// and after each swap, without moving the page.
function currentInView() {
  function reveal() {
    document.querySelectorAll("ol.flow, ol.tabs, .train-scroll").forEach(function (row) {
      var cur = row.querySelector("a[aria-current], td.chosen");
      if (!cur || row.scrollWidth <= row.clientWidth) return;
      var r = cur.getBoundingClientRect(), box = row.getBoundingClientRect();
      row.scrollLeft += (r.left + r.width / 2) - (box.left + box.width / 2);
    });
  }
  onLayout(reveal);
}

// The model view on the projector (templates/model.html, presenter mode): the largest type (8–48 px) at which its
// grids ([data-fit-grids]: one grid, a tall one's two halves, or the two texts' grids) fit the page's width and end
// above the bottom of the screen (and above a class bar). Measured, as the lab's numbers are above.
function modelFit() {
  function fit() {
    var box = document.querySelector("body.present main.model-view [data-fit-grids]");
    if (!box) return;
    if (document.documentElement.clientWidth <= 700) return box.style.removeProperty("--grid-fit");  // a phone: the phone layout
    var room = document.getElementById("room");
    var bottom = window.innerHeight - (room ? room.getBoundingClientRect().height : 0) - 4;
    var scrolls = box.querySelectorAll(".scroll");
    var main = box.closest("main");
    function fits() {
      if (box.scrollWidth > box.clientWidth + 1 || main.scrollWidth > main.clientWidth + 1) return false;
      for (var i = 0; i < scrolls.length; i++) {  // no grid may need its own scroll bar
        if (scrolls[i].scrollWidth > scrolls[i].clientWidth + 1) return false;
      }
      return box.getBoundingClientRect().bottom + window.scrollY <= bottom;
    }
    var px = largest(8, 48, function (v) { box.style.setProperty("--grid-fit", v + "px"); }, fits);
    box.setAttribute("data-fit", String(px));
  }
  onLayout(fit);
  document.addEventListener("toggle", function (e) {  // the form or the tokens unfolded above the grids
    if (e.target.closest && e.target.closest("main.model-view")) fit();
  }, true);
}

// Presenter mode's prediction tables (/predict: one column per position, the second prompt's too): the largest type
// (10–32 px) at which a table needs no sideways scroll in its box and ends above the bottom of the screen (and the
// class bar). The numbers take that size whole, the tokens a little less (lab.css).
function predictFit() {
  function fit() {
    var boxes = document.querySelectorAll("body.present .train-scroll");
    var room = document.getElementById("room");
    var bottom = window.innerHeight - (room ? room.getBoundingClientRect().height : 0) - 4;
    boxes.forEach(function (box) {
      if (document.documentElement.clientWidth <= 700) return box.style.removeProperty("--table-fit");  // a phone: the phone layout
      function fits() {
        return box.scrollWidth <= box.clientWidth + 1 && box.getBoundingClientRect().bottom + window.scrollY <= bottom;
      }
      var px = largest(10, 32, function (v) { box.style.setProperty("--table-fit", v + "px"); }, fits);
      box.setAttribute("data-fit", String(px));
    });
  }
  onLayout(fit);
  document.addEventListener("toggle", function (e) {  // the form unfolded above the table
    if (e.target.closest && e.target.closest("main.predict-page")) fit();
  }, true);
}

// A token the model predicts may be a byte piece that only begins a character (⟨e7⟩: the engine's labels,
// engine/models/labels.py, name no character it does not finish): wherever one is shown, on every page, it says so
// in the reader's language (a dotted underline and a tooltip; a tooltip that already names it gets the sentence).
function bytePieces() {
  var piece = /⟨[0-9a-f]{2}⟩(?:⟨[0-9a-f]{2}⟩)*/;
  function explain() {
    var say = document.body.getAttribute("data-byte-piece");
    if (!say || document.body.textContent.indexOf("⟨") < 0 && !document.querySelector("[title*='⟨']")) return;
    var walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT), node, seen = [];
    while ((node = walk.nextNode())) {
      var el = node.parentElement, m = piece.exec(node.nodeValue);
      if (m && el && !el.closest("script, style, textarea")) seen.push([el, m[0]]);
    }
    document.querySelectorAll("[title*='⟨']:not([data-piece])").forEach(function (el) {
      var m = piece.exec(el.getAttribute("title"));
      if (m) seen.push([el, m[0]]);
    });
    seen.forEach(function (found) {
      var el = found[0], line = say.replace("{piece}", found[1]), title = el.getAttribute("title");
      if (el.hasAttribute("data-piece")) return;
      el.setAttribute("data-piece", found[1]);
      el.setAttribute("title", title ? title + "\n" + line : line);
    });
  }
  document.addEventListener("DOMContentLoaded", explain);
  document.addEventListener("htmx:afterSettle", explain);
  document.addEventListener("room:followed", explain);
}

window.lab = { onLayout: onLayout, largest: largest, settleFormulas: settleFormulas };
[keyboard, relink, play, progress, refusedRequests, toAnchor, deferredPage, stickyLesson, barResized, presenterNumbers, moreMenu,
 arithmeticInView, formulas, currentInView, modelFit, predictFit, bytePieces].forEach(function (section) { section(); });
})();
