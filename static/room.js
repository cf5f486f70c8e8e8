// Attention Lab: live rooms. In a room (cookie lab_room) every page gets the room bar from /r/<code>/bar and one
// EventSource on /api/v1/rooms/<code>/events. The teacher's page sends its view (path + query) on every change;
// a following student's page fetches that view and swaps it in place, keeping the bar and the stream.
(function () {
  "use strict";
  var kit = window.labRoomKit;

  function cookie(name) {
    var m = document.cookie.match(new RegExp("(?:^|; )" + name + "=([^;]*)"));
    return m ? decodeURIComponent(m[1]) : null;
  }
  var code = cookie("lab_room");
  if (!code || !/^[A-Z2-9]{6}$/.test(code)) return;
  // The teacher's remote (static/teach.js) and the pairing pages are the teacher's own, never a view of the class.
  if (document.querySelector("[data-teach], [data-room-pair]")) return;
  // Until the bar says who this screen is, a lesson step's answer stays shut (a student's waits for the reveal).
  // So do the steps' answers of a lesson's own page (/lessons/<slug>).
  var ANSWERS = ".lesson-panel details.answer, main.lesson[data-lesson] .lesson-step details.answer";
  Array.prototype.forEach.call(document.querySelectorAll(ANSWERS), function (shut) { shut.hidden = true; });
  var lang = (document.documentElement.lang || "en").slice(0, 2);
  var api = "/api/v1/rooms/" + code;
  var modeKey = "lab_room_mode_" + code;
  var bar = document.createElement("div");
  bar.id = "room";
  var role = null;
  var conn = null; // the room's event stream (static/room-kit.js)
  var latest = null; // the room's view, as last announced
  var poll = null; // the open (or last revealed) poll
  var seq = 0; // follow navigations: only the newest one may swap

  function q(sel) { return bar.querySelector(sel); }
  function all(sel) { return Array.prototype.slice.call(bar.querySelectorAll(sel)); }
  function text(sel, value) { var el = q(sel); if (el) el.textContent = value; }

  // The view of this page without what belongs to this screen alone (language, presenter mode).
  function ownView() { return kit.asView(location.href); }
  var sameView = kit.sameView;

  // ---- students: follow, explore, answer ----------------------------------------------------------------------
  function following() { return sessionStorage.getItem(modeKey) !== "exploring"; }
  function setMode(mode) {
    sessionStorage.setItem(modeKey, mode);
    document.body.setAttribute("data-room-following", mode === "following" ? "1" : "0");
  }

  function go(view) {
    if (!view || sameView(view, ownView())) return;
    var params = new URLSearchParams(view.query);
    params.set("lang", lang);
    // What belongs to this screen stays: the projector stays in presenter mode when the remote steps.
    var here = new URLSearchParams(location.search);
    if (here.get("present")) params.set("present", here.get("present"));
    var url = view.page + "?" + params.toString();
    var mine = ++seq;
    // The place the remote's press is about: the link to this view on the page shown now (the one the remote read
    // its button from) names it by its #fragment, e.g. "Rank the heads" → #ranking, a head on /heads → #pattern.
    var place = placeOf(view);
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (res) {
        // A busy server (429: this address's computation is running; 503: the queue is full) is no page to show:
        // the same step again after its Retry-After, unless a newer step came meanwhile.
        if (res.status === 429 || res.status === 503) {
          var wait = Math.min(30, Math.max(1, Number(res.headers.get("Retry-After")) || 2));
          setTimeout(function () { if (mine === seq) go(view); }, wait * 1000);
          return null;
        }
        return res.text();
      })
      .then(function (html) {
        if (html === null) return;
        if (mine !== seq || (role === "student" && !following())) return; // a newer step, or exploring meanwhile
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.title = doc.title;
        document.body.className = doc.body.className;
        var nodes = Array.prototype.slice.call(doc.body.childNodes);
        document.body.replaceChildren.apply(document.body, nodes);
        document.body.appendChild(bar);
        if (role === "student") document.body.setAttribute("data-room-following", "1");
        document.body.setAttribute("data-room", role);
        if (poll && poll.status === "open") document.body.setAttribute("data-poll-open", "1");
        if (role === "teacher") { announced = view; addAsk(); presentRoom(); }
        history.replaceState(null, "", url);
        if (window.htmx) window.htmx.process(document.body);
        markCells();
        holdAnswers();
        document.dispatchEvent(new CustomEvent("room:followed", { detail: view }));
        toPlace(place);
      })
      .catch(function () { /* the next event (or "back to the teacher") tries again */ });
  }

  function placeOf(view) {
    var links = document.querySelectorAll("a[href*='#']");
    for (var i = 0; i < links.length; i++) {
      if (bar.contains(links[i])) continue;
      var u = new URL(links[i].getAttribute("href"), location.href);
      if (u.origin !== location.origin || u.hash.length < 2) continue;
      if (sameView(kit.asView(u.href), view)) return decodeURIComponent(u.hash.slice(1));
    }
    return null;
  }
  // A followed screen (the projector, a following phone) scrolls there, as the link itself would have: what the
  // remote changed is in sight, not below the fold. After the page's own layout (presenter sizing) has run.
  function toPlace(id) {
    var el = id && document.getElementById(id);
    if (!el) return;
    el.scrollIntoView({ block: "start" });
    requestAnimationFrame(function () { el.scrollIntoView({ block: "start" }); });
  }

  function studentId() {
    var id = localStorage.getItem("lab_student");
    if (!id) {
      var bytes = new Uint8Array(12);
      crypto.getRandomValues(bytes);
      id = Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join("");
      localStorage.setItem("lab_student", id);
    }
    return id;
  }

  function send(answer) {
    if (!poll || poll.status !== "open") return;
    var nick = q("[data-room-nickname]");
    var body = { student: studentId(), answer: answer };
    if (nick && nick.value.trim()) body.nickname = nick.value.trim();
    kit.json(api + "/polls/" + poll.id + "/answers", "POST", body)
      .then(function (out) {
        sessionStorage.setItem("lab_answer_" + poll.id, out.answer);
        showMine(out.answer);
      }).catch(function () {});
  }
  function showMine(value) {
    var mine = q("[data-room-mine]");
    if (!mine) return;
    mine.hidden = value == null;
    text("[data-room-mine-value]", value == null ? "" : cellLabel(value));
    all("[data-room-options] button").forEach(function (b) { b.setAttribute("aria-pressed", String(b.value === value)); });
    markCells();
  }
  function cellLabel(value) {
    if (value == null) return value;
    var local = localPoll(poll);
    var i = poll && poll.kind === "choice" ? poll.options.indexOf(value) : -1;
    if (i >= 0 && local.options[i]) return local.options[i]; // a lesson's poll, in this student's language
    // The matrix this screen shows, when it is the question's (its shape): its own labels, in this screen's
    // language (a toy's example tokens are the reader's); else those the asking page sent.
    var own = poll && poll.kind === "cell" ? matrixShape() : {};
    var mine = own.row_labels && own.rows === poll.rows && own.cols === poll.cols;
    return kit.tokensOf(value, mine ? own.row_labels : poll && poll.row_labels, mine ? own.col_labels : poll && poll.col_labels);
  }
  // A lesson's poll carries every language; a student reads their own (answers go by index, counted as one).
  function localPoll(p) {
    var mine = p && p.languages && p.languages[lang];
    return mine && mine.options && p.options && mine.options.length === p.options.length ? mine :
      { prompt: p ? p.prompt : "", options: p ? p.options : [] };
  }

  function histogram(list, counts, key) {
    return kit.histogram(list, counts, poll && poll.kind === "choice" ? poll.options.slice() : null, key, cellLabel);
  }

  // Cell polls: every matrix cell shows how many chose it (teacher), or which one this student chose.
  function markCells() {
    var cells = document.querySelectorAll("td[data-row][data-col]");
    var counts = (poll && poll.counts) || null;
    var top = 0;
    if (counts) Object.keys(counts).forEach(function (k) { top = Math.max(top, counts[k]); });
    var mine = poll ? sessionStorage.getItem("lab_answer_" + poll.id) : null;
    Array.prototype.forEach.call(cells, function (td) {
      var k = td.getAttribute("data-row") + "," + td.getAttribute("data-col");
      var active = poll && poll.kind === "cell";
      td.classList.toggle("pollable", !!(active && poll.status === "open" && role === "student"));
      td.classList.toggle("voted", !!(active && mine === k));
      td.classList.toggle("poll-key", !!(active && poll.status === "closed" && poll.answer === k));
      var n = active && counts ? counts[k] || 0 : 0;
      if (n) {
        td.setAttribute("data-votes", String(n));
        td.style.setProperty("--votes", String(n / top));
      } else {
        td.removeAttribute("data-votes");
        td.style.removeProperty("--votes");
      }
    });
  }

  function showPoll(p) {
    poll = p;
    if (role === "teacher") return teacherPoll(p);
    var box = q("[data-room-question]");
    if (!box) return;
    box.hidden = false;
    var local = localPoll(p);
    text("[data-room-prompt]", local.prompt);
    var options = q("[data-room-options]");
    options.replaceChildren();
    if (p.kind === "choice") {
      p.options.forEach(function (o, i) {
        var b = document.createElement("button");
        b.type = "button";
        b.value = o;
        b.textContent = local.options[i];
        b.disabled = p.status !== "open";
        b.addEventListener("click", function () { send(i); });
        options.appendChild(b);
      });
    }
    q("[data-room-cell-hint]").hidden = !(p.kind === "cell" && p.status === "open");
    var reveal = q("[data-room-reveal]");
    reveal.hidden = p.status !== "closed";
    q("[data-room-dismiss]").hidden = p.status !== "closed";
    all("[data-room-mine] [data-when]").forEach(function (el) { el.hidden = el.getAttribute("data-when") !== p.status; });
    if (p.status === "closed") {
      text("[data-room-key]", p.answer == null ? "—" : cellLabel(p.answer));
      histogram(reveal.querySelector("[data-room-histogram]"), p.counts, p.answer);
    }
    showMine(sessionStorage.getItem("lab_answer_" + p.id));
  }

  document.addEventListener("click", function (e) {
    if (role !== "student" || !poll || poll.kind !== "cell" || poll.status !== "open") return;
    var td = e.target.closest && e.target.closest("td[data-row][data-col]");
    if (!td || bar.contains(td)) return;
    e.preventDefault();
    e.stopPropagation();
    send([Number(td.getAttribute("data-row")), Number(td.getAttribute("data-col"))]);
  }, true);

  // Anything the student does on the page itself (a link, a form, a key) means exploring on their own; a heavy
  // page's shell asking for its own numbers as it loads (main[data-deferred], #42) is not the student's doing.
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail && e.detail.elt;
    if (!elt || bar.contains(elt) || (elt.closest && elt.closest("[data-deferred]"))) return;
    if (role === "student" && following()) setMode("exploring");
  });

  // ---- the teacher: announce the view, watch the answers ----------------------------------------------------
  var announced = null;
  var ownVersion = 0; // the newest version this page made itself: older state events are its own echoes
  var pending = 0; // announcements in flight
  var navigating = false; // a step of this page's own is loading
  function announce() {
    if (role !== "teacher") return;
    var view = ownView();
    if (announced && sameView(view, announced)) return;
    announced = view;
    pending++;
    fetch(api + "/state", {
      method: "PUT", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(view)
    }).then(function (res) {
      bar.classList.toggle("refused", !res.ok);
      if (!res.ok) { announced = null; return null; }
      return res.json();
    }).then(function (out) {
      if (out && out.version > ownVersion) ownVersion = out.version;
    }).catch(function () { announced = null; })
      .then(function () { pending--; tryFollow(); });
  }
  // The teacher's remote (/r/<code>/teach) may step the class: the projector follows it like a student would,
  // unless the change is this page's own (or this page is itself moving).
  var remoteState = null; // the newest state the projector has not caught up with yet
  function teacherState(state) {
    if (!remoteState || state.version > remoteState.version) remoteState = state;
    tryFollow();
  }
  function tryFollow() {
    // While this page's own step or announcement is in flight, wait for it: then follow only what is newer.
    if (!remoteState || pending || navigating) return;
    var state = remoteState;
    remoteState = null;
    if (state.version <= ownVersion || (announced && sameView(state, announced))) return;
    go(state);
  }

  // The matrix a cell question is about, so every screen names the cells by their tokens (static/room-kit.js).
  function matrixShape() { return kit.matrixShape(document.querySelector("table[data-matrix]")); }
  function askLesson(lesson, step) {
    var body = Object.assign({ lesson: lesson, step: Number(step), lang: lang }, matrixShape());
    fetch(api + "/polls/lesson", {
      method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body)
    }).then(function (res) { bar.classList.toggle("refused", !res.ok); });
  }

  // "Ask the class" on a lesson step: the question, its options and its key come from the lesson on the server;
  // the page holds no key.
  function addAsk() {
    var panel = document.querySelector(".lesson-panel[data-lesson]");
    if (role !== "teacher" || over || !panel || panel.querySelector("[data-room-ask]")) return;
    var b = document.createElement("button");
    b.type = "button";
    b.className = "btn";
    b.setAttribute("data-room-ask", "");
    b.textContent = bar.querySelector("[data-room-ask-label]").textContent;
    b.title = bar.querySelector("[data-room-ask-label]").getAttribute("title");
    b.addEventListener("click", function () { askLesson(panel.getAttribute("data-lesson"), panel.getAttribute("data-step")); });
    var q0 = panel.querySelector(".question");
    (q0 || panel).appendChild(b);
  }

  var watching = null;
  function teacherPoll(p) {
    var box = q("[data-room-results]");
    if (!box) return;
    box.hidden = false;
    text("[data-room-prompt]", p.prompt + (p.status === "closed" && p.answer != null ? " → " + cellLabel(p.answer) : ""));
    // The projector never shows the open histogram (it would steer the vote): only the count, until the reveal.
    q("[data-room-histogram]").hidden = p.status !== "closed";
    q("[data-room-close]").hidden = p.status !== "open";
    q("[data-room-clear]").hidden = p.status !== "closed";
    refreshResults();
    if (watching) clearInterval(watching);
    watching = p.status === "open" ? setInterval(refreshResults, 1000) : null;
  }
  function refreshResults() {
    if (!poll) return;
    kit.json(api + "/polls/" + poll.id)
      .then(function (r) {
        var closed = r.status === "closed";
        poll.counts = closed ? r.counts : null; // open: the cells show no counts on the projector either
        var total = histogram(q("[data-room-histogram]"), closed ? r.counts : {}, closed ? r.answer : null);
        if (!closed) { total = r.total; }
        text("[data-room-total]", String(total));
        markCells();
      }).catch(function () {});
  }
  function refreshFollowers() {
    kit.json(api).then(function (r) { text("[data-room-followers]", String(r.followers)); }).catch(function () {});
  }

  // Presenter mode's QR (the view's own address) becomes the room's: students scan it and follow.
  function presentRoom() {
    var aside = document.querySelector("aside.qr");
    var svg = q("[data-room-qr] svg");
    if (!aside || aside.hasAttribute("data-room-join") || !svg) return;
    aside.setAttribute("data-room-join", code);
    var big = document.createElement("p");
    big.className = "room-code";
    big.textContent = code;
    var link = document.createElement("code");
    link.setAttribute("data-share-url", "");
    link.textContent = q("[data-room-join]").textContent.replace(/^https?:\/\//, ""); // short: host/r/CODE
    aside.replaceChildren(svg.cloneNode(true), big, link);
    var warning = q("[data-warning=loopback]");  // phones cannot reach this server: say so on the wall
    if (warning) aside.appendChild(warning.cloneNode(true));
  }

  function teacherControls() {
    presentRoom();
    document.addEventListener("htmx:afterSettle", presentRoom);
    addAsk();
    document.addEventListener("htmx:afterSettle", addAsk);
    var endForm = q("[data-room-end-form]");
    if (endForm) endForm.addEventListener("submit", function (e) {
      e.preventDefault();
      if (!window.confirm(endForm.getAttribute("data-confirm"))) return;
      if (new URLSearchParams(window.location.search).get("present") === "1" && !endForm.querySelector("[name=present]")) {
        var keep = document.createElement("input");  // the plain form's redirect keeps presenter mode too
        keep.type = "hidden"; keep.name = "present"; keep.value = "1";
        endForm.appendChild(keep);
      }
      // The projector stays on its page (in presenter mode if it was) and says the class has ended, as it does when
      // the phone ends it: no reload that would drop the bar and its line. Without fetch's answer, the plain form.
      fetch(endForm.action, { method: "POST", credentials: "same-origin", redirect: "manual",
                              body: new URLSearchParams(new FormData(endForm)) })
        .then(function (res) { if (res.type === "opaqueredirect" || res.ok) ended(); else endForm.submit(); })
        .catch(function () { endForm.submit(); });
    });
    ["close", "clear"].forEach(function (act) {
      q("[data-room-" + act + "]").addEventListener("click", function () {
        if (poll) kit.json(api + "/polls/" + poll.id + "/" + act, "POST").catch(function () {});
      });
    });
    document.addEventListener("htmx:pushedIntoHistory", announce);
    // A step of the projector's own wins over a remote step that arrived before it.
    document.addEventListener("htmx:beforeRequest", function () { navigating = true; remoteState = null; });
    var settled = function () { navigating = false; setTimeout(tryFollow, 0); };
    document.addEventListener("htmx:afterSettle", settled);
    document.addEventListener("htmx:afterRequest", function (e) { if (!e.detail || !e.detail.successful) settled(); });
    document.addEventListener("htmx:sendError", settled);
    document.addEventListener("htmx:replacedInHistory", announce);
    window.addEventListener("popstate", function () { setTimeout(announce, 0); });
    announce();
    refreshFollowers();
    followersTimer = setInterval(refreshFollowers, 5000);
  }

  function studentControls() {
    if (location.hash === "#follow") {
      setMode("following");
      history.replaceState(null, "", location.pathname + location.search);
    } else {
      setMode(following() ? "following" : "exploring");
    }
    q("[data-room-explore]").addEventListener("click", function () { setMode("exploring"); });
    q("[data-room-back]").addEventListener("click", function () {
      setMode("following");
      kit.json(api).then(go).catch(function () {});
    });
    // A revealed result can leave this phone before the teacher clears it.
    q("[data-room-dismiss]").addEventListener("click", clearPoll);
    q("[data-room-leave]").addEventListener("click", function () {
      document.cookie = "lab_room=; Max-Age=0; path=/";
      stop();
      bar.remove();
      document.body.removeAttribute("data-room-following");
      holdAnswers();
    });
  }

  var followersTimer = null;
  function ended() {
    stop();
    if (followersTimer) clearInterval(followersTimer);
    if (watching) clearInterval(watching);
    // One message, nothing to press: every control of the bar goes, and so does a poll nobody can answer now.
    Array.prototype.forEach.call(bar.querySelector(".room-bar").children, function (el) { el.hidden = true; });
    q("[data-room-ended]").hidden = false;
    // The ended class's code and QR leave the projector: nobody can join it now.
    Array.prototype.forEach.call(document.querySelectorAll("aside.qr[data-room-join]"), function (el) { el.hidden = true; });
    var restart = q("[data-room-restart]");  // the teacher's screen: the next class starts from this view
    if (restart) {
      restart.querySelector("[name=page]").value = window.location.pathname;
      restart.querySelector("[name=query]").value = window.location.search.replace(/^\?/, "");
      restart.hidden = false;
    }
    poll = null;
    markCells();
    document.body.removeAttribute("data-poll-open");
    // Nobody is left to ask: the lesson panel's "Ask the class" goes too (addAsk adds none once the class is over).
    Array.prototype.forEach.call(document.querySelectorAll("[data-room-ask]"), function (b) { b.remove(); });
    bar.classList.add("ended");
    document.cookie = "lab_room=; Max-Age=0; path=/";
    document.body.removeAttribute("data-room-following");
    holdAnswers();
  }

  // A student opens a lesson step's answer only once the teacher has revealed that step's poll or moved the class
  // on from the step (asking first, answering after): until then the answer's place says so.
  var releasedKey = "lab_room_released_" + code;
  function released() {
    try { return JSON.parse(sessionStorage.getItem(releasedKey) || "[]"); } catch (e) { return []; }
  }
  function release(step) {
    var r = released();
    if (step && r.indexOf(step) < 0) { r.push(step); sessionStorage.setItem(releasedKey, JSON.stringify(r)); }
  }
  // The same hold on a lesson's own page (/lessons/<slug>): each step's answer, by the same rule.
  function holdAnswers() {
    var panel = document.querySelector(".lesson-panel[data-lesson]");
    if (panel) hold(panel, panel.getAttribute("data-lesson"), panel.getAttribute("data-step"));
    var page = document.querySelector("main.lesson[data-lesson]");
    if (page) {
      Array.prototype.forEach.call(page.querySelectorAll(".lesson-step[data-step]"), function (li) {
        hold(li, page.getAttribute("data-lesson"), li.getAttribute("data-step"));
      });
    }
  }
  function hold(box, lesson, step) {
    var answer = box.querySelector("details.answer");
    if (!answer) return;
    var k = Number(step);
    var now = new URLSearchParams((latest && latest.query) || "");
    var past = now.get("lesson") === lesson && Number(now.get("lesson_step")) > k; // the class is further on
    var held = role === "student" && !over && !past && released().indexOf(lesson + ":" + k) < 0;
    if (held) answer.open = false;
    answer.hidden = held;
    var note = box.querySelector("[data-answer-held]");
    if (!note && held) {
      note = document.createElement("p");
      note.className = "hint";
      note.setAttribute("data-answer-held", "");
      note.textContent = q("[data-room-answer-held]").textContent;
      answer.after(note);
    }
    if (note) note.hidden = !held;
  }
  document.addEventListener("htmx:afterSettle", function () { holdAnswers(); });

  function applyState(state) {
    if (poll && poll.status !== "open" && pollStep !== null && stepOf(state) !== pollStep) clearPoll();
    if (latest && stepOf(latest) !== stepOf(state)) release(stepOf(latest)); // the class moved on from that step
    latest = state;
    bar.setAttribute("data-room-version", String(latest.version));
    if (role === "student" && following()) go(latest);
    else if (role === "teacher") teacherState(latest);
    holdAnswers();
  }
  // A poll belongs to the step it was asked on: a revealed one leaves every screen when the teacher clears it or
  // moves the class to another step (another lesson step, or another stage of a page outside a lesson).
  var pollStep = null;
  function stepOf(view) {
    if (!view) return null;
    var p = new URLSearchParams(view.query || "");
    var lesson = p.get("lesson");
    return lesson ? lesson + ":" + (p.get("lesson_step") || p.get("step") || "1") : view.page + ":" + (p.get("stage") || "");
  }
  function clearPoll() {
    poll = null;
    pollStep = null;
    if (watching) { clearInterval(watching); watching = null; }
    var box = q(role === "teacher" ? "[data-room-results]" : "[data-room-question]");
    if (box) box.hidden = true;
    document.body.removeAttribute("data-poll-open");
    markCells();
  }
  function applyPoll(p) {
    if (p.status === "cleared") { if (!poll || poll.id === p.id) clearPoll(); return; }
    pollStep = stepOf(latest);
    if (p.status === "closed") release(pollStep); // revealed: the step's answer opens for the students too
    // While the class votes, no screen shows "what to notice" or the lesson's answer.
    if (p.status === "open") document.body.setAttribute("data-poll-open", "1");
    else document.body.removeAttribute("data-poll-open");
    showPoll(p);
    markCells();
    holdAnswers();
  }

  // ---- staying in the class ---------------------------------------------------------------------------------
  // The stream reconnects itself (static/room-kit.js `stream`); every reconnect, and a page that comes back after a
  // pause (a hidden tab, a sleeping laptop, a frozen tab, a stream that went quiet), resyncs with the room as it is
  // now: its view and its poll.
  var over = false; // ended, or left: no more reconnects

  function stop() {
    over = true;
    if (conn) conn.stop();
  }
  function offline(down) {
    if (down) bar.setAttribute("data-room-offline", "");
    else bar.removeAttribute("data-room-offline");
  }
  function resync() {
    if (over) return;
    fetch(api, { credentials: "same-origin" }).then(function (res) {
      if (res.status === 404) { ended(); return null; }
      return res.ok ? res.json() : null;
    }).then(function (r) {
      if (!r || over) return;
      if (!latest || r.version > latest.version) applyState({ page: r.page, query: r.query, version: r.version });
      // A poll opened, or the open one closed (and revealed), while this page heard nothing.
      var id = r.poll || (poll && poll.status === "open" ? poll.id : null);
      if (id && !(poll && poll.id === id && poll.status === "open" && r.poll === id)) {
        kit.json(api + "/polls/" + id).then(function (p) { if (!over) applyPoll(p); }).catch(function () {});
      }
      if (role === "teacher" && !announced) announce(); // a step this page made while the store was away
    }).catch(function () {});
  }
  function wake() { if (!over && conn) conn.wake(); }
  function watchdog() {
    var tick = Date.now();
    setInterval(function () {
      var now = Date.now();
      var frozen = now - tick > 30000; // this page's timers stood still: a frozen tab, a sleeping laptop
      tick = now;
      if (frozen) wake();
      else if (conn && conn.quiet() > 60000 && document.visibilityState === "visible") conn.resync(); // a quiet stream
    }, 10000);
    document.addEventListener("visibilitychange", function () { if (document.visibilityState === "visible") wake(); });
    window.addEventListener("online", wake);
    window.addEventListener("pageshow", function (e) { if (e.persisted) wake(); });
  }

  // The bar first: while the room store is away (503) or the network is, try again with growing pauses.
  var tries = 0;
  function loadBar() {
    fetch("/r/" + code + "/bar?lang=" + lang, { credentials: "same-origin" })
      .then(function (res) {
        if (res.status === 404) { document.cookie = "lab_room=; Max-Age=0; path=/"; holdAnswers(); return null; }
        if (!res.ok) { setTimeout(loadBar, kit.backoff(tries++, Number(res.headers.get("Retry-After")) || 0)); return null; }
        return res.text();
      })
      .then(function (html) {
        if (!html) return;
        bar.innerHTML = html;
        var root = bar.querySelector("[data-room-role]");
        role = root.getAttribute("data-room-role");
        document.body.appendChild(bar);
        document.body.setAttribute("data-room", role);
        if (role === "teacher") teacherControls(); else studentControls();
        holdAnswers();
        conn = kit.stream(api, { state: applyState, poll: applyPoll, end: ended, resync: resync, down: offline });
        watchdog();
        document.dispatchEvent(new CustomEvent("room:bar"));
      })
      .catch(function () { setTimeout(loadBar, kit.backoff(tries++)); });
  }
  loadBar();
})();
