// Live rooms. In a room (cookie lab_room) every page gets its bar from /r/<code>/bar (templates/room_bar.html), which
// follows the room's events over htmx's SSE extension; the server renders its poll box (`poll-html`). Here: `state`
// moves a following screen to the teacher's view, `end` closes the class; exploring, a cell poll's cells, the
// teacher's announcing, a lesson's held answers.
(function () {
  "use strict";
  var kit = window.labRoomKit;
  var code = (document.cookie.match(/(?:^|; )lab_room=([A-Z2-9]{6})(?:;|$)/) || [])[1];
  // The teacher's remote (static/teach.js), the pairing pages and the class summary are the teacher's own, never a
  // view of the class (the summary, read after the end, asked for the ended class's bar: a 404 in the console).
  if (!code || document.querySelector("[data-teach], [data-room-pair], main[data-summary]")) return;
  // A lesson step's answer (and a lesson page's) stays shut until the bar says who this screen is.
  each(".lesson-panel details.answer, main.lesson[data-lesson] .lesson-step details.answer", function (a) { a.hidden = true; });
  var lang = (document.documentElement.lang || "en").slice(0, 2);
  var api = "/api/v1/rooms/" + code, modeKey = "lab_room_mode_" + code;
  var bar = document.createElement("div");
  bar.id = "room";
  var role = null, latest = null, over = false, seq = 0;

  function q(sel) { return bar.querySelector(sel); }
  function each(sel, fn, root) { Array.prototype.forEach.call((root || document).querySelectorAll(sel), fn); }
  function forget() { document.cookie = "lab_room=; Max-Age=0; path=/"; }
  function ownView() { return kit.asView(location.href); } // without this screen's own language and presenter mode
  // The bar's own request (its poll box) or a live run's redraw (/train, templates/_train.html): no step of the page's.
  function quiet(elt) { return bar.contains(elt) || !!elt.closest("[data-quiet]"); }

  // ---- students: follow, explore, answer ----------------------------------------------------------------------
  function following() { return sessionStorage.getItem(modeKey) !== "exploring"; }
  function setMode(mode) {
    sessionStorage.setItem(modeKey, mode);
    document.body.setAttribute("data-room-following", mode === "following" ? "1" : "0");
  }
  function go(view) {
    if (!view || kit.sameView(view, ownView())) return;
    var params = new URLSearchParams(view.query), here = new URLSearchParams(location.search);
    params.set("lang", lang);
    if (here.get("present")) params.set("present", here.get("present")); // the projector stays in presenter mode
    var url = view.page + "?" + params.toString(), mine = ++seq, place = placeOf(view);
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) {
        // A busy server (429, 503) is no page to show: the same step after its Retry-After, unless a newer came.
        if (res.status !== 429 && res.status !== 503) return res.text();
        var wait = Math.min(30, Math.max(1, Number(res.headers.get("Retry-After")) || 2));
        setTimeout(function () { if (mine === seq) go(view); }, wait * 1000);
        return null;
      })
      .then(function (html) {
        if (html === null || mine !== seq || over || (role === "student" && !following())) return; // newer, exploring, left
        // htmx swaps the page in (its title too) and settles it at once: the htmx:afterSettle listeners below mark its
        // cells and give the teacher's page its Ask and QR. The bar and its event stream are kept out of the swap.
        bar.remove();
        window.htmx.swap(document.body, html, { swapStyle: "innerHTML" });
        document.body.appendChild(bar);
        if (role === "teacher") announced = view;
        history.replaceState(null, "", url);
        document.dispatchEvent(new CustomEvent("room:followed", { detail: { view: view, place: place } })); // lab.js lands
      })
      .catch(function () { /* the next event (or "back to the teacher") tries again */ });
  }
  // The place the remote's press is about: the link to this view on the page shown now names it by its #fragment
  // (e.g. "Rank the heads" → #ranking); a followed screen lands there (static/lab.js places). A link that names no
  // sentence matches the view with the class's kept one (rooms/api.py kept_sentence).
  function placeOf(view) {
    var links = document.querySelectorAll("a[href*='#']"), kept = new URLSearchParams(view.query);
    kept.delete("tokens");
    for (var i = 0; i < links.length; i++) {
      var u = new URL(links[i].getAttribute("href"), location.href), own = kit.asView(u.href);
      if (bar.contains(links[i]) || u.origin !== location.origin || u.hash.length < 2) continue;
      if (kit.sameView(own, new URLSearchParams(own.query).has("tokens") ? view : { page: view.page, query: kept.toString() }))
        return decodeURIComponent(u.hash.slice(1));
    }
    return null;
  }

  // The poll this screen shows, as the server rendered it into the bar (templates/_room_poll.html): its data-poll-*.
  function poll() { return (q("[data-poll]") || {}).dataset; }
  // A cell poll asks about the class's matrix (app/rooms/api.py view_place): a student exploring another page or stage
  // sees no votes or key there, and a tap opens the cell instead of answering (the class walk). Unnamed parts match.
  function place(page, query) {
    var p = new URLSearchParams(query || ""), at = function (k) { return (p.get(k) || "").trim(); }, s = at("stage");
    if (page === "/" && /^[1-5]$/.test(s)) s = ["projection", "scores", "mask", "softmax", "weighted_sum"][s - 1];
    return { page: page, stage: s, step: at("step"), lesson_step: at("lesson_step") };
  }
  function atPollMatrix() {
    if (role !== "student" || following() || !latest) return true;
    var a = place(location.pathname, location.search), b = place(latest.page, latest.query);
    return a.page === b.page && ["stage", "step", "lesson_step"].every(function (k) { return !a[k] || !b[k] || a[k] === b[k]; });
  }
  // Cell polls: every matrix cell shows how many chose it (once revealed), or which one this student chose.
  function markCells(p) {
    var cell = p && p.pollKind === "cell" && atPollMatrix(), counts = cell ? JSON.parse(p.pollCounts || "{}") : {}, top = 0;
    Object.keys(counts).forEach(function (k) { top = Math.max(top, counts[k]); });
    each("td[data-row][data-col]", function (td) {
      if (bar.contains(td)) return;
      var k = td.getAttribute("data-row") + "," + td.getAttribute("data-col"), n = counts[k] || 0;
      td.classList.toggle("pollable", !!(cell && p.pollStatus === "open" && role === "student"));
      td.classList.toggle("voted", !!(cell && p.pollMine === k));
      td.classList.toggle("poll-key", !!(cell && p.pollStatus === "closed" && p.pollAnswer === k));
      if (n) { td.setAttribute("data-votes", String(n)); td.style.setProperty("--votes", String(n / top)); }
      else { td.removeAttribute("data-votes"); td.style.removeProperty("--votes"); }
    });
  }
  // A new poll box: the page's cells, and while the class votes no screen shows "what to notice" or the answer.
  function pollChanged() {
    var p = poll();
    if (p && p.pollStatus === "open") document.body.setAttribute("data-poll-open", "1");
    else document.body.removeAttribute("data-poll-open");
    if (p && p.pollStatus === "closed") release(stepOf(latest)); // revealed: the step's answer opens for students too
    markCells(p);
    holdAnswers();
  }
  // A cell poll's answer is a cell tapped on the page (a choice's options answer from the box, by htmx).
  document.addEventListener("click", function (e) {
    var p = poll(), box = q("[data-room-poll]"), td = e.target.closest && e.target.closest("td[data-row][data-col]");
    if (role !== "student" || !p || p.pollKind !== "cell" || p.pollStatus !== "open" || !td || bar.contains(td) || !atPollMatrix()) return;
    e.preventDefault();
    e.stopPropagation();
    var answer = td.getAttribute("data-row") + "," + td.getAttribute("data-col");
    window.htmx.ajax("POST", box.getAttribute("data-answer"), { source: box, target: box, swap: "outerHTML", values: { answer: answer } });
  }, true);
  bar.addEventListener("click", function (e) { // a revealed result leaves this phone
    if (e.target.closest("[data-room-dismiss]")) { dismiss(); pollChanged(); }
  });
  function dismiss() {
    var box = q("[data-room-poll]");
    if (box) { box.hidden = true; box.removeAttribute("data-poll"); }
  }
  // A student's own request on the page means exploring (not a heavy page's shell asking for its numbers, #42).
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail && e.detail.elt;
    if (!elt || quiet(elt) || elt.closest("[data-deferred]")) return;
    if (role === "student" && following()) setMode("exploring");
  });

  // ---- the teacher: announce the view ---------------------------------------------------------------------------
  var announced = null, ownVersion = 0, pending = 0, navigating = false, remoteState = null;
  function announce() {
    var view = ownView();
    if (role !== "teacher" || (announced && kit.sameView(view, announced))) return;
    announced = view;
    pending++;
    kit.json(api + "/state", "PUT", view)
      .then(function (out) { bar.classList.remove("refused"); if (out && out.version > ownVersion) ownVersion = out.version; })
      .catch(function (status) { announced = null; if (typeof status === "number") bar.classList.add("refused"); })
      .then(function () { pending--; tryFollow(); });
  }
  // The remote (/r/<code>/teach) may step the class: the projector follows it like a student would, unless the
  // change is this page's own; while this page's own step or announcement is in flight, it waits for it.
  function tryFollow() {
    if (!remoteState || pending || navigating) return;
    var state = remoteState;
    remoteState = null;
    if (state.version > ownVersion && !(announced && kit.sameView(state, announced))) go(state);
  }
  // "Ask the class" on a lesson step (the bar's <template>): the question and its key come from the lesson. On the
  // lab's lesson panel, and on a lesson's own page beside each step the class answers there (a choice).
  function addAsk() {
    if (role !== "teacher" || over) return;
    each(".lesson-panel[data-lesson], main.lesson[data-lesson] .lesson-step[data-poll-kind=choice]", function (box) {
      if (box.querySelector("[data-room-ask]")) return;
      (box.querySelector(".question") || box).appendChild(q("template[data-room-ask-button]").content.cloneNode(true));
    });
  }
  document.addEventListener("click", function (e) {
    var ask = e.target.closest && e.target.closest("[data-room-ask]");
    var panel = ask && ask.closest(".lesson-panel[data-lesson], .lesson-step[data-step]");
    if (!panel || over || bar.contains(ask)) return;
    var body = Object.assign({ lesson: panel.closest("[data-lesson]").getAttribute("data-lesson"),
                               step: Number(panel.getAttribute("data-step")), lang: lang },
                             kit.matrixShape(document.querySelector("table[data-matrix]")));
    kit.json(api + "/polls/lesson", "POST", body).then(function () { bar.classList.remove("refused"); })
      .catch(function () { bar.classList.add("refused"); });
  });
  // Presenter mode's QR (the view's own address) becomes the room's, as the bar renders it: students scan it.
  function presentRoom() {
    var aside = document.querySelector("aside.qr"), wall = q("template[data-room-wall]");
    if (!aside || aside.hasAttribute("data-room-join") || !wall || over) return;
    aside.setAttribute("data-room-join", code);
    aside.replaceChildren(wall.content.cloneNode(true));
  }
  function teacherControls() {
    // The class as it stood when this page loaded is no step of the remote's: a page the class cannot follow (a
    // refused announcement) stays on the projector instead of going back to it.
    ownVersion = Number(q("[data-room-loaded]").getAttribute("data-room-loaded")) || 0;
    presentRoom();
    addAsk();
    document.addEventListener("htmx:afterSettle", function () { presentRoom(); addAsk(); });
    // A step of the projector's own wins over a remote step that arrived before it.
    document.addEventListener("htmx:beforeRequest", function (e) {
      if (!quiet(e.detail.elt)) { navigating = true; remoteState = null; }
    });
    var settled = function (e) {
      if (e && e.detail && e.detail.elt && quiet(e.detail.elt)) return;
      navigating = false;
      setTimeout(tryFollow, 0);
    };
    document.addEventListener("htmx:afterSettle", settled);
    document.addEventListener("htmx:afterRequest", function (e) { if (!e.detail || !e.detail.successful) settled(); });
    document.addEventListener("htmx:pushedIntoHistory", announce);
    document.addEventListener("htmx:replacedInHistory", announce);
    window.addEventListener("popstate", function () { setTimeout(announce, 0); });
    announce();
  }
  function studentControls() {
    var joined = location.hash === "#follow"; // a student who just joined follows
    if (joined) history.replaceState(null, "", location.pathname + location.search);
    setMode(joined || following() ? "following" : "exploring");
    q("[data-room-explore]").addEventListener("click", function () { setMode("exploring"); });
    q("[data-room-back]").addEventListener("click", function () { setMode("following"); kit.json(api).then(go).catch(function () {}); });
    q("[data-room-leave]").addEventListener("click", function () {
      forget();
      stop();
      bar.remove();
      document.body.removeAttribute("data-room-following");
      holdAnswers();
    });
  }

  // ---- the end ------------------------------------------------------------------------------------------------
  function stop() { over = true; kit.close(q("[sse-connect]")); }
  function ended() {
    stop();
    // One message, nothing to press: every control of the bar goes, and so does a poll nobody can answer now.
    each(".room-bar > *", function (el) { el.hidden = true; }, bar);
    q("[data-room-ended]").hidden = false;
    each("aside.qr[data-room-join]", function (el) { el.hidden = true; }); // nobody can join the ended class
    var restart = q("[data-room-restart]"); // the teacher's screen: the next class starts from this view
    if (restart) {
      restart.querySelector("[name=page]").value = location.pathname;
      restart.querySelector("[name=query]").value = location.search.replace(/^\?/, "");
      restart.hidden = false;
    }
    dismiss();
    each("[data-room-ask]", function (b) { b.remove(); }); // nobody is left to ask
    bar.classList.add("ended");
    forget();
    document.body.removeAttribute("data-room-following");
    pollChanged();
  }

  // A student's lesson step answer opens once its poll is revealed or the class moved on; until then a note says so.
  var releasedKey = "lab_room_released_" + code;
  function released() { return (sessionStorage.getItem(releasedKey) || "").split("\n"); }
  function release(step) {
    if (step && released().indexOf(step) < 0) sessionStorage.setItem(releasedKey, released().concat(step).join("\n"));
  }
  // A step: a lesson's, else the page's stage (app/rooms/fragments.py step_of says it the same way).
  function stepOf(view) {
    if (!view) return null;
    var p = new URLSearchParams(view.query || ""), lesson = p.get("lesson");
    return lesson ? lesson + ":" + (p.get("lesson_step") || p.get("step") || "1") : view.page + ":" + (p.get("stage") || "");
  }
  function holdAnswers() {
    var panel = document.querySelector(".lesson-panel[data-lesson]"), page = document.querySelector("main.lesson[data-lesson]");
    if (panel) hold(panel, panel.getAttribute("data-lesson"), panel.getAttribute("data-step"));
    if (page) each(".lesson-step[data-step]", function (li) { hold(li, page.getAttribute("data-lesson"), li.getAttribute("data-step")); }, page);
  }
  function hold(box, lesson, step) {
    var answer = box.querySelector("details.answer"), k = Number(step);
    if (!answer) return;
    var now = new URLSearchParams((latest && latest.query) || "");
    var past = now.get("lesson") === lesson && Number(now.get("lesson_step")) > k; // the class is further on
    var held = role === "student" && !over && !past && released().indexOf(lesson + ":" + k) < 0;
    if (held) answer.open = false;
    answer.hidden = held;
    var note = box.querySelector("[data-answer-held]");
    if (!note && held) {
      answer.after(q("template[data-room-answer-held]").content.cloneNode(true));
      note = box.querySelector("[data-answer-held]");
    }
    if (note) note.hidden = !held;
  }
  document.addEventListener("htmx:afterSettle", pollChanged);

  // ---- the room's events on the bar (htmx's SSE extension; a reconnected stream starts with the room as it is) ----
  function onState(view) {
    if (latest && stepOf(latest) !== stepOf(view)) release(stepOf(latest)); // the class moved on from that step
    latest = view;
    bar.setAttribute("data-room-version", String(view.version));
    if (role === "student" && following()) go(view);
    if (role === "teacher" && (!remoteState || view.version > remoteState.version)) { remoteState = view; tryFollow(); }
    holdAnswers();
  }
  bar.addEventListener("htmx:sseMessage", function (e) {
    var type = e.detail && e.detail.type;
    if (type === "state") onState(JSON.parse(e.detail.data));
    else if (type === "end") ended();
  });
  bar.addEventListener("htmx:sseOpen", function () { bar.removeAttribute("data-room-offline"); });
  // A stream that fails: offline until it is back; a room that is gone has ended.
  bar.addEventListener("htmx:sseError", function () {
    bar.setAttribute("data-room-offline", "");
    if (!over) kit.ifGone(api, ended);
  });

  // The bar first: while the room store is away (503) or the network is, try again with growing pauses.
  var tries = 0;
  function loadBar() {
    fetch("/r/" + code + "/bar?lang=" + lang, { credentials: "same-origin" }) // it gives this browser its student id
      .then(function (res) {
        if (res.status === 404) { forget(); holdAnswers(); return null; }
        if (!res.ok) { setTimeout(loadBar, kit.backoff(tries++, Number(res.headers.get("Retry-After")) || 0)); return null; }
        return res.text();
      })
      .then(function (html) {
        if (!html) return;
        bar.innerHTML = html;
        role = q("[data-room-role]").getAttribute("data-room-role");
        document.body.appendChild(bar);
        document.body.setAttribute("data-room", role);
        if (role === "teacher") teacherControls(); else studentControls();
        holdAnswers();
        window.htmx.process(bar); // connects the room's event stream
        document.dispatchEvent(new CustomEvent("room:bar"));
      })
      .catch(function () { setTimeout(loadBar, kit.backoff(tries++)); });
  }
  loadBar();
})();
