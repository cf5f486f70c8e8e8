// Attention Lab's page behaviour (a module, so its names stay its own): each section binds its listeners, run in
// order at the end (the presenter fitters before the arithmetic's scroll, which measures what they sized).
// Everything else is links, forms, htmx and CSS.

// Listen for each of the space-separated event `names` on `target`.
const on = (names, fn, target = document, options = false) => {
  for (const name of names.split(" ")) target.addEventListener(name, fn, options);
};
const byId = (id) => document.getElementById(id);

// Follow a link as a panel swap (htmx may not have boosted a link drawn just now).
function follow(a) {
  htmx.process(a);
  a.click();
}

// A hidden link in `parent`, so a swap asked by script takes the htmx attributes the page's own links have there.
function hiddenLink(href, parent) {
  const a = Object.assign(document.createElement("a"), { href, hidden: true });
  a.setAttribute("data-hidden-link", "");
  (parent || document.body).append(a);
  return a;
}

// Where the screen ends for the page: above the class bar along the bottom, `margin` px more.
const screenBottom = (margin) => innerHeight - (byId("room")?.getBoundingClientRect().height || 0) - margin;

// A place (or the top), scrolled to now and once more after the next frame, when the fitters have sized the page.
function scrollToPlace(place) {
  const land = () => (place ? place.scrollIntoView() : scrollTo(0, 0));
  land();
  requestAnimationFrame(land);
}
const hashTarget = () => location.hash && byId(decodeURIComponent(location.hash.slice(1)));
const anchorOf = () => document.querySelector(".lesson-panel[data-anchor]")?.getAttribute("data-anchor") ?? "";

// Run `fn` whenever the layout may have changed: the one list of those moments for the measuring code below.
function onLayout(fn) {
  on("DOMContentLoaded htmx:afterSettle room:followed room:resized", fn);
  on("load resize", fn, window);
  document.fonts.ready.then(fn);  // the math font changes widths
  on("toggle", fn, document, true);  // a disclosure opened or shut (a lesson's answer, a form)
}

// Keys (← → step, m and s toggle: the page's own links; Ctrl+Enter applies a text box) and the heat map's readout.
function keyboard() {
  const KEYS = { ArrowRight: "[data-action=next]", ArrowLeft: "[data-action=prev]", m: "[data-toggle=mask]",
                 s: "[data-toggle=scale]" };
  on("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || !KEYS[e.key]) return;
    if (e.target.closest?.("input, select, textarea, [contenteditable]")) return;
    const el = document.querySelector(KEYS[e.key]);
    if (!el?.getAttribute("href")) return;
    e.preventDefault();
    follow(el);
  });
  // A text box keeps line breaks: Enter starts a new line, Ctrl+Enter (⌘+Enter) applies the form.
  on("keydown", (e) => {
    const box = e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target.closest?.("textarea[data-apply-keys]");
    if (!box?.form) return;
    e.preventDefault();
    box.form.requestSubmit();
  });
  // A view given token ids shows their text: editing it empties the ids (which the server lets win over a text).
  on("input", (e) => {
    const ids = e.target.name === "text" && e.target.form?.querySelector("input[name=token_ids]");
    if (!ids?.value) return;
    ids.value = "";
    const said = e.target.form.querySelector("[data-ids-shown]");
    if (said?.dataset.replaced) said.textContent = said.dataset.replaced;
  });

  const rows = {};  // a window's rows of values, by "window#row"
  let tapped = null, pending = null;
  const fraction = (img, e) => {  // the point as fractions of the map's width and height
    const box = img.getBoundingClientRect();
    return [(e.clientX - box.left) / box.width, (e.clientY - box.top) / box.height];
  };
  function readout(img, [fx, fy]) {
    const out = byId("hover-readout"), d = img.dataset, box = img.getBoundingClientRect();
    if (!out) return;
    const r = Math.min(d.rows - 1, Math.max(0, Math.floor(fy * d.rows)));
    const c = Math.min(d.cols - 1, Math.max(0, Math.floor(fx * d.cols)));
    const key = `${d.window}#${r}`, rowLabel = JSON.parse(d.rowLabels)[r], colLabel = JSON.parse(d.colLabels)[c];
    const label = `(${r}: ${rowLabel}, ${c}: ${colLabel})`;
    const show = (values) => {
      out.textContent = label + (values ? " = " + (values[c] === null ? "−∞" : values[c]) : " …");
      // Beside the point, kept inside the map (CSSOM, not a style attribute: the CSP allows it).
      out.style.left = Math.max(0, Math.min(fx * box.width + 14, box.width - out.offsetWidth)) + "px";
      out.style.top = Math.max(0, Math.min(fy * box.height + 14, box.height - out.offsetHeight)) + "px";
    };
    show(rows[key]);
    if (rows[key]) return;
    fetch(`${d.window}&row=${r}&col=0&rows=1&cols=${d.cols}`)
      .then((res) => (res.ok ? res.json() : Promise.reject(res.status)))
      .then((body) => { rows[key] = body.values[0]; if (out.isConnected) show(rows[key]); })
      .catch(() => { /* the readout keeps the labels */ });
  }
  on("mousemove", (e) => {
    const img = e.target;
    if (img.id !== "zoom" || pending) return;
    pending = requestAnimationFrame(() => { pending = null; readout(img, fraction(img, e)); });
  });
  // A click or tap (no hover on touch) shows the readout and opens the 16 × 16 window around the cell, a swap after
  // which the readout is shown again on the redrawn map.
  on("click", (e) => {
    const img = e.target, d = img.dataset;
    if (img.id !== "zoom" || !d.tileUrl) return;
    const f = fraction(img, e);
    const r0 = Math.max(0, Math.min(d.rows - 16, Math.floor(f[1] * d.rows) - 8));
    const c0 = Math.max(0, Math.min(d.cols - 16, Math.floor(f[0] * d.cols) - 8));
    readout(img, f);
    tapped = { window: d.window, f };
    const a = hiddenLink(d.tileUrl.replace("ROW%2CCOL", `${r0}%2C${c0}`).replace("ROW,COL", `${r0},${c0}`),
                         img.closest("main"));
    follow(a);
    a.remove();
  });
  on("htmx:afterSettle", () => {
    const img = byId("zoom"), at = tapped;
    tapped = null;
    if (!img || !at || img.dataset.window !== at.window) return;
    if (img.complete && img.naturalWidth) return readout(img, at.f);
    img.addEventListener("load", () => readout(img, at.f), { once: true });
  });
}

// The toy's example (#42, <meta name=lab-example>) is named in the address, so a class or a copied link shows the
// same numbers in any language. What else sits outside the swapped panel and follows the URL htmx pushes (language
// links, "Start a class", presenter switch) comes with htmx's answer, out of band (app/web/page.py blocks_answer);
// the JSON twin's <link> in <head> is copied here, as a history restore and a class's follow swap the body alone.
function relink() {
  const example = document.querySelector('meta[name="lab-example"]')?.getAttribute("content");
  function pin() {
    const url = new URL(location.href), q = url.searchParams;
    const named = ["tokens", "text", "token_ids"].some((k) => q.get(k)) || (q.get("preset") || "toy") !== "toy";
    if (!example || named) return;
    q.set("tokens", example);
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }
  pin();  // now, before room.js announces this view to a class
  on("htmx:pushedIntoHistory htmx:historyRestore htmx:afterSettle DOMContentLoaded", () => {
    pin();
    const twin = document.querySelector("a[data-twin=json]")?.getAttribute("href");
    if (twin) document.querySelector('link[rel=alternate][type="application/json"]')?.setAttribute("href", twin);
  });
}

// ▶ Play (/generate): a step every 0.9 s from here (from the first at the last), "Pause" meanwhile, until the last
// step, a click elsewhere or a key. Each step swaps #stage, the button too: the state lives here, each new button is
// drawn from it (its id keeps the old one's focus: htmx).
function play() {
  let playing = false, timer = null, stepping = null, asked = null;  // the link followed, its request
  const nextLink = () => document.querySelector("a[data-action=next][href]");
  function draw() {
    for (const b of document.querySelectorAll("[data-play]")) {
      b.setAttribute("aria-pressed", String(playing));
      const label = playing ? b.dataset.labelPause : b.dataset.labelPlay;
      if (label && b.textContent !== label) b.textContent = label;
    }
  }
  function stop() {
    clearTimeout(timer);
    timer = null;
    asked?.abort();  // a step on its way would move the paused page on (the request itself: htmx:abort missed it)
    stepping = asked = null;
    if (playing) { playing = false; draw(); }
  }
  function step(a) { stepping = a; follow(a); }
  function schedule() {
    if (timer || !playing) return;
    timer = setTimeout(() => {
      timer = null;
      if (playing && nextLink()) step(nextLink()); else if (playing) stop();
    }, 900);
  }
  function start(button) {
    playing = true;
    draw();
    if (nextLink()) return schedule();
    const first = button.dataset.first;  // at the last step: start again from the first
    if (!first) return stop();
    // The first token's link, or a hidden one kept until the swap is done (htmx needs the element that asked).
    step([...document.querySelectorAll("#stage a[href]")].find((a) => a.getAttribute("href") === first)
         || hiddenLink(first, button.closest("main")));
  }
  on("click", (e) => {
    const button = e.target.closest?.("[data-play]");
    if (!button) { if (e.isTrusted) stop(); return; }
    e.preventDefault();
    if (playing) stop(); else start(button);
  });
  on("keydown", (e) => { if (!e.target.closest?.("[data-play]")) stop(); });  // Enter or Space on it: the click toggles
  on("htmx:afterSettle", () => {
    for (const a of document.querySelectorAll("a[data-hidden-link]")) a.remove();
    draw();
    if (playing && !nextLink()) stop(); else schedule();  // the last step: done, the button reads "Play" again
  });
  on("htmx:beforeSend", (e) => { if (stepping && e.detail.elt === stepping) asked = e.detail.xhr; });
  on("htmx:afterRequest", (e) => { if (e.detail.elt === stepping) stepping = asked = null; });
  on("htmx:responseError htmx:sendError htmx:historyRestore", stop);
}

// A request that is not waited for: a live run's redraw, every second, or its Stop (templates/_train.html).
const quiet = (e) => e.detail.elt.closest("[data-quiet]");

// A request the server turned away for now (429: this reader's share is taken; 503: full) says so, with its
// Retry-After, rather than leave an earlier setting's answer standing as if it were this one's.
function refusedRequests() {
  let timer = null;
  on("htmx:responseError", (e) => {
    const status = e.detail.xhr?.status, box = byId("refused");
    if (!box || (status !== 429 && status !== 503) || quiet(e)) return;
    const wait = parseInt(e.detail.xhr.getResponseHeader("Retry-After") || "1", 10) || 1;
    box.textContent = (document.body.getAttribute("data-busy-text") || "{s}").replace("{s}", String(wait));
    box.hidden = false;
    clearTimeout(timer);
    timer = setTimeout(() => { box.hidden = true; }, Math.max(4, wait + 2) * 1000);
  });
  on("htmx:afterSwap", () => { if (byId("refused")) byId("refused").hidden = true; });
}

// Long work: while a page or a panel is computed, poll /api/v1/progress and show how far it has come in the server's
// words ("21 / 31 layers · 6.2 s"), with <html data-polling> set (a test waits for it to go). An htmx request names
// itself by a random key (X-Progress-Key, adopted by the server); a full page load by its URL (`for=`).
function progress() {
  let timer = null, asking = null;  // the poll in flight, aborted when the wait ends
  function stop() {
    clearInterval(timer);
    asking?.abort();
    timer = asking = null;
    document.documentElement.removeAttribute("data-polling");
    if (byId("progress")) byId("progress").hidden = true;
  }
  function render(p) {
    const box = byId("progress");
    if (!box || (!(p.total > 0) && p.seconds < 1)) return;  // a page that counts nothing: shown once it takes a while
    const bar = box.querySelector("progress");
    if (p.total > 0) Object.assign(bar, { max: p.total, value: p.done }); else bar.removeAttribute("value");
    box.querySelector("span").textContent = p.text ||
      (p.total > 0 ? `${p.done} / ${p.total} ${p.unit || ""} · ` : "") + p.seconds + " s";
    box.hidden = false;
  }
  // A page takes this one's place (the API's files and JSON do not: nothing waits for them).
  const isPage = (url) => !/^\/(api|static|vendor)\/|\.(json|npz|csv|svg|png|zip)$/.test(url.split("?")[0]);
  function start(query) {  // "key=…" (an htmx request's own key) or "for=…" (a page's URL)
    stop();
    const lang = document.documentElement.lang.startsWith("zh") ? "zh" : "en";
    document.documentElement.setAttribute("data-polling", "");
    timer = setInterval(() => {
      if (asking) return;  // the last poll not answered yet
      const ask = asking = new AbortController();
      fetch(`/api/v1/progress?${query}&lang=${lang}`, { headers: { Accept: "application/json" }, signal: ask.signal })
        .then((res) => (res.ok ? res.json() : null))
        .then((p) => {
          if (asking === ask) asking = null;
          if (timer && p && !p.answered) render(p); else if (timer) stop();  // answered, or not served here
        })
        .catch(() => { if (asking === ask) asking = null; });
    }, 600);
  }
  function startFor(url) {  // a full page load, by its URL when it is short enough (a long text's is not)
    if (isPage(url) && url.length <= 8000) start("for=" + encodeURIComponent(url)); else stop();
  }
  on("htmx:configRequest", (e) => {
    if (quiet(e)) return;
    if (!isPage(e.detail.path || "")) return stop();
    const key = Array.from(crypto.getRandomValues(new Uint8Array(8)), (b) => (b + 256).toString(16).slice(1)).join("");
    e.detail.headers["X-Progress-Key"] = key;
    start("key=" + key);
  });
  on("htmx:afterRequest", (e) => { if (!quiet(e)) stop(); });
  // Full page loads: a GET form or a plain link to this site in this tab; the old page polls until the new one comes.
  const otherTab = (el) => el.target && el.target !== "_self";
  on("submit", (e) => {
    const form = e.target, action = new URL(form.action, location.href);
    if (e.defaultPrevented || form.method !== "get" || otherTab(form) || action.origin !== location.origin) return;
    startFor(action.pathname + "?" + new URLSearchParams(new FormData(form)));
  });
  on("click", (e) => {
    const a = e.target.closest?.("a[href]");
    if (!a || e.defaultPrevented || a.hasAttribute("download") || a.origin !== location.origin || otherTab(a)) return;
    if (a.hash && a.pathname === location.pathname && a.search === location.search) return;  // a place on this page
    if (a.closest("[hx-boost=true]") && a.getAttribute("hx-boost") !== "false") return;  // htmx's own request
    startFor(a.pathname + a.search);
  });
  // Back to a page that polled (from the back-forward cache; not the first load, a deferred page's own request).
  on("pageshow", (e) => { if (e.persisted) stop(); }, window);
}

// Places: a lesson step's (data-anchor) is scrolled to by a screen that came without its #fragment (a remote, a room);
// a class's followed page (static/room.js) lands at the teacher's place or its top before the fitters measure it; a
// deferred page's shell (templates/_deferred.html), once its page is swapped in, scrolls to its #fragment (or the
// step's place) as a plain load would, or says that the page could not come, beside the plain link.
function places() {
  on("DOMContentLoaded", () => {
    const place = byId(anchorOf());
    if (place && !hashTarget()) scrollToPlace(place);  // the address's own place is the browser's to scroll to
  });
  on("room:followed", (e) => scrollToPlace(byId(e.detail.place || "")));
  let arrived = false;
  const shell = (e) => e.detail.elt.closest?.("[data-deferred]");
  on("htmx:beforeSwap", (e) => { if (shell(e)) arrived = true; });
  on("htmx:afterSettle", () => {
    const place = arrived && (location.hash ? hashTarget() : byId(anchorOf()));
    arrived = false;
    if (place) scrollToPlace(place);
  });
  on("htmx:responseError htmx:sendError", (e) => {
    if (!shell(e)) return;
    shell(e).querySelector("[data-deferred-failed]").hidden = false;
    shell(e).querySelector("#deferred-status").hidden = true;
  });
}

// The lesson's panel stays at the top (lab.css) beside a step's place: its height (--lesson-h; a phone's fold above
// the question, --lesson-fold) sizes the figures, and the page stays at the place until the reader scrolls.
function stickyLesson() {
  let held = true;
  on("wheel touchstart keydown mousedown", () => { held = false; }, window, { passive: true });
  on("room:followed", () => { held = true; });
  onLayout(() => {
    const beside = document.querySelector("body > .lesson-beside"), root = document.documentElement.style;
    const box = beside?.getBoundingClientRect(), question = beside?.querySelector(".question");
    const fold = question ? question.getBoundingClientRect().top - box.top - 4 : 0;
    root.setProperty("--lesson-fold", Math.max(0, Math.floor(fold)) + "px");
    const style = beside && getComputedStyle(beside);  // its top: 0, or minus the fold on a phone
    const h = style?.position === "sticky" ? box.height + Math.min(0, parseFloat(style.top) || 0) : 0;
    root.setProperty("--lesson-h", Math.ceil(h) + "px");
    const anchor = question?.closest(".lesson-panel").getAttribute("data-anchor");
    const place = h && anchor && byId(anchor), hash = decodeURIComponent(location.hash.slice(1));
    if (!held || !place || (hash !== anchor && byId(hash))) return;
    const off = place.getBoundingClientRect().top - parseFloat(getComputedStyle(place).scrollMarginTop);
    if (Math.abs(off) > 2) place.scrollIntoView();
  });
}

// The class bar (#room) comes, grows and goes: its height as --room-h, and "room:resized" for the fitters, once a
// frame. Its own observer sees it go too, and not while a follower's page is swapped in without it (static/room.js).
function barResized() {
  let watched = null, queued = false;
  const observer = new ResizeObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      document.documentElement.style.setProperty("--room-h", Math.ceil(byId("room")?.offsetHeight || 0) + "px");
      document.dispatchEvent(new CustomEvent("room:resized"));
    });
  });
  on("room:bar htmx:afterSettle", () => {
    const room = byId("room");
    if (!room || room === watched) return;
    if (watched) observer.unobserve(watched);
    observer.observe((watched = room));
  });
}

// Presenter mode wider than a phone (by layout width: a page zoomed out has a wide innerWidth).
const projector = () => document.body.classList.contains("present") && document.documentElement.clientWidth > 700;
// Whether no element of `els` shown needs a sideways scroll.
const noSideways = (els) => els.every((el) => !el.offsetParent || el.scrollWidth <= el.clientWidth + 1);

// The largest whole size in lo…hi at which `fits()` holds after `set(size)` (lo when none does), left applied.
function largest(lo, hi, set, fits) {
  set(hi);
  if (fits()) return hi;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    set(mid);
    if (fits()) lo = mid; else hi = mid;
  }
  set(lo);
  return lo;
}

// Presenter mode's stage: the largest font (8–64 px) at which its matrices fit their column and it ends on screen.
function presenterNumbers() {
  onLayout(() => {
    const stage = byId("stage"), data = stage?.querySelector(".stage-data"), css = stage?.style;
    if (!document.body.classList.contains("present") || !data?.querySelector("table[data-matrix]")) return;
    if (!projector()) return ["--fit", "--fit-arith"].forEach((v) => css.removeProperty(v));
    const bottom = screenBottom(4), boxes = [data, ...data.querySelectorAll(".scroll, figure.matrix")];
    const body = stage.querySelector(".stage-body")?.style, text = stage.querySelector(".stage-text");
    const fits = () => noSideways(boxes) && data.getBoundingClientRect().bottom <= bottom;
    const textFits = () => !text || text.getBoundingClientRect().bottom <= bottom;
    const numbers = () => largest(8, 64, (px) => {
      css.setProperty("--fit", px + "px");
      css.setProperty("--fit-arith", Math.min(30, Math.max(12, Math.round(px * 0.7))) + "px");
    }, fits);
    const columns = (value) => (value ? body.setProperty("grid-template-columns", value)
                                      : body.removeProperty("grid-template-columns"));
    // The words' column ends on screen too: it takes width from the numbers (1 : 1.5 … 1 : 0.8) while they keep 24 px
    // (or less had) and fit, then its type shrinks to 14 px at the least (#32), the question's size kept.
    if (body) columns("");
    css.removeProperty("--fit-text");
    let px = numbers();
    const floor = Math.min(24, px);
    for (const share of [1.5, 1.2, 1, 0.8]) {
      if (!body || textFits()) break;
      const was = body.getPropertyValue("grid-template-columns");
      columns(`minmax(0, 1fr) minmax(0, ${share}fr)`);
      const got = numbers();
      if (got >= floor && fits()) { px = got; continue; }
      columns(was);
      px = numbers();
      break;
    }
    if (!textFits()) {
      let size = parseFloat(getComputedStyle(text.querySelector(".explain") || text).fontSize);
      while (size > 14 && !textFits()) css.setProperty("--fit-text", --size + "px");
      px = numbers();
    }
    stage.setAttribute("data-fit", String(px));
    settleFormulas();  // the arithmetic's new size: its lines fit again
  });
}

// The model view's grids and /predict's tables: the largest type (lo…hi px) with nothing sideways, ending on screen.
const FITTED = [["main.model-view [data-fit-grids]", "--grid-fit", 8, 48], [".train-scroll", "--table-fit", 10, 32]];
function presenterTables() {
  onLayout(() => {
    for (const [selector, property, lo, hi] of FITTED) {
      for (const box of document.querySelectorAll("body.present " + selector)) {
        if (!projector()) { box.style.removeProperty(property); continue; }
        const bottom = screenBottom(4), boxes = [box, box.closest("main") || box, ...box.querySelectorAll(".scroll")];
        const fits = () => noSideways(boxes) && box.getBoundingClientRect().bottom + scrollY <= bottom;
        box.setAttribute("data-fit", largest(lo, hi, (px) => box.style.setProperty(property, px + "px"), fits));
      }
    }
  });
}

// The header's "More" menu (#42): a disclosure that closes as a menu does, on a click elsewhere or Escape.
function moreMenu() {
  on("click", (e) => {
    const mine = e.target.closest?.("details[data-more-nav]");
    for (const d of document.querySelectorAll("details[data-more-nav][open]")) if (d !== mine) d.open = false;
  });
  on("keydown", (e) => {
    const open = e.key === "Escape" && document.querySelector("details[data-more-nav][open]");
    if (!open) return;
    open.open = false;
    open.querySelector("summary").focus();
  });
}

// The open cell's arithmetic (#42) is scrolled on screen, the clicked number kept below the top (outside presenter
// mode the box waits at the window's foot: the number is lifted above it); once per cell, not pulling a reader back.
function arithmeticInView() {
  let shown = null;
  onLayout(() => {
    const box = byId("arithmetic"), key = box && location.pathname + "#" + box.getAttribute("data-cell");
    const sticky = box && getComputedStyle(box).position === "sticky";
    // At the window's foot the box may grow with the math font: the number is lifted again (if it is under it).
    const again = key === shown;
    if (!box || (again && !sticky)) { shown = key || null; return; }
    const r = box.getBoundingClientRect();
    if (!r.height) return;  // not laid out yet (a hidden panel): the next layout moment tries again
    shown = key;
    const cell = document.querySelector("#stage td.selected"), top = cell ? cell.getBoundingClientRect().top : r.top;
    const margin = 8, bottom = screenBottom(margin);
    let by = 0;
    if (cell && sticky) {  // lift the cell above the box at the window's foot, if it is on screen
      const c = cell.getBoundingClientRect();
      if (!again || (c.bottom > r.top - margin && c.top < r.top)) by = Math.max(0, c.bottom - (r.top - margin));
    } else if (r.bottom > bottom) by = Math.min(r.bottom - bottom, top - margin);  // to the box's end, keeping the cell
    else if (r.top < margin) by = r.top - margin;
    if (cell && top - by < margin) by = top - margin;  // the cell itself above the screen: bring it back
    if (Math.abs(by) >= 1) scrollBy(0, by);
  });
}

// A formula or arithmetic line wider than its box shrinks to fit (outside presenter mode to 70 %, then it scrolls).
function settleFormulas() {
  for (const box of document.querySelectorAll(".explain .formula, .stage-data > .arithmetic li")) {
    const m = box.querySelector("math");
    if (!m) continue;
    m.style.removeProperty("font-size");
    // A block formula's box is as wide as its column: what overflows is the column's scroll.
    const w = Math.max(m.getBoundingClientRect().width, box.scrollWidth), room = box.clientWidth;
    if (w <= room || room <= 0) continue;
    const size = parseFloat(getComputedStyle(m).fontSize);
    const least = box.closest("body.present") || !box.closest(".arithmetic") ? 8 : Math.ceil(size * 0.7);
    m.style.setProperty("font-size", Math.max(least, Math.floor(size * room / w * 0.98)) + "px");
  }
}

// Phones: rows that scroll sideways (step tabs, the block's flow, /predict's table) keep the current step in view.
function currentInView() {
  onLayout(() => {
    for (const row of document.querySelectorAll("ol.flow, ol.tabs, .train-scroll")) {
      const cur = row.querySelector("a[aria-current], td.chosen");
      if (!cur || row.scrollWidth <= row.clientWidth) continue;
      const r = cur.getBoundingClientRect(), box = row.getBoundingClientRect();
      row.scrollLeft += (r.left + r.width / 2) - (box.left + box.width / 2);
    }
  });
}

// The Show code panel's Copy buttons (templates/_export.html): the snippet to the clipboard, or selected for Ctrl+C
// where there is no Clipboard API (a page served over plain http to another machine).
function copyCode() {
  on("click", async (e) => {
    const b = e.target.closest?.("button[data-copy-code]");
    const pre = b?.closest("details").querySelector(`pre[data-code-text="${b.dataset.copyCode}"]`);
    if (!pre) return;
    try { await navigator.clipboard.writeText(pre.textContent); } catch { return getSelection().selectAllChildren(pre); }
    const label = b.textContent;
    b.textContent = b.dataset.done;
    setTimeout(() => { b.textContent = label; }, 1500);
  });
}

// A byte piece that only begins a character (⟨e7⟩: engine/models/labels.py) says so in a tooltip, on any page.
function bytePieces() {
  const piece = /⟨[0-9a-f]{2}⟩(?:⟨[0-9a-f]{2}⟩)*/;
  on("DOMContentLoaded htmx:afterSettle room:followed", () => {
    const say = document.body.getAttribute("data-byte-piece"), seen = [];
    if (!say || (!document.body.textContent.includes("⟨") && !document.querySelector("[title*='⟨']"))) return;
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node; (node = walk.nextNode());) {
      const m = piece.exec(node.nodeValue), el = node.parentElement;
      if (m && el && !el.closest("script, style, textarea")) seen.push([el, m[0]]);
    }
    for (const el of document.querySelectorAll("[title*='⟨']:not([data-piece])")) {
      const m = piece.exec(el.getAttribute("title"));
      if (m) seen.push([el, m[0]]);
    }
    for (const [el, found] of seen) {
      if (el.hasAttribute("data-piece")) continue;
      const line = say.replace("{piece}", found), title = el.getAttribute("title");
      el.setAttribute("data-piece", found);
      el.setAttribute("title", title ? title + "\n" + line : line);
    }
  });
}

for (const section of [keyboard, relink, play, progress, refusedRequests, places, stickyLesson, barResized,
                       presenterNumbers, presenterTables, moreMenu, arithmeticInView, () => onLayout(settleFormulas),
                       currentInView, copyCode, bytePieces]) section();
